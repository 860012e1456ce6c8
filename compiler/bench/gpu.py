"""GPU benchmark: eager vs Inductor vs Crucible, side by side, with the fraction of copy bandwidth.

    python -m compiler.bench.gpu [--quick]

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


def make_layer_norm(cols: int, device: str) -> Callable:
    w = torch.randn(cols, device=device)
    b = torch.randn(cols, device=device)
    return lambda x: F.layer_norm(x, (cols,), w, b)


def make_rms_norm(cols: int, device: str) -> Callable:
    w = torch.randn(cols, device=device)
    return lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def bench(fn: Callable, x: torch.Tensor) -> float:
    import triton.testing

    return float(triton.testing.do_bench(lambda: fn(x), warmup=25, rep=100, return_mode="median"))


def copy_bandwidth(x: torch.Tensor) -> float:
    """Bytes/ms of a device-to-device copy (read + write) of ``x``."""
    out = torch.empty_like(x)
    ms = bench(lambda t: out.copy_(t), x)
    return 2 * x.numel() * x.element_size() / ms


def run_case(name: str, fn: Callable, x: torch.Tensor) -> list:
    import torch._dynamo

    moved = 2 * x.numel() * x.element_size()
    bw = copy_bandwidth(x)
    times = {"eager": bench(fn, x)}
    for backend in ("inductor", "crucible"):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend, dynamic=False,
                                 options={"strict": True} if backend == "crucible" else None)
        expected = fn(x)
        torch.testing.assert_close(compiled(x), expected, rtol=1e-3, atol=1e-3)
        times[backend] = bench(compiled, x)
    ideal = moved / bw
    return [name, tuple(x.shape), f"{times['eager']:.3f}", f"{times['inductor']:.3f}", f"{times['crucible']:.3f}",
            f"{ideal / times['eager']:.2f}", f"{ideal / times['inductor']:.2f}", f"{ideal / times['crucible']:.2f}",
            f"{times['inductor'] / times['crucible']:.2f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (smoke-test the script)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("compiler.bench.gpu needs a CUDA GPU")
        return 2
    import compiler  # noqa: F401  (registers the backend)

    dev = "cuda"
    scale = 64 if args.quick else 1
    shapes = [(32768 // scale, 4096), (4096 // scale, 32768), (262144 // scale, 512)]
    rows = [run_case("pointwise chain (5 ops)", chain5, torch.randn(256 * 2**20 // scale, device=dev))]
    for r, c in shapes:
        x = torch.randn(r, c, device=dev)
        rows.append(run_case("softmax", softmax, x))
        rows.append(run_case("layer_norm", make_layer_norm(c, dev), x))
        rows.append(run_case("rms_norm", make_rms_norm(c, dev), x))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(tabulate(rows, headers=["case", "shape", "eager ms", "inductor ms", "crucible ms", "eager of copy BW",
                                  "inductor of copy BW", "crucible of copy BW", "crucible speed vs inductor"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
