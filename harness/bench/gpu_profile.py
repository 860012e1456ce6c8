"""GPU time from ``torch.profiler``, shared by ``harness.bench.profile`` (its kernel tables),
``harness.bench.training`` (each step's GPU time and longest kernels) and ``harness.bench.models``;
and what a training step holds at its memory peak (the CUDA allocator's history), per allocation site."""

from __future__ import annotations

import linecache
from collections.abc import Callable
from pathlib import Path
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


# --- what is live at a step's peak ----------------------------------------------------------------

PEAK_SITES = 6  # allocation sites a peak lists, largest first
PEAK_MARGIN_MB = 1.0  # a Crucible peak more than this above its peer's lists both sides' sites
BLOCK_MIN_BYTES = 2**20  # blocks a peak lists one by one (to tell the two sides' peaks apart)
HISTORY_ENTRIES = 500_000  # allocator events recorded for one call (a training step makes thousands)
_TORCH_DIR = str(Path(torch.__file__).parent)


def allocation_site(frames: list[dict]) -> str:
    """Where a block was allocated: the innermost Python frame outside torch's own package (a compiled
    graph's wrapper line, Inductor's output code, the model's layer, the benchmark's step), with its
    source line where ``linecache`` has it; frames only inside torch (the optimizer) keep the innermost."""
    inside = [f for f in frames if not str(f.get("filename", "")).startswith(_TORCH_DIR)]
    frame = (inside or frames or [None])[0]
    if frame is None:
        return "(no Python frame)"
    filename, line = str(frame.get("filename", "?")), int(frame.get("line", 0))
    text = linecache.getline(filename, line).strip()
    where = f"{Path(filename).name if not filename.startswith('<') else filename}:{line}"
    return f"{where} {frame.get('name', '')}" + (f": {text[:70]}" if text else "")


def live_at_peak(events: list[dict], top: int = PEAK_SITES) -> dict[str, Any]:
    """From the allocator's events of one call (``torch.cuda.memory._snapshot()['device_traces']``):
    the peak of the bytes it allocated less those it freed (blocks allocated before the call count
    where they are freed, as ``max_memory_allocated`` above the held state does), and the blocks the
    call allocated that are live at that peak, summed per ``allocation_site``, largest first."""
    actions = {e.get("action") for e in events}
    free = "free_completed" if "free_completed" in actions else "free_requested"
    level = peak = 0
    peak_at = -1
    for i, event in enumerate(events):
        if event.get("action") == "alloc":
            level += event["size"]
        elif event.get("action") == free:
            level -= event["size"]
        if level > peak:
            peak, peak_at = level, i
    live: dict[int, dict] = {}
    for event in events[:peak_at + 1]:
        if event.get("action") == "alloc":
            live[event["addr"]] = event
        elif event.get("action") == free:
            live.pop(event["addr"], None)
    sites: dict[str, int] = {}
    blocks = []
    for event in live.values():
        site = allocation_site(event.get("frames") or [])
        sites[site] = sites.get(site, 0) + event["size"]
        if event["size"] >= BLOCK_MIN_BYTES:
            blocks.append([event["size"], site])
    largest = sorted(sites.items(), key=lambda kv: -kv[1])[:top]
    return {"trace_peak_mb": peak / 2**20, "live_mb": sum(sites.values()) / 2**20,
            "peak_sites": [[site, size / 2**20] for site, size in largest], "peak_blocks": blocks}


def held_beyond(mine: list, theirs: list, top: int = PEAK_SITES) -> list[str]:
    """The blocks of ``mine`` (``peak_blocks``: [bytes, site]) beyond what ``theirs`` holds at its peak,
    matched by size: two compilers' peaks share most of their blocks (the same saved activations, the
    same sizes), and what one holds beyond the other is where its peak differs. Per size, largest
    first: the count beyond the other's, the size and the first such block's site."""
    counts: dict[int, int] = {}
    for size, _ in theirs:
        counts[size] = counts.get(size, 0) + 1
    extra: dict[int, list[str]] = {}
    for size, site in sorted(mine, key=lambda b: -b[0]):
        if counts.get(size, 0):
            counts[size] -= 1
        else:
            extra.setdefault(size, []).append(site)
    return [f"{len(where)} x {size / 2**20:.1f} MB ({where[0]})" for size, where in list(extra.items())[:top]]


def peak_profile(call: Callable[[], Any]) -> dict[str, Any]:
    """``live_at_peak`` of one call of ``call`` under the CUDA allocator's history (Python stacks)."""
    record = torch.cuda.memory._record_memory_history
    torch.cuda.synchronize()
    try:
        record(enabled="all", context="alloc", stacks="python", max_entries=HISTORY_ENTRIES, clear_history=True)
    except TypeError:  # a torch without clear_history: its history starts empty when first enabled
        record(enabled="all", context="alloc", stacks="python", max_entries=HISTORY_ENTRIES)
    try:
        call()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        record(enabled=None)
    traces = snapshot.get("device_traces") or [[]]
    return live_at_peak(traces[torch.cuda.current_device()] if len(traces) > 1 else traces[0])


def peak_rows_section(results: list[dict], ours: str, peer: str, what: str) -> str | None:
    """Rows whose ``ours`` peak is above ``peer``'s by more than ``PEAK_MARGIN_MB``, with what each
    holds at its peak (``live_at_peak``: the largest sites) and the blocks each holds beyond the other's
    (``held_beyond``: the largest sites alone are the saved activations both hold); None where there is
    none or no row was profiled."""
    out = []
    for r in results:
        mine, theirs = row_value(r, ours, "peak_mb"), row_value(r, peer, "peak_mb")
        if mine is None or theirs is None or mine <= theirs + PEAK_MARGIN_MB:
            continue
        if not (row_value(r, ours, "peak_sites") or row_value(r, peer, "peak_sites")):
            continue
        out.append(f"- {r['model']} {r['dtype']}: {ours} {mine:.0f} MB, {peer} {theirs:.0f} MB (+{mine - theirs:.0f}):")
        for backend, other in ((ours, peer), (peer, ours)):
            sites = "; ".join(f"{site} {mb:.1f}" for site, mb in row_value(r, backend, "peak_sites") or [])
            beyond = held_beyond(row_value(r, backend, "peak_blocks") or [], row_value(r, other, "peak_blocks") or [])
            out.append(f"  - {backend}: {_fmt(row_value(r, backend, 'live_mb'), '.0f')} MB allocated in the {what} "
                       f"live at its peak: {sites}" + (f"; beyond {other}'s: {'; '.join(beyond)}" if beyond else ""))
    if not out:
        return None
    return (f"rows whose {ours} peak is above {peer}'s, the {what}'s allocations live at each peak by where they "
            f"were allocated (MB):\n" + "\n".join(out))
