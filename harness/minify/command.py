"""``crucible minify``: shrink a failing entry (or a saved graph case) to a minimal repro.

Every setting is checked before any work starts (a bad one: a one-line error, exit 2). Exit status:
0 when a repro was written, 1 when nothing fails to minimize (the entry passes, or its failure is
outside the captured graphs), 2 for bad usage, 3 when the minimizer's own check failed.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from harness.store import DEFAULT_DB, ResultStore
from harness.validation import UsageError, corpus_paths, environment, positive


def add_parser(sub: Any) -> None:
    p = sub.add_parser("minify", help="shrink a failing entry or graph case to a minimal standalone repro")
    p.add_argument("entry", metavar="ENTRY", help="an entry name, or a graph case file written by "
                                                  "harness.minify.save_case (a fuzz finding)")
    p.add_argument("--out", required=True, metavar="DIR", help="where repro.py (and its inputs) are written")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("--run", help="the run whose failure to minimize (default: the latest run holding ENTRY)")
    p.add_argument("--target", help="target to minimize on (default: the run's target)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="device for eager and Dynamo-backend targets")
    p.add_argument("--corpus", action="append", metavar="PATH", help="also load an external corpus directory")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE in the minimizer and every check worker (repeatable; see docs/minimizing.md)")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds of reduction per graph (default 600)")
    p.add_argument("--max-checks", type=int, default=5000, help="predicate checks per graph (default 5000)")
    p.add_argument("--check-timeout", type=float, default=300.0,
                   help="seconds one check may run before it counts as a timeout (default 300)")
    p.add_argument("--no-verify", action="store_true", help="do not run the written repro.py once to confirm it")


def output_directory(option: str, path: str) -> None:
    """``path`` is a directory that exists or can be created, and can be written (nothing is created)."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{option} {path}: is a file; give a directory (repro.py is written into it)")
    existing = target
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {path}: {existing} is a file, so the directory cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: {existing} is not writable; choose another directory")


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a module without a spec
        return False


def validate(args: argparse.Namespace) -> None:
    """Every setting of ``crucible minify``, before anything is captured or checked."""
    positive("--time-limit", args.time_limit)
    positive("--max-checks", args.max_checks, integer=True)
    positive("--check-timeout", args.check_timeout)
    output_directory("--out", args.out)
    corpus_paths("--corpus", args.corpus)
    for name in args.plugin:
        if not _importable(name):
            raise UsageError(f"--plugin {name}: no module of that name to import; check the name and PYTHONPATH")
    if args.run and not Path(args.db).exists():
        raise UsageError(f"--run {args.run}: no results database at {args.db}")
    environment()


def _stored(args: argparse.Namespace) -> tuple[str | None, Any]:
    """(run id, stored Result) of the entry in --db, when there is one."""
    if not Path(args.db).exists():
        return None, None
    with ResultStore(args.db, read_only=True) as store:
        runs = [store.run(args.run)] if args.run else list(reversed(store.runs()))
        if args.run and runs[0] is None:
            listing = shlex.join(["crucible", "report", "--runs", "--db", args.db])
            raise UsageError(f"--run {args.run}: no such run in {args.db}; list them with: {listing}")
        for run in runs:
            found = [r for r in store.results(run["id"]) if r.name in (args.entry, args.entry.split("/")[-1])
                     or r.name.endswith("/" + args.entry)]
            if found:
                return run["id"], found[0]
    if args.run:
        raise UsageError(f"--run {args.run}: run in {args.db} has no entry {args.entry!r}")
    return None, None


def _selections(args: argparse.Namespace) -> list[argparse.Namespace]:
    """Where to look for the entry, ``--corpus`` included: only its source where its name says which
    (names are ``<source>/<model>``; listing every source takes seconds), else everything; the
    second selection is for a prefix that names no source."""
    from corpus import SOURCES

    def selection(suite: str, source: str | None) -> argparse.Namespace:
        return argparse.Namespace(suite=suite, source=source, tag=None, entry=None, exclude=None, keyword=None,
                                  corpus=args.corpus)

    prefix = args.entry.split("/", 1)[0] if "/" in args.entry else None
    if prefix in SOURCES:
        return [selection("all", prefix)]
    if prefix and args.corpus:  # an external corpus's source: without the built-in ones
        return [selection(prefix, None), selection("all", None)]
    return [selection("all", None)]


def find_entry(args: argparse.Namespace) -> Any:
    """The corpus entry ENTRY names (a full name, or the part after its source), ``--corpus`` included."""
    from harness.selection import select_by_name, selected_entries

    for selection in _selections(args):
        try:
            _, entries = selected_entries(selection)
        except UsageError:  # the entry's prefix is no source of the external corpora: look everywhere
            continue
        break
    else:
        entries = []
    found = [e for e in entries if e.name == args.entry]
    if not found:
        try:
            found = select_by_name(entries, [args.entry])
        except ValueError:
            found = []
    if len(found) > 1:
        raise UsageError(f"{args.entry!r} names {len(found)} entries ({', '.join(e.name for e in found[:5])}); "
                         f"give the full name")
    if found:
        return found[0]
    names = [e.name for e in entries]
    close = difflib.get_close_matches(args.entry, names, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    listing = shlex.join(["crucible", "list", *[a for path in args.corpus or [] for a in ("--corpus", path)]])
    raise UsageError(f"no corpus entry {args.entry!r}{hint} (list them with: {listing})")


def _progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def cmd_minify(args: argparse.Namespace) -> int:
    from harness.minify.entry_graphs import prepare_capture
    from harness.minify.plugins import set_plugins
    from harness.targets import validate_target

    validate(args)
    set_plugins(args.plugin)  # before the target is validated: a plugin may register its Dynamo backend
    options = {"time_limit_s": args.time_limit, "max_checks": args.max_checks, "verify": not args.no_verify,
               "progress": _progress}
    if Path(args.entry).is_file():
        return _minify_case_file(args, options)
    run_id, stored = _stored(args)
    target_name = args.target or (stored.target if stored is not None else None)
    if not target_name:
        raise UsageError(f"no --target given and no run in {args.db} holds {args.entry}")
    target = validate_target(target_name, args.device)
    prepare_capture()  # before the corpus is loaded: its stand-ins for missing packages break Dynamo's import
    entry = find_entry(args)
    if stored is not None:
        print(f"{entry.name}: {stored.status} on {stored.target} in run {run_id}", file=sys.stderr)
    return _minify_entry(args, entry, target, run_id, options)


def _minify_case_file(args: argparse.Namespace, options: dict[str, Any]) -> int:
    from harness.minify.case import load_case
    from harness.minify.check import case_device
    from harness.minify.session import MinifyError, minify_case
    from harness.minify.worker import CheckWorker
    from harness.targets import validate_target

    case = load_case(args.entry)
    case.target = args.target or case.target
    target = validate_target(case.target, args.device or case_device(case))
    with CheckWorker(args.check_timeout, target.device, case.target) as worker:
        try:
            report = minify_case(case, Path(args.out), worker=worker, **options)
        except MinifyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
    print(report.summary())
    return 0 if report.repro is not None else 1


def _minify_entry(args: argparse.Namespace, entry: Any, target: Any, run_id: str | None,
                  options: dict[str, Any]) -> int:
    from harness.errors import describe_error
    from harness.minify.check import failed, signature
    from harness.minify.entry_graphs import capture_entry
    from harness.minify.session import MinifyError, minify_case
    from harness.minify.worker import CheckWorker

    print(f"capturing the ATen graphs of {entry.name} as {target.name} receives them", file=sys.stderr)
    try:
        graphs = capture_entry(entry, target)
    except Exception as exc:  # noqa: BLE001 -- the model's own failure: nothing of the target's to minimize
        print(f"{entry.name}: building or capturing it failed before any graph reached {target.name}: "
              f"{describe_error(exc)[0]}")
        return 1
    decomposition_fails = graphs.decomposition is not None and not graphs.decomposition.passed
    reports = []
    with CheckWorker(args.check_timeout, target.device, target.name) as worker:
        results = [worker.check(c) for c in graphs.cases]
        failing = [(c, r) for c, r in zip(graphs.cases, results) if failed(r)]
        print(f"{len(graphs.cases)} graph(s), {len(failing)} failing on {target.name}", file=sys.stderr)
        for k, (case, result) in enumerate(failing):
            print(f"minimizing {case.origin}: {signature(result)}", file=sys.stderr)
            try:
                reports.append(minify_case(case, Path(args.out), worker=worker, expected=result,
                                           decomposition_fails=decomposition_fails,
                                           repro_name="repro.py" if k == 0 else f"repro_graph{k}.py", **options))
            except MinifyError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 3
    if not reports:
        if decomposition_fails:
            print(f"{entry.name}: every graph passes on {target.name}, but the decomposed graphs in eager already "
                  f"fail parity ({graphs.decomposition.reason}): stage at fault: decomposition")
        else:
            print(f"{entry.name}: no captured graph fails on {target.name}: nothing to minimize")
        return 1
    for report in reports:
        print(report.summary())
    if run_id is not None:
        with ResultStore(args.db) as store:
            store.record_minimized(run_id, entry.name, reports[0].as_record())
        print(f"linked {entry.name} -> {reports[0].repro} in {args.db} (run {run_id})", file=sys.stderr)
    return 0
