"""Model benchmark: eager, Inductor (default and reduce-overhead), Crucible and Crucible with CUDA
graphs on timm and transformers models (random weights), in float32 and bfloat16, at inference.

    python -m harness.bench.models [--models resnet50 gpt2] [--dtypes fp32 bf16] [--tiny]
                                    [--device cuda|cpu] [--jobs 4] [--timeout 300] [--budget 540]
                                    [--markdown FILE]

Per model and dtype: latency (ms per call, back-to-back calls, in rounds interleaved between the
backends so a drift of the host falls on all of them alike), speed ratios, cold compile time
(first call with empty kernel caches), max abs error against eager, Crucible's kernel and extern
counts and its host time per launched step, where Crucible's compile time goes; on CUDA each call's
GPU time and its share of the wall time, and for a row where Crucible is below 0.95x a peer in wall or
GPU time, both sides' longest kernels (``harness.bench.gpu_profile``); then geomeans and the launch
micro-benchmark (``harness.bench.launch``). Each model runs in its own process (a true cold compile,
and one that crashes, hangs or runs out of memory is a row of its own) unless ``--in-process``. With
``--jobs N``, N rows run at once: their compiles overlap, every timing runs alone (``harness.bench.turns``).
Performance goals are read from this table; nothing here asserts.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.bench.errors import error_line
from harness.bench.gpu_profile import busy_table, gpu_time, slow_rows_section
from harness.bench.turns import RESULT, Turns, add_turns_option, run_all, run_lock, run_row
from harness.bench.breakdown import _fmt, compile_breakdown, compile_passes  # noqa: F401  (compile_breakdown: re-exported)
from harness.bench.zoo import MODELS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
BACKENDS = ("eager", "inductor", "inductor-ro", "crucible", "crucible-cg")
# run only when --backends names them: Inductor's max-autotune (its GEMM and convolution template
# autotuning, CUDA graphs off: the column compares kernels with Crucible's) compiles for minutes a model
OPT_IN = ("inductor-ma", "crucible-untuned")
# crucible-untuned: options ``tuning="off"``, every kernel on the renderer's first launch config, nothing
# timed: what launch-config tuning buys a model (against the crucible column) and costs its compile


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def latency_ms(call: Callable[[], Any], device: str, budget_s: float = 1.0) -> float:
    """Median over 5 rounds of the mean time of back-to-back calls (host and device together:
    a host-bound wrapper shows up here), each round about ``budget_s / 5``. Crucible's deferred launch
    configs (compiler/tuning.py) are built first and timed in the warm-up call."""
    return latencies_ms({"call": call}, device, budget_s)["call"]


def latencies_ms(calls: dict[str, Callable[[], Any]], device: str, budget_s: float = 1.0, rounds: int = 5,
                 failed: dict[str, str] | None = None) -> dict[str, float]:
    """``latency_ms`` of several calls with their rounds interleaved (round k of every call before round
    k + 1 of any), so a drift of the host during the timing falls on all of them alike. With ``failed``,
    a call that raises is recorded there (its error line) and dropped; without, the error propagates."""
    from compiler.tuning import finish_tuning

    def guarded(name: str, run: Callable[[], Any]) -> Any:
        if failed is None:
            return run()
        try:
            return run()
        except Exception as why:  # noqa: BLE001  (one backend failing is a table entry)
            failed[name] = error_line(why)
            return None

    def batch(call: Callable[[], Any], n: int) -> float:
        sync(device)
        start = time.perf_counter()
        for _ in range(n):
            call()
        sync(device)
        return (time.perf_counter() - start) / n

    def warm(call: Callable[[], Any]) -> int:
        call()
        finish_tuning()
        call()
        return max(1, min(200, int(budget_s / rounds / max(batch(call, 1), 1e-6))))

    per_round = {name: guarded(name, lambda call=call: warm(call)) for name, call in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            if failed is None or name not in failed:
                mean = guarded(name, lambda call=call, name=name: batch(call, per_round[name]))
                if mean is not None:
                    times[name].append(mean)
    return {name: statistics.median(t) * 1e3 for name, t in times.items() if failed is None or name not in failed}


def host_ms(call: Callable[[], Any], device: str, repeat: int = 20) -> float:
    """Host time of one call started on an idle device (its launches never wait for a full queue)."""
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    sync(device)
    return statistics.median(times) * 1e3


def _first_tensor(out: Any) -> torch.Tensor:
    while isinstance(out, (list, tuple)):
        out = out[0]
    return out


def compiled_for(backend: str, model: torch.nn.Module) -> Callable:
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model, backend="inductor", dynamic=False)
    if backend == "inductor-ro":
        return torch.compile(model, mode="reduce-overhead", dynamic=False)
    if backend == "inductor-ma":
        return torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=False)
    options = {"strict": True, **({"cudagraphs": True} if backend == "crucible-cg" else {}),
               **({"tuning": "off"} if backend == "crucible-untuned" else {})}
    return torch.compile(model, backend="crucible", dynamic=False, options=options)


def _cache_env(backend: str, root: Path) -> dict[str, str]:
    """Empty caches for a cold compile: Inductor's (its Triton cache lives inside), or Crucible's and
    Triton's. The CUDA-graph variants share their base's caches (their compile is not the cold one)."""
    base = root / backend.removesuffix("-ro").removesuffix("-cg")
    if backend.startswith("inductor"):
        return {"TORCHINDUCTOR_CACHE_DIR": str(base)}
    return {"CRUCIBLE_CACHE_DIR": str(base), "TRITON_CACHE_DIR": str(base / "triton")}


@dataclass
class Compiled:
    """One backend after its first call (the cold compile), waiting for its timing."""

    fn: Callable
    row: dict[str, Any]
    out: torch.Tensor  # the first call's output (copied: a CUDA graph's next replay overwrites it)
    report: Any  # Crucible's CompileReport (filled in place: CUDA-graph capture happens later)


def compile_backend(backend: str, model: torch.nn.Module, inputs: tuple, device: str,
                    cache_root: Path) -> Compiled:
    """The backend's first call with empty caches, timed: its cold compile."""
    import compiler
    from compiler import collect_reports
    from compiler.config import environment_override
    from compiler.runtime import TUNING_SECONDS

    row: dict[str, Any] = {}
    tuned_before = TUNING_SECONDS[0]
    fn = compiled_for(backend, model)
    overrides = _cache_env(backend, cache_root) if backend != "eager" else {}
    with collect_reports() as report, torch.no_grad():
        start = time.perf_counter()
        with _environment(overrides, environment_override):
            out = _first_tensor(fn(*inputs))
            sync(device)
        row["compile_s"] = time.perf_counter() - start
        row["tuning_s"] = TUNING_SECONDS[0] - tuned_before
        if backend.startswith("crucible"):
            # the launch configs the first call did not wait for (options ``tuning="deferred"``): built
            # in the background, timed in the next call; done here, so they do not share the timed calls
            with _environment(overrides, environment_override):
                compiler.finish_tuning()
                fn(*inputs)
                sync(device)
            row["tuned_s"] = time.perf_counter() - start
    return Compiled(fn, row, out.detach().clone(), report)


def time_backend(backend: str, done: Compiled, inputs: tuple, expected: torch.Tensor | None,
                 device: str, ms: float) -> dict[str, Any]:
    """A compiled backend's row: its latency ``ms`` (``latencies_ms``), host time, error against eager,
    Crucible's counts."""
    row, fn, report = done.row, done.fn, done.report
    row["ms"] = ms
    with torch.no_grad():
        row["host_ms"] = host_ms(lambda: fn(*inputs), device)
        again = _first_tensor(fn(*inputs))  # after the timed calls: a CUDA graph's replay, not its warm-up
    if expected is not None:
        row["max_err"] = max(float((o.float() - expected.float()).abs().max()) for o in (done.out, again))
    if backend.startswith("crucible"):
        row["kernels"] = len(report.kernels)
        row["externs"] = len(report.externs)
        row["fallbacks"] = [f"{g.fallback.value}: {g.fallback_message}" for g in report.fallbacks]
        row["notes"] = sorted({f"cuda graph {g.cudagraph.value}: {g.cudagraph_message}" for g in report.graphs
                               if g.cudagraph is not None})
        row["passes_s"] = compile_passes(report)
        steps = row["kernels"] + row["externs"]
        row["host_us_per_step"] = row["host_ms"] * 1e3 / steps if steps else None
    return row


class _environment:
    """Several ``environment_override`` blocks at once."""

    def __init__(self, values: dict[str, str], override: Callable) -> None:
        self.blocks = [override(k, v) for k, v in values.items()]

    def __enter__(self) -> None:
        for b in self.blocks:
            b.__enter__()

    def __exit__(self, *exc: Any) -> None:
        for b in reversed(self.blocks):
            b.__exit__(*exc)


def measure_model(name: str, dtype: str, device: str, tiny: bool, backends: tuple[str, ...],
                  turns: Turns | None = None, keep_tuning: Path | None = None) -> dict[str, Any]:
    """One model in one dtype under every backend; a backend that fails gets its error, not a row.

    Every backend compiles first (one compiling turn), then each is timed (one timing turn): two
    turns per row, not two per backend, so rows wait for each other's compiles once. The compiled
    variants stay alive side by side (no ``torch._dynamo.reset()`` between them: Dynamo keeps one
    cache entry per backend, told apart by its backend guard)."""
    import torch._dynamo

    import compiler  # noqa: F401  (registers the backend)

    turns = turns or Turns(None)
    turns.compiling()
    torch.manual_seed(0)
    model, inputs = MODELS[name].build(DTYPES[dtype], device, tiny)
    result: dict[str, Any] = {"model": name, "dtype": dtype, "backends": {}}
    with torch.no_grad():
        expected = _first_tensor(model(*inputs)).detach().clone()
    torch._dynamo.reset()
    compiled: dict[str, Compiled] = {}
    with tempfile.TemporaryDirectory(prefix="crucible-bench-") as tmp:
        # crucible-untuned first: a kernel tuned earlier in the process keeps its tuned config in every mode
        for backend in sorted(backends, key=lambda b: b != "crucible-untuned"):
            if backend in ("inductor-ro", "crucible-cg") and device != "cuda":
                continue
            try:
                compiled[backend] = compile_backend(backend, model, inputs, device, Path(tmp))
            except Exception as why:  # noqa: BLE001  (one backend failing is a table entry)
                result["backends"][backend] = {"error": error_line(why)}
        tuned = Path(tmp) / "crucible" / "tuning" / "configs.json"  # written by the first call's timing
        if keep_tuning is not None and tuned.exists():
            keep_tuning.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tuned, keep_tuning / f"{name}_{dtype}.json")
        turns.timing()
        failed: dict[str, str] = {}
        with torch.no_grad():  # interleaved rounds: a drift of the host falls on every backend alike
            ms = latencies_ms({b: functools.partial(d.fn, *inputs) for b, d in compiled.items()}, device,
                              failed=failed)
        for backend, done in compiled.items():
            if backend in failed:
                result["backends"][backend] = {**done.row, "error": failed[backend]}
                continue
            try:
                result["backends"][backend] = time_backend(backend, done, inputs, expected, device, ms[backend])
                if device == "cuda":
                    with torch.no_grad():
                        result["backends"][backend].update(gpu_time(functools.partial(done.fn, *inputs)))
            except Exception as why:  # noqa: BLE001
                result["backends"][backend] = {**done.row, "error": error_line(why)}
    turns.release()
    return {**result, "backends": {b: result["backends"][b] for b in backends if b in result["backends"]}}


def run_isolated(name: str, dtype: str, args: argparse.Namespace, timeout: float,
                 lock: str | None = None) -> dict[str, Any]:
    argv = ["--worker", "--models", name, "--dtypes", dtype, "--device", args.device,
            "--backends", *args.backends] + (["--tiny"] if args.tiny else []) + \
        (["--keep-tuning", str(args.keep_tuning)] if args.keep_tuning else [])
    return run_row("models", lock, argv, timeout, name, dtype)


def compile_share(jobs: int) -> int | None:
    """Compile workers per compiler of a row when ``jobs`` rows compile at once: an equal share of
    the cores for Inductor's and Crucible's alike (instead of every row's compilers starting one per
    core); None: one row at a time, each compiler's default."""
    return max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None


def _ms(row: dict, backend: str) -> float | None:
    return row["backends"].get(backend, {}).get("ms")


def _ratio(row: dict, slow: str, fast: str) -> float | None:
    a, b = _ms(row, slow), _ms(row, fast)
    return a / b if a and b else None


# (column, how to get it from a result row)
COLUMNS: list[tuple[str, Callable[[dict], str]]] = [
    ("model", lambda r: r["model"]),
    ("dtype", lambda r: r["dtype"]),
    *[(f"{b} ms", lambda r, b=b: _fmt(_ms(r, b), ".3f")) for b in BACKENDS],
    ("crucible/inductor", lambda r: _fmt(_ratio(r, "inductor", "crucible"))),
    ("crucible/eager", lambda r: _fmt(_ratio(r, "eager", "crucible"))),
    ("crucible-cg/inductor-ro", lambda r: _fmt(_ratio(r, "inductor-ro", "crucible-cg"))),
    ("compile s inductor", lambda r: _fmt(r["backends"].get("inductor", {}).get("compile_s"), ".1f")),
    ("compile s crucible", lambda r: _fmt(r["backends"].get("crucible", {}).get("compile_s"), ".1f")),
    # until the deferred launch configs are built and timed (compiler/tuning.py)
    ("tuned s crucible", lambda r: _fmt(r["backends"].get("crucible", {}).get("tuned_s"), ".1f")),
    ("max err crucible", lambda r: _fmt(r["backends"].get("crucible", {}).get("max_err"), ".2g")),
    ("max err inductor", lambda r: _fmt(r["backends"].get("inductor", {}).get("max_err"), ".2g")),
    ("host us/step", lambda r: _fmt(r["backends"].get("crucible", {}).get("host_us_per_step"), ".1f")),
    ("kernels+externs", lambda r: "-" if "kernels" not in r["backends"].get("crucible", {}) else
     f"{r['backends']['crucible']['kernels']}+{r['backends']['crucible']['externs']}"),
]

GEOMEANS = (("crucible/inductor", "inductor", "crucible"), ("crucible/eager", "eager", "crucible"),
            ("crucible-cg/inductor-ro", "inductor-ro", "crucible-cg"),
            ("crucible-cg/inductor", "inductor", "crucible-cg"),
            *((f"crucible/{b}", b, "crucible") for b in OPT_IN))
# the opt-in backends' columns, shown when a row ran them
OPT_IN_COLUMNS: dict[str, list[tuple[str, Callable[[dict], str]]]] = {
    b: [(f"{b} ms", lambda r, b=b: _fmt(_ms(r, b), ".3f")),
        (f"crucible/{b}", lambda r, b=b: _fmt(_ratio(r, b, "crucible"))),
        (f"compile s {b}", lambda r, b=b: _fmt(r["backends"].get(b, {}).get("compile_s"), ".1f"))]
    for b in OPT_IN}


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def problems(results: list[dict]) -> list[str]:
    """Every error, fallback and note of the run, one line each."""
    out = []
    for r in results:
        where = f"{r['model']} {r['dtype']}"
        if "error" in r:
            out.append(f"{where}: {r['error']}")
        for backend, row in r["backends"].items():
            if "error" in row:
                out.append(f"{where} {backend}: {row['error']}")
            out += [f"{where} {backend}: fell back to eager: {f}" for f in row.get("fallbacks", ())]
            out += [f"{where} {backend}: {n}" for n in row.get("notes", ())]
    return out


def render_tables(results: list[dict], launch_rows: list[tuple[str, float]]) -> str:
    from tabulate import tabulate

    ran = {b for r in results for b in r["backends"]}
    columns = COLUMNS + [c for b in OPT_IN if b in ran for c in OPT_IN_COLUMNS[b]]
    rows = [[get(r) for _, get in columns] for r in results]
    text = [tabulate(rows, headers=[c for c, _ in columns], tablefmt="github")]
    geomeans = [g for g in GEOMEANS if g[1] in ran and g[2] in ran]
    geo = []
    for dtype in DTYPES:
        mine = [r for r in results if r["dtype"] == dtype]
        if mine:
            geo.append([dtype] + [_fmt(geomean([x for r in mine if (x := _ratio(r, slow, fast))]))
                                  for _, slow, fast in geomeans])
    text.append("geomeans (speed of the second over the first; > 1: Crucible faster; over the rows that ran "
                "both):\n" + tabulate(geo, headers=["dtype", *[g[0] for g in geomeans]], tablefmt="github"))
    ran_in_order = [b for b in (*BACKENDS, *OPT_IN) if b in ran]
    text += [t for t in (busy_table(results, ran_in_order, "call"), slow_rows_section(results, GEOMEANS, "call")) if t]
    breakdown = compile_breakdown(results)
    if breakdown:
        text.append(breakdown)
    if launch_rows:
        text.append("host time per launch:\n" + tabulate([(w, f"{us:.1f}") for w, us in launch_rows],
                                                         headers=["launch", "host us"], tablefmt="github"))
    issues = problems(results)
    if issues:
        text.append("errors, fallbacks and notes:\n" + "\n".join(f"- {p}" for p in issues))
    return "\n\n".join(text)


def pairs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    if not args.pairs:
        return [(m, d) for m in args.models for d in args.dtypes]
    out = []
    for pair in args.pairs:
        name, _, dtype = pair.partition(":")
        if name not in MODELS or dtype not in DTYPES:
            parser.error(f"--pairs {pair!r}: expected MODEL:DTYPE with MODEL in {', '.join(MODELS)} "
                         f"and DTYPE in {', '.join(DTYPES)}")
        out.append((name, dtype))
    return out


def render_only(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Exit status 1 when any model fails to compile (render) for the GPU."""
    import compiler  # noqa: F401  (registers the backend)
    from harness.bench.render_check import render_check

    failed = 0
    for name, dtype in pairs(args, parser):
        row = render_check(name, DTYPES[dtype], args.tiny)
        failed += not row["ok"]
        detail = (", ".join(f"{k} kernels + {e} externs" for k, e in row["graphs"]) if row["ok"]
                  else f"FAILED: {row['error']}")
        stages = ", ".join(f"{stage} {t:.2f}" for stage, t in row.get("stages", {}).items())
        print(f"{name} {dtype}: {detail} ({row['s']:.0f} s{'; s by stage: ' + stages if stages else ''})", flush=True)
    return 1 if failed else 0


def run_rows(todo: list[tuple[str, str]], args: argparse.Namespace) -> list[dict]:
    """Every (model, dtype) row: in this process, or each in a worker process, ``args.jobs`` at once
    (compiles overlapping, timings alone, see ``harness.bench.turns``), within ``args.budget``."""
    from compiler.config import environment_override

    def done(job: tuple[str, str], row: dict, seconds: float) -> None:
        name, dtype = job
        print(f"[{seconds:6.1f} s] {name} {dtype}: " +
              ", ".join(f"{b} {_fmt(v.get('ms'), '.3f')} ms" if "ms" in v else f"{b} FAILED"
                        for b, v in row["backends"].items()) + (f" ({row['error']})" if "error" in row else ""),
              flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps(row) + "\n")

    def not_run(job: tuple[str, str]) -> dict:
        return {"model": job[0], "dtype": job[1], "error": f"not run: too little of the --budget of {args.budget:.0f} s "
                f"was left", "backends": {}}

    # a full-size row takes ~75 s on the H200 (one at a time): one started with less left would time out
    least = 1.0 if args.tiny else min(60.0, args.timeout)

    if args.in_process:
        run = lambda job, _: measure_model(job[0], job[1], args.device, args.tiny, tuple(args.backends),  # noqa: E731
                                           keep_tuning=args.keep_tuning)
        return run_all(todo, run, 1, args.budget, math.inf, done, not_run, least)
    share = compile_share(args.jobs)
    with tempfile.TemporaryDirectory(prefix="crucible-bench-turns-") as tmp, \
            _environment({} if share is None else {"TORCHINDUCTOR_COMPILE_THREADS": str(share),
                                                   "CRUCIBLE_COMPILE_THREADS": str(share)}, environment_override):
        lock = run_lock(args.turns, args.jobs, tmp)
        return run_all(todo, lambda job, timeout: run_isolated(job[0], job[1], args, timeout, lock), args.jobs,
                       args.budget, args.timeout, done, not_run, least)


def how_measured(args: argparse.Namespace) -> str:
    """The run's conditions, printed above its table."""
    share = compile_share(args.jobs)
    rows = (f"{args.jobs} rows at once: a row compiles all its backends while other rows compile (each compiler "
            f"{share} compile workers), then times them alone on the host" if args.jobs > 1 and not args.in_process
            else "one row at a time: a row compiles all its backends, then times them")
    if args.turns is not None:
        rows += f" (its timings alone among every run sharing the turns file {args.turns.name})"
    return (f"{rows}; cold compile: the first call with empty caches, of Inductor's default mode and of Crucible "
            f"without CUDA graphs; reduce-overhead and Crucible+CG compile after them on the same caches (kernel "
            f"builds and tuning warm; Inductor re-lowers the graph: its FX graph cache key includes the CUDA-graph "
            f"setting), so their compile times are not in the table")


def main(argv: list[str] | None = None, turns: Turns | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.models", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), metavar="MODEL",
                        help=f"models to run (default: all of {', '.join(MODELS)})")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--pairs", nargs="+", metavar="MODEL:DTYPE",
                        help="run exactly these model:dtype pairs (instead of --models x --dtypes)")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS + OPT_IN,
                        help=f"what to run (default: {' '.join(BACKENDS)}; the CUDA-graph variants need --device "
                             f"cuda; inductor-ma: Inductor's max-autotune, minutes of compile a model)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true",
                        help="tiny stand-ins of each model and small inputs: a smoke check of the script")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model and dtype (default 600)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="rows (model x dtype) run at once: their compiles overlap, every timing runs alone "
                             "(default 1)")
    parser.add_argument("--budget", type=float,
                        help="seconds for all rows: a row gets at most what is left as its timeout, rows not "
                             "started in time are listed as not run")
    parser.add_argument("--in-process", action="store_true",
                        help="run every model in this process (no timeout; compiles are not cold after the first)")
    parser.add_argument("--no-launch-bench", action="store_true", help="skip the launch micro-benchmark")
    parser.add_argument("--json", type=Path, help="also write every result row to this file (JSON lines)")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--keep-tuning", type=Path, metavar="DIR",
                        help="copy each row's tuning cache (every launch-config candidate's time, "
                             "compiler.tuning_cache) to DIR/MODEL_DTYPE.json")
    parser.add_argument("--render-only", action="store_true",
                        help="no GPU needed: lower, schedule and render each model for the GPU (nothing built "
                             "or timed), to check that every model compiles (harness/bench/render_check.py)")
    add_turns_option(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: expected at least 1 (rows run at once)")
    if args.turns is not None and args.in_process:
        parser.error("--turns with --in-process: rows run in this process take no turns; drop one of them")
    if args.render_only:
        return render_only(args, parser)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("harness.bench.models: no CUDA GPU here; use --device cpu (with --tiny for a smoke check)")
        return 2
    if args.worker:
        for name, dtype in pairs(args, parser):
            row = measure_model(name, dtype, args.device, args.tiny, tuple(args.backends), turns, args.keep_tuning)
            print(RESULT + json.dumps(row), flush=True)
        return 0
    launch_rows = []
    if args.device == "cuda" and not args.no_launch_bench:
        from harness.bench.launch import launch_table

        launch_rows = launch_table()
        for what, us in launch_rows:
            print(f"host time per launch: {what}: {us:.1f} us", flush=True)
    started = time.perf_counter()
    results = run_rows(pairs(args, parser), args)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    head = (f"device: {device}, torch {torch.__version__}" + (", tiny models" if args.tiny else "") +
            f"\n{how_measured(args)}; all rows: {time.perf_counter() - started:.0f} s wall")
    text = head + "\n\n" + render_tables(results, launch_rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
