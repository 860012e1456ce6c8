"""Where one call of a benchmark model spends its GPU time, per backend, side by side.

    python -m harness.bench.profile --model gpt2 --dtype bf16 [--backends crucible inductor] [--top 25]
    python -m harness.bench.profile --train --model resnet50 --dtype bf16 [--backends crucible inductor]

For each backend: latency (``harness.bench.models.latency_ms``), then ``torch.profiler`` over a few
calls: the GPU kernels by time per call (what cuBLAS, attention and generated kernels cost), the
ATen ops by input shape (which extern call launched them), and the host's CPU self time per op or
launch (where a host-bound graph's time goes). ``crucible-nopasses`` is Crucible with
``fold_weights=False`` (no compile-time weight passes), to read what those passes change.

``--train``: the same tables for one training step of ``harness.bench.training`` (forward under
autocast for bf16, cross-entropy, backward, AdamW foreach; the model compiled, the rest eager) at its
batch size, per backend of that benchmark (``crucible-cg``/``inductor-ro``: with CUDA graphs;
``crucible-step``/``inductor-step``: the whole step function compiled, the optimizer step a graph too).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from harness.bench.gpu_profile import device_us as _device_us, kernel_events
from harness.bench.models import DTYPES, _first_tensor, latency_ms
from harness.bench.zoo import MODELS

BACKENDS = ("crucible", "crucible-nopasses", "inductor", "eager")
TRAIN_BACKENDS = ("eager", "inductor", "crucible", "inductor-ro", "crucible-cg", "inductor-step", "crucible-step")
CALLS = 5


def _compiled(backend: str, model: torch.nn.Module) -> Any:
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model, backend="inductor", dynamic=False)
    options = {"strict": True, **({"fold_weights": False} if backend == "crucible-nopasses" else {})}
    return torch.compile(model, backend="crucible", dynamic=False, options=options)


def profile_tables(call: Any, top: int) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    # device-side events only: host ranges (Inductor's "## Call CompiledFxGraph ##", "Torch-Compiled
    # Region") and the host records Inductor names after its kernels also carry device time
    kernels = kernel_events(prof.key_averages())
    total = sum(_device_us(e, True) for e in kernels) / CALLS
    lines = [f"GPU kernels: {total / 1e3:.3f} ms per call in all", f"{'ms/call':>8} {'calls':>6}  kernel"]
    lines += [f"{_device_us(e, True) / CALLS / 1e3:>8.3f} {e.count // CALLS:>6}  {e.key[:110]}" for e in kernels[:top]]
    ops = [e for e in prof.key_averages(group_by_input_shape=True)
           if e.key.startswith("aten::") and _device_us(e, False) > 0]
    ops.sort(key=lambda e: -_device_us(e, False))
    lines += ["", "ATen ops (inclusive GPU time) by input shape", f"{'ms/call':>8} {'calls':>6}  op  shapes"]
    lines += [f"{_device_us(e, False) / CALLS / 1e3:>8.3f} {e.count // CALLS:>6}  {e.key} {str(e.input_shapes)[:120]}"
              for e in ops[:top]]
    return "\n".join(lines + ["", *host_table(prof.key_averages(), CALLS, top)])


def host_table(events: Any, calls: int, top: int) -> list[str]:
    """The host side of a call: CPU self time per op or launch (``cuLaunchKernel``, an ATen op's own
    dispatch, a cuBLASLt heuristic query, ...), what a host-bound graph spends its time on."""
    rows = [e for e in events if getattr(e, "self_cpu_time_total", 0) > 0]
    rows.sort(key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows) / calls
    lines = [f"host (CPU self time): {total / 1e3:.3f} ms per call in all",
             f"{'us/call':>8} {'calls':>6}  {'us each':>8}  event"]
    lines += [f"{e.self_cpu_time_total / calls:>8.1f} {e.count // calls:>6}  {e.self_cpu_time_total / max(e.count, 1):>8.2f}"
              f"  {e.key[:100]}" for e in rows[:top]]
    return lines


def profile_backend(backend: str, model: torch.nn.Module, inputs: tuple, expected: torch.Tensor, top: int,
                    tables: bool) -> str:
    import torch._dynamo

    torch._dynamo.reset()
    fn = _compiled(backend, model)
    start = time.perf_counter()
    out = _first_tensor(fn(*inputs)).float()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    err = float((out - expected.float()).abs().max())
    ms = latency_ms(lambda: fn(*inputs), "cuda")
    head = f"== {backend}: {ms:.3f} ms per call, first call {compile_s:.1f} s, max |err| vs eager {err:.3g}"
    return head + ("\n" + profile_tables(lambda: fn(*inputs), top) if tables else "")


def profile_training(backend: str, name: str, dtype: str, top: int, tables: bool) -> str:
    """One training step of ``name`` under ``backend`` (``harness.bench.training``): step time, first
    step, and the tables of ``profile_tables`` over ``CALLS`` steps."""
    import torch._dynamo

    from harness.bench.training import _targets, batches, compiled_step, step_ms

    torch._dynamo.reset()
    torch.manual_seed(0)
    base, inputs = MODELS[name].build(torch.float32, "cuda", False, train=True)
    autocast = dtype == "bf16"
    batch = batches(inputs, 1)[0]
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=autocast):
        target = _targets(base(*inputs), 1, "cuda")[0]
    step, _ = compiled_step(backend, base, autocast, "cuda")
    start = time.perf_counter()
    step(batch, target)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    ms = step_ms(step, batch, target, "cuda", 10)
    head = f"== {backend}: {ms:.3f} ms per step, first step {first_s:.1f} s"
    return head + ("\n" + profile_tables(lambda: step(batch, target), top) if tables else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2", choices=list(MODELS))
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--backends", nargs="+", default=["crucible", "inductor"], choices=BACKENDS + TRAIN_BACKENDS)
    parser.add_argument("--no-tables", nargs="*", default=[], choices=BACKENDS + TRAIN_BACKENDS, metavar="BACKEND",
                        help="backends measured for latency only")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--train", action="store_true", help="profile a training step (harness.bench.training)")
    args = parser.parse_args(argv)
    allowed = TRAIN_BACKENDS if args.train else BACKENDS
    wrong = [b for b in args.backends if b not in allowed]
    if wrong:
        parser.error(f"--backends {' '.join(wrong)}: {'with' if args.train else 'without'} --train, "
                     f"choose from {', '.join(allowed)}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    import compiler  # noqa: F401  (registers the backend)

    if args.train:
        for backend in args.backends:
            try:
                text = profile_training(backend, args.model, args.dtype, args.top, backend not in args.no_tables)
            except Exception as why:  # noqa: BLE001  (one backend failing is a line of the output)
                text = f"== {backend}: FAILED {type(why).__name__}: {str(why)[:300]}"
            print(f"# {args.model} {args.dtype} training step\n{text}\n", flush=True)
            torch.cuda.empty_cache()
        return 0

    torch.manual_seed(0)
    model, inputs = MODELS[args.model].build(DTYPES[args.dtype], "cuda", False)
    with torch.no_grad():
        expected = _first_tensor(model(*inputs)).detach().clone()
        for backend in args.backends:
            try:
                text = profile_backend(backend, model, inputs, expected, args.top, backend not in args.no_tables)
            except Exception as why:  # noqa: BLE001  (one backend failing is a line of the output)
                text = f"== {backend}: FAILED {type(why).__name__}: {str(why)[:300]}"
            print(f"# {args.model} {args.dtype}\n{text}\n", flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
