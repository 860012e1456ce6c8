"""The cluster executor against the single-host pool: a corpus tier's wall time, and the engine's cost per task.

    python -m harness.bench.cluster [--suite smoke] [--target crucible-cpp] [--workers 4] [--rounds 1]
    python -m harness.bench.cluster --noop 200 --workers 4     # only the per-task cost of each executor

``run`` rows: ``crucible run`` of the tier through ``-j N`` and through ``--cluster local:N``, each
in a fresh process with a fresh kernel cache and a fresh results file (so neither orders its
entries by the other's history), the two alternating per round. It prints the wall times, their
ratio (cluster / pool), and the overhead per entry ((cluster - pool) / entries). ``noop`` rows: N
tasks that do nothing, through a warm pool of N workers and through a warm local cluster of N: the
executor's own seconds per task. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from harness.pool import WorkerConfig, WorkerContext, WorkerPool
from harness.result import Result
from harness.status import Status

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class NoopTask:
    name: str
    imports: tuple[str, ...] = ()

    def __call__(self, worker: WorkerContext) -> Result:
        return Result(name=self.name, target=worker.target.name, status=Status.PASS)


def _run(suite: str, target: str, workers: int, cluster: bool, limit: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="crucible-bench-cluster-") as tmp:
        db = Path(tmp) / "r.sqlite"
        env = {**os.environ, "CRUCIBLE_CACHE_DIR": str(Path(tmp) / "cache"),
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        command = [sys.executable, "-m", "harness", "run", "--suite", suite, "--target", target, "--no-report",
                   "--db", str(db), *(["--cluster", f"local:{workers}"] if cluster else ["-j", str(workers)]),
                   *(["--limit", str(limit)] if limit else [])]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT status, wall_s FROM results").fetchall()
    return {"wall": wall, "entries": len(rows), "statuses": Counter(s for s, _ in rows),
            "task_s": sum(w or 0.0 for _, w in rows)}


def bench_runs(args: argparse.Namespace) -> None:
    measured: dict[str, list[dict]] = {"pool": [], "cluster": []}
    for round_ in range(args.rounds):
        order = ("pool", "cluster") if round_ % 2 == 0 else ("cluster", "pool")
        for kind in order:
            measured[kind].append(_run(args.suite, args.target, args.workers, kind == "cluster", args.limit))
            last = measured[kind][-1]
            print(f"round {round_ + 1} {kind}: {last['wall']:.1f} s, {last['entries']} entries", file=sys.stderr)
    rows = []
    for kind, runs in measured.items():
        wall = statistics.median(r["wall"] for r in runs)
        rows.append([kind, args.workers, runs[0]["entries"], f"{wall:.1f}",
                     f"{statistics.median(r['task_s'] for r in runs):.1f}",
                     ", ".join(f"{s} {n}" for s, n in sorted(runs[0]["statuses"].items()))])
    pool = statistics.median(r["wall"] for r in measured["pool"])
    cluster = statistics.median(r["wall"] for r in measured["cluster"])
    entries = measured["pool"][0]["entries"] or 1
    print(f"suite {args.suite} on {args.target}, {args.workers} workers, {args.rounds} round(s), fresh kernel caches")
    print(tabulate(rows, headers=["executor", "workers", "entries", "wall s (median)", "task s (sum)", "statuses"]))
    print(f"cluster / pool wall time: {cluster / pool:.3f}x; overhead per entry: {(cluster - pool) / entries:+.3f} s")


def bench_noop(args: argparse.Namespace) -> None:
    from harness.cluster import Cluster, ClusterExecutor

    from harness.bench.cluster import NoopTask as Noop  # not __main__'s class: workers import it by this name

    tasks = [Noop(f"noop/{i}") for i in range(args.noop)]
    config = WorkerConfig(target="eager", timeout_s=120, jobs=args.workers)
    rows = []
    pool = WorkerPool(config, args.workers, keep=True)
    try:
        pool.run(tasks[: args.workers], lambda r: None)  # warm: every worker started
        start = time.perf_counter()
        pool.run(tasks, lambda r: None)
        rows.append(["pool", args.workers, args.noop, f"{1000 * (time.perf_counter() - start) / args.noop:.2f}"])
    finally:
        pool.close()
    with Cluster(f"local:{args.workers}", "eager") as cluster:
        executor = ClusterExecutor(cluster, config)
        executor.run(tasks[: args.workers * 2], lambda r: None)  # warm
        start = time.perf_counter()
        executor.run(tasks, lambda r: None)
        batch = time.perf_counter() - start
        start = time.perf_counter()
        for task in tasks[:50]:  # one at a time, as a fuzz campaign hands them over
            executor.run([task], lambda r: None)
        single = (time.perf_counter() - start) / 50
    rows.append(["cluster", args.workers, args.noop, f"{1000 * batch / args.noop:.2f}"])
    rows.append(["cluster, one at a time", 1, 50, f"{1000 * single:.2f}"])
    print(tabulate(rows, headers=["executor", "workers", "tasks", "ms per task (wall / tasks)"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--target", default="crucible-cpp")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--limit", type=int, help="run at most N entries of the suite")
    parser.add_argument("--noop", type=int, metavar="N", help="only time N no-op tasks through each executor")
    args = parser.parse_args(argv)
    if args.noop:
        bench_noop(args)
    else:
        bench_runs(args)


if __name__ == "__main__":
    main()
