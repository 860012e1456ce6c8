"""``crucible mutate``: arguments, checks before any work, and the mutation score report."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from tabulate import tabulate

from harness.cluster import check_cluster_settings, cluster_options
from harness.mutate.operators import OPERATORS
from harness.validation import UsageError, positive, writable_output


def add_parser(sub: Any) -> None:
    p = sub.add_parser("mutate", help="mutation analysis: plant one bug at a time in a copy of a compiler's sources "
                                      "and fuzz each; print the mutation score and the survivors")
    p.add_argument("--package", default="compiler",
                   help="the importable package (or module) to mutate, e.g. compiler or torch._inductor.lowering "
                        "(default compiler)")
    p.add_argument("--paths", help="only these files, globs relative to the package, comma-separated "
                                   "(lowerings/*,codegen/*)")
    p.add_argument("--campaign", default="fuzz",
                   help="fuzz (crucible fuzz's campaign on each target) or MODULE:FUNCTION, called with a Budget "
                        "and returning failure signatures (default fuzz)")
    p.add_argument("--targets", default="crucible-cpp",
                   help="fuzz targets, comma-separated: a mutant is fuzzed on the first whose baseline reaches "
                        "its line (default crucible-cpp)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float,
                        help="seconds of fuzzing per mutant, on one core (default 120)")
    budget.add_argument("--budget-graphs", type=int, help="graphs generated per mutant instead of seconds")
    p.add_argument("--focus-s", type=float, metavar="SECONDS",
                   help="a second round for each survivor: SECONDS of fuzzing on only the ops whose baseline graphs "
                        "run its lines most reliably (fuzz campaigns; resumes a results file made without it)")
    p.add_argument("--mutants", type=int, default=100, help="mutants to sample from the covered sites (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the campaigns and of the sample (default 0)")
    p.add_argument("--operators", help=f"only these operators, comma-separated ({', '.join(OPERATORS)})")
    p.add_argument("--ops", help="fuzz only ops matching these globs (as crucible fuzz --ops)")
    p.add_argument("--corpus-suite", metavar="SUITE",
                   help="after the fuzz budget, a corpus tier: the entries of SUITE on the mutant's target "
                        "(fuzz campaigns; its time comes on top of the budget)")
    p.add_argument("--corpus-entry", metavar="GLOBS",
                   help="--corpus-suite: only these entries, names or globs, comma-separated")
    p.add_argument("-j", "--jobs", type=int, default=1, help="mutants side by side, one core each (default 1)")
    cluster_options(p)
    p.add_argument("--coverage-file", metavar="FILE",
                   help="the lines to mutate from FILE ({file: [lines]} or coverage.py's JSON report) instead of "
                        "tracing the baseline")
    p.add_argument("--out", default="crucible-mutate.jsonl",
                   help="results file, one JSON line per mutant as it finishes; a rerun with the same settings "
                        "resumes it (default crucible-mutate.jsonl)")
    p.add_argument("--cache", choices=("auto", "warm", "cold"), default="auto",
                   help="each mutant's own kernel cache starts as a copy of the baseline's (warm) or empty (cold); "
                        "auto (default): warm for Crucible's compiler, cold for other packages")
    p.add_argument("--mem-limit-mb", type=int,
                   help="address-space limit of each mutant's process (default: 80%% of RAM / jobs)")
    p.add_argument("--workdir", help="where mutants' copies and caches live while they run (default: the temp dir)")
    p.add_argument("--list", action="store_true", help="print the mutants that would run (after the baseline) and exit")


def _request(args: argparse.Namespace) -> Any:
    from harness.fuzz.specs import select_specs
    from harness.mutate.analysis import MutateRequest
    from harness.targets import validate_target

    positive("--budget-s", args.budget_s)
    positive("--budget-graphs", args.budget_graphs, integer=True)
    positive("--mutants", args.mutants, integer=True)
    positive("--focus-s", args.focus_s)
    if args.focus_s is not None and args.campaign != "fuzz":
        raise UsageError("--focus-s narrows a fuzz campaign to ops; a --campaign MODULE:FUNCTION has none")
    positive("-j/--jobs", args.jobs, integer=True)
    positive("--mem-limit-mb", args.mem_limit_mb, integer=True)
    check_cluster_settings(args)
    if args.cluster and args.jobs != 1:
        raise UsageError("-j sizes the single-host pool; a --cluster run has the cluster's workers")
    operators = tuple(o.strip() for o in args.operators.split(",")) if args.operators else OPERATORS
    unknown = [o for o in operators if o not in OPERATORS]
    if unknown:
        raise UsageError(f"--operators: no operator {', '.join(unknown)}; choose from {', '.join(OPERATORS)}")
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    if args.campaign == "fuzz":
        for target in targets:
            validate_target(target)
        select_specs(args.ops)
        _check_corpus(args)
    elif args.corpus_suite or args.corpus_entry:
        raise UsageError("--corpus-suite is a tier of the fuzz campaign; a --campaign MODULE:FUNCTION runs its own")
    elif ":" not in args.campaign:
        raise UsageError(f"--campaign {args.campaign}: give fuzz or MODULE:FUNCTION")
    else:
        from harness.fuzz.cli import check_imports

        check_imports([args.campaign])
        targets = targets[:1]
    if args.workdir and not __import__("os").path.isdir(args.workdir):
        raise UsageError(f"--workdir {args.workdir}: no such directory")
    writable_output("--out", args.out)
    from harness.pool import default_mem_limit
    from harness.mutate.tasks import package_location

    package_location(args.package)  # an unknown package is a usage error (ValueError)
    seconds = None if args.budget_graphs else (args.budget_s or 120.0)
    return MutateRequest(package=args.package, paths=tuple(p.strip() for p in (args.paths or "").split(",") if p.strip()),
                         campaign=args.campaign, targets=targets, seed=args.seed, seconds=seconds,
                         graphs=args.budget_graphs, mutants=args.mutants, operators=operators, ops=args.ops,
                         corpus_suite=args.corpus_suite, corpus_entries=_entries(args),
                         jobs=args.jobs, cluster=args.cluster, mixed_versions=args.mixed_versions,
                         coverage_file=args.coverage_file, out=args.out, workdir=args.workdir, cache=_cache(args),
                         focus_s=args.focus_s,
                         mem_limit_mb=args.mem_limit_mb if args.mem_limit_mb is not None else default_mem_limit(args.jobs))


def _cache(args: argparse.Namespace) -> str:
    """``--cache auto``: warm only for Crucible's compiler, whose disk caches are keyed by the generated
    kernel's source (a kernel the mutation changed misses). Another compiler's may be keyed by its
    installed sources (Inductor's FX graph cache hashes torch/_inductor), which a mutant's copy does
    not change: a warm copy would hand the mutant the baseline's compiled graphs."""
    if args.cache != "auto":
        return args.cache
    return "warm" if args.package == "compiler" or args.package.startswith("compiler.") else "cold"


def _entries(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(e.strip() for e in (args.corpus_entry or "").split(",") if e.strip())


def _check_corpus(args: argparse.Namespace) -> None:
    """--corpus-suite names a suite, and --corpus-entry globs match entries of it."""
    if args.corpus_entry and not args.corpus_suite:
        raise UsageError("--corpus-entry chooses entries of --corpus-suite; give the suite too")
    if not args.corpus_suite:
        return
    from corpus.registry import catalog, select
    from harness.selection import select_by_name

    try:
        entries = select(catalog().entries, args.corpus_suite)
    except KeyError as exc:
        raise UsageError(f"--corpus-suite: {exc.args[0]}") from None
    chosen = select_by_name(entries, list(_entries(args)) or None, where=f"suite {args.corpus_suite}")
    if not chosen:
        raise UsageError(f"--corpus-suite {args.corpus_suite}: no entries to run")


def cmd_mutate(args: argparse.Namespace) -> int:
    from harness.mutate.analysis import run_analysis

    request = _request(args)
    try:
        summary = run_analysis(request, log=lambda line: print(line, file=sys.stderr, flush=True),
                               list_only=args.list)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the verdicts so far are in {args.out}; the same command resumes", file=sys.stderr)
        return 130
    if args.list:
        for mutant, target in summary["chosen"]:
            print(f"{mutant.id} {mutant.file}:{mutant.line} {mutant.operator} ({target}): "
                  f"{mutant.original!r} -> {mutant.replacement!r}")
        return 0
    print(render(summary))
    return 0


# how a mutant was killed, by the status of its result (harness.mutate.tasks)
_KILLED_BY = {"fail_run": "a failure", "timeout": "a hang", "crash": "a crash", "fail_compile": "no campaign (import failed)"}


def counts_first(records: list[dict]) -> str:
    """The score before the focused round (its kills counted as survivors), CPU targets."""
    cpu = [r for r in records if not r["gpu_only"] and r["verdict"] in ("killed", "survived")]
    killed = sum(r["verdict"] == "killed" and "focus" not in r for r in cpu)
    return f"{100 * killed / len(cpu):.1f}%, {killed} of {len(cpu)}" if cpu else "n/a"


def render(summary: dict) -> str:
    records = summary["records"]
    lines = []
    for label, chosen in (("", [r for r in records if not r["gpu_only"]]),
                          ("GPU-only code ", [r for r in records if r["gpu_only"]])):
        counts = Counter(r["verdict"] for r in chosen)
        judged = counts["killed"] + counts["survived"]
        if chosen or not label:
            score = f"{100 * counts['killed'] / judged:.1f}%" if judged else "n/a"
            lines.append(f"{label}mutation score {score}: {counts['killed']} killed, {counts['survived']} survived"
                         f" of {judged} mutants" + (f" ({counts['error']} harness errors, not counted)"
                                                   if counts["error"] else ""))
    rows = []
    for operator in OPERATORS:
        mine = [r for r in records if r["operator"] == operator]
        if mine:
            killed = sum(r["verdict"] == "killed" for r in mine)
            rows.append([operator, len(mine), killed, sum(r["verdict"] == "survived" for r in mine)])
    if rows:
        lines.append(tabulate(rows, headers=["operator", "mutants", "killed", "survived"]))
    focused = [r for r in records if "focus" in r]
    if focused:
        killed = sum(r["verdict"] == "killed" for r in focused)
        lines.append(f"focused round: {killed} of {len(focused)} first-round survivors killed by "
                     f"{focused[0]['focus']['seconds']:g}s on the ops that reach their lines "
                     f"(first round alone: {counts_first(records)})")
    how = Counter(_KILLED_BY.get(r["status"], r["status"]) for r in records if r["verdict"] == "killed")
    if how:
        lines.append("killed by: " + ", ".join(f"{k} {v}" for k, v in how.most_common()))
    timed = [r for r in records if r.get("campaign_s") is not None]
    if timed:
        mean = lambda key: sum(r[key] or 0 for r in timed) / len(timed)  # noqa: E731
        fuzz = any(r["graphs"] for r in timed)  # a fuzz campaign (a MODULE:FUNCTION one counts no graphs)
        lines.append(f"per mutant: copying sources {mean('copy_s'):.2f}s, child start (imports) {mean('import_s'):.1f}s,"
                     f" campaign {mean('campaign_s'):.1f}s"
                     + (f" ({timed[0].get('cache', 'cold')} kernel cache)" if fuzz else "")
                     + f", {mean('wall_s'):.1f}s wall"
                     + (f" (with the killing graph's check on the unmutated compiler); {mean('graphs'):.0f} graphs run"
                        if fuzz else ""))
    for target, base in summary["baselines"].items():
        lines.append(f"baseline {target}: {base['graphs'] if base['graphs'] is not None else '-'} graphs in {base['seconds']:.0f}s (traced, cold cache), "
                     f"{len(base['signatures'])} failure signatures not counted as kills")
    unreached = summary["reach"]["unreached"]
    if unreached:
        top = sorted(unreached.items(), key=lambda item: -item[1])
        lines.append(f"not mutated: {sum(unreached.values())} sites on lines no baseline reached (GPU-only or "
                     f"unreached code); most in " + ", ".join(f"{f} {n}" for f, n in top[:8])
                     + (f" and {len(top) - 8} more files" if len(top) > 8 else ""))
    survivors = [r for r in records if r["verdict"] == "survived"]
    if survivors:
        lines.append(f"surviving mutants ({len(survivors)}):")
        for r in sorted(survivors, key=lambda r: (r["file"], r["line"])):
            focus = (f"; focused: {r['focus']['graphs'] or 0} graphs on {', '.join(r['focus']['ops'])}"
                     if "focus" in r else "")
            lines.append(f"  {r['id']} {r['file']}:{r['line']} {r['operator']} on {r['target']} "
                         f"({r['graphs'] or 0} graphs{focus})\n" + "\n".join("    " + x for x in r["diff"].splitlines()))
    lines.append(f"results: {summary['out']} (this session: {summary['wall_s']:.0f}s wall)")
    return "\n".join(lines)
