"""The ``crucible`` command: list, run, report, diff, merge, minify, corpus check."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tabulate import tabulate

from corpus import SOURCES
from corpus.entry import TIERS
from corpus.registry import catalog, select
from harness.store import DEFAULT_DB, ResultStore, StoreError, export_json
from harness.targets import MODES, REFERENCE_CHOICES


def _add_selection(p: argparse.ArgumentParser, default_suite: str | None) -> None:
    p.add_argument("--suite", default=default_suite,
                   help=f"a tier ({', '.join(TIERS)}; cumulative), a source name, or 'all'")
    p.add_argument("--source", help="only entries of this source")
    p.add_argument("--tag", help="only entries with this tag")
    p.add_argument("--entry", nargs="+", metavar="NAME", help="only these entries ('source/model' or 'model')")
    p.add_argument("--corpus", action="append", metavar="PATH",
                   help="also load an external corpus directory (repeatable)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crucible", description="Run corpora through graph compilers.")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("list", help="list corpus entries")
    _add_selection(p, None)
    p.add_argument("--summary", action="store_true", help="counts per source and tier, and unavailable sources")

    p = sub.add_parser("run", help="run entries on a target and store the results")
    _add_selection(p, None)
    p.add_argument("--target", help="eager, crucible-triton, crucible-interpret, crucible-sim, crucible-cpp or a Dynamo "
                                    "backend (default: crucible-triton with CUDA, else crucible-interpret)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="device for eager and Dynamo-backend targets")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="parallel worker processes (default: CPU cores up to 8 on CPU targets, 1 on CUDA)")
    p.add_argument("--shard", metavar="i/n", help="run shard i of n (1-based, deterministic)")
    p.add_argument("--resume", action="store_true", help="continue the latest unfinished matching run")
    p.add_argument("--run-id", help="name the run (shards of one run share an id; merge joins them)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"SQLite results file (default {DEFAULT_DB})")
    p.add_argument("--json", metavar="PATH", help="also export the run as JSON")
    p.add_argument("--limit", type=int, help="run at most N entries")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per entry (default 600)")
    p.add_argument("--mem-limit-mb", type=int, default=None,
                   help="address-space limit per entry on CPU targets (default: RAM / jobs)")
    p.add_argument("--no-capture", action="store_true", help="skip capture analysis (graphs, breaks, coverage)")
    p.add_argument("--reference", choices=REFERENCE_CHOICES, default="auto",
                   help="where the float64 reference runs: auto (the target's device, CPU if that fails), "
                        "cpu, device, or none (compare with eager only); default auto")
    p.add_argument("--mode", choices=MODES, default="inference",
                   help="inference (default) or train: forward, a seeded scalar loss, backward; "
                        "gradients of inputs and parameters graded too")
    p.add_argument("--dynamic", action="store_true",
                   help="compile with dynamic shapes and grade each entry at several batch sizes")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML (one testcase per entry)")
    p.add_argument("--html", metavar="PATH", help="also write the HTML report (see `report --html`)")
    p.add_argument("--no-report", action="store_true", help="do not print the report at the end")

    p = sub.add_parser("report", help="print the report of a run (default: the latest)")
    p.add_argument("run", nargs="?", help="run id, results .sqlite (latest run; FILE:RUN_ID) or .json export")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--json", metavar="PATH", help="export the run as JSON instead")
    p.add_argument("--html", metavar="PATH",
                   help="write a self-contained HTML report (with the store's run history) instead")
    p.add_argument("--junit", metavar="PATH", help="write the run as JUnit XML instead")
    p.add_argument("--runs", action="store_true", help="list the runs in the database")
    p.add_argument("--repro", metavar="KEY", help="print the repro.py of the fuzz finding KEY of the run")
    p.add_argument("--traceback", metavar="KEY",
                   help="print the traceback the fuzz finding KEY of the run raised when it was found")

    p = sub.add_parser("diff", help="regressions and improvements from RUN_A to RUN_B (exit 1 on regressions)")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--db", default=DEFAULT_DB)

    p = sub.add_parser("merge", help="merge results databases (shards of one run id become one run)")
    p.add_argument("output")
    p.add_argument("inputs", nargs="+")

    from harness.minify.command import add_parser as add_minify_parser

    add_minify_parser(sub)

    sub.add_parser("corpus", help="corpus maintenance: 'crucible corpus check ...'", add_help=False)
    from harness.fuzz.cli import add_fuzz_parser

    add_fuzz_parser(sub)
    return parser


def _sources_needed(args: argparse.Namespace) -> tuple[bool, list[str] | None]:
    """(load built-in sources?, which ones): listing every source is slow, load only what is selected."""
    if args.source in SOURCES:
        return True, [args.source]
    if args.suite in SOURCES:
        return True, [args.suite]
    if args.corpus and args.suite not in (*TIERS, "all", None) and args.source is None:
        return False, None  # a suite named after an external corpus's source
    return True, None


def _entries(args: argparse.Namespace) -> tuple[Any, list]:
    builtin, sources = _sources_needed(args)
    cat = catalog(args.corpus, builtin=builtin, sources=sources)
    for name, reason in cat.unavailable.items():
        print(f"source unavailable: {name}: {reason}", file=sys.stderr)
    entries = select(cat.entries, args.suite, args.source, args.tag, args.entry)
    return cat, entries


def cmd_list(args: argparse.Namespace) -> int:
    _, entries = _entries(args)
    if args.summary:
        counts = Counter((e.source, e.tier) for e in entries)
        rows = [[src, *[counts[(src, t)] for t in TIERS], sum(counts[(src, t)] for t in TIERS)]
                for src in sorted({e.source for e in entries})]
        print(tabulate(rows, headers=["source", *TIERS, "total"]))
        return 0
    rows = [[e.name, e.tier, e.family, ",".join(sorted(e.tags)), e.dtype,
             "-" if e.expected_graphs is None else e.expected_graphs,
             "-" if e.expected_breaks is None else e.expected_breaks] for e in entries]
    print(tabulate(rows, headers=["entry", "tier", "family", "tags", "dtype", "graphs", "breaks"]))
    return 0


def _default_mem_limit(jobs: int) -> int | None:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return max(1024, int(total * 0.8 / max(1, jobs)) // (1024 * 1024))


def cmd_run(args: argparse.Namespace) -> int:
    from harness.report import render_report
    from harness.runner import RunRequest, execute_run, parse_shard, shard_entries
    from harness.targets import default_target, parse_target, target_options_problem

    with ResultStore(args.db):  # a damaged or foreign --db fails now, before any entry runs
        pass
    target = args.target or default_target()
    problem = target_options_problem(target, args.device)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.suite is None:  # naming entries picks them from every tier
        args.suite = "all" if args.entry else "smoke"
    cat, entries = _entries(args)
    if cat.duplicates():
        print(f"error: duplicate entry names: {sorted(set(cat.duplicates()))}", file=sys.stderr)
        return 2
    if args.shard:
        index, count = parse_shard(args.shard)
        entries = shard_entries(entries, index, count)
    if args.limit is not None:
        entries = entries[: args.limit]
    if not entries:
        print("no entries selected", file=sys.stderr)
        return 2
    if parse_target(target, args.device).device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(f"error: target {target} needs a CUDA GPU and none is available", file=sys.stderr)
            return 2
    gpus: tuple[str, ...] = ()
    if parse_target(target, args.device).device == "cuda":
        from harness.pool import visible_gpus

        gpus = visible_gpus()
    if args.jobs is None:  # on CUDA one worker per GPU
        args.jobs = max(1, len(gpus)) if gpus else min(8, os.cpu_count() or 1)
    if args.jobs < 1:
        print(f"error: -j/--jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    print(f"running {len(entries)} entries of suite {args.suite} on {target} with {args.jobs} worker(s)",
          file=sys.stderr)
    request = RunRequest(
        suite=args.suite, target=target, entries=entries, catalog=cat, db=args.db, run_id=args.run_id,
        resume=args.resume, jobs=args.jobs, shard=args.shard, timeout_s=args.timeout,
        mem_limit_mb=args.mem_limit_mb if args.mem_limit_mb is not None else _default_mem_limit(args.jobs),
        device=args.device, capture=not args.no_capture, reference=args.reference, mode=args.mode,
        dynamic=args.dynamic, gpus=gpus)
    try:
        run_id = execute_run(request)
    except KeyboardInterrupt:
        print("\ninterrupted: finished entries are stored; continue with --resume", file=sys.stderr)
        return 130
    with ResultStore(args.db) as store:
        if args.json:
            Path(args.json).write_text(json.dumps(export_json(store, run_id), indent=1, default=str))
        run = store.run(run_id)
        selected = {e.name for e in entries}
        results = [r for r in store.results(run_id) if r["name"] in selected]
        if args.junit:
            from harness.junit import write_junit

            write_junit(args.junit, run, results)
        if args.html:
            from harness.html_report import write_html

            write_html(args.html, run, results, list(store.iter_all()))
        if not args.no_report:
            print(render_report(run, results))
    print(f"results: {args.db} (run {run_id})", file=sys.stderr)
    return 0


def load_run(ref: str | None, db: str) -> tuple[dict, list[dict]]:
    """Resolve a run reference: a run id in ``db``, ``FILE.sqlite[:RUN_ID]`` or a JSON export."""
    if ref and ref.endswith(".json") and Path(ref).is_file():
        doc = json.loads(Path(ref).read_text())
        run = dict(doc["run"])
        run.setdefault("metadata", {k: v for k, v in run.items() if k not in ("id", "suite", "target")})
        return run, doc["entries"]
    run_id = ref
    if ref and ".sqlite:" in ref:  # FILE.sqlite:RUN_ID
        stem, _, run_id = ref.partition(".sqlite:")
        db = stem + ".sqlite"
    elif ref and (ref.endswith(".sqlite") or Path(ref).is_file()):  # a database: its latest run
        db, run_id = ref, None
    if not Path(db).exists():
        raise SystemExit(f"no results database at {db}")
    with ResultStore(db) as store:
        run = store.run(run_id) if run_id else store.latest_run()
        if run is None:
            raise SystemExit(f"no run {run_id!r} in {db}" if run_id else f"no runs in {db}")
        return run, store.results(run["id"])


def _history(ref: str | None, db: str) -> list[tuple[dict, list[dict]]]:
    """Every run of the store a report reference points into (none for a JSON export)."""
    if ref and ref.endswith(".json"):
        return []
    if ref and ".sqlite:" in ref:
        db = ref.partition(".sqlite:")[0] + ".sqlite"
    elif ref and (ref.endswith(".sqlite") or Path(ref).is_file()):
        db = ref
    with ResultStore(db) as store:
        return list(store.iter_all())


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import render_report, render_runs

    if args.runs:
        with ResultStore(args.db) as store:
            print(render_runs(store.runs()))
        return 0
    run, results = load_run(args.run, args.db)
    if run["suite"] in ("fuzz", "fuzz-decomps"):
        from harness.fuzz.report import print_fuzz_report

        return print_fuzz_report(run, args)
    if args.junit:
        from harness.junit import write_junit

        write_junit(args.junit, run, results)
        return 0
    if args.html:
        from harness.html_report import write_html

        write_html(args.html, run, results, _history(args.run, args.db))
        return 0
    if args.json:
        doc = {"run": {k: v for k, v in run.items() if k != "metadata"} | run.get("metadata", {}),
               "entries": results}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
        return 0
    print(render_report(run, results))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from harness.diff import diff_runs, render_diff

    run_a, results_a = load_run(args.run_a, args.db)
    run_b, results_b = load_run(args.run_b, args.db)
    changes = diff_runs(results_a, results_b)
    print(f"A = {run_a['id']}, B = {run_b['id']}")
    print(render_diff(changes))
    return 1 if any(c.regression for c in changes) else 0


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.store import merge

    with ResultStore(args.output) as out:
        merged = merge(out, args.inputs)
    for run_id, n in merged.items():
        print(f"{run_id}: {n} results")
    return 0


def cmd_corpus(argv: list[str]) -> int:
    if not argv or argv[0] != "check":
        print("usage: crucible corpus check [...]", file=sys.stderr)
        return 2
    try:
        check = importlib.import_module("corpus.check")
    except ImportError as exc:
        print(f"crucible corpus check is not available in this installation ({exc})", file=sys.stderr)
        return 2
    return int(check.main(argv[1:]) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "corpus":
        return cmd_corpus(argv[1:])
    args = _parser().parse_args(argv or ["run"])
    from harness.fuzz.cli import cmd_fuzz, cmd_fuzz_decomps
    from harness.minify.command import cmd_minify

    commands = {"list": cmd_list, "run": cmd_run, "report": cmd_report, "diff": cmd_diff, "merge": cmd_merge,
                "fuzz": cmd_fuzz, "fuzz-decomps": cmd_fuzz_decomps, "minify": cmd_minify}
    try:
        return commands[args.command](args)
    except KeyError as exc:  # unknown suite/source from the registry
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
