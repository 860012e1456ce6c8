"""GPU time from ``torch.profiler``, shared by ``harness.bench.profile`` (its kernel tables) and
``harness.bench.training`` (each step's GPU time and longest kernels)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


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
