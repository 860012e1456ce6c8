"""The ``crucible`` command: list, run, report, diff, merge, minify, fuzz, fuzz-decomps, mutate, corpus check.

Every command checks its settings before it does anything (``harness.validation``): a bad one is
one ``error:`` line and exit status 2, with nothing stored. ``crucible run`` exits 0 when no entry
failed against the compiler (or every failure was expected), 1 when one did, 2 on usage errors, 3
when the run could not finish (the disk filled up: what finished is stored, ``--resume`` goes on).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tabulate import tabulate

from corpus.entry import TIERS
from harness.cluster import check_cluster_settings, cluster_options
from harness.selection import add_selection, selected_entries
from harness.store import DEFAULT_DB, ResultStore, StoreError, check_usable, export_json
from harness.targets import MODES, REFERENCE_CHOICES
from harness.validation import UsageError, positive, writable_output

# Exit statuses of ``crucible run`` (and of the commands that gate CI the same way).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _version() -> str:
    try:
        return f"crucible {version('crucible')}"
    except PackageNotFoundError:  # run from a checkout without installing
        return "crucible (not installed: run from a checkout)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crucible", description="Run corpora through graph compilers.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("list", help="list corpus entries")
    add_selection(p, None)
    p.add_argument("--summary", action="store_true", help="counts per source and tier, and unavailable sources")

    p = sub.add_parser("run", help="run entries on a target and store the results (exit 1 when any failed)")
    add_selection(p, None)
    p.add_argument("--target", help="eager, crucible-triton, crucible-interpret, crucible-sim, crucible-cpp or a Dynamo "
                                    "backend, with options after ':' (default: crucible-triton with CUDA, else "
                                    "crucible-interpret)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="device for eager and Dynamo-backend targets")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="parallel worker processes (default: CPU cores up to 8 on CPU targets, one per GPU on CUDA)")
    p.add_argument("--shard", metavar="i/n", help="run shard i of n (1-based, deterministic)")
    cluster_options(p)
    p.add_argument("--resume", action="store_true", help="continue the latest unfinished matching run")
    p.add_argument("--run-id", help="name the run (shards of one run share an id; merge joins them)")
    p.add_argument("--rerun-failed", metavar="RUN",
                   help="only the entries that failed against the compiler in RUN (an id in --db, FILE.sqlite, "
                        "FILE.sqlite:RUN_ID)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"SQLite results file (default {DEFAULT_DB})")
    p.add_argument("--json", metavar="PATH", help="also export the run as JSON")
    p.add_argument("--limit", type=int, help="run at most N entries")
    p.add_argument("--maxfail", type=int, metavar="N", help="stop starting entries after N failures")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per entry (default 600)")
    p.add_argument("--mem-limit-mb", type=int, default=None,
                   help="address-space limit per entry on CPU targets (default: 80%% of RAM / jobs)")
    p.add_argument("--no-capture", action="store_true", help="skip capture analysis (graphs, breaks, coverage)")
    p.add_argument("--reference", choices=REFERENCE_CHOICES, default="auto",
                   help="where the float64 reference runs: auto (the target's device, CPU if that fails), "
                        "cpu, device, or none (compare with eager only); default auto")
    p.add_argument("--mode", choices=MODES, default="inference",
                   help="inference (default) or train: forward, a seeded scalar loss, backward; "
                        "gradients of inputs and parameters graded too")
    p.add_argument("--dynamic", action="store_true",
                   help="compile with dynamic shapes and grade each entry at several batch sizes")
    p.add_argument("--expected", metavar="FILE",
                   help="expected-results CSV (default: corpus/data/expected/<suite>.<target>.<device>.csv if any)")
    p.add_argument("--update-expected", action="store_true",
                   help="rewrite the expected-results file from this run's results")
    p.add_argument("--strict-xpass", action="store_true",
                   help="an expected failure that now passes (xpass) fails the run, until the file is updated")
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

    from harness.corpus_check import add_parser as add_corpus_parser
    from harness.fuzz.cli import add_fuzz_parser
    from harness.minify.command import add_parser as add_minify_parser
    from harness.mutate.command import add_parser as add_mutate_parser

    add_minify_parser(sub)
    add_fuzz_parser(sub)
    add_mutate_parser(sub)
    add_corpus_parser(sub)
    return parser


def cmd_list(args: argparse.Namespace) -> int:
    _, entries = selected_entries(args)
    if args.summary:
        counts = Counter((e.source, e.tier) for e in entries)
        rows = [[src, *[counts[(src, t)] for t in TIERS], sum(counts[(src, t)] for t in TIERS)]
                for src in sorted({e.source for e in entries})]
        print(tabulate(rows, headers=["source", *TIERS, "total"]))
        return EXIT_OK
    rows = [[e.name, e.tier, e.family, ",".join(sorted(e.tags)), e.dtype,
             "-" if e.expected_graphs is None else e.expected_graphs,
             "-" if e.expected_breaks is None else e.expected_breaks] for e in entries]
    print(tabulate(rows, headers=["entry", "tier", "family", "tags", "dtype", "graphs", "breaks"]))
    return EXIT_OK


def _check_run_settings(args: argparse.Namespace) -> None:
    """Every number, path and environment value of ``crucible run``, before anything runs."""
    from harness.runner import parse_shard
    from harness.validation import environment

    positive("--timeout", args.timeout)
    positive("--limit", args.limit, integer=True)
    positive("--maxfail", args.maxfail, integer=True)
    positive("-j/--jobs", args.jobs, integer=True)
    positive("--mem-limit-mb", args.mem_limit_mb, integer=True)
    if args.shard:
        parse_shard(args.shard)
    check_cluster_settings(args)
    if args.cluster and args.jobs is not None:
        raise UsageError("-j sizes the single-host pool; a --cluster run has the cluster's workers (local:N starts N)")
    for option in ("json", "html", "junit"):
        writable_output(f"--{option}", getattr(args, option))
    if args.expected and not args.update_expected and not Path(args.expected).is_file():
        raise UsageError(f"--expected {args.expected}: no such file (--update-expected writes one)")
    if args.update_expected and args.expected:
        writable_output("--expected", args.expected)
    if args.resume and args.rerun_failed:
        raise UsageError("--resume continues a run and --rerun-failed starts one: give one of them")
    check_usable(args.db)
    environment()


def _rerun_failed(ref: str, db: str, entries: list) -> list:
    run, results = load_run(ref, db)
    failed = {r.name for r in results if r.against_compiler}
    print(f"--rerun-failed {run['id']}: {len(failed)} entries failed there", file=sys.stderr)
    return [e for e in entries if e.name in failed]


def cmd_run(args: argparse.Namespace) -> int:
    from harness import expected as expected_files
    from harness.pool import default_mem_limit
    from harness.runner import RunRequest, RunStopped, execute_run, parse_shard, shard_entries
    from harness.targets import default_target, validate_target

    _check_run_settings(args)
    if args.suite is None:  # naming entries picks them from every tier
        args.suite = "all" if args.entry or args.keyword else "smoke"
    cat, entries = selected_entries(args)
    # after the corpus is listed: an external corpus may register the Dynamo backend it names
    target_name = args.target or default_target()
    target = validate_target(target_name, args.device)
    if cat.duplicates():
        raise UsageError(f"duplicate entry names: {sorted(set(cat.duplicates()))}")
    if args.rerun_failed:
        entries = _rerun_failed(args.rerun_failed, args.db, entries)
        if not entries:
            print(f"--rerun-failed {args.rerun_failed}: no entry failed there; nothing to run", file=sys.stderr)
            return EXIT_OK
    if args.shard:
        index, count = parse_shard(args.shard)
        entries = shard_entries(entries, index, count)
    if args.limit is not None:
        entries = entries[: args.limit]
    if not entries:
        raise UsageError(f"no entries selected from suite {args.suite}" +
                         ("" if args.corpus else " (an external corpus needs --corpus DIR)"))
    gpus: tuple[str, ...] = ()
    if target.device == "cuda":
        from harness.pool import visible_gpus

        gpus = visible_gpus()
    if args.cluster and args.cluster.startswith("local:"):
        args.jobs = int(args.cluster.partition(":")[2])  # for the default memory limit per worker
    if args.jobs is None:  # on CUDA one worker per GPU
        args.jobs = max(1, len(gpus)) if gpus else min(8, os.cpu_count() or 1)
    expected_path = Path(args.expected) if args.expected else expected_files.default_path(
        args.suite, target_name, target.device)
    expected = (expected_files.load(expected_path, args.suite, target_name, target.device)
                if expected_path.is_file() else expected_files.ExpectedResults(args.suite, target_name, target.device))
    where = f"on the cluster {args.cluster}" if args.cluster else f"with {args.jobs} worker(s)"
    print(f"running {len(entries)} entries of suite {args.suite} on {target_name} {where}"
          + (f"; expected results: {expected_path} ({len(expected.rows)} known failures)"
             if expected_path.is_file() else ""), file=sys.stderr)
    request = RunRequest(
        suite=args.suite, target=target_name, entries=entries, catalog=cat, db=args.db, run_id=args.run_id,
        resume=args.resume, jobs=args.jobs, shard=args.shard, timeout_s=args.timeout,
        mem_limit_mb=args.mem_limit_mb if args.mem_limit_mb is not None else default_mem_limit(args.jobs),
        device=args.device, capture=not args.no_capture, reference=args.reference, mode=args.mode,
        dynamic=args.dynamic, gpus=gpus, maxfail=args.maxfail, expected=expected.rows,
        expected_file=str(expected_path) if expected_path.is_file() else None,
        corpus=[str(Path(p).resolve()) for p in args.corpus or []], cluster=args.cluster,
        mixed_versions=args.mixed_versions)
    try:
        outcome = execute_run(request)
    except KeyboardInterrupt:
        print("\ninterrupted: finished entries are stored; continue with --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RunStopped as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    _write_outputs(args, outcome)
    if args.update_expected:
        return _update_expected(expected, expected_path, outcome)
    return _run_status(args, outcome)


def _write_outputs(args: argparse.Namespace, outcome: Any) -> None:
    from harness.report import render_report

    with ResultStore(args.db) as store:
        run = store.run(outcome.run_id)
        if args.json:
            Path(args.json).write_text(json.dumps(export_json(store, outcome.run_id, {r.name for r in outcome.results}),
                                                  indent=1, default=str))
        if args.junit:
            from harness.junit import write_junit

            write_junit(args.junit, run, outcome.results)
        if args.html:
            from harness.html_report import write_html

            write_html(args.html, run, outcome.results, list(store.iter_all()))
        if not args.no_report:
            print(render_report(run, outcome.results))
    print(f"results: {args.db} (run {outcome.run_id})", file=sys.stderr)


def _run_status(args: argparse.Namespace, outcome: Any) -> int:
    """0 when nothing failed against the compiler (expected failures aside), else 1 (and say which)."""
    if outcome.stopped:
        print(outcome.stopped, file=sys.stderr)
    if outcome.missing:
        print(f"FAILED: the count check: {len(outcome.missing)} planned entr{'y has' if len(outcome.missing) == 1 else 'ies have'} "
              f"no result: {', '.join(outcome.missing[:10])}{' ...' if len(outcome.missing) > 10 else ''}; "
              "run them with --resume", file=sys.stderr)
        return EXIT_FAILED
    failures, improved = outcome.failures, outcome.improved
    if improved:
        print(f"{len(improved)} expected failure(s) now pass (xpass): "
              f"{', '.join(r.name for r in improved[:10])}; update the expected file (--update-expected)",
              file=sys.stderr)
    if failures:
        print(f"FAILED: {len(failures)} entr{'y' if len(failures) == 1 else 'ies'} failed against the compiler: "
              f"{', '.join(r.name for r in failures[:10])}{' ...' if len(failures) > 10 else ''}", file=sys.stderr)
        return EXIT_FAILED
    if improved and args.strict_xpass:
        return EXIT_FAILED
    return EXIT_FAILED if outcome.stopped else EXIT_OK


def _update_expected(expected: Any, path: Path, outcome: Any) -> int:
    from harness import expected as expected_files
    from harness.versions import installed_versions

    new, changes = expected_files.updated(expected, outcome.results, installed_versions())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(expected_files.dump(new))
    print(f"expected results written to {path}: {len(new.rows)} known failures"
          + ("".join(f"\n  {c}" for c in changes) if changes else ", unchanged"), file=sys.stderr)
    return EXIT_OK


def load_run(ref: str | None, db: str) -> tuple[dict, list]:
    """Resolve a run reference: a run id in ``db``, ``FILE.sqlite[:RUN_ID]`` or a JSON export."""
    from harness.result import Result

    if ref and ref.endswith(".json") and Path(ref).is_file():
        doc = json.loads(Path(ref).read_text())
        run = dict(doc["run"])
        run.setdefault("metadata", {k: v for k, v in run.items() if k not in ("id", "suite", "target")})
        return run, [Result.from_dict(e) for e in doc["entries"]]
    run_id = ref
    if ref and ".sqlite:" in ref:  # FILE.sqlite:RUN_ID
        stem, _, run_id = ref.partition(".sqlite:")
        db = stem + ".sqlite"
    elif ref and (ref.endswith(".sqlite") or Path(ref).is_file()):  # a database: its latest run
        db, run_id = ref, None
    if not Path(db).exists():
        raise UsageError(f"no results database at {db}")
    with ResultStore(db, read_only=True) as store:
        run = store.run(run_id) if run_id else store.latest_run()
        if run is None:
            raise UsageError(f"no run {run_id!r} in {db}; list them with `crucible report --runs --db {db}`"
                             if run_id else f"no runs in {db}")
        return run, store.results(run["id"])


def _history(ref: str | None, db: str) -> list[tuple[dict, list]]:
    """Every run of the store a report reference points into (none for a JSON export)."""
    if ref and ref.endswith(".json"):
        return []
    if ref and ".sqlite:" in ref:
        db = ref.partition(".sqlite:")[0] + ".sqlite"
    elif ref and (ref.endswith(".sqlite") or Path(ref).is_file()):
        db = ref
    with ResultStore(db, read_only=True) as store:
        return list(store.iter_all())


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import render_report, render_runs

    for option in ("json", "html", "junit"):
        writable_output(f"--{option}", getattr(args, option))
    if args.runs:
        if not Path(args.db).exists():
            raise UsageError(f"no results database at {args.db}")
        with ResultStore(args.db, read_only=True) as store:
            print(render_runs(store.runs()))
        return EXIT_OK
    run, results = load_run(args.run, args.db)
    if run["suite"] in ("fuzz", "fuzz-decomps"):
        from harness.fuzz.report import print_fuzz_report

        return print_fuzz_report(run, args)
    if args.junit:
        from harness.junit import write_junit

        write_junit(args.junit, run, results)
        return EXIT_OK
    if args.html:
        from harness.html_report import write_html

        write_html(args.html, run, results, _history(args.run, args.db))
        return EXIT_OK
    if args.json:
        doc = {"run": {k: v for k, v in run.items() if k != "metadata"} | run.get("metadata", {}),
               "entries": [r.to_dict() for r in results]}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
        return EXIT_OK
    print(render_report(run, results))
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from harness.diff import diff_runs, render_diff

    run_a, results_a = load_run(args.run_a, args.db)
    run_b, results_b = load_run(args.run_b, args.db)
    changes = diff_runs(results_a, results_b)
    print(f"A = {run_a['id']}, B = {run_b['id']}")
    print(render_diff(changes))
    return EXIT_FAILED if any(c.regression for c in changes) else EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.store import merge

    for path in args.inputs:
        if not Path(path).is_file():
            raise UsageError(f"merge: no such file {path} (nothing was merged)")
    writable_output("merge output", args.output)
    with ResultStore(args.output) as out:
        merged = merge(out, args.inputs)
        problems = []
        for run_id, n in merged.items():
            print(f"{run_id}: {n} results")
            problems += [f"{run_id}: {line}" for line in count_check(out.run(run_id), out.finished_names(run_id))]
    if problems:  # each shard ran what it was given, and every shard is here
        print("FAILED: the count check:\n  " + "\n  ".join(problems), file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def count_check(run: dict, names: set[str]) -> list[str]:
    """What a merged run lacks: shards of ``i/n`` that are not among those merged, and planned
    entries without a result (per shard)."""
    from harness.store import missing_entries

    problems = []
    shards = run["metadata"].get("shards") or []
    counts = {shard.partition("/")[2] for shard in shards}
    if len(counts) == 1:
        total = int(counts.pop())
        absent = [f"{i}/{total}" for i in range(1, total + 1) if f"{i}/{total}" not in shards]
        if absent:
            problems.append(f"shard(s) {', '.join(absent)} of {total} not merged")
    for shard, missing in missing_entries(run, names).items():
        problems.append(f"shard {shard}: {len(missing)} planned entries have no result: {', '.join(missing[:10])}"
                        + (" ..." if len(missing) > 10 else ""))
    return problems


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv or ["run"])
        if args.command is None:
            args = _parser().parse_args(["run"])
        from harness.corpus_check import cmd_corpus
        from harness.fuzz.cli import cmd_fuzz, cmd_fuzz_decomps
        from harness.minify.command import cmd_minify
        from harness.mutate.command import cmd_mutate

        commands = {"list": cmd_list, "run": cmd_run, "report": cmd_report, "diff": cmd_diff, "merge": cmd_merge,
                    "fuzz": cmd_fuzz, "fuzz-decomps": cmd_fuzz_decomps, "minify": cmd_minify, "corpus": cmd_corpus, "mutate": cmd_mutate}
        return commands[args.command](args)
    except (StoreError, ValueError) as exc:  # bad settings (UsageError, TargetError, ...), a bad --db
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # `crucible list | head`: the reader left; say nothing more (Python would print a traceback at exit)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
