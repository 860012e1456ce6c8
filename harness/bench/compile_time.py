"""Compile time on a CPU: where the first call of a corpus entry goes, pass by pass.

    python -m harness.bench.compile_time [--entry NAME ...] [--target crucible-sim] [--repeat N]

Each entry is built at scale "small" (as the harness builds it on a CPU) and compiled with a
Crucible target; its first call is timed, ``--repeat`` times after one warm-up compile (imports,
torch's one-time set-up), and the fastest is printed: the first call in all, AOTAutograd's graph
capture (where the decomposition rules run), each of Crucible's passes, and the rest (Dynamo's
trace, AOTAutograd's other stages, the first run of the kernels). The default entries are smoke-
tier models whose compile dominates the smoke run (``crucible run --suite smoke``): what makes
CI and nightly runs slow shows here first. One torch thread, as a harness worker on two cores.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

ENTRIES = ["timm/test_convnext", "timm/test_vit_relpos", "timm/mobilenetv3_small_100", "transformers/whisper",
           "transformers/speech_to_text", "torchvision/shufflenet_v2_x0_5"]


@contextmanager
def _timing_graph_capture(seconds: Counter) -> Iterator[None]:
    """AOTAutograd's graph capture (decompositions traced into the graph), timed where this torch
    has it by that name (aot_autograd calls it by the name it imported)."""
    from torch._functorch import aot_autograd

    original = getattr(aot_autograd, "aot_stage1_graph_capture", None)
    if original is None:
        yield
        return

    def timed(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds["aot_capture"] += time.perf_counter() - start

    aot_autograd.aot_stage1_graph_capture = timed
    try:
        yield
    finally:
        aot_autograd.aot_stage1_graph_capture = original


def first_call(name: str, target_name: str) -> dict[str, float]:
    """Seconds of one cold first call of entry ``name`` on ``target_name``, split as the docstring says."""
    import torch

    import contextlib

    from compiler.report import collect_reports
    from corpus.registry import catalog
    from harness.targets import parse_target
    from simulator.session import checking

    entry = next((e for e in catalog().entries if e.name == name), None)
    if entry is None:
        raise SystemExit(f"no corpus entry {name!r}: `crucible list --suite smoke` lists them")
    target = parse_target(target_name)
    built = entry.build("small")
    model = built.model.eval()
    torch._dynamo.reset()
    seconds: Counter = Counter()
    # crucible-sim: launches checked, as in a run
    simulation = checking() if target.checked else contextlib.nullcontext()
    with simulation, torch.no_grad(), _timing_graph_capture(seconds), collect_reports() as reports:
        compiled = target.compile(model)
        start = time.perf_counter()
        compiled(*built.inputs, **built.kwargs)
        seconds["first call"] = time.perf_counter() - start
    for graph in reports.graphs:
        for pass_name, s in graph.pass_seconds.items():
            seconds[pass_name] += s
    seconds["rest"] = seconds["first call"] - sum(s for k, s in seconds.items() if k != "first call")
    torch._dynamo.reset()
    return dict(seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entry", nargs="+", default=ENTRIES, help="corpus entries (default: %(default)s)")
    parser.add_argument("--target", default="crucible-sim", help="a crucible target (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="cold compiles per entry; the fastest is shown")
    args = parser.parse_args(argv)
    if not args.target.startswith("crucible"):
        parser.error(f"--target {args.target!r}: choose a crucible target (crucible-sim, crucible-interpret, ...)")
    import torch
    from tabulate import tabulate

    torch.set_num_threads(1)
    rows = []
    for name in args.entry:
        first_call(name, args.target)  # warm-up: imports and torch's one-time set-up
        best = min((first_call(name, args.target) for _ in range(max(1, args.repeat))),
                   key=lambda s: s["first call"])
        rows.append({"entry": name, **{k: round(v, 2) for k, v in sorted(best.items(), key=lambda kv: -kv[1])}})
    columns = ["entry", "first call", "aot_capture", "lower", "schedule", "rest"]
    columns += sorted({k for r in rows for k in r} - set(columns), key=lambda k: -sum(r.get(k, 0) for r in rows))
    print(tabulate([[r.get(c, 0.0) for c in columns] for r in rows] +
                   [["total"] + [round(sum(r.get(c, 0.0) for r in rows), 2) for c in columns[1:]]],
                   headers=columns))


if __name__ == "__main__":
    main()
