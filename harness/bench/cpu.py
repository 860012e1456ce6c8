"""CPU benchmark: eager vs Inductor (its C++ backend) vs Crucible's C++ codegen.

    python -m harness.bench.cpu [--repeat N] [--only NAME ...]

For each case: the median run time over ``--repeat`` timed calls after warmup, and the
cold compile time (the first call, with fresh cache directories for both compilers and
``torch._dynamo.reset()``). Ratios: Crucible/eager and Crucible/Inductor run time
(below 1 = Crucible faster) and Crucible/Inductor cold compile time.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tabulate import tabulate


@dataclass
class Case:
    name: str
    build: Callable[[], tuple[Callable, tuple]]  # -> (function or module, inputs)


def pointwise_chain(n: int) -> tuple[Callable, tuple]:
    def chain(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid((x * 1.5 + y).relu() - z)  # mul, add, relu, sub, sigmoid

    return chain, tuple(torch.randn(n) for _ in range(3))


def softmax(rows: int, cols: int) -> tuple[Callable, tuple]:
    return (lambda x: torch.softmax(x, dim=-1)), (torch.randn(rows, cols),)


def layer_norm(rows: int, cols: int) -> tuple[Callable, tuple]:
    w, b = torch.randn(cols), torch.randn(cols)
    return (lambda x: F.layer_norm(x, (cols,), w, b)), (torch.randn(rows, cols),)


def mlp() -> tuple[Callable, tuple]:
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.GELU(approximate="tanh"), torch.nn.Linear(1024, 10)).eval()
    return model, (torch.randn(256, 512),)


def cnn() -> tuple[Callable, tuple]:
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()
    return model, (torch.randn(32, 3, 64, 64),)


CASES = [
    Case("pointwise chain 16M", lambda: pointwise_chain(16 * 1024 * 1024)),
    Case("softmax 8192x1024", lambda: softmax(8192, 1024)),
    Case("softmax 1024x8192", lambda: softmax(1024, 8192)),
    Case("layer_norm 8192x1024", lambda: layer_norm(8192, 1024)),
    Case("layer_norm 1024x8192", lambda: layer_norm(1024, 8192)),
    Case("MLP 256x512", mlp),
    Case("CNN 32x3x64x64", cnn),
]


WARMUP_S = 3.0  # seconds of interleaved warmup rounds per case before timing


def compile_cold(fn: Callable, inputs: tuple, backend: str, cache_env: str) -> tuple[Callable, float]:
    """``fn`` compiled by ``backend`` with an empty cache directory, and the seconds its first
    call took (tracing, compiling, building, loading)."""
    if backend == "crucible":
        import compiler  # noqa: F401  (registers the backend)
        from compiler import cpp_build

        cpp_build.clear_memory_cache()
    from compiler import config

    with tempfile.TemporaryDirectory(prefix=f"bench-{backend}-") as cache, \
            config.environment_override(cache_env, cache):
        opt = torch.compile(fn, backend=backend)
        start = time.perf_counter()
        opt(*inputs)
        return opt, time.perf_counter() - start


def median_ms(variants: dict[str, Callable], inputs: tuple, repeat: int, warmup_s: float = WARMUP_S,
              min_warmup: int = 5) -> dict[str, float]:
    """Median wall time per variant. Variants are timed in interleaved rounds, so load from
    other processes on a shared machine hits them alike. Warmup is interleaved rounds for
    ``warmup_s`` seconds (at least ``min_warmup`` rounds): on this virtual machine the first
    ~20 calls that touch a fresh 32 MiB output run up to 6x slower than the steady state (memory
    the host backs lazily), far more than three warmup calls absorb."""
    deadline = time.perf_counter() + warmup_s
    rounds = 0
    while rounds < min_warmup or time.perf_counter() < deadline:
        for fn in variants.values():
            fn(*inputs)
        rounds += 1
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn(*inputs)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def run_case(case: Case, repeat: int) -> dict:
    import torch._dynamo

    fn, inputs = case.build()
    row: dict = {"case": case.name}
    with torch.no_grad():
        expected = fn(*inputs)
        torch._dynamo.reset()
        inductor, row["inductor compile s"] = compile_cold(fn, inputs, "inductor", "TORCHINDUCTOR_CACHE_DIR")
        crucible, row["crucible compile s"] = compile_cold(fn, inputs, "crucible", "CRUCIBLE_CACHE_DIR")
        for opt in (inductor, crucible):
            torch.testing.assert_close(opt(*inputs), expected, rtol=1e-3, atol=1e-3)
        ms = median_ms({"eager": fn, "inductor": inductor, "crucible": crucible}, inputs, repeat)
    row.update({f"{name} ms": t for name, t in ms.items()})
    row["crucible/eager"] = row["crucible ms"] / row["eager ms"]
    row["crucible/inductor"] = row["crucible ms"] / row["inductor ms"]
    row["compile crucible/inductor"] = row["crucible compile s"] / row["inductor compile s"]
    columns = ["case", "eager ms", "inductor ms", "crucible ms", "crucible/eager", "crucible/inductor",
               "inductor compile s", "crucible compile s", "compile crucible/inductor"]
    return {c: row[c] for c in columns}


def pin_allocator() -> str:
    """Take fresh pages out of the measurement. By default glibc serves large blocks with mmap (a
    32 MiB output then costs ~8 ms of page faults per call, more than the kernel) and moves that
    threshold as blocks are freed, so whether a case paid it depended on the cases run before
    (the CNN measured 2.9 ms in the full run and 9 ms alone; Inductor's layer_norm 3.7 or 11 ms).
    With mmap off and no trimming, every call of every contender reuses heap memory: the table
    compares kernels, not the allocator's state."""
    try:
        libc = ctypes.CDLL(None)
        # M_MMAP_MAX = 0 (no mmap), M_TRIM_THRESHOLD = 1 GiB (freed memory stays in the heap)
        if libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 1 << 30) == 1:
            return "glibc: mmap off, no trimming (no page faults after warmup)"
    except (OSError, AttributeError):
        pass
    return "allocator not pinned (not glibc): page-fault costs may depend on case order"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per measurement (median)")
    parser.add_argument("--only", nargs="*", help="run the cases whose name contains one of these")
    args = parser.parse_args(argv)
    allocator = pin_allocator()
    cases = [c for c in CASES if not args.only or any(o in c.name for o in args.only)]
    rows = []
    for case in cases:
        rows.append(run_case(case, args.repeat))
        print(f"done: {case.name}", flush=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; run time = median of "
          f"{args.repeat} interleaved calls after {WARMUP_S:g} s of interleaved warmup; compile = first call with empty caches "
          f"(the first case also pays each compiler's one-time start-up); {allocator}")
    print(tabulate(rows, headers="keys", floatfmt=".3g"))


if __name__ == "__main__":
    main()
