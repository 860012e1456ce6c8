"""Simulator benchmarks: checking overhead on the CPU, and the roofline estimate against a GPU.

    python -m harness.bench.simulator overhead [--suite smoke] [--entry NAME ...] [--limit N]
    python -m harness.bench.simulator gpu [--quick] [--gpu H200]

``overhead`` compiles each corpus entry with the compiler's Triton kernels on the CPU and
times its steady-state call (the harness's ``run`` phase) in Triton's plain interpreter and
checked by the simulator; it prints the ratio per entry and over the whole selection (the
issue's budget: at most 3x). ``gpu`` needs a CUDA GPU: for each case of
``harness.bench.gpu`` it counts the kernels' bytes and FLOPs in the simulator on the CPU at
two small row counts (every case is row-wise, so bytes and FLOPs are affine in the rows),
extrapolates them to the GPU shape, estimates the time on ``--gpu`` from the datasheet and from the
measured copy bandwidth, and prints both next to the measured time with the error. It prints
figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tabulate import tabulate


def _steady_call(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # compile + first call
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _entry_call(entry: Any, checked: bool) -> Callable[[], Any]:
    import torch

    from harness.model_runs import DTYPES, ModelCopies, cast
    from harness.targets import parse_target

    built = entry.build("small")
    dtype = DTYPES.get(entry.dtype)
    model = ModelCopies(entry, "small", built.model).fresh("cpu", dtype)
    args, kwargs = cast(built.inputs, "cpu", dtype), cast(built.kwargs, "cpu", dtype)
    compiled = parse_target("crucible-sim" if checked else "crucible-interpret").compile(model)

    def call() -> Any:
        with torch.no_grad():
            return compiled(*args, **kwargs)

    return call


def overhead(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.simulator overhead",
                                     description="checked vs plain interpreter time of the run phase")
    parser.add_argument("--suite", default="smoke", help="corpus suite (default smoke)")
    parser.add_argument("--entry", nargs="+", default=None, help="only these entries")
    parser.add_argument("--limit", type=int, default=None, help="at most this many entries")
    parser.add_argument("--repeat", type=int, default=1, help="timed calls per mode; the best counts (default 1)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    import torch

    from corpus.registry import catalog, select
    from simulator import SimulatorMemoryError, session

    entries = [e for e in select(catalog().entries, args.suite, None, None, args.entry) if "cpu" in e.devices]
    if not entries:
        print(f"error: no entries selected (suite {args.suite!r}, entries {args.entry})", file=sys.stderr)
        return 2
    rows, plain_total, checked_total = [], 0.0, 0.0
    for entry in entries[:args.limit]:
        try:
            torch._dynamo.reset()
            plain = _steady_call(_entry_call(entry, False), args.repeat)
            torch._dynamo.reset()
            with session.checking():
                checked = _steady_call(_entry_call(entry, True), args.repeat)
        except SimulatorMemoryError as e:
            rows.append([entry.name, "-", "-", f"memory error: {str(e).splitlines()[0][:60]}"])
            continue
        except Exception as e:  # noqa: BLE001 -- an entry that does not compile is skipped, not a benchmark error
            rows.append([entry.name, "-", "-", f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:60]}"
                         if str(e) else f"skipped: {type(e).__name__}"])
            continue
        finally:
            torch._dynamo.reset()
        plain_total += plain
        checked_total += checked
        rows.append([entry.name, f"{plain * 1e3:.1f}", f"{checked * 1e3:.1f}", f"{checked / plain:.2f}"])
    print(tabulate(rows, headers=["entry", "interpreter ms", "checked ms", "ratio"]))
    ratios = [float(r[3]) for r in rows if r[1] != "-"]
    if ratios:
        print(f"\n{len(ratios)} entries: total {plain_total:.2f} s plain, {checked_total:.2f} s checked, "
              f"overhead {checked_total / plain_total:.2f}x (median per entry {statistics.median(ratios):.2f}x; "
              f"budget 3x)")
    return 0


def _gpu_cases(quick: bool) -> list[tuple[str, Callable[[str, int], Callable], tuple[int, int]]]:
    from harness.bench import gpu as cases

    scale = 64 if quick else 1
    shapes = [(32768 // scale, 4096), (4096 // scale, 32768), (262144 // scale, 512)]
    out = [("pointwise chain (5 ops)", lambda dev, c: cases.chain5, (256 * 2**20 // scale // 4096, 4096))]
    for rows, cols in shapes:
        out.append(("softmax", lambda dev, c: cases.softmax, (rows, cols)))
        out.append(("layer_norm", lambda dev, c: cases.make_layer_norm(c, dev), (rows, cols)))
        out.append(("rms_norm", lambda dev, c: cases.make_rms_norm(c, dev), (rows, cols)))
    return out


def _count(make: Callable, cols: int, rows: int) -> list:
    """Per-kernel accounting of one steady-state call on a ``rows`` x ``cols`` input, in the simulator."""
    import torch

    from simulator import session

    torch.manual_seed(0)
    fn = make("cpu", cols)
    x = torch.randn(rows, cols)
    torch._dynamo.reset()
    with session.checking() as rec:
        compiled = torch.compile(fn, backend="crucible", dynamic=False, options={"codegen": "triton", "strict": True})
        compiled(x)
        rec.reset()
        compiled(x)
    torch._dynamo.reset()
    return [r.accounting for r in rec.reports if r.accounting is not None]


def _extrapolated(make: Callable, shape: tuple[int, int], sim_rows: int) -> list[tuple[float, float, float]]:
    """(ideal bytes, FLOPs, dot FLOPs) per kernel at the full shape, from two small row counts.

    Every case is row-wise, so each count is affine in the rows (per-row data plus per-kernel
    constants such as a norm's weight): two points give it exactly."""
    r1, r2 = sim_rows, 2 * sim_rows
    a, b = _count(make, shape[1], r1), _count(make, shape[1], r2)
    if len(a) != len(b):
        raise RuntimeError(f"the simulated graph has {len(a)} kernels at {r1} rows and {len(b)} at {r2}")

    def at(v1: float, v2: float) -> float:
        return v1 + (v2 - v1) / (r2 - r1) * (shape[0] - r1)

    return [(at(p.ideal_bytes, q.ideal_bytes), at(p.flops, q.flops), at(p.dot_flops, q.dot_flops))
            for p, q in zip(a, b)]


def _scaled_estimate(kernels: list[tuple[float, float, float]], spec: Any) -> tuple[float, float, str]:
    """(seconds, DRAM bytes, bound) of the kernels on ``spec``."""
    seconds, moved, bounds = 0.0, 0.0, set()
    for ideal, flops, dot_flops in kernels:
        memory = ideal / (spec.bandwidth * spec.efficiency)
        compute = flops / spec.fp32 + dot_flops / spec.tensor16
        seconds += spec.latency_s + max(memory, compute)
        moved += ideal
        bounds.add("memory" if memory >= compute else "compute")
    return seconds, moved, "memory" if bounds == {"memory"} else "/".join(sorted(bounds))


def gpu(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.simulator gpu",
                                     description="the simulator's roofline estimate vs measured time on a GPU")
    parser.add_argument("--quick", action="store_true", help="shapes 64x smaller (smoke-test the script)")
    parser.add_argument("--gpu", default="H200", help="spec-table GPU for the estimate (default H200)")
    parser.add_argument("--sim-rows", type=int, default=16, help="rows counted in the simulator per case (default 16)")
    args = parser.parse_args(argv)
    from simulator.accounting import gpu_spec

    try:
        spec = gpu_spec(args.gpu)
    except ValueError as e:
        parser.error(str(e))
    import torch

    if not torch.cuda.is_available():
        print("error: python -m harness.bench.simulator gpu needs a CUDA GPU (none is available)", file=sys.stderr)
        return 2
    import compiler  # noqa: F401  (registers the backend)
    from harness.bench.gpu import bench, copy_bandwidth

    rows, errors = [], []
    for name, make, shape in _gpu_cases(args.quick):
        kernels = _extrapolated(make, shape, args.sim_rows)
        x = torch.randn(*shape, device="cuda")
        if name.startswith("pointwise"):
            x = x.reshape(-1)
        measured_bw = copy_bandwidth(x) * 1e3  # bytes/ms -> bytes/s
        fn = make("cuda", shape[1])
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="crucible", dynamic=False, options={"strict": True})
        compiled(x)
        measured = bench(compiled, x) * 1e-3
        estimate, moved, bound = _scaled_estimate(kernels, spec)
        with_bw, _, _ = _scaled_estimate(kernels, gpu_spec(args.gpu, bandwidth=measured_bw))
        error = (estimate - measured) / measured
        if bound == "memory":
            errors.append(abs(error))
        rows.append([name, shape, len(kernels), f"{moved / 1e9:.3f}", bound, f"{estimate * 1e6:.1f}",
                     f"{with_bw * 1e6:.1f}", f"{measured * 1e6:.1f}", f"{100 * error:+.1f}%",
                     f"{100 * (with_bw - measured) / measured:+.1f}%"])
        torch._dynamo.reset()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; estimate for {spec.name} "
          f"({spec.bandwidth / 1e12:.2f} TB/s x {spec.efficiency} + {spec.latency_s * 1e6:.1f} us per kernel)")
    print(tabulate(rows, headers=["case", "shape", "kernels", "DRAM GB", "bound", f"est {spec.name} us",
                                  "est (copy BW) us", "measured us", "error", "error (copy BW)"]))
    if errors:
        print(f"\nmedian |error| over {len(errors)} memory-bound cases: {100 * statistics.median(errors):.1f}% "
              f"(target: at most 25%)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"overhead": overhead, "gpu": gpu}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print(__doc__.strip().split("\n\n")[1] if argv and argv[0] in ("-h", "--help") else
              "usage: python -m harness.bench.simulator {overhead,gpu} [options] (--help for each)",
              file=sys.stdout if argv and argv[0] in ("-h", "--help") else sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
