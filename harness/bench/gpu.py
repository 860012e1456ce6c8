"""GPU benchmark: eager vs Inductor vs Crucible, side by side, with the fraction of copy bandwidth.

    python -m harness.bench.gpu [--quick]

Each case is compiled for its own static shape. Times are medians of
``triton.testing.do_bench``; "of copy BW" is the bytes the op must move (inputs
read once, outputs written once) over time, divided by the measured bandwidth of
a device-to-device copy of the same size. This script prints ratios; it asserts
nothing (performance goals are read from the table, not from tests).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tabulate import tabulate


def chain5(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x * 1.5 + 0.5).relu() - x


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def make_layer_norm(cols: int, device: str, dtype: torch.dtype = torch.float32) -> Callable:
    w = torch.randn(cols, device=device, dtype=dtype)
    b = torch.randn(cols, device=device, dtype=dtype)
    return lambda x: F.layer_norm(x, (cols,), w, b)


def make_layer_norm2d(channels: int, device: str, dtype: torch.dtype) -> Callable:
    """timm's ``LayerNorm2d`` (convnext's stem and downsampling): NCHW permuted to NHWC, normalized over C,
    permuted back."""
    w = torch.randn(channels, device=device, dtype=dtype)
    b = torch.randn(channels, device=device, dtype=dtype)
    return lambda x: F.layer_norm(x.permute(0, 2, 3, 1), (channels,), w, b, 1e-6).permute(0, 3, 1, 2)


def make_rms_norm(cols: int, device: str) -> Callable:
    w = torch.randn(cols, device=device)
    return lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def bench(fn: Callable, x: torch.Tensor) -> float:
    import triton.testing

    from compiler.tuning import finish_tuning

    fn(x)
    finish_tuning()  # Crucible's deferred launch configs (compiler/tuning.py), timed in the warm-up
    return float(triton.testing.do_bench(lambda: fn(x), warmup=25, rep=100, return_mode="median"))


def copy_bandwidth(x: torch.Tensor) -> float:
    """Bytes/ms of a device-to-device copy (read + write) of ``x``."""
    out = torch.empty_like(x)
    ms = bench(lambda t: out.copy_(t), x)
    return 2 * x.numel() * x.element_size() / ms


def measure_case(name: str, fn: Callable, x: torch.Tensor) -> list:
    import torch._dynamo

    moved = 2 * x.numel() * x.element_size()
    bw = copy_bandwidth(x)
    times = {"eager": bench(fn, x)}
    for backend in ("inductor", "crucible"):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend, dynamic=False,
                                 options={"strict": True} if backend == "crucible" else None)
        expected = fn(x)
        tol = 1e-3 if x.dtype == torch.float32 else 5e-2
        torch.testing.assert_close(compiled(x), expected, rtol=tol, atol=tol)
        times[backend] = bench(compiled, x)
    ideal = moved / bw
    return [name, f"{tuple(x.shape)} {str(x.dtype)[6:]}", f"{times['eager']:.3f}", f"{times['inductor']:.3f}",
            f"{times['crucible']:.3f}",
            f"{ideal / times['eager']:.2f}", f"{ideal / times['inductor']:.2f}", f"{ideal / times['crucible']:.2f}",
            f"{times['inductor'] / times['crucible']:.2f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (smoke-test the script)")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="run the cases whose name starts with one of these")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("harness.bench.gpu needs a CUDA GPU")
        return 2
    import compiler  # noqa: F401  (registers the backend)

    dev = "cuda"
    scale = 64 if args.quick else 1

    def run_case(name: str, fn: Callable, x: torch.Tensor) -> list | None:
        wanted = not args.only or any(name.startswith(prefix) for prefix in args.only)
        return measure_case(name, fn, x) if wanted else None

    shapes = [(32768 // scale, 4096), (4096 // scale, 32768), (262144 // scale, 512)]
    rows = [run_case("pointwise chain (5 ops)", chain5, torch.randn(256 * 2**20 // scale, device=dev))]
    for r, c in shapes:
        x = torch.randn(r, c, device=dev)
        rows.append(run_case("softmax", softmax, x))
        rows.append(run_case("layer_norm", make_layer_norm(c, dev), x))
        rows.append(run_case("rms_norm", make_rms_norm(c, dev), x))
    # the benchmark models' layer norms in bfloat16: convnext/swin rows of 96 channels (32 x 56 x 56
    # positions), timm's LayerNorm2d over NCHW and over channels-last storage, BERT/GPT-2 rows of 768
    bf16, batch = torch.bfloat16, max(1, 32 // scale)
    rows.append(run_case("layer_norm", make_layer_norm(96, dev, bf16), torch.randn(batch * 3136, 96, device=dev,
                                                                                   dtype=bf16)))
    image = torch.randn(batch, 96, 56, 56, device=dev, dtype=bf16)
    rows.append(run_case("layer_norm2d", make_layer_norm2d(96, dev, bf16), image))
    rows.append(run_case("layer_norm2d channels-last", make_layer_norm2d(96, dev, bf16),
                         image.contiguous(memory_format=torch.channels_last)))
    rows.append(run_case("layer_norm", make_layer_norm(768, dev, bf16), torch.randn(4096, 768, device=dev, dtype=bf16)))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = [r for r in rows if r is not None]
    print(tabulate(rows, headers=["case", "shape", "eager ms", "inductor ms", "crucible ms", "eager of copy BW",
                                  "inductor of copy BW", "crucible of copy BW", "crucible speed vs inductor"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
