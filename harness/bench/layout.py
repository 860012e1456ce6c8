"""Channels-last vs contiguous: the measurements behind ``compiler.layout``'s cost rule.

``--convs``: ATen's convolution per family (stem, dense, pointwise, depthwise, grouped) on shapes of
the benchmark's convnets at batch 32, 224 px, NCHW against NHWC (input and weight), float32 and
bfloat16; prints each time, the channels-last / NCHW ratio and the median per family and dtype (the
``CL_RATIO`` table). ``--models``: each model compiled by Crucible with ``layout="contiguous"`` and
``layout="channels_last"``, side by side with eager: latency, max error vs eager, the layout the
``auto`` rule picks and why; with ``--cudagraphs`` also each layout under CUDA graphs, whose latency
is the graph's GPU time without the host's launch cost (the steadier comparison of the kernels the
layouts make). ``--train``: each model's training step instead (forward, loss, backward, AdamW, as
``harness.bench.training``; the forward forced to each layout, its backward following), eager, Inductor
and both layouts built in one process, then ``--rounds`` rounds of one step each, interleaved (medians);
on a GPU also each variant's GPU time a step and its longest kernels (``torch.profiler``), which a slow
host's wall times hide.
Each model runs in its own process with a timeout.

    python -m harness.bench.layout --convs
    python -m harness.bench.layout --models resnet50:bf16 mobilenetv3_large_100:fp32 --cudagraphs
    python -m harness.bench.layout --models resnet50:fp32 resnet50:bf16 --train
    python -m harness.bench.layout --models test_convnet:fp32 --device cpu   # a smoke check
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from harness.bench.errors import error_line
from harness.bench.gpu_profile import gpu_time

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_RESULT = "RESULT "
# --train's variants, built in one process and timed in turns: Crucible with each layout forced, and the
# references (Inductor chooses its own layout)
TRAIN_VARIANTS = ("eager", "inductor", "contiguous", "channels_last")

# (family, C_in, C_out, kernel, stride, groups, H): batch 32; H is the input's height and width
CONVS = [
    ("stem", 3, 64, 7, 2, 1, 224), ("stem", 3, 16, 3, 2, 1, 224), ("stem", 3, 32, 3, 2, 1, 224),
    ("stem", 3, 96, 4, 4, 1, 224),
    ("dense", 64, 64, 3, 1, 1, 56), ("dense", 128, 128, 3, 1, 1, 28), ("dense", 256, 256, 3, 1, 1, 14),
    ("dense", 512, 512, 3, 1, 1, 7),
    ("pointwise", 64, 256, 1, 1, 1, 56), ("pointwise", 256, 64, 1, 1, 1, 56), ("pointwise", 1024, 256, 1, 1, 1, 14),
    ("pointwise", 2048, 512, 1, 1, 1, 7), ("pointwise", 16, 64, 1, 1, 1, 112), ("pointwise", 96, 384, 1, 1, 1, 56),
    ("pointwise", 672, 112, 1, 1, 1, 14),
    ("depthwise", 16, 16, 3, 1, 16, 112), ("depthwise", 32, 32, 3, 1, 32, 112), ("depthwise", 72, 72, 3, 1, 72, 56),
    ("depthwise", 144, 144, 3, 1, 144, 56), ("depthwise", 120, 120, 5, 1, 120, 28),
    ("depthwise", 240, 240, 5, 2, 240, 28), ("depthwise", 480, 480, 3, 1, 480, 14),
    ("depthwise", 672, 672, 5, 1, 672, 14), ("depthwise", 1152, 1152, 5, 1, 1152, 7),
    ("depthwise", 96, 96, 7, 1, 96, 56), ("depthwise", 384, 384, 7, 1, 384, 14), ("depthwise", 768, 768, 7, 1, 768, 7),
    ("grouped", 128, 128, 3, 1, 32, 56), ("grouped", 256, 256, 3, 1, 32, 28),
]


def _cuda_ms(call: Any, reps: int = 20) -> float:
    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def conv_table() -> str:
    lines = ["family     dtype  C_in  C_out  k  s  groups    H   NCHW ms   NHWC ms  NHWC/NCHW"]
    ratios: dict[tuple[str, str], list[float]] = {}
    for dname, dtype in DTYPES.items():
        for family, cin, cout, k, stride, groups, h in CONVS:
            x = torch.randn(32, cin, h, h, device="cuda", dtype=dtype)
            w = torch.randn(cout, cin // groups, k, k, device="cuda", dtype=dtype)
            pad = k // 2 if k != 4 else 0
            times = []
            for fmt in (torch.contiguous_format, torch.channels_last):
                xs, ws = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
                times.append(_cuda_ms(functools.partial(torch.convolution, xs, ws, None, [stride] * 2, [pad] * 2,
                                                        [1, 1], False, [0, 0], groups)))
            ratio = times[1] / times[0]
            ratios.setdefault((family, dname), []).append(ratio)
            lines.append(f"{family:<10} {dname:<5} {cin:>5} {cout:>6} {k:>2} {stride:>2} {groups:>7} {h:>4} "
                         f"{times[0]:>9.4f} {times[1]:>9.4f} {ratio:>10.3f}")
    lines.append("\nmedian NHWC/NCHW per family (CL_RATIO in compiler/layout.py):")
    for (family, dname), found in sorted(ratios.items()):
        lines.append(f"  {dname} {family:<10} {statistics.median(found):.3f}  "
                     f"(min {min(found):.3f}, max {max(found):.3f}, {len(found)} shapes)")
    return "\n".join(lines)


def _model(name: str, dtype: torch.dtype, device: str, train: bool = False) -> tuple[torch.nn.Module, tuple]:
    if name == "test_convnet":  # a small stand-in for CPU smoke checks
        import timm

        model = timm.create_model("test_efficientnet", pretrained=False)
        model = (model.train() if train else model.eval()).to(device=device, dtype=dtype)
        return model, (torch.randn(2, 3, 64, 64, device=device, dtype=dtype),)
    from harness.bench.zoo import MODELS

    return MODELS[name].build(dtype, device, tiny=False, train=train)


def measure_training(name: str, dname: str, device: str, rounds: int = 20) -> dict[str, Any]:
    """Training steps (``harness.bench.training``'s) of eager and of Crucible with the layout forced each
    way, on one model: first three steps (the compiles) per variant, then ``rounds`` rounds of one step
    of each, interleaved; bf16 is autocast over float32 weights, as the training benchmark's."""
    import compiler
    from harness.bench.training import LR, _targets, batches, make_step

    torch.manual_seed(0)
    base, inputs = _model(name, torch.float32, device, train=True)
    autocast = dname == "bf16"
    data = batches(inputs, 2)
    with torch.autocast(device, torch.bfloat16, enabled=autocast):
        targets = _targets(base(*data[0]), 2, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    row: dict[str, Any] = {"model": name, "dtype": dname, "train": True}
    steps = {}
    for layout in TRAIN_VARIANTS:
        model = copy.deepcopy(base)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, foreach=True)
        if layout == "inductor":
            model = torch.compile(model, dynamic=False)
        elif layout != "eager":
            model = torch.compile(model, backend="crucible", dynamic=False, options={"strict": True, "layout": layout})
        step = make_step(model, optimizer, autocast, device)
        try:
            with compiler.collect_reports() as report:
                start = time.perf_counter()
                for i in range(3):
                    step(data[i % 2], targets[i % 2])
                sync()
            row[f"{layout}_compile_s"] = time.perf_counter() - start
            if layout == "contiguous":
                row["rule"] = "; ".join(g.layout_reason for g in report.graphs if g.layout_reason)
            steps[layout] = step
        except Exception as why:  # noqa: BLE001  (one failure is a table entry)
            row[f"{layout}_error"] = error_line(why)
    times: dict[str, list[float]] = {layout: [] for layout in steps}
    for _ in range(rounds):
        for layout, step in steps.items():
            sync()
            start = time.perf_counter()
            step(data[1], targets[1])
            sync()
            times[layout].append(time.perf_counter() - start)
    for layout, t in times.items():
        row[f"{layout}_ms"] = statistics.median(t) * 1e3
        if device == "cuda":  # the GPU's work a step: on a slow host the wall times wait on the host
            profiled = gpu_time(lambda step=steps[layout]: step(data[1], targets[1]))
            row[f"{layout}_gpu_ms"], row[f"{layout}_top"] = profiled["gpu_ms"], profiled["top_kernels"]
    return row


def measure(name: str, dname: str, device: str, cudagraphs: bool = False) -> dict[str, Any]:
    """Eager, then Crucible contiguous and channels-last (``cudagraphs``: each also under CUDA
    graphs, as ``LAYOUT_cg``), on one model and dtype."""
    import torch._dynamo

    import compiler
    from harness.bench.models import _first_tensor, latency_ms

    torch.manual_seed(0)
    model, inputs = _model(name, DTYPES[dname], device)
    row: dict[str, Any] = {"model": name, "dtype": dname}
    with torch.no_grad():
        expected = _first_tensor(model(*inputs)).detach().clone()
        row["eager_ms"] = latency_ms(lambda: model(*inputs), device)
        variants = [(layout, cg) for layout in ("contiguous", "channels_last") for cg in (False, True)
                    if cudagraphs or not cg]
        for base, cg in variants:
            layout = base + ("_cg" if cg else "")
            torch._dynamo.reset()
            fn = torch.compile(model, backend="crucible", dynamic=False,
                               options={"strict": True, "layout": base, "cudagraphs": cg})
            try:
                with compiler.collect_reports() as report:
                    start = time.perf_counter()
                    out = _first_tensor(fn(*inputs))
                    row[f"{layout}_compile_s"] = time.perf_counter() - start
                row[f"{layout}_ms"] = latency_ms(functools.partial(fn, *inputs), device)
                row[f"{layout}_err"] = float((out.float() - expected.float()).abs().max())
                row[f"{layout}_strides_ok"] = out.stride() == expected.stride()
                row[f"{layout}_kernels"] = len(report.kernels)
                row["rule"] = "; ".join(g.layout_reason for g in report.graphs if g.layout_reason)
            except Exception as why:  # noqa: BLE001  (one failure is a table entry)
                row[f"{layout}_error"] = error_line(why)
    return row


def run_isolated(name: str, dname: str, device: str, timeout: float, cudagraphs: bool = False,
                 train: bool = False, rounds: int = 20) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "harness.bench.layout", "--worker", "--device", device, "--models", f"{name}:{dname}",
           *(["--cudagraphs"] if cudagraphs else []), *(["--train", "--rounds", str(rounds)] if train else [])]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "dtype": dname, "error": f"timeout after {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith(_RESULT):
            return json.loads(line[len(_RESULT):])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"model": name, "dtype": dname, "error": f"exit {done.returncode}: {tail[:300]}"}


def _fmt(row: dict, key: str, spec: str = ".3f") -> str:
    value = row.get(key)
    return "-" if value is None else format(value, spec)


def _speedup(row: dict, suffix: str = "") -> str:
    """Channels-last's speed over contiguous of the row's ``{layout}{suffix}_ms`` times."""
    c, cl = row.get(f"contiguous{suffix}_ms"), row.get(f"channels_last{suffix}_ms")
    return f"{c / cl:.2f}x" if c and cl else "-"


def model_line(row: dict) -> str:
    if "error" in row:
        return f"{row['model']} {row['dtype']}: {row['error']}"
    speed = _speedup(row)
    errors = "; ".join(f"{k}: {v}" for k, v in row.items() if k.endswith("_error"))
    if row.get("train"):
        gpu = "".join(f"\n  {layout}: GPU {_fmt(row, f'{layout}_gpu_ms')} ms a step: " + "; ".join(
            f"{kernel} {ms:.3f}" for kernel, ms in row[f"{layout}_top"]) for layout in TRAIN_VARIANTS
            if row.get(f"{layout}_gpu_ms") is not None)
        return (f"{row['model']} {row['dtype']} training step: eager {_fmt(row, 'eager_ms')} ms, Inductor "
                f"{_fmt(row, 'inductor_ms')} ms, contiguous {_fmt(row, 'contiguous_ms')} ms, channels_last "
                f"{_fmt(row, 'channels_last_ms')} ms (channels-last speedup {speed}, in GPU time "
                f"{_speedup(row, '_gpu')}); first 3 steps s {_fmt(row, 'contiguous_compile_s', '.1f')} / "
                f"{_fmt(row, 'channels_last_compile_s', '.1f')}; rule: {row.get('rule', '-')}"
                + (f"; FAILED {errors}" if errors else "") + gpu)
    return (f"{row['model']} {row['dtype']}: eager {_fmt(row, 'eager_ms')} ms, contiguous {_fmt(row, 'contiguous_ms')} "
            f"ms, channels_last {_fmt(row, 'channels_last_ms')} ms (channels-last speedup {speed}); max err "
            f"{_fmt(row, 'contiguous_err', '.2e')} / {_fmt(row, 'channels_last_err', '.2e')}; output strides eager's: "
            f"{row.get('contiguous_strides_ok')} / {row.get('channels_last_strides_ok')}; compile s "
            f"{_fmt(row, 'contiguous_compile_s', '.1f')} / {_fmt(row, 'channels_last_compile_s', '.1f')}; "
            f"kernels {row.get('contiguous_kernels')} / {row.get('channels_last_kernels')}; rule: {row.get('rule', '-')}"
            + _cudagraph_part(row) + (f"; FAILED {errors}" if errors else ""))


def _cudagraph_part(row: dict) -> str:
    if row.get("contiguous_cg_ms") is None and row.get("channels_last_cg_ms") is None:
        return ""
    return (f"; CUDA graphs: contiguous {_fmt(row, 'contiguous_cg_ms')} ms, channels_last "
            f"{_fmt(row, 'channels_last_cg_ms')} ms (channels-last speedup {_speedup(row, '_cg')})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.layout", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--convs", action="store_true", help="the per-convolution table (GPU)")
    parser.add_argument("--models", nargs="*", default=[], metavar="MODEL:DTYPE",
                        help="models of harness.bench.models (or test_convnet) with fp32 or bf16")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--cudagraphs", action="store_true",
                        help="--models: also time each layout under CUDA graphs (GPU)")
    parser.add_argument("--train", action="store_true", help="--models: time training steps, not inference")
    parser.add_argument("--rounds", type=int, default=20, help="--train: interleaved rounds of one step each (default 20)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model (default 300)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="stop starting models this many seconds after the start")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: must be at least 1")
    if args.train and args.cudagraphs:
        parser.error("--train times steps without CUDA graphs: drop --cudagraphs")
    if (args.convs or args.device == "cuda") and not torch.cuda.is_available():
        print("harness.bench.layout: no CUDA GPU here; --models ... --device cpu runs the model comparison on the CPU")
        return 2
    pairs = []
    for pair in args.models:
        name, _, dname = pair.partition(":")
        if dname not in DTYPES:
            parser.error(f"--models {pair!r}: expected MODEL:DTYPE with DTYPE in {', '.join(DTYPES)}")
        pairs.append((name, dname))
    if args.worker:
        for name, dname in pairs:
            row = (measure_training(name, dname, args.device, args.rounds) if args.train
                   else measure(name, dname, args.device, args.cudagraphs))
            print(_RESULT + json.dumps(row), flush=True)
        return 0
    started = time.perf_counter()
    if args.convs:
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
        print(conv_table(), flush=True)
    for name, dname in pairs:
        left = args.timeout if args.deadline is None else min(args.timeout, args.deadline - (time.perf_counter() - started))
        if left < 10:
            print(f"{name} {dname}: skipped (deadline)", flush=True)
            continue
        print(model_line(run_isolated(name, dname, args.device, left, args.cudagraphs, args.train, args.rounds)),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
