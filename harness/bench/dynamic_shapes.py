"""Dynamic shapes: one size-generic compile against a static compile per size.

    python -m harness.bench.dynamic_shapes [--codegen cpp] [--device cpu|cuda] [--only NAME ...]
                                           [--inductor] [--baseline-tree DIR] [--repeat N]

Each workload (a pointwise chain, softmax + layer norm, a small MLP, a transformer encoder layer)
runs at several sizes (batch and sequence length both change) under Crucible compiled with
``dynamic=False`` (Dynamo recompiles per size) and ``dynamic=True`` (one symbolic graph), and with
``--inductor`` under Inductor's ``dynamic=True``. Printed per workload and mode: graphs compiled
over all sizes (the first call's Dynamo restarts included), compile seconds of the first call,
Crucible's lower + schedule + render seconds of its first graph, the median run time per size after
warm-up, and the dynamic / static ratios of both. ``--device cuda`` runs the models and inputs on
the GPU (use ``--codegen triton``), synchronizing around each timed call.

``--baseline-tree DIR`` (a checkout of another commit, e.g. ``git archive HEAD~1 | tar -x -C DIR``)
adds the cost of the size representation on static graphs: the same static compiles' lower +
schedule seconds in this tree and in DIR, alternating in subprocesses, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PASSES = ("lower", "schedule", "render")


def workloads() -> dict[str, tuple[Callable[[], Any], Callable[..., tuple], list[tuple]]]:
    """name -> (model factory, input maker over a size, sizes)."""
    import torch

    def encoder() -> Any:
        torch.backends.mha.set_fastpath_enabled(False)  # the decomposed layer, not one fused ATen op
        return torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()

    class Norms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = torch.nn.LayerNorm(64)

        def forward(self, x: Any) -> Any:
            return self.ln(x.softmax(-1) * 2 + x)

    def chain(x: Any, y: Any) -> Any:
        return torch.sigmoid(x * y + 1) * torch.tanh(x) - x / 3

    rand = torch.randn
    return {
        "pointwise": (lambda: chain, lambda b, s: (rand(b, s, 64), rand(64)), [(4, 32), (8, 48), (6, 64), (2, 80)]),
        "softmax_layernorm": (Norms, lambda b, s: (rand(b, s, 64),), [(4, 32), (8, 48), (6, 64), (2, 80)]),
        "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval(),
                lambda b, s: (rand(b * s, 64),), [(4, 32), (8, 48), (6, 64), (2, 80)]),
        "encoder_layer": (encoder, lambda b, s: (rand(b, s, 64),), [(4, 32), (8, 48), (6, 64), (2, 80)]),
    }


def _median_ms(fn: Callable[[], Any], repeat: int, sync: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(name: str, mode: str, codegen: str, repeat: int, device: str = "cpu") -> dict[str, Any]:
    """One workload under ``mode`` ("static", "dynamic", "inductor") on ``device``: graphs, compile and
    run times."""
    import torch

    import compiler
    from compiler.backend import crucible_backend

    torch._dynamo.reset()
    make_model, make_inputs, shapes = workloads()[name]
    model = make_model()
    model = model.to(device) if isinstance(model, torch.nn.Module) else model
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    graphs: list[Any] = []
    if mode == "inductor":
        from torch._inductor.compile_fx import compile_fx

        def backend(gm: Any, example_inputs: list) -> Any:
            graphs.append(gm)
            return compile_fx(gm, example_inputs)
    else:
        def backend(gm: Any, example_inputs: list) -> Any:
            graphs.append(gm)
            return crucible_backend(gm, example_inputs, options={"codegen": codegen})

    compiled = torch.compile(model, backend=backend, dynamic=mode != "static")
    out: dict[str, Any] = {"workload": name, "mode": mode, "run_ms": []}
    with torch.no_grad(), compiler.collect_reports() as report:
        for i, shape in enumerate(shapes):
            inputs = tuple(t.to(device) for t in make_inputs(*shape))
            start = time.perf_counter()
            compiled(*inputs)
            sync()
            if i == 0:
                out["compile_s"] = time.perf_counter() - start
            compiled(*inputs)  # warm (a new static size compiled on the call before)
            out["run_ms"].append(_median_ms(lambda inputs=inputs: compiled(*inputs), repeat, sync))
    out["graphs"] = len(graphs)
    first = report.graphs[0] if report.graphs else None
    out["passes_s"] = sum(first.pass_seconds.get(p, 0.0) for p in PASSES) if first is not None else None
    out["fallbacks"] = len(report.fallbacks)
    return out


def static_pass_seconds(name: str, codegen: str, repeat: int = 15) -> float:
    """Lower + schedule seconds of ``name``'s static ATen graph at each of its sizes, the fastest of
    ``repeat`` compiles of the same graph (kernels built once, then cached), summed over the sizes."""
    import torch

    from compiler import backend
    from compiler.pipeline import GraphCompilation

    make_model, make_inputs, shapes = workloads()[name]
    model = make_model()
    graphs: list[Any] = []  # the ATen graphs AOTAutograd hands the pipeline, one per size
    original = backend.compile_aten_graph

    def recording(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        graphs.append(gm)
        return original(gm, example_inputs, **kwargs)

    backend.compile_aten_graph = recording
    try:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="crucible", dynamic=False, options={"codegen": codegen})
        with torch.no_grad():
            for shape in shapes:
                compiled(*make_inputs(*shape))
    finally:
        backend.compile_aten_graph = original
    total = 0.0
    for gm in graphs:
        best = float("inf")
        for _ in range(repeat):
            comp = GraphCompilation(gm, codegen, "inference")
            comp.compile()
            best = min(best, sum(comp.report.pass_seconds.get(p, 0.0) for p in ("lower", "schedule")))
        total += best
    return total


def _in_tree(tree: Path, name: str, codegen: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    here = Path(__file__).resolve()
    # run_path, not the script itself: that would put harness/bench (its profile.py) first on sys.path
    script = (f"import runpy, sys; sys.argv = ['dynamic_shapes', '--static-seconds', {name!r}, '--codegen', "
              f"{codegen!r}]; runpy.run_path({str(here)!r}, run_name='__main__')")
    cmd = [sys.executable, "-c", script]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=str(tree))
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.dynamic_shapes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--codegen", default="cpp", choices=("cpp", "triton"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", nargs="*", default=None, help="workloads to run (default: all)")
    parser.add_argument("--inductor", action="store_true", help="also Inductor with dynamic=True (slow cold compiles)")
    parser.add_argument("--repeat", type=int, default=20, help="runs per size for the median")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="another checkout: compare static lower + schedule seconds with it")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the baseline comparison")
    parser.add_argument("--baseline-only", action="store_true", help="only the --baseline-tree comparison")
    parser.add_argument("--static-seconds", default=None, help=argparse.SUPPRESS)  # the subprocess side
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.static_seconds:
        static_pass_seconds(args.static_seconds, args.codegen)  # warm-up: imports, one-time set-up
        print(static_pass_seconds(args.static_seconds, args.codegen))
        return 0
    names = args.only or list(workloads())
    modes = ["static", "dynamic"] + (["inductor"] if args.inductor else [])
    rows = []
    if not args.baseline_only:
        measure(names[0], "static", args.codegen, 2, args.device)  # warm-up: imports, torch's one-time set-up
    for name in names if not args.baseline_only else []:
        results = {mode: measure(name, mode, args.codegen, args.repeat, args.device) for mode in modes}
        for mode, r in results.items():
            ratio = [d / s for d, s in zip(r["run_ms"], results["static"]["run_ms"])]
            rows.append([name, mode, r["graphs"], f"{r['compile_s']:.2f}",
                         "-" if r["passes_s"] is None else f"{r['passes_s']:.3f}",
                         " ".join(f"{t:.3f}" for t in r["run_ms"]), " ".join(f"{x:.2f}" for x in ratio),
                         r["fallbacks"]])
    from tabulate import tabulate

    if rows:
        print(tabulate(rows, headers=["workload", "mode", "graphs", "first call s", "lower+schedule+render s",
                                      "run ms per size", "run / static", "fallbacks"]))
    if args.baseline_tree is not None:
        here = Path(__file__).resolve().parents[2]
        table = []
        for name in names:
            mine, base = [], []
            for _ in range(args.rounds):  # alternating, so drift of the machine hits both
                mine.append(_in_tree(here, name, args.codegen))
                base.append(_in_tree(args.baseline_tree, name, args.codegen))
            table.append([name, f"{min(base):.4f}", f"{min(mine):.4f}", f"{min(mine) / min(base):.3f}"])
        print()
        print(json.dumps({"baseline": str(args.baseline_tree)}))
        print(tabulate(table, headers=["static workload", "baseline lower+schedule s", "this tree s", "ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
