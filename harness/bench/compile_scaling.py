"""Compile time against graph size: every stage's growth, and the whole against Inductor's.

    python -m harness.bench.compile_scaling [--families mlp convnet hourglass] [--sizes 100 1000 2000]
        [--codegens cpp triton] [--inductor-limit 300] [--models zoo/r2plus1d_34] [--rounds R]

Defaults (mlp and convnet at 100, 1,000 and 2,000 nodes) take about ten minutes on a loaded 2-core
machine, most of it Inductor's; the slope target's range wants ``--sizes 1000 4000 20000`` and
``--families hourglass`` adds the real network (``--no-inductor`` leaves Inductor out). ``--clock cpu``
times Crucible's stages in CPU seconds (the worker's and its finished children's: the C++ compiler's),
which other jobs on a shared machine do not stretch; slopes read on a loaded machine want it.

Graphs. Each family is a real block structure repeated until its ATen graph has about the asked
number of nodes: ``mlp`` residual blocks (layer norm, linear, GELU, linear, add) on a (4, 32) input,
``convnet`` a deep stack of residual conv blocks (3x3 conv, batch norm, ReLU, add) on a (1, 8, 8, 8)
input, ``hourglass`` the zoo's stacked hourglass pose network (``corpus/zoo.py``) with as many stacks
as the size asks (about 600 nodes a stack). ``--models`` adds corpus entries as they are. Nodes are
counted as the ``call_function`` nodes of the ATen graphs Crucible lowers: what AOTAutograd hands
over after its decompositions, with the late decompositions applied (``compiler.late_decompositions``;
before the weight passes), summed over graphs.

Each row is one cold compile in a fresh process (empty kernel caches, no FX graph cache, one torch
thread), killed at ``--limit`` seconds (``--inductor-limit`` for Inductor). Rows of one size run
one after the other (cpp, triton, Inductor), so a loaded machine slows them alike. Stages:

* ``dynamo``: the first call minus the backend and the first run (Dynamo's bytecode trace);
* ``aot_capture``: AOTAutograd's graph capture, where the decomposition rules run;
* ``aot_other``: the rest of AOTAutograd (functionalization checks, wrappers);
* each Crucible pass (``compiler/pipeline.py``); ``load`` is the C++ build on the cpp codegen;
* ``first_run``: the second call's time, standing in for the first call's run.

``triton`` rows run the GPU pipeline's passes on this CPU (``harness.bench.render_check``: late
decompositions, weight passes, layout, lowering, scheduling, the GPU renderer); Triton's build for
the GPU (front end, PTX, cubin), autotuning and the launches cannot be timed without a GPU (where the
installed Triton has its NVIDIA backend the build is timed too, as ``gpu_build``).

Printed: per row the stages; per codegen and stage the log-log slope of seconds against nodes over
the rows with 1,000 to 20,000 nodes (least squares; target: at most 1.1; stages under 0.05 s at the
largest size are too small to say, shown as ``-``); per size the whole cpp compile against Inductor's
(target: at most 1.0; an Inductor row past its limit shows ``>limit``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

FAMILIES = ("mlp", "convnet", "hourglass")
NODES_PER_BLOCK = {"mlp": 59, "convnet": 13, "hourglass": 600}  # measured on this torch: blocks from a size
SLOPE_RANGE = (1_000, 20_000)
SMALL_S = 0.05


def build(family: str, size: int) -> tuple[Any, tuple]:
    """The model of ``family`` with about ``size`` ATen nodes, or the corpus entry named ``family``."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = max(1, round(size / NODES_PER_BLOCK.get(family, 1)))
    if family == "mlp":
        class Residual(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.norm, self.up, self.down = nn.LayerNorm(32), nn.Linear(32, 64), nn.Linear(64, 32)

            def forward(self, x):
                return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

        return nn.Sequential(*[Residual() for _ in range(blocks)]).eval(), (torch.randn(4, 32),)
    if family == "convnet":
        class ConvBlock(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv, self.norm = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)

            def forward(self, x):
                return x + torch.relu(self.norm(self.conv(x)))

        return nn.Sequential(*[ConvBlock() for _ in range(blocks)]).eval(), (torch.randn(1, 8, 8, 8),)
    if family == "hourglass":
        from corpus.zoo import StackedHourglass

        return StackedHourglass(stacks=blocks).eval(), (torch.randn(1, 3, 64, 64),)
    from corpus.registry import catalog

    entry = next((e for e in catalog().entries if e.name == family), None)
    if entry is None:
        raise SystemExit(f"--models {family!r}: no such corpus entry (`crucible list` names them)")
    built = entry.build("small")
    return built.model.eval(), tuple(built.inputs)


def _timed(seconds: dict[str, float], stage: str, fn: Callable) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - start
    return run


class _CpuTime:
    """``time`` whose ``perf_counter`` counts CPU seconds: this process's and those of its children
    that have ended (the C++ compiler's runs), so a stage's figure does not grow with the load other
    processes put on the machine. Everything else is ``time``'s."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def perf_counter() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system


def use_cpu_clock() -> None:
    """Every stage timer of this worker (the pipeline's passes, AOTAutograd's capture, the stages
    here) reads CPU seconds instead of wall seconds."""
    import compiler.pipeline
    from harness.bench import compile_time, render_check

    for module in (sys.modules[__name__], compile_time, render_check, compiler.pipeline):
        module.time = _CpuTime()  # type: ignore[attr-defined]


def measure(family: str, size: int, compiler_name: str) -> dict[str, Any]:
    """One cold compile in this process: {"nodes", "whole", stage seconds...}."""
    import torch

    from harness.bench.compile_time import _timing_graph_capture

    torch.set_num_threads(1)
    model, inputs = build(family, size)
    seconds: Counter = Counter()
    if compiler_name == "triton":
        from harness.bench.render_check import render_graphs

        nodes: list[int] = []
        start = time.perf_counter()
        render_graphs(model, inputs, seconds=seconds, nodes=nodes)
        seconds["whole"] = time.perf_counter() - start
        seconds["aot_capture"] = seconds.pop("capture", 0.0)
        return {"nodes": sum(nodes), **seconds}  # counted after the late decompositions, as below
    if compiler_name == "inductor":
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = False  # cold: the cache directory is empty anyway
        compiled = torch.compile(model, backend="inductor")
        with torch.no_grad():
            start = time.perf_counter()
            compiled(*inputs)
            seconds["whole"] = time.perf_counter() - start
        return seconds
    from compiler import collect_reports
    from compiler.backend import crucible_backend

    backend = _timed(seconds, "backend", lambda gm, example: crucible_backend(gm, example, {"codegen": "cpp"}))
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad(), _timing_graph_capture(seconds), collect_reports() as reports:
        start = time.perf_counter()
        compiled(*inputs)
        whole = time.perf_counter() - start
        start = time.perf_counter()
        compiled(*inputs)
        seconds["first_run"] = time.perf_counter() - start
    passes = {}
    for graph in reports.graphs:
        for name, s in graph.pass_seconds.items():
            passes[name] = passes.get(name, 0.0) + s
    backend_s = seconds.pop("backend")
    seconds["dynamo"] = whole - backend_s - seconds["first_run"]
    seconds["aot_other"] = backend_s - seconds.get("aot_capture", 0.0) - sum(passes.values())
    # a report's count is the graph's after the late decompositions (what the pipeline lowers)
    return {"nodes": sum(g.fx_nodes for g in reports.graphs), "whole": whole, **seconds, **passes}


def run_row(family: str, size: int, compiler_name: str, limit: float, clock: str = "wall") -> dict[str, Any]:
    """``measure`` in a fresh process group with empty caches (``turns.run_worker``: past the limit
    the worker and what it started, Inductor's compile workers, are killed): its row, or
    {"timeout": limit}, or {"error": ...}."""
    from harness.bench.turns import RESULT, run_worker

    with tempfile.TemporaryDirectory(prefix="compile-scaling-") as cache:
        env = {**os.environ, "CRUCIBLE_CACHE_DIR": os.path.join(cache, "crucible"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"),
               "TRITON_CACHE_DIR": os.path.join(cache, "triton"), "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "harness.bench.compile_scaling", "--row", family, str(size), compiler_name,
                   "--clock", clock if compiler_name != "inductor" else "wall"]
        status, out, err = run_worker(command, limit, env)
    if status is None:
        return {"timeout": limit}
    for line in out.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {status}: {tail[:200]}"}


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(seconds) against log(nodes)."""
    points = [(n, s) for n, s in points if n > 0 and s > 0]
    if len(points) < 2:
        return None
    xs, ys = [math.log(n) for n, _ in points], [math.log(s) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return None if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def slopes(rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """codegen -> stage -> slope text over the rows in SLOPE_RANGE (all families together)."""
    out: dict[str, dict[str, str]] = {}
    for codegen in sorted({r["compiler"] for r in rows if r["compiler"] != "inductor"}):
        # by the size asked for: a graph asked at 20,000 nodes may come out at 20,001
        mine = [r for r in rows if r["compiler"] == codegen and SLOPE_RANGE[0] <= r.get("size", 0) <= SLOPE_RANGE[1]
                and r.get("nodes", 0) > 0]
        stages = sorted({k for r in mine for k, v in r.items() if isinstance(v, float)} - {"timeout"})
        texts = {}
        for stage in stages:
            for family in sorted({r["family"] for r in mine}):
                points = [(r["nodes"], r[stage]) for r in mine if r["family"] == family and stage in r]
                largest = max(points, default=(0, 0.0))
                value = slope(points)
                if value is None:
                    continue
                texts.setdefault(stage, [])
                texts[stage].append(f"{family} {value:.2f}" if largest[1] >= SMALL_S else f"{family} -")
        out[codegen] = {stage: ", ".join(t) for stage, t in texts.items()}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=["mlp", "convnet"], choices=FAMILIES,
                        help="generated graphs (default: %(default)s; hourglass: the zoo's network, slower)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds over every row, interleaved; each stage's fastest round is kept")
    parser.add_argument("--sizes", nargs="+", type=int, default=[100, 1000, 2000],
                        help="ATen nodes asked for (default: %(default)s; the slope target is over 1000-20000)")
    parser.add_argument("--models", nargs="*", default=[], help="corpus entries compiled as they are")
    parser.add_argument("--codegens", nargs="+", default=["cpp", "triton"], choices=["cpp", "triton"])
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a Crucible row may take")
    parser.add_argument("--inductor-limit", type=float, default=300.0, help="seconds an Inductor row may take")
    parser.add_argument("--no-inductor", action="store_true", help="leave Inductor out")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="what a Crucible stage's seconds are: wall time, or CPU time of the worker and its "
                             "finished children (steady on a loaded machine; Inductor's rows stay wall time, its "
                             "compile workers outlive the row)")
    parser.add_argument("--row", nargs=3, metavar=("FAMILY", "SIZE", "COMPILER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.row:  # a worker: one measurement, printed as one RESULT line
        family, size, compiler_name = args.row
        from harness.bench.turns import RESULT

        if args.clock == "cpu":
            use_cpu_clock()

        print(RESULT + json.dumps(measure(family, int(size), compiler_name)), flush=True)
        return
    if any(s < 1 for s in args.sizes):
        parser.error(f"--sizes {args.sizes}: sizes are positive node counts")
    from tabulate import tabulate

    plan = [(f, s) for s in sorted(args.sizes) for f in args.families] + [(m, 0) for m in args.models]
    compilers = [*args.codegens, *([] if args.no_inductor else ["inductor"])]
    best: dict[tuple, dict[str, Any]] = {}
    for _ in range(max(1, args.rounds)):
        for family, size in plan:
            nodes = 0
            for compiler_name in compilers:
                limit = args.inductor_limit if compiler_name == "inductor" else args.limit
                row = {"family": family, "size": size, "compiler": compiler_name,
                       **run_row(family, size, compiler_name, limit, args.clock)}
                nodes = row.setdefault("nodes", nodes) or nodes  # Inductor's rows: the same model's count
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
                kept = best.setdefault((family, size, compiler_name), row)
                for key, value in row.items():  # each stage's fastest round
                    if isinstance(value, float) and key != "timeout" and value < kept.get(key, float("inf")):
                        kept[key] = value
    rows = list(best.values())
    stages = ["whole", "dynamo", "aot_capture", "aot_other"]
    stages += sorted({k for r in rows for k, v in r.items() if isinstance(v, float)} - set(stages) - {"timeout"},
                     key=lambda k: -max(r.get(k, 0.0) for r in rows))
    print(tabulate([[r["family"], r["compiler"], r.get("nodes", "-"),
                     *[round(r[s], 2) if s in r else "-" for s in stages], r.get("error", "")] for r in rows],
                   headers=["graph", "compiler", "nodes", *stages, "error"]))
    print(f"\nlog-log slope of seconds against ATen nodes, {SLOPE_RANGE[0]}-{SLOPE_RANGE[1]} nodes (target <= 1.1):")
    for codegen, per_stage in slopes(rows).items():
        for stage, text in per_stage.items():
            print(f"  {codegen:8} {stage:22} {text}")
    if "cpp" in compilers and "inductor" in compilers:
        print("\nwhole cpp compile / Inductor's (target <= 1.0):")
        for family, size in plan:
            ours = next((r for r in rows if (r["family"], r["size"], r["compiler"]) == (family, size, "cpp")), {})
            theirs = next((r for r in rows if (r["family"], r["size"], r["compiler"]) == (family, size, "inductor")), {})
            if "timeout" in theirs:
                ratio = f"Inductor >{theirs['timeout']:.0f} s limit, ours {ours.get('whole', float('nan')):.1f} s"
            elif "whole" in ours and "whole" in theirs:
                ratio = f"{ours['whole'] / theirs['whole']:.2f} ({ours['whole']:.1f} s / {theirs['whole']:.1f} s)"
            else:
                ratio = "-"
            print(f"  {family:16} {ours.get('nodes', '-'):>6} nodes  {ratio}")


if __name__ == "__main__":
    main()
