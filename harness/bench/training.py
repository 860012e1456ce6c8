"""Training benchmark: one full training step (forward, loss, backward, AdamW in its foreach form)
of the benchmark models (``harness.bench.zoo``, random weights, dropout off), eager against
Inductor and Crucible, in float32 and under bfloat16 autocast (float32 weights).

    python -m harness.bench.training [--models resnet50 bert_base] [--dtypes fp32 bf16] [--tiny]
                                      [--backends eager inductor crucible ...] [--steps 20]
                                      [--device cuda|cpu] [--jobs 4] [--timeout 900] [--budget S] [--markdown FILE]

Backends: ``eager``; ``inductor`` and ``crucible``: the model compiled, loss, backward and the
optimizer step eager; ``inductor-ro`` and ``crucible-cg``: the model compiled with CUDA graphs
(reduce-overhead, Crucible's ``cudagraphs``); ``inductor-step`` and ``crucible-step``: the whole
step function compiled (Dynamo splits it at ``backward()``; the optimizer step is a graph of its own).

Per model, dtype and backend: the median step time over ``--steps`` rounds of one step of every
backend (interleaved, so a drift of the host falls on all of them alike) after warm-up, the
step's peak memory above what the model and optimizer state hold between steps (activations,
gradients, workspaces), the first step's time (the cold compile, empty kernel caches), and parity
with eager: every backend starts from the same weights and sees the same batches; after
``PARITY_STEPS`` steps its losses and weights are compared with eager's (``update err``: how far
its weights are from eager's, relative to how far eager's moved; ``eager noise``: the same for a
second eager run; a backend above ``PARITY_LIMIT`` for the dtype and above ``NOISE_FACTOR`` times
eager's noise is listed as a parity failure). On CUDA each step is also profiled: its GPU time and
longest kernels (listed for rows behind their peer), and where Crucible's peak is above Inductor's, the
blocks each side allocated in the step that are live at its peak, by the line that allocated them (a
compiled graph's wrapper, Inductor's output code, a model layer). Rows run in their own processes, ``--jobs`` at once
with compiles overlapping and timings alone (``harness.bench.turns``). Nothing here asserts.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from compiler.report import collect_reports
from harness.bench.breakdown import _fmt
from harness.bench.errors import error_line
from harness.bench.gpu_profile import (busy_table, gpu_time, peak_profile, peak_rows_section, row_value,
                                      slow_rows_section, speedup)
from harness.bench.models import _cache_env, _environment, compile_share, geomean, sync
from harness.bench.turns import RESULT, Turns, add_turns_option, run_all, run_lock, run_row
from harness.bench.zoo import MODELS

DTYPES = ("fp32", "bf16")  # bf16: autocast over float32 weights, as mixed-precision training runs
BACKENDS = ("eager", "inductor", "inductor-ro", "inductor-step", "crucible", "crucible-cg", "crucible-step")
CUDA_ONLY = ("inductor-ro", "crucible-cg")
PARITY_STEPS = 3
PARITY_LIMIT = {"fp32": 0.05, "bf16": 0.3}  # update err above this (and above the noise allowance): a failure
# Eager run twice is not bit-identical on the GPU (cuDNN's convolution backward and atomics in
# reductions), and AdamW's g / sqrt(v) turns tiny gradient differences on near-zero gradients into
# whole-step differences: on the H200, resnet50 fp32 after 3 steps was 0.10 (Inductor) and 0.11
# (Crucible) of an update away from eager. A second eager run measures that noise; a backend fails
# only above max(PARITY_LIMIT, NOISE_FACTOR x eager's own distance from itself).
NOISE_FACTOR = 3.0
LR = 1e-3


def loss_of(out: Any, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the model's first output over its last dim (class logits, token logits, or
    a hidden state taken as logits) against fixed random targets, in float32."""
    out = out if isinstance(out, torch.Tensor) else next(t for t in out if isinstance(t, torch.Tensor))
    return torch.nn.functional.cross_entropy(out.float().flatten(0, -2), target)


def make_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, autocast: bool, device: str) -> Callable:
    def step(inputs: tuple, target: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device, torch.bfloat16, enabled=autocast):
            out = model(*inputs)
        loss = loss_of(out, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def compiled_step(backend: str, base: torch.nn.Module, autocast: bool, device: str) -> tuple[Callable, torch.nn.Module]:
    """A fresh copy of ``base`` with its own optimizer, and the step function for ``backend``."""
    model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, foreach=True)
    kind, _, variant = backend.partition("-")
    if kind != "eager" and variant != "step":
        if kind == "inductor":
            model = torch.compile(model, mode="reduce-overhead" if variant == "ro" else None, dynamic=False)
        else:
            model = torch.compile(model, backend="crucible", dynamic=False,
                                  options={"strict": True, **({"cudagraphs": True} if variant == "cg" else {})})
    step = make_step(model, optimizer, autocast, device)
    if variant == "step":
        step = torch.compile(step, backend="inductor" if kind == "inductor" else "crucible", dynamic=False)
    return step, model


def batches(inputs: tuple, count: int) -> list[tuple[tuple, torch.Tensor]]:
    """``count`` fixed batches: the example inputs with their float values redrawn per batch (the
    same for every backend) and a target per batch."""
    out = []
    generator = torch.Generator().manual_seed(1)
    for _ in range(count):
        batch = tuple(torch.randn(t.shape, generator=generator).to(t) if t.is_floating_point() else t for t in inputs)
        out.append(batch)
    return out


def _targets(out: Any, count: int, device: str) -> list[torch.Tensor]:
    out = out if isinstance(out, torch.Tensor) else next(t for t in out if isinstance(t, torch.Tensor))
    rows, classes = out.flatten(0, -2).shape
    generator = torch.Generator().manual_seed(2)
    return [torch.randint(0, classes, (rows,), generator=generator).to(device) for _ in range(count)]


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().float().clone() for p in model.parameters()]


def update_err(weights: list[torch.Tensor], reference: list[torch.Tensor], start: list[torch.Tensor]) -> float:
    """Distance of ``weights`` from ``reference`` relative to how far ``reference`` moved from ``start``."""
    off = sum(float((w - r).abs().sum()) for w, r in zip(weights, reference))
    moved = sum(float((r - s).abs().sum()) for r, s in zip(reference, start))
    return off / moved if moved else (0.0 if off == 0 else math.inf)


def eager_noise(base: torch.nn.Module, autocast: bool, device: str, data: list, targets: list,
                reference: list[torch.Tensor], start: list[torch.Tensor]) -> float:
    """How far a second eager run's weights end from the first's after the parity steps (``update_err``)."""
    step, model = compiled_step("eager", base, autocast, device)
    for i in range(PARITY_STEPS):
        step(data[i], targets[i])
    return update_err(_weights(model), reference, start)


def parity_limit(row: dict, dtype: str) -> float:
    """The update err above which a backend's row is a parity failure (see ``NOISE_FACTOR``)."""
    noise = row["backends"].get("eager", {}).get("noise_err") or 0.0
    return max(PARITY_LIMIT[dtype], NOISE_FACTOR * noise)


def peak_step_bytes(step: Callable, batch: tuple, target: torch.Tensor, device: str) -> int | None:
    """The step's peak allocation above what is held just before it (CUDA only)."""
    if device != "cuda":
        return None
    sync(device)
    held = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(batch, target)
    sync(device)
    return torch.cuda.max_memory_allocated() - held


def saved_bytes(step: Callable, batch: tuple, target: torch.Tensor, model: torch.nn.Module) -> int:
    """Bytes of the distinct storages one step's forward saves for its backward (autograd's saved
    tensors, compiled graphs' included), less the model's own parameters and buffers: the
    activations a partition keeps alive, on any device."""
    held = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in held:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step(batch, target)
    return sum(saved.values())


def measure_row(name: str, dtype: str, device: str, tiny: bool, backends: tuple[str, ...], steps: int,
                turns: Turns | None = None) -> dict[str, Any]:
    """One model in one dtype under every backend: first every backend's first steps (compiling,
    overlapping other rows' compiles), then each one's timing alone. The compiled variants stay alive
    side by side (no ``torch._dynamo.reset()`` between them: each compiles its own copy of the model;
    the step variants' one step function is told apart by its closure and backend guards)."""
    import compiler  # noqa: F401  (registers the backend)

    turns = turns or Turns(None)
    turns.compiling()
    torch.manual_seed(0)
    base, inputs = MODELS[name].build(torch.float32, device, tiny, train=True)
    autocast = dtype == "bf16"
    data = batches(inputs, PARITY_STEPS + 1)
    with torch.no_grad(), torch.autocast(device, torch.bfloat16, enabled=autocast):
        targets = _targets(base(*inputs), PARITY_STEPS + 1, device)
    start = _weights(base)
    result: dict[str, Any] = {"model": name, "dtype": dtype, "backends": {}}
    live: dict[str, tuple[Callable, torch.nn.Module]] = {}
    graphs: dict[str, list] = {}  # a CUDA-graph backend's graph reports, read after its timed steps
    reference: tuple[list[float], list[torch.Tensor]] | None = None
    with tempfile.TemporaryDirectory(prefix="crucible-train-bench-") as tmp:
        for backend in backends:
            if backend in CUDA_ONLY and device != "cuda":
                continue
            row: dict[str, Any] = {}
            try:
                with _cache_env_of(backend, Path(tmp)), collect_reports() as compiled:
                    step, model = compiled_step(backend, base, autocast, device)
                    began = time.perf_counter()
                    losses = [float(step(data[0], targets[0]))]
                    sync(device)
                    row["first_step_s"] = time.perf_counter() - began
                    losses += [float(step(data[i], targets[i])) for i in range(1, PARITY_STEPS)]
                    weights = _weights(model)
                if backend == "crucible-cg":
                    graphs[backend] = compiled.graphs
                if backend == "eager":
                    reference = (losses, weights)
                    row["noise_err"] = eager_noise(base, autocast, device, data, targets, weights, start)
                elif reference is not None:
                    row["loss_err"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference[0]))
                    row["update_err"] = update_err(weights, reference[1], start)
                row["loss"] = losses[-1]
                del weights
                live[backend] = (step, model)
            except Exception as why:  # noqa: BLE001  (one backend failing is a table entry)
                row["error"] = error_line(why)
            result["backends"][backend] = row
        turns.timing()
        failed: dict[str, str] = {}
        timed = interleaved_ms({b: s for b, (s, _) in live.items()}, data[-1], targets[-1], device, steps,
                               lambda b: _cache_env_of(b, Path(tmp)), failed)
        for backend, (step, model) in live.items():
            row = result["backends"][backend]
            if backend in failed:
                row["error"] = failed[backend]
                continue
            row["ms"] = timed[backend]
            try:
                with _cache_env_of(backend, Path(tmp)):
                    row["peak_mb"] = _mb(peak_step_bytes(step, data[-1], targets[-1], device))
                    row["saved_mb"] = _mb(saved_bytes(step, data[-1], targets[-1], model))
                    if device == "cuda":
                        row.update(gpu_time(lambda step=step: step(data[-1], targets[-1])))
                        row.update(peak_profile(lambda step=step: step(data[-1], targets[-1])))
            except Exception as why:  # noqa: BLE001
                row["error"] = error_line(why)
            if backend in graphs:
                row["cudagraphs"] = cudagraph_summary(graphs[backend])
    live.clear()
    gc.collect()
    turns.release()
    return result


def cudagraph_summary(graphs: list) -> str:
    """What became of each compiled graph's CUDA graph over the row's steps (captured or why not,
    replays, calls run uncaptured): a CUDA-graph column that does not beat its plain one says why."""
    parts = []
    for g in graphs:
        status = g.cudagraph.value if g.cudagraph is not None else "not requested"
        parts.append(f"{g.kind} {status} ({g.cudagraph_replays} replays, {g.cudagraph_uncaptured_calls} uncaptured"
                     + (f"; {g.cudagraph_message}" if g.cudagraph_message else "") + ")")
    return "; ".join(parts) or "no graphs compiled"


def _mb(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def _cache_env_of(backend: str, root: Path) -> Any:
    """Empty kernel caches per compiler (the step variants share their compiler's: cold is the first)."""
    from compiler.config import environment_override

    if backend == "eager":
        return _environment({}, environment_override)
    base = backend.removesuffix("-step")
    return _environment(_cache_env(base, root), environment_override)


def step_ms(step: Callable, batch: tuple, target: torch.Tensor, device: str, steps: int) -> float:
    """Median time of one step over ``steps`` steps, after two warm-up steps (Crucible's deferred
    launch configs are built between them): ``interleaved_ms`` of one step function."""
    return interleaved_ms({"step": step}, batch, target, device, steps)["step"]


def interleaved_ms(steps: dict[str, Callable], batch: tuple, target: torch.Tensor, device: str, rounds: int,
                   env: Callable[[str], Any] | None = None, failed: dict[str, str] | None = None) -> dict[str, float]:
    """Each backend's median step time over ``rounds`` rounds of one step of every backend, after two
    warm-up steps each (Crucible's deferred launch configs are built between them), each step under
    its backend's ``env``. With ``failed``, a backend that raises is recorded there (its error line) and
    dropped from the rounds; without, the error propagates (``models.latencies_ms`` alike). Timed one
    backend after the other, a drift of the host over the timing (another process, clocks) fell on one
    backend's steps only: on a slow host resnet50 fp32 read 0.94x Inductor in this benchmark and 1.05x in
    one process with the steps interleaved (H100, forty-first session; the interleaved run's graphs were
    from a commit before, whose normalize kernels were slower, not faster)."""
    import contextlib

    from compiler.tuning import finish_tuning

    times: dict[str, list[float]] = {name: [] for name in steps}
    dropped: dict[str, str] = {} if failed is None else failed

    def timed(name: str, warm: bool = False) -> None:
        try:
            with env(name) if env is not None else contextlib.nullcontext():
                sync(device)
                began = time.perf_counter()
                steps[name](batch, target)
                sync(device)
                if warm:
                    finish_tuning()
                    steps[name](batch, target)
                else:
                    times[name].append(time.perf_counter() - began)
        except Exception as why:  # noqa: BLE001  (one backend failing is a table entry)
            if failed is None:
                raise
            dropped[name] = error_line(why)

    for name in steps:
        timed(name, warm=True)
    for _ in range(rounds):
        for name in steps:
            if name not in dropped:
                timed(name)
    return {name: statistics.median(t) * 1e3 for name, t in times.items() if name not in dropped}


def run_isolated(name: str, dtype: str, args: argparse.Namespace, timeout: float, lock: str | None) -> dict:
    argv = ["--worker", "--models", name, "--dtypes", dtype, "--device", args.device, "--steps", str(args.steps),
            "--backends", *args.backends] + (["--tiny"] if args.tiny else [])
    return run_row("training", lock, argv, timeout, name, dtype)


RATIOS = (("crucible/inductor", "inductor", "crucible"), ("crucible/eager", "eager", "crucible"),
          ("crucible-step/inductor-step", "inductor-step", "crucible-step"),
          ("crucible-cg/inductor-ro", "inductor-ro", "crucible-cg"))


def render(results: list[dict], backends: tuple[str, ...]) -> str:
    """Tables: step times with ratios; peak memory, first step and parity; GPU time per step (CUDA);
    geomeans; the longest kernels of rows below ``gpu_profile.SLOW``; what each side holds at its peak
    where Crucible's peak is above Inductor's (``gpu_profile.peak_rows_section``)."""
    from tabulate import tabulate

    shown = [b for b in backends if any(b in r["backends"] for r in results)]
    compiled = [b for b in shown if b != "eager"]
    speed = [[r["model"], r["dtype"], *[_fmt(row_value(r, b, "ms"), ".2f") for b in shown],
              *[_fmt(speedup(r, slow, fast)) for _, slow, fast in RATIOS]] for r in results]
    text = ["step time (ms, median):\n" + tabulate(
        speed, headers=["model", "dtype", *shown, *[r[0] for r in RATIOS]], tablefmt="github")]
    rest = [[r["model"], r["dtype"], *[_fmt(row_value(r, b, "peak_mb"), ".0f") for b in shown],
             *[_fmt(row_value(r, b, "saved_mb"), ".1f") for b in shown],
             *[_fmt(row_value(r, b, "first_step_s"), ".1f") for b in compiled],
             _fmt(row_value(r, "eager", "noise_err"), ".2g"),
             *[_fmt(row_value(r, b, "update_err"), ".2g") for b in compiled]] for r in results]
    text.append("peak MB above the held state (CUDA), MB saved for the backward, first step s (cold compile), "
                f"update err after "
                f"{PARITY_STEPS} steps:\n" + tabulate(
                    rest, headers=["model", "dtype", *[f"{b} MB" for b in shown], *[f"{b} saved" for b in shown],
                                   *[f"{b} first" for b in compiled],
                                   "eager noise", *[f"{b} err" for b in compiled]], tablefmt="github"))
    geo = [[dtype, *[_fmt(geomean([x for r in results if r["dtype"] == dtype and (x := speedup(r, s, f))]))
                     for _, s, f in RATIOS]] for dtype in DTYPES if any(r["dtype"] == dtype for r in results)]
    text.append("geomeans (speed of the second over the first; > 1: Crucible faster):\n" +
                tabulate(geo, headers=["dtype", *[r[0] for r in RATIOS]], tablefmt="github"))
    text += [t for t in (busy_table(results, shown, "step"), slow_rows_section(results, RATIOS, "step"),
                         peak_rows_section(results, "crucible", "inductor", "step")) if t]
    found = problems(results)
    if found:
        text.append("errors, parity failures and CUDA graphs:\n" + "\n".join(f"- {p}" for p in found))
    return "\n\n".join(text)


def problems(results: list[dict]) -> list[str]:
    out = []
    for r in results:
        where = f"{r['model']} {r['dtype']}"
        if "error" in r:
            out.append(f"{where}: {r['error']}")
        for backend, row in r["backends"].items():
            if "cudagraphs" in row:
                out.append(f"{where} {backend}: CUDA graphs: {row['cudagraphs']}")
            if "error" in row:
                out.append(f"{where} {backend}: {row['error']}")
            err, limit = row.get("update_err"), parity_limit(r, r["dtype"])
            if err is not None and err > limit:
                out.append(f"{where} {backend}: parity: weights after {PARITY_STEPS} steps are {err:.3g} of eager's "
                           f"update away from eager's (limit {limit:.3g}), loss err "
                           f"{row.get('loss_err', math.nan):.3g}")
    return out


def main(argv: list[str] | None = None, turns: Turns | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.training", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert_base"], choices=list(MODELS),
                        metavar="MODEL", help=f"models to train (default: resnet50 bert_base; any of {', '.join(MODELS)})")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS,
                        help="what to run (eager is the parity reference: keep it first; the CUDA-graph "
                             "variants need --device cuda)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per backend (default 20)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="tiny stand-ins of each model: a smoke check of the script")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model and dtype (default 900)")
    parser.add_argument("--jobs", type=int, default=1, help="rows run at once: compiles overlap, timings alone")
    parser.add_argument("--budget", type=float,
                        help="seconds for all rows: a row gets at most what is left as its timeout, rows not "
                             "started with a minute left are listed as not run")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    add_turns_option(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.steps < 1:
        parser.error(f"--jobs {args.jobs} --steps {args.steps}: both must be at least 1")
    if args.budget is not None and args.budget <= 0:
        parser.error(f"--budget {args.budget}: give the seconds all rows may take, more than 0")
    if args.backends[0] != "eager" and "eager" in args.backends:
        parser.error("--backends: put eager first (it is the parity reference)")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("harness.bench.training: no CUDA GPU here; use --device cpu (with --tiny for a smoke check)")
        return 2
    if args.worker:
        for name in args.models:
            for dtype in args.dtypes:
                row = measure_row(name, dtype, args.device, args.tiny, tuple(args.backends), args.steps, turns)
                print(RESULT + json.dumps(row), flush=True)
        return 0
    from compiler.config import environment_override

    todo = [(m, d) for m in args.models for d in args.dtypes]
    share = compile_share(args.jobs)

    def done(job: tuple[str, str], row: dict, seconds: float) -> None:
        print(f"[{seconds:6.1f} s] {job[0]} {job[1]}: " + ", ".join(
            f"{b} {_fmt(v.get('ms'), '.2f')} ms" if "ms" in v else f"{b} FAILED" for b, v in row["backends"].items())
            + (f" ({row['error']})" if "error" in row else ""), flush=True)

    def not_run(job: tuple[str, str]) -> dict:
        why = "not run" if args.budget is None else f"not run: too little of the --budget of {args.budget:.0f} s was left"
        return {"model": job[0], "dtype": job[1], "error": why, "backends": {}}

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="crucible-train-turns-") as tmp, \
            _environment({} if share is None else {"TORCHINDUCTOR_COMPILE_THREADS": str(share),
                                                   "CRUCIBLE_COMPILE_THREADS": str(share)}, environment_override):
        lock = run_lock(args.turns, args.jobs, tmp)
        results = run_all(todo, lambda job, timeout: run_isolated(job[0], job[1], args, timeout, lock), args.jobs,
                          args.budget, args.timeout, done, not_run, 1.0 if args.tiny else min(60.0, args.timeout))
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    shared = "" if args.turns is None else f" among every run sharing the turns file {args.turns.name}"
    text = (f"device: {device}, torch {torch.__version__}" + (", tiny models" if args.tiny else "") +
            f"; AdamW(foreach, lr {LR}); median of {args.steps} interleaved steps; {args.jobs} rows at once "
            f"(compiles overlap, timings alone{shared}); all rows: {time.perf_counter() - started:.0f} s wall\n\n"
            + render(results, tuple(args.backends)))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
