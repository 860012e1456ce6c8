"""GPU time from ``torch.profiler``, shared by ``harness.bench.profile`` (its kernel tables) and
``harness.bench.training`` (each step's GPU time and longest kernels)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.bench.breakdown import _fmt


def device_us(event: Any, self_only: bool) -> float:
    """An averaged profiler event's device microseconds (self or inclusive), under either of the
    attribute names torch versions give them."""
    for name in (("self_device_time_total", "self_cuda_time_total") if self_only else
                 ("device_time_total", "cuda_time_total")):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def kernel_events(averages: Any) -> list[Any]:
    """The GPU's own events (kernels, copies, sets) of ``prof.key_averages()``, longest first: not the
    host ranges that also carry device time (ATen ops, Inductor's "## Call CompiledFxGraph ##")."""
    cuda = torch.autograd.DeviceType.CUDA
    events = [e for e in averages if device_us(e, True) > 0 and getattr(e, "device_type", cuda) == cuda
              and not e.key.startswith("aten::")]
    return sorted(events, key=lambda e: -device_us(e, True))


def gpu_kernels(call: Callable[[], Any], calls: int) -> list[tuple[str, float]]:
    """(name, ms per call) of every kernel, copy and set the GPU ran for ``calls`` calls of ``call``
    (``torch.profiler``, device time), longest first: the GPU's side of a call, beside its wall time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return [(e.key, device_us(e, True) / calls / 1e3) for e in kernel_events(prof.key_averages())]


PROFILED_CALLS = 3  # calls (steps) under torch.profiler per backend, after the timing
TOP_KERNELS = 5  # kernels a row keeps by GPU time
SLOW = 0.95  # a Crucible column below this ratio to its peer lists both sides' longest kernels


def gpu_time(call: Callable[[], Any]) -> dict[str, Any]:
    """A call's GPU time (every kernel, copy and set, ``gpu_kernels``) and its longest kernels: a call
    whose GPU time is well below its wall time waits on the host, and a row slower than its peer shows
    which kernels it spends its time in (``where_time_goes``)."""
    kernels = gpu_kernels(call, PROFILED_CALLS)
    return {"gpu_ms": sum(ms for _, ms in kernels),
            "top_kernels": [[name[:90], ms] for name, ms in kernels[:TOP_KERNELS]]}


def row_value(row: dict, backend: str, key: str) -> Any:
    """A benchmark row's figure ``key`` for ``backend`` (None where it has none)."""
    return row["backends"].get(backend, {}).get(key)


def speedup(row: dict, peer: str, ours: str, key: str = "ms") -> float | None:
    """``ours``' speed over ``peer``'s in ``key`` (their time over ours; None where either is missing)."""
    theirs, mine = row_value(row, peer, key), row_value(row, ours, key)
    return theirs / mine if theirs and mine else None


def busy_table(results: list[dict], backends: list[str], what: str) -> str | None:
    """Each row's GPU time per ``what`` (a step, a call) and its share of the wall time, per backend;
    None where no row was profiled (a CPU run)."""
    from tabulate import tabulate

    if not any(row_value(r, b, "gpu_ms") for r in results for b in backends):
        return None

    def share(r: dict, b: str) -> float | None:
        gpu, ms = row_value(r, b, "gpu_ms"), row_value(r, b, "ms")
        return gpu / ms if gpu and ms else None

    busy = [[r["model"], r["dtype"], *[_fmt(row_value(r, b, "gpu_ms"), ".2f") for b in backends],
             *[_fmt(share(r, b), ".0%") for b in backends]] for r in results]
    return (f"GPU time per {what} (ms: kernels, copies and sets under torch.profiler, {PROFILED_CALLS} {what}s) "
            f"and its share of the {what}'s wall time (well below 100%: the {what} waits on the host):\n"
            + tabulate(busy, headers=["model", "dtype", *[f"{b} GPU" for b in backends],
                                      *[f"{b} busy" for b in backends]], tablefmt="github"))


def where_time_goes(results: list[dict], ratios: tuple[tuple[str, str, str], ...], what: str) -> list[str]:
    """For each row and (label, peer, ours) of ``ratios`` where ours is below ``SLOW`` times its peer in
    wall time or in GPU time, both backends' wall and GPU time per ``what`` and their longest kernels: the
    profile a slow row is explained by. A row ahead on a slow host (its steps waiting on the host) but
    behind in GPU time is listed too: on a faster host its wall time follows its GPU time."""
    out = []
    for r in results:
        for label, peer, ours in ratios:
            wall = speedup(r, peer, ours)
            gpu = speedup(r, peer, ours, "gpu_ms")
            slow = [f"{name} {x:.2f}" for name, x in (("wall", wall), ("GPU", gpu)) if x is not None and x < SLOW]
            if not slow or not (row_value(r, ours, "top_kernels") or row_value(r, peer, "top_kernels")):
                continue
            out.append(f"- {r['model']} {r['dtype']} {label}: {', '.join(slow)}:")
            for backend in (ours, peer):
                kernels = "; ".join(f"{name} {ms:.3f}" for name, ms in row_value(r, backend, "top_kernels") or [])
                out.append(f"  - {backend}: {what} {_fmt(row_value(r, backend, 'ms'), '.2f')} ms, GPU "
                           f"{_fmt(row_value(r, backend, 'gpu_ms'), '.2f')} ms: {kernels}")
    return out


def slow_rows_section(results: list[dict], ratios: tuple[tuple[str, str, str], ...], what: str) -> str | None:
    """``where_time_goes`` under its heading, or None where no row is slow."""
    slow = where_time_goes(results, ratios, what)
    if not slow:
        return None
    return (f"rows where Crucible is below {SLOW}x its peer in wall or GPU time, the longest kernels of each "
            f"(ms a {what}):\n"
            + "\n".join(slow))
