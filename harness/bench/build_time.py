"""What the Triton builds of a benchmark model's GPU kernels cost, on this machine's CPU.

The model benchmark's cold compile is mostly ``load``: Triton builds every launch-config candidate
of every kernel (front end, GPU passes, ptxas), and tuning times them. This measures the build
part on any machine (``compiler.gpu_build``: for an H200, nothing launched), three ways side by side
on the same kernels, each into an empty Triton cache: one by one, on N threads (the pipeline's
default, ``CRUCIBLE_COMPILE_THREADS``) and in N spawned processes (``CRUCIBLE_COMPILE_PROCESSES``).

    python -m harness.bench.build_time --pairs resnet50:fp32 bert_base:bf16 --workers 2
    python -m harness.bench.build_time --pairs resnet50:fp32 --tiny   # a smoke check: a small stand-in

Models are traced at batch 1 on the CPU (as ``models --render-only``): shapes differ from the GPU
run's, so block sizes and candidate counts are close to, not the same as, the H200's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import torch

def candidate_builds(name: str, dtype: torch.dtype, tiny: bool) -> list[tuple[Any, list[torch.dtype]]]:
    """(rendered kernel with one launch config, its buffers' dtypes) for every candidate config."""
    import compiler  # noqa: F401  (registers the backend)
    from harness.bench.render_check import cpu_model, render_graphs

    model, inputs = cpu_model(name, dtype, tiny)
    kernels: list = []
    render_graphs(model, inputs, build=False, collect=kernels)
    return [(dataclasses.replace(rendered, grid=grid, meta=dict(meta), alternatives=()), dtypes)
            for rendered, dtypes in kernels
            for grid, meta in [(rendered.grid, rendered.meta), *rendered.alternatives]]


def build_one(job: tuple[Any, list[torch.dtype]]) -> str | None:
    from compiler.gpu_build import build_for

    return build_for(*job)


def _set_cache(path: str) -> str:
    """Point Triton's cache at ``path``; returns where it pointed before."""
    import triton

    before, triton.knobs.cache.dir = triton.knobs.cache.dir, path
    return before


def timed(mode: str, jobs: Sequence[tuple[Any, list[torch.dtype]]], workers: int) -> tuple[float, int]:
    """(seconds, failed builds) for building ``jobs`` one way, into a fresh Triton cache (this
    process's cache directory is put back after)."""
    with tempfile.TemporaryDirectory(prefix=f"crucible-build-{mode}-") as cache:
        before = _set_cache(cache)
        try:
            return _timed(mode, jobs, workers, cache)
        finally:
            _set_cache(before)


def _timed(mode: str, jobs: Sequence[tuple[Any, list[torch.dtype]]], workers: int, cache: str) -> tuple[float, int]:
    start = time.perf_counter()
    if mode == "serial":
        errors = [build_one(j) for j in jobs]
    elif mode == "threads":
        with ThreadPoolExecutor(workers) as pool:
            errors = list(pool.map(build_one, jobs))
    else:
        import multiprocessing

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_set_cache, initargs=(cache,)) as pool:
            # the pipeline starts its pool once per process, in the background: not timed here
            list(pool.map(_warm, range(workers)))
            start = time.perf_counter()
            errors = list(pool.map(build_one, jobs, chunksize=1))
    return time.perf_counter() - start, sum(e is not None for e in errors)


def _warm(_: int) -> None:
    import compiler.gpu_build  # noqa: F401  (torch, Triton and the compiler imported)

    time.sleep(0.5)  # busy long enough that every worker of the pool is started


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    from harness.bench.models import DTYPES, pairs
    from harness.bench.zoo import MODELS

    parser = argparse.ArgumentParser(prog="python -m harness.bench.build_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", nargs="+", default=["resnet50:fp32"], metavar="MODEL:DTYPE",
                        help=f"models ({', '.join(MODELS)}) and dtypes ({', '.join(DTYPES)})")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="threads / processes (default: cores)")
    parser.add_argument("--tiny", action="store_true", help="each model's small stand-in")
    args = parser.parse_args(argv)
    from compiler import gpu_build
    from tabulate import tabulate

    if not gpu_build.available():
        parser.error("the installed Triton has no NVIDIA backend: nothing to build")
    rows = []
    for name, dtype in pairs(args, parser):
        pair = f"{name}:{dtype}"
        jobs = candidate_builds(name, DTYPES[dtype], args.tiny)
        kernels = len({j[0].symbol or j[0].name for j in jobs})
        times = {mode: timed(mode, jobs, args.workers) for mode in ("serial", "threads", "processes")}
        serial = times["serial"][0]
        rows.append([pair, kernels, len(jobs), f"{serial:.1f}", f"{serial / len(jobs) * 1000:.0f}",
                     *(f"{t:.1f} ({serial / t:.2f}x)" for t, _ in (times["threads"], times["processes"])),
                     sum(f for _, f in times.values())])
        out(f"{pair}: {kernels} kernels, {len(jobs)} launch configs built three ways")
    out(tabulate(rows, headers=["model", "kernels", "configs", "serial s", "ms/config",
                                f"{args.workers} threads s", f"{args.workers} processes s", "failed"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
