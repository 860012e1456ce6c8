"""``crucible corpus check``: build every entry once and run it in eager.

Each entry is built at scale "small" on the CPU in a worker process (one torch thread
per worker), run three times (warm-up, then two timed runs whose outputs must match
bit for bit), and one record is appended to ``corpus/data/measured/<source>.jsonl`` as
soon as it finishes. Those records are the parameter counts and eager times tiers are
chosen from (corpus.tiers), and the list of entries broken in eager, with why.

    crucible corpus check                      # every unchecked entry of every source
    crucible corpus check --source timm --recheck --match 'timm/resnet*'
    crucible corpus check --catalog            # regenerate corpus/data/<source>.json
    crucible corpus check --report             # failures recorded so far, no running
    crucible corpus check --compact            # drop superseded and stale records
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import fnmatch
import importlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from typing import Any

from corpus import SOURCES
from corpus.entry import EntryUnavailable
from corpus.tiers import (
    append_measurement,
    compact_measurements,
    load_catalog,
    load_measurements,
    write_catalog,
)

# Sources this module checks (the hand-written zoo is checked by its own tests).
CHECKED_SOURCES = ("torchvision", "timm", "transformers", "opinfo")
DEFAULT_TIMEOUT_S = 180.0
# Entries whose catalog parameter count is above this are not built on the CPU: a few
# of them at once would exhaust a small machine's memory. They stay in nightly-gpu.
CHECK_MAX_PARAMS = 1_500_000_000
# Worker processes are replaced after this many entries: a long-lived worker's memory
# only grows (allocator caches, imported model code).
TASKS_PER_WORKER = 25
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


# --- worker side --------------------------------------------------------------------------


class _EntryTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _EntryTimeout()


def _init_worker() -> None:
    os.environ.update(OFFLINE_ENV)
    import torch

    torch.set_num_threads(1)


_ENTRY_CACHE: dict[str, dict[str, Any]] = {}


def _find_entry(source: str, name: str) -> Any:
    if source not in _ENTRY_CACHE:
        module = importlib.import_module(SOURCES[source])
        _ENTRY_CACHE[source] = {e.name: e for e in module.entries()}
    return _ENTRY_CACHE[source][name]


def output_tensors(value: Any) -> list:
    """Every tensor in a model output (tensors, tuples, lists, dicts, ModelOutput)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in output_tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in output_tensors(v)]
    return []


def _same_tensor(x: Any, y: Any) -> bool:
    """Bitwise-equal, where NaN equals NaN (torch.equal says NaN != NaN)."""
    import torch

    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.is_quantized:
        x, y = x.dequantize(), y.dequantize()
    if x.is_complex():
        x, y = torch.view_as_real(x.to(torch.complex64)), torch.view_as_real(y.to(torch.complex64))
    if x.is_floating_point():
        return bool(((x == y) | (x.isnan() & y.isnan())).all())
    return torch.equal(x, y)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(_same_tensor(x, y) for x, y in zip(a, b))


def _error(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" at {os.path.basename(last[0].filename)}:{last[0].lineno}" if last else ""
    return f"{type(exc).__name__}: {str(exc).strip()[:400]}{where}"


def check_entry(source: str, name: str, timeout_s: float) -> dict[str, Any]:
    """Build and run one entry in eager; never raises (a failure is a status)."""
    import torch

    record: dict[str, Any] = {"name": name, "source": source, "scale": "small", "torch": torch.__version__}
    previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    stage = "build"
    try:
        entry = _find_entry(source, name)
        start = time.perf_counter()
        built = entry.build("small")
        record["build_ms"] = round((time.perf_counter() - start) * 1000, 2)
        if isinstance(built.model, torch.nn.Module):
            record["params"] = sum(p.numel() for p in built.model.parameters())
        record["input_shapes"] = [list(t.shape) for t in output_tensors([built.inputs, built.kwargs])][:8]
        stage = "eager"
        outputs = []
        times = []
        with torch.no_grad():
            for _ in range(3):
                start = time.perf_counter()
                out = built.model(*built.inputs, **built.kwargs)
                times.append((time.perf_counter() - start) * 1000)
                outputs.append([t.detach().clone() for t in output_tensors(out)])
        record["eager_ms"] = round(min(times[1:]), 3)
        if not outputs[-1]:
            record.update(status="eager_fail", error="the output holds no tensor")
        elif not _same(outputs[1], outputs[2]):
            record.update(status="eager_nondeterministic", error="two eager runs differ")
        else:
            record["status"] = "ok"
    except _EntryTimeout:
        record.update(status="timeout", error=f"{stage} took longer than {timeout_s:.0f} s")
    except EntryUnavailable as exc:
        record.update(status="skipped", error=f"unavailable here: {exc}")
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded, none escapes
        record.update(status="build_fail" if stage == "build" else "eager_fail", error=_error(exc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
    return record


# --- driver side --------------------------------------------------------------------------


def _source_entries(source: str) -> list:
    module = importlib.import_module(SOURCES[source])
    reason = module.unavailable() if hasattr(module, "unavailable") else None
    if reason:
        print(f"{source}: unavailable ({reason})", file=sys.stderr)
        return []
    return module.entries()


def _todo(sources: list[str], match: list[str] | None, recheck: bool, limit: int | None) -> list[tuple[str, str]]:
    todo = []
    for source in sources:
        done = set() if recheck else set(load_measurements(source))
        entries = [e for e in _source_entries(source) if e.name not in done]
        if match:
            entries = [e for e in entries if any(fnmatch.fnmatchcase(e.name, m) for m in match)]
        too_big = [e for e in entries if (e.params or 0) > CHECK_MAX_PARAMS]
        big_names = {e.name for e in too_big}
        for e in too_big:
            append_measurement(
                source,
                {"name": e.name, "source": source, "status": "skipped", "params": e.params,
                 "error": f"{e.params} parameters: too large to build on the CPU check"},
            )
        # Small entries first: most entries are checked early in a run that gets cut off.
        entries = sorted((e for e in entries if e.name not in big_names), key=lambda e: (e.params or 0, e.name))
        todo += [(source, e.name) for e in entries]
    return todo[:limit] if limit else todo


def _kill_workers(pool: cf.ProcessPoolExecutor) -> None:
    # ProcessPoolExecutor cannot cancel a running task; a hung worker is killed by pid
    # (only the workers this pool started), then the pool is replaced.
    for process in list(getattr(pool, "_processes", {}).values()):
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _new_pool(jobs: int, tasks_per_worker: int) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        max_tasks_per_child=tasks_per_worker,
    )


def run_checks(
    todo: list[tuple[str, str]], jobs: int, timeout_s: float, tasks_per_worker: int = TASKS_PER_WORKER
) -> dict[str, int]:
    """Check entries with ``jobs`` workers; at most ``jobs`` in flight, so a dead or hung
    worker is charged to the entries it was running, never to queued ones."""
    counts: dict[str, int] = {}
    hard_limit_s = timeout_s * 1.5 + 60  # the in-worker alarm failed to fire (stuck in C)
    queue = list(todo)
    pool = _new_pool(jobs, tasks_per_worker)
    in_flight: dict[cf.Future, tuple[str, str, float]] = {}
    done = 0

    def finish(source: str, record: dict[str, Any]) -> None:
        nonlocal done
        done += 1
        append_measurement(source, record)
        counts[record["status"]] = counts.get(record["status"], 0) + 1
        extra = f"{record.get('eager_ms', '-')} ms" if record["status"] == "ok" else record.get("error", "")
        print(f"[{done}/{len(todo)}] {record['status']:<12} {record['name']}  {extra}", flush=True)

    try:
        while queue or in_flight:
            while queue and len(in_flight) < jobs:
                source, name = queue.pop(0)
                in_flight[pool.submit(check_entry, source, name, timeout_s)] = (source, name, time.monotonic())
            finished, _ = cf.wait(list(in_flight), timeout=2.0, return_when=cf.FIRST_COMPLETED)
            broken = False
            for future in finished:
                source, name, _ = in_flight.pop(future)
                try:
                    finish(source, future.result())
                except Exception as exc:  # noqa: BLE001 - the worker died (OOM kill, C crash)
                    broken = True
                    finish(source, {"name": name, "source": source, "status": "crash", "error": _error(exc)})
            now = time.monotonic()
            hung = [f for f, (_, _, t0) in in_flight.items() if now - t0 > hard_limit_s]
            if broken or hung:
                for future in hung:
                    source, name, _ = in_flight.pop(future)
                    finish(source, {"name": name, "source": source, "status": "timeout",
                                    "error": f"worker unresponsive after {hard_limit_s:.0f} s"})
                # Entries still in flight on the dead pool are retried on a fresh one.
                queue = [(s, n) for s, n, _ in in_flight.values()] + queue
                in_flight.clear()
                _kill_workers(pool)
                pool = _new_pool(jobs, tasks_per_worker)
    finally:
        _kill_workers(pool)
    return counts


def report(sources: list[str]) -> int:
    """Print what the recorded checks say: status counts and every failing entry."""
    from tabulate import tabulate

    rows, failures = [], []
    for source in sources:
        current = {e.name for e in _source_entries(source)}
        # Records of entries no longer in the catalog (an op dropped, a model renamed) are stale.
        records = {n: r for n, r in load_measurements(source).items() if n in current}
        statuses: dict[str, int] = {}
        for r in records.values():
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            if r["status"] != "ok":
                failures.append((r["name"], r["status"], (r.get("error") or "")[:140]))
        catalog = load_catalog(source) or {}
        for model, reason in sorted(catalog.get("unbuildable", {}).items()):
            failures.append((f"{source}/{model}", "not_listed", reason[:140]))
        rows.append([source, len(records), *[statuses.get(s, 0) for s in STATUS_COLUMNS],
                     len(catalog.get("unbuildable", {}))])
    print(tabulate(rows, headers=["source", "checked", *STATUS_COLUMNS, "not_listed"]))
    if failures:
        print()
        print(tabulate(sorted(failures), headers=["entry", "status", "why"]))
    return 0


STATUS_COLUMNS = ("ok", "build_fail", "eager_fail", "eager_nondeterministic", "timeout", "crash", "skipped")


def write_catalogs(sources: list[str]) -> None:
    for source in sources:
        module = importlib.import_module(SOURCES[source])
        if module.unavailable():
            print(f"{source}: unavailable, catalog not written", file=sys.stderr)
            continue
        start = time.perf_counter()
        path = write_catalog(source, module.catalog())
        print(f"{source}: wrote {path} in {time.perf_counter() - start:.0f} s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="crucible corpus check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", action="append", choices=CHECKED_SOURCES,
                        help="check only this source (repeatable); default: all")
    parser.add_argument("--match", action="append", help="only entries whose name matches this glob (repeatable)")
    parser.add_argument("-j", "--jobs", type=int, default=max(1, (os.cpu_count() or 2)), help="worker processes")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per entry")
    parser.add_argument("--tasks-per-worker", type=int, default=TASKS_PER_WORKER,
                        help="replace a worker after this many entries (raise it for cheap op entries)")
    parser.add_argument("--limit", type=int, help="check at most this many entries")
    parser.add_argument("--recheck", action="store_true", help="also re-run entries already recorded")
    parser.add_argument("--catalog", action="store_true",
                        help="regenerate the catalogs (corpus/data/<source>.json) instead of checking")
    parser.add_argument("--report", action="store_true", help="only print the recorded results")
    parser.add_argument("--compact", action="store_true",
                        help="rewrite the records keeping the latest per current entry (no check running)")
    args = parser.parse_args(argv)
    sources = args.source or list(CHECKED_SOURCES)
    os.environ.update(OFFLINE_ENV)
    if args.catalog:
        write_catalogs(sources)
        return 0
    if args.compact:
        for source in sources:
            kept = compact_measurements(source, [e.name for e in _source_entries(source)])
            print(f"{source}: {kept} records kept")
        return 0
    if not args.report:
        todo = _todo(sources, args.match, args.recheck, args.limit)
        print(f"checking {len(todo)} entries with {args.jobs} workers, {args.timeout:.0f} s each", flush=True)
        run_checks(todo, args.jobs, args.timeout, args.tasks_per_worker)
    return report(sources)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
