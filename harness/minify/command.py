"""``crucible minify``: shrink a failing entry (or a saved graph case) to a minimal repro.

Exit status: 0 when a repro was written, 1 when nothing fails to minimize (the entry passes, or
its failure is outside the captured graphs), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.store import DEFAULT_DB, ResultStore


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
                   help="import MODULE in the minimizer and every check worker (repeatable; see README)")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds of reduction per graph (default 600)")
    p.add_argument("--max-checks", type=int, default=5000, help="predicate checks per graph (default 5000)")
    p.add_argument("--check-timeout", type=float, default=300.0,
                   help="seconds one check may run before it counts as a timeout (default 300)")
    p.add_argument("--no-verify", action="store_true", help="do not run the written repro.py once to confirm it")


def _stored(args: argparse.Namespace) -> tuple[str | None, Any]:
    """(run id, stored Result) of the entry in --db, when there is one."""
    if not Path(args.db).exists():
        if args.run:
            raise ValueError(f"--run {args.run}: no results database at {args.db}")
        return None, None
    with ResultStore(args.db, read_only=True) as store:
        runs = [store.run(args.run)] if args.run else list(reversed(store.runs()))
        if args.run and runs[0] is None:
            raise ValueError(f"no run {args.run!r} in {args.db}; list them with 'crucible report --runs'")
        for run in runs:
            found = [r for r in store.results(run["id"]) if r.name in (args.entry, args.entry.split("/")[-1])
                     or r.name.endswith("/" + args.entry)]
            if found:
                return run["id"], found[0]
    if args.run:
        raise ValueError(f"run {args.run!r} in {args.db} has no entry {args.entry!r}")
    return None, None


def _find_entry(args: argparse.Namespace) -> Any:
    from harness.selection import selected_entries

    ns = argparse.Namespace(suite="all", source=None, tag=None, entry=[args.entry], exclude=None, keyword=None,
                            corpus=args.corpus)
    _, entries = selected_entries(ns)
    if not entries:
        raise ValueError(f"no corpus entry {args.entry!r}; see 'crucible list'")
    return entries[0]


def _progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def cmd_minify(args: argparse.Namespace) -> int:
    from harness.minify.case import load_case
    from harness.minify.check import failed, signature
    from harness.minify.entry_graphs import capture_entry
    from harness.minify.plugins import set_plugins
    from harness.minify.session import MinifyError, minify_case
    from harness.minify.worker import CheckWorker
    from harness.targets import parse_target

    set_plugins(args.plugin)
    out_dir = Path(args.out)
    options = {"time_limit_s": args.time_limit, "max_checks": args.max_checks, "verify": not args.no_verify,
               "progress": _progress}
    if Path(args.entry).is_file():
        case = load_case(args.entry)
        case.target = args.target or case.target
        with CheckWorker(args.check_timeout, parse_target(case.target, args.device).device, case.target) as worker:
            try:
                report = minify_case(case, out_dir, worker=worker, **options)
            except MinifyError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 3
        print(report.summary())
        return 0 if report.repro is not None else 1

    run_id, stored = _stored(args)
    target_name = args.target or (stored.target if stored is not None else None)
    if not target_name:
        print(f"error: no --target given and no run in {args.db} holds {args.entry}", file=sys.stderr)
        return 2
    from harness.minify.entry_graphs import prepare_capture

    prepare_capture()  # before the corpus's modules are loaded (their stand-ins for missing packages)
    entry = _find_entry(args)
    target = parse_target(target_name, args.device)
    if stored is not None:
        print(f"{entry.name}: {stored.status} on {stored.target} in run {run_id}", file=sys.stderr)
    print(f"capturing the ATen graphs of {entry.name} as {target.name} receives them", file=sys.stderr)
    try:
        graphs = capture_entry(entry, target)
    except Exception as exc:  # noqa: BLE001 -- the model's own failure: nothing of the target's to minimize
        from harness.errors import describe_error

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
                reports.append(minify_case(case, out_dir, worker=worker, expected=result,
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
