"""crucible-interpret against crucible-cpp per corpus entry: compile plus run, cold kernel caches.

    python -m harness.bench.interp_time [--sets smoke inception] [--entry NAME ...] [--chunk 20]
        [--cpp-results DB[:RUN_ID]] [--interp-results DB[:RUN_ID]] [--cpp-tree DIR] [--interp-tree DIR] [--save DB]

Each entry's time on a target is what the harness records for it: its first compiled call (the
compile included) plus its second call (``compile_s + run_s``); an entry that times out or fails
counts with its whole worker time (``wall_s``) and its status is printed. The entries run through
``crucible run -j 1`` in chunks of ``--chunk``, the two targets alternating chunk by chunk (so load
on a shared machine falls on both alike), every chunk in a fresh process with a fresh kernel cache
(``CRUCIBLE_CACHE_DIR``): cold caches on both sides. It prints the distribution of the per-entry
ratio interpret / cpp (median, 90th percentile by nearest rank, max) for each set of entries and
over all, the slowest entries with both times, and each target's total. It asserts nothing.

Sets: ``smoke`` (the smoke tier), ``inception`` (``INCEPTION_SHARD``: the corpus's Inception-style
models, from the nightly-cpu tier), or a tier with a shard, ``nightly-cpu:3/40``.

``--cpp-results DB[:RUN_ID]`` takes crucible-cpp's figures from an earlier run's results file instead of
running it again (issue 39 compares against crucible-cpp measured once at its starting commit), and
``--interp-results`` crucible-interpret's (both: only the table, nothing runs);
``--cpp-tree``/``--interp-tree`` run a target from another checkout; ``--save DB`` keeps this run's
results file (both targets, one run id per target) for a later ``--cpp-results``.
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("crucible-cpp", "crucible-interpret")
# Every Inception-style model of the corpus (torchvision's inception_v3 and googlenet with their
# quantized forms, timm's Inception family); all are in the nightly-cpu tier.
INCEPTION_SHARD = ("torchvision/googlenet", "torchvision/inception_v3", "torchvision/quantized_googlenet",
                   "torchvision/quantized_inception_v3", "timm/inception_next_atto", "timm/inception_next_tiny",
                   "timm/inception_resnet_v2", "timm/inception_v3")


@dataclass(frozen=True)
class EntryTime:
    name: str
    status: str
    seconds: float  # compile_s + run_s, or wall_s when either is missing (timeout, failure)
    kernels: int | None  # generated kernels: 0 means nothing of Crucible's ran (no graph captured)


def resolve_set(spec: str) -> list[str]:
    """The entry names of one set: ``smoke``, ``inception`` or ``TIER:i/n``."""
    if spec == "inception":
        return list(INCEPTION_SHARD)
    from corpus.registry import catalog, select
    from harness.runner import parse_shard, shard_entries

    tier, _, shard = spec.partition(":")
    try:
        entries = [e for e in select(catalog().entries, tier, None, None) if "cpu" in e.devices]
    except KeyError as exc:
        raise SystemExit(f"error: set {spec!r}: {exc.args[0] if exc.args else exc}; a set is smoke, inception "
                         f"or TIER:i/n") from None
    if shard:
        try:
            index, count = parse_shard(shard)
        except ValueError as exc:
            raise SystemExit(f"error: set {spec!r}: {exc}") from None
        entries = shard_entries(entries, index, count)
    return [e.name for e in entries]


def run_chunk(target: str, names: list[str], tree: Path, timeout: int, db: Path) -> None:
    """``crucible run`` of ``names`` on ``target`` from checkout ``tree``, a fresh kernel cache, into ``db``."""
    with tempfile.TemporaryDirectory(prefix="crucible-bench-interp-") as tmp:
        env = {**os.environ, "CRUCIBLE_CACHE_DIR": str(Path(tmp) / "cache"), "PYTHONPATH": str(tree)}
        command = [sys.executable, "-m", "harness", "run", "--suite", "all", "--entry", *names, "--target", target,
                   "-j", "1", "--timeout", str(timeout), "--db", str(db), "--run-id", target, "--no-report"]
        done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command[:8])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")


def read_times(db: Path, run_id: str | None, target: str, names: list[str]) -> dict[str, EntryTime]:
    """Each named entry's time on ``target`` in results file ``db`` (the latest row per entry)."""
    if not db.exists():
        raise SystemExit(f"error: results file {db} does not exist")
    query = "SELECT name, status, compile_s, run_s, wall_s, kernels FROM results WHERE target = ?"
    params: list[str] = [target]
    if run_id:
        query, params = query + " AND run_id = ?", [*params, run_id]
    with sqlite3.connect(db) as conn:
        rows = conn.execute(query + " ORDER BY rowid", params).fetchall()
    wanted, out = set(names), {}
    for name, status, compile_s, run_s, wall_s, kernels in rows:
        if name in wanted:
            seconds = compile_s + run_s if compile_s is not None and run_s is not None else (wall_s or math.nan)
            out[name] = EntryTime(name, status, seconds, kernels)
    return out


def _stored(spec: str) -> tuple[Path, str | None]:
    """``DB[:RUN_ID]`` of ``--cpp-results``/``--interp-results``."""
    path, _, run_id = spec.partition(":")
    return Path(path), run_id or None


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the value at or above a share ``q`` of the sorted values)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(label: str, names: list[str], times: dict[str, dict[str, EntryTime]]) -> list[object]:
    pairs = [(times["crucible-interpret"][n].seconds, times["crucible-cpp"][n].seconds) for n in names
             if n in times["crucible-interpret"] and n in times["crucible-cpp"]]
    ratios = [i / c for i, c in pairs if c > 0 and not math.isnan(i) and not math.isnan(c)]
    if not ratios:
        return [label, 0, "-", "-", "-", "-", "-"]
    return [label, len(ratios), f"{statistics.median(ratios):.2f}", f"{percentile(ratios, 0.9):.2f}",
            f"{max(ratios):.2f}", f"{sum(c for _, c in pairs):.1f}", f"{sum(i for i, _ in pairs):.1f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.interp_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["smoke", "inception"],
                        help="sets of entries: smoke, inception or TIER:i/n (default: smoke inception)")
    parser.add_argument("--entry", nargs="+", help="these entries instead of --sets")
    parser.add_argument("--chunk", type=int, default=20, help="entries per crucible run (default 20)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per entry (default 600)")
    parser.add_argument("--cpp-results", metavar="DB[:RUN_ID]", help="crucible-cpp's times from this results file")
    parser.add_argument("--interp-results", metavar="DB[:RUN_ID]",
                        help="crucible-interpret's times from this results file (with --cpp-results: only the table)")
    parser.add_argument("--cpp-tree", type=Path, default=ROOT, help="checkout crucible-cpp runs from (default: this)")
    parser.add_argument("--interp-tree", type=Path, default=ROOT, help="checkout crucible-interpret runs from")
    parser.add_argument("--save", type=Path, help="keep this run's results file here")
    parser.add_argument("--slowest", type=int, default=10, help="entries listed by ratio (default 10)")
    args = parser.parse_args(argv)
    if args.chunk < 1:
        parser.error("--chunk must be at least 1")
    for tree in (args.cpp_tree, args.interp_tree):
        if not (tree / "harness" / "__main__.py").is_file():
            parser.error(f"{tree} is not a Crucible checkout (no harness/__main__.py)")
    sets = {"entries": list(args.entry)} if args.entry else {spec: resolve_set(spec) for spec in args.sets}
    names = list(dict.fromkeys(n for group in sets.values() for n in group))
    if not names:
        parser.error("no entries selected")
    stored = {target: _stored(spec) for target, spec in zip(TARGETS, (args.cpp_results, args.interp_results))
              if spec}
    with tempfile.TemporaryDirectory(prefix="crucible-bench-interp-db-") as tmp:
        db = args.save or Path(tmp) / "results.sqlite"
        if args.save and db.exists():
            parser.error(f"--save {db} exists: choose a new file")
        chunks = [names[i:i + args.chunk] for i in range(0, len(names), args.chunk)]
        running = [t for t in TARGETS if t not in stored]
        for i, chunk in enumerate(chunks if running else []):
            for target in running if i % 2 == 0 else running[::-1]:
                print(f"chunk {i + 1}/{len(chunks)}: {target}, {len(chunk)} entries", file=sys.stderr, flush=True)
                run_chunk(target, chunk, args.cpp_tree if target == "crucible-cpp" else args.interp_tree,
                          args.timeout, db)
        times = {t: read_times(db, t, t, names) for t in running}
        for target, (path, run_id) in stored.items():
            times[target] = read_times(path, run_id, target, names)
    for target in TARGETS:
        missing = [n for n in names if n not in times[target]]
        if missing:
            print(f"no {target} figures for {len(missing)} entries (left out): {', '.join(missing[:5])}",
                  file=sys.stderr)
    print(f"crucible-interpret ({args.interp_results or args.interp_tree}) / crucible-cpp "
          f"({args.cpp_results or args.cpp_tree}), compile + run per entry, cold kernel caches")
    rows = [summary(label, group, times) for label, group in sets.items()]
    if len(sets) > 1:
        rows.append(summary("all", names, times))
    print(tabulate(rows, headers=["set", "entries", "median", "p90", "max", "cpp s (sum)", "interpret s (sum)"]))
    ranked = sorted((n for n in names if n in times["crucible-cpp"] and n in times["crucible-interpret"]),
                    key=lambda n: -(times["crucible-interpret"][n].seconds / max(times["crucible-cpp"][n].seconds,
                                                                                    1e-9)))
    slow = [[n, f"{times['crucible-cpp'][n].seconds:.1f}", times["crucible-cpp"][n].status,
             f"{times['crucible-interpret'][n].seconds:.1f}", times["crucible-interpret"][n].status,
             f"{times['crucible-interpret'][n].seconds / max(times['crucible-cpp'][n].seconds, 1e-9):.2f}",
             times["crucible-interpret"][n].kernels]
            for n in ranked[:args.slowest]]
    print("\nslowest entries by ratio (kernels: interpreted kernels; 0: no graph of Crucible's ran, only eager):")
    print(tabulate(slow, headers=["entry", "cpp s", "cpp status", "interpret s", "interpret status", "ratio",
                                  "kernels"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
