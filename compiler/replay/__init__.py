"""Golden-kernel replay: prove that a refactor changed no generated code.

``--capture`` runs the compiler's tests with a recorder that writes every ATen graph
they compile (nodes, targets, arguments and each value's shape/stride/dtype) to
``graphs.jsonl``, then regenerates, for every recorded graph, the source of every
kernel and of the wrapper with each renderer (C++, Triton interpreted, Triton
compiled) into ``kernels.txt``. ``--check`` regenerates from the recorded graphs
(lower -> schedule -> render -> wrap, no kernel is built or run) and prints a
unified diff per changed kernel; exit 1 on any change. ``--update`` rewrites
``kernels.txt`` from the recorded graphs (after an intended change).

A graph the recorder cannot write as data (higher-order ops, symbolic sizes, opaque
arguments) is skipped and counted; a graph whose compile fails is recorded with its
error, so a refactor that makes it fail, or pass, shows up as a change too.
"""

from __future__ import annotations

import dataclasses

import difflib
import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from compiler.replay.record import graph_module, missing_targets

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "compiler" / "golden"
# What the compiler's tests are: every test that compiles graphs through the pipeline.
TEST_ARGS = ("-n", "2", "tests/compiler", "tests/test_cpp_build.py")
# (key suffix, codegen, device the renderer is chosen for): every source a graph can produce,
# rendered on any machine (choosing the compiled Triton renderer needs no GPU; lowering is for the CPU).
RENDERINGS = (("cpp", "cpp", "cpu"), ("triton-interpret", "triton", "cpu"), ("triton-gpu", "triton", "cuda"))


# --- regenerating sources -----------------------------------------------------------

def render_graph(record: dict) -> dict[str, str]:
    """Every source the recorded graph compiles to, keyed ``<renderer>/<kernel>``: lowered and
    scheduled for each renderer's capabilities (renderers are chosen first; equal capabilities
    share one lowering), rendered, plus each renderer's wrapper."""
    from compiler.codegen.registry import renderer_for
    from compiler.kernel_sharing import render_shared
    from compiler.lowering import lower
    from compiler.scheduler import Kernel, schedule
    from compiler.wrapper import generate_wrapper

    out, lowered_for = {}, {}
    for suffix, codegen, device in RENDERINGS:
        renderer = renderer_for(codegen, torch.device(device))
        caps = renderer.capabilities
        try:
            key = dataclasses.replace(caps, codegen="", templates=frozenset())  # what lowering reads
            if key not in lowered_for:
                lowered = lower(graph_module(record), torch.device("cpu"), caps)
                lowered_for[key] = (lowered, schedule(lowered, caps))
            lowered, sched = lowered_for[key]
            kernels = [s for s in sched.steps if isinstance(s, Kernel)]
            rendered = render_shared(kernels, renderer.render)  # as the pipeline renders
            wrapper = generate_wrapper(sched, rendered, {})
        except Exception as why:  # noqa: BLE001  (a failing compile is a recorded outcome)
            out[f"{suffix}/error"] = f"{type(why).__name__}: {why}"
            continue
        for name, r in rendered.items():
            out[f"{suffix}/{name}"] = r.source
        out[f"{suffix}/wrapper"] = wrapper.source
    return out


def read_graphs(path: Path) -> dict[str, dict]:
    graphs = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, record = json.loads(line)
            graphs[digest] = record
    return graphs


def write_graphs(path: Path, graphs: dict[str, dict]) -> None:
    path.write_text("".join(json.dumps([d, graphs[d]], sort_keys=True, separators=(",", ":")) + "\n"
                            for d in sorted(graphs)))


_HEADER = "=== "
_SAME = " = "  # "=== key = earlier_key": the same source as that key


def unavailable(graphs: dict[str, dict]) -> dict[str, list[str]]:
    """Graphs using ATen ops this torch lacks (captured with another version), with those ops:
    they cannot be rebuilt here, so they are neither checked nor rewritten."""
    return {d: m for d, rec in graphs.items() if (m := missing_targets(rec))}


def regenerate(graphs: dict[str, dict], skip: Iterable[str] = ()) -> dict[str, str]:
    skip = set(skip)
    out = {}
    for digest in sorted(graphs):
        if digest in skip:
            continue
        for key, source in render_graph(graphs[digest]).items():
            out[f"{digest}/{key}"] = source
    return out


def write_golden(path: Path, sources: dict[str, str]) -> None:
    """Sorted by key; a source equal to an earlier one (the same kernel in another graph or
    renderer) is written as a reference to it, which halves the file."""
    parts, first = [], {}
    for key in sorted(sources):
        text = sources[key] if sources[key].endswith("\n") else sources[key] + "\n"
        if text in first:
            parts.append(f"{_HEADER}{key}{_SAME}{first[text]}\n")
            continue
        first[text] = key
        parts.append(f"{_HEADER}{key}\n{text}")
    path.write_text("".join(parts))


def read_golden(path: Path) -> dict[str, str]:
    sources: dict[str, str] = {}
    same: dict[str, str] = {}
    key, lines = None, []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith(_HEADER):
            if key is not None:
                sources[key] = "".join(lines)
            key, lines = line[len(_HEADER):].rstrip("\n"), []
            if _SAME in key:
                key, ref = key.split(_SAME)
                same[key], key = ref, None
        else:
            lines.append(line)
    if key is not None:
        sources[key] = "".join(lines)
    for key, ref in same.items():
        sources[key] = sources[ref]
    return sources


def diff_sources(golden: dict[str, str], now: dict[str, str], skip: Iterable[str] = ()) -> list[str]:
    """One unified diff per kernel that changed, appeared or disappeared (graphs in ``skip`` aside)."""
    skip = set(skip)
    diffs = []
    for key in sorted(set(golden) | set(now)):
        if key.split("/", 1)[0] in skip:
            continue
        old = golden.get(key, "")
        new = now.get(key, "")
        new = new if not new or new.endswith("\n") else new + "\n"
        if old != new:
            diffs.append("".join(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=f"golden/{key}" if key in golden else "/dev/null",
                tofile=f"now/{key}" if key in now else "/dev/null")))
    return diffs


def capture(pytest_args: list[str], graphs_path: Path) -> dict[str, dict]:
    """Run the compiler's tests with the recorder on; every graph they compiled, by digest."""
    with tempfile.TemporaryDirectory(prefix="crucible-replay-") as tmp:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "compiler.replay.record",
               f"--replay-record-dir={tmp}", *(pytest_args or TEST_ARGS)]
        print("running:", " ".join(cmd), file=sys.stderr)
        status = subprocess.call(cmd)
        if status not in (0, 1):  # 1: some test failed; its graphs are still worth keeping
            raise SystemExit(f"replay: the test run failed to start or crashed (exit {status})")
        graphs = {p.stem: json.loads(p.read_text()) for p in sorted(Path(tmp).glob("*.json"))}
        skipped = Counter(p.read_text() for p in Path(tmp).glob("skipped-*.txt"))
    write_graphs(graphs_path, graphs)
    for why, n in skipped.most_common():
        print(f"replay: skipped {n} graphs that cannot be recorded: {why}", file=sys.stderr)
    return graphs
