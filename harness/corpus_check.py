"""``crucible corpus check``: build every entry once and run it in eager, through the engine.

Each entry is a subject (``harness.tasks.CorpusCheckSubject``) that stops after eager: built at scale "small" on
the CPU, run three times (a warm-up, then two timed runs whose outputs must match bit for bit) in
an isolated harness worker with one torch thread (``harness.pool``: deadline, memory limit, crash
and hang recorded, a fresh worker replaces a dead one or one that ran ``--tasks-per-worker``
entries). One record per entry is appended to ``corpus/data/measured/<source>.jsonl`` as soon as it
finishes (``corpus.tiers``): those records are the parameter counts and eager times tiers are
chosen from, and the list of entries broken in eager, with why. Already-checked entries are
skipped, so an interrupted check resumes.

    crucible corpus check                      # every unchecked entry of every source
    crucible corpus check --source timm --recheck --match 'timm/resnet*'
    crucible corpus check --catalog            # regenerate corpus/data/<source>.json
    crucible corpus check --report             # failures recorded so far, no running
    crucible corpus check --compact            # drop superseded and stale records
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import os
import sys
import time
from typing import Any

from corpus import SOURCES
from corpus.tiers import append_measurement, compact_measurements, load_catalog, load_measurements, write_catalog
from harness.cluster import check_cluster_settings, cluster_options
from harness.result import Result
from harness.status import Phase, Status
from harness.validation import UsageError, positive

# Sources this command checks (the hand-written zoo is checked by its own tests).
CHECKED_SOURCES = ("torchvision", "timm", "transformers", "opinfo")
DEFAULT_TIMEOUT_S = 180.0
# Entries whose catalog parameter count is above this are not built on the CPU: a few
# of them at once would exhaust a small machine's memory. They stay in nightly-gpu.
CHECK_MAX_PARAMS = 1_500_000_000
# Workers are replaced after this many entries: a long-lived worker's memory only grows
# (allocator caches, imported model code).
TASKS_PER_WORKER = 25
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
STATUS_COLUMNS = ("ok", "build_fail", "eager_fail", "eager_nondeterministic", "timeout", "crash", "skipped")


def measurement(result: Result, source: str, torch_version: str) -> dict[str, Any]:
    """The ``corpus/data/measured`` record of a check's result (the format ``corpus.tiers`` reads)."""
    record: dict[str, Any] = {"name": result.name, "source": source, "scale": "small", "torch": torch_version}
    if result.build_s is not None:
        record["build_ms"] = round(result.build_s * 1000, 2)
    for key in ("params", "input_shapes"):
        if getattr(result, key) is not None:
            record[key] = getattr(result, key)
    calls = result.eager_calls_s or []
    if len(calls) >= 2:
        record["eager_ms"] = round(min(calls[1:]) * 1000, 3)
    status = result.status
    if status == Status.PASS:
        record["status"] = "ok"
        return record
    if status == Status.EAGER_FAIL:
        record["status"] = "build_fail" if result.phase == Phase.BUILD else "eager_fail"
    elif status == Status.OOM:
        record["status"] = "crash"
    else:
        record["status"] = str(status)
    record["error"] = (result.error or "")[:500]
    return record


def _source_entries(source: str) -> list:
    module = importlib.import_module(SOURCES[source])
    reason = module.unavailable() if hasattr(module, "unavailable") else None
    if reason:
        print(f"{source}: unavailable ({reason})", file=sys.stderr)
        return []
    return module.entries()


def todo(sources: list[str], match: list[str] | None, recheck: bool, limit: int | None) -> list[tuple[str, str]]:
    out = []
    for source in sources:
        done = set() if recheck else set(load_measurements(source))
        entries = [e for e in _source_entries(source) if e.name not in done]
        if match:
            entries = [e for e in entries if any(fnmatch.fnmatchcase(e.name, m) for m in match)]
        too_big = [e for e in entries if (e.params or 0) > CHECK_MAX_PARAMS]
        big_names = {e.name for e in too_big}
        for e in too_big:
            append_measurement(source, {"name": e.name, "source": source, "status": "skipped", "params": e.params,
                                        "error": f"{e.params} parameters: too large to build on the CPU check"})
        # Small entries first: most entries are checked early in a run that gets cut off.
        entries = sorted((e for e in entries if e.name not in big_names), key=lambda e: (e.params or 0, e.name))
        out += [(source, e.name) for e in entries]
    return out[:limit] if limit else out


def run_checks(items: list[tuple[str, str]], jobs: int, timeout_s: float,
               tasks_per_worker: int = TASKS_PER_WORKER, cluster: str | None = None,
               mixed_versions: bool = False) -> dict[str, int]:
    """Check entries on ``jobs`` isolated workers (one torch thread each), or on a cluster's workers;
    returns status counts."""
    import torch

    from harness.cluster import open_executor
    from harness.pool import WorkerConfig
    from harness.tasks import CorpusCheckTask

    counts: dict[str, int] = {}
    source_of = {name: source for source, name in items}
    done = [0]

    def finish(result: Result) -> None:
        done[0] += 1
        source = source_of[result.name]
        record = measurement(result, source, torch.__version__)
        append_measurement(source, record)
        counts[record["status"]] = counts.get(record["status"], 0) + 1
        extra = f"{record.get('eager_ms', '-')} ms" if record["status"] == "ok" else record.get("error", "")
        print(f"[{done[0]}/{len(items)}] {record['status']:<12} {record['name']}  {extra}", flush=True)

    config = WorkerConfig(target="eager", device="cpu", timeout_s=timeout_s, jobs=jobs, threads=1,
                          max_tasks=tasks_per_worker)
    with open_executor(config, cluster, mixed_versions) as executor:
        executor.run([CorpusCheckTask(s, n) for s, n in items], finish)
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


def write_catalogs(sources: list[str]) -> None:
    for source in sources:
        module = importlib.import_module(SOURCES[source])
        if module.unavailable():
            print(f"{source}: unavailable, catalog not written", file=sys.stderr)
            continue
        start = time.perf_counter()
        path = write_catalog(source, module.catalog())
        print(f"{source}: wrote {path} in {time.perf_counter() - start:.0f} s")


def add_parser(sub: Any) -> None:
    corpus = sub.add_parser("corpus", help="corpus maintenance: 'crucible corpus check ...'")
    actions = corpus.add_subparsers(dest="corpus_command", required=True)
    p = actions.add_parser("check", help="build every entry once and run it in eager; record eager times",
                           description=__doc__.split("\n\n")[0])
    p.add_argument("--source", action="append", choices=CHECKED_SOURCES,
                   help="check only this source (repeatable); default: all")
    p.add_argument("--match", action="append", help="only entries whose name matches this glob (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=max(1, (os.cpu_count() or 2)), help="worker processes")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per entry")
    cluster_options(p)
    p.add_argument("--tasks-per-worker", type=int, default=TASKS_PER_WORKER,
                   help="replace a worker after this many entries (raise it for cheap op entries)")
    p.add_argument("--limit", type=int, help="check at most this many entries")
    p.add_argument("--recheck", action="store_true", help="also re-run entries already recorded")
    p.add_argument("--catalog", action="store_true",
                   help="regenerate the catalogs (corpus/data/<source>.json) instead of checking")
    p.add_argument("--report", action="store_true", help="only print the recorded results")
    p.add_argument("--compact", action="store_true",
                   help="rewrite the records keeping the latest per current entry (no check running)")


def cmd_corpus(args: argparse.Namespace) -> int:
    positive("-j/--jobs", args.jobs, integer=True)
    positive("--timeout", args.timeout)
    positive("--tasks-per-worker", args.tasks_per_worker, integer=True)
    positive("--limit", args.limit, integer=True)
    check_cluster_settings(args)
    if sum((args.catalog, args.report, args.compact)) > 1:
        raise UsageError("choose one of --catalog, --report, --compact")
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
        items = todo(sources, args.match, args.recheck, args.limit)
        where = f"on the cluster {args.cluster}" if args.cluster else f"with {args.jobs} workers"
        print(f"checking {len(items)} entries {where}, {args.timeout:.0f} s each", flush=True)
        run_checks(items, args.jobs, args.timeout, args.tasks_per_worker, args.cluster, args.mixed_versions)
    return report(sources)
