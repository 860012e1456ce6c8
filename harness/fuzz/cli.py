"""``crucible fuzz`` and ``crucible fuzz-decomps``: arguments, progress line, summary, store."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
import time
import uuid
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from typing import Any

from tabulate import tabulate

from harness.cluster import ClusterError, check_cluster_settings, cluster_options, open_executor
from harness.pool import WorkerConfig
from harness.runner import Progress
from harness.status import Status
from harness.store import DEFAULT_DB, ResultStore, check_usable
from harness.targets import CAPTURES
from harness.validation import UsageError, environment, positive


def add_fuzz_parser(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="differential fuzzing with hypothesis-generated ATen graphs (exit 1 on findings)")
    p.add_argument("--target", help="crucible-cpp, crucible-interpret, crucible-sim (every kernel under the simulator's "
                                    "memory checks), crucible-triton, eager or a Dynamo backend, with options after ':'")
    p.add_argument("--device", choices=("cpu", "cuda"), help="device for Dynamo-backend targets")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="time box for generating graphs (default 60)")
    budget.add_argument("--examples", type=int, help="run exactly N generated graphs")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="N campaigns side by side, one isolated worker each, seeds derived from --seed "
                        "(--examples is split between them; default 1)")
    cluster_options(p)
    p.add_argument("--ops", help="only ops matching these globs, comma-separated (sum, aten.var*, *pool*)")
    p.add_argument("--max-nodes", type=int, default=6, help="ops per graph, at most (default 6)")
    p.add_argument("--shrink-seconds", type=float, default=120.0, help="time box per shrink (default 120)")
    p.add_argument("--max-findings", type=int, help="stop after N new findings (default: run the whole budget)")
    p.add_argument("--no-replay", dest="replay", action="store_false",
                   help="do not re-run the findings stored for this target in --db before generating")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per graph before it is a hang (default 120)")
    p.add_argument("--capture", choices=CAPTURES, default="fx",
                   help="hand graphs to the compiler directly (fx, default) or through torch.compile (dynamo)")
    p.add_argument("--dynamic", action="store_true",
                   help="compile each graph once with symbolic sizes (torch.compile dynamic=True) and run it at "
                        "further sizes drawn from its structure; recompiles and dynamic-only fallbacks are findings")
    p.add_argument("--oracle-tiers", choices=("on", "off"), default="on",
                   help="the exact tier (outputs of exact ops equal eager's bit for bit), the relative check (RMS "
                        "error in ulps) and the bias check "
                        "(default on; off: the tolerance check alone)")
    p.add_argument("--in-process", action="store_true",
                   help="run graphs in this process (no isolation: a crash ends the campaign)")
    p.add_argument("--coverage", action="store_true",
                   help="record the compiler lines the campaign executes; print covered/total per file, the "
                        "lines never executed and the rules no op reaches")
    p.add_argument("--coverage-package", action="append", default=[], metavar="PACKAGE",
                   help="with --coverage: a package (or directory) of the compiler under test to measure "
                        "(repeatable; default for crucible-* targets: compiler)")
    p.add_argument("--coverage-sample", type=int, metavar="N",
                   help="with --coverage: trace 1 generated graph in N, and every graph with an op no traced graph "
                        "had (default 1 on Python 3.12+; 3 on 3.11, where tracing every graph cost 1.4x on crucible-interpret)")
    p.add_argument("--seed-corpus", metavar="NAME",
                   help="mutate the seeds of corpus NAME in --db besides plain generation, and add the graphs "
                        "that reach lines first to it (implies --coverage)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE[:FUNCTION]",
                   help="import MODULE in the worker first, and call FUNCTION of it (a plugin backend, or a "
                        "planted bug in tests)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"SQLite results file (default {DEFAULT_DB})")
    p.add_argument("--run-id", help="name the run (default fuzz-<target>-<seed>-<time>)")
    p.add_argument("--list-ops", action="store_true", help="print the op table and exit")

    p = sub.add_parser("fuzz-decomps", help="check decomposition rules against the ops they replace (exit 1 on findings)")
    p.add_argument("--rule", action="append", metavar="NAME",
                   help="only this rule (repeatable; a RULES name such as torch:aten::_softmax, or core:<op>, globs ok)")
    p.add_argument("--seconds", type=float, help="time box for the whole check (default: no limit)")
    p.add_argument("--examples", type=int, default=30, help="generated inputs per rule (default 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="check rules on N isolated workers (default 1); a rule that crashes or hangs one is its finding")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per rule on a worker before it is a hang (default 600)")
    p.add_argument("--in-process", action="store_true",
                   help="check rules in this process (no isolation: for debugging a rule)")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run-id")
    p.add_argument("--list", action="store_true", help="list the rules checked and exit")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first, here and in the workers (tests use it to plant a broken rule)")


@dataclass
class FuzzProgress(Progress):
    """The run's progress line, in fuzz terms: graphs/s, findings, statuses."""

    summary: Any = None

    def update(self, summary: Any) -> None:
        self.summary = summary
        self._draw()

    def _line(self) -> str:
        s = self.summary
        if s is None:
            return "starting the worker..."
        elapsed = time.monotonic() - self.started
        new = len(s.new_findings)
        replayed = sum(f.replayed is not None for f in s.findings.values())
        statuses = " ".join(f"{k}={v}" for k, v in sorted(s.statuses.items()))
        lines = f" | {len(s.coverage)} lines" if len(s.coverage) else ""
        return (f"{s.graphs} graphs ({s.graphs / max(elapsed, 1e-9):.2f}/s) {elapsed:.0f}s | findings {new}"
                f" new, {replayed} replayed, {len(s.findings) - new - replayed} known{lines} | {statuses}")


def check_imports(imports: list[str]) -> None:
    """Each ``--import MODULE[:FUNCTION]`` names a module that can be found (it is imported in the
    worker, where a missing one would fail every example as a harness error)."""
    for spec in imports:
        module = spec.partition(":")[0]
        try:
            found = bool(module) and importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise UsageError(f"--import {spec}: no module {module!r} to import; check the name and PYTHONPATH")


def coverage_roots(args: argparse.Namespace, target: str) -> tuple[str, ...]:
    """The package roots ``--coverage`` (or ``--seed-corpus``) measures; () when coverage is off."""
    from harness.fuzz.coverage import check_tracer, measured_packages, package_roots

    for option, value in (("--coverage-package", args.coverage_package), ("--coverage-sample", args.coverage_sample)):
        if value and not (args.coverage or args.seed_corpus):
            raise UsageError(f"{option} says how --coverage measures: add --coverage")
    positive("--coverage-sample", args.coverage_sample, integer=True)
    if not (args.coverage or args.seed_corpus):
        return ()
    try:
        check_tracer()
        return package_roots(measured_packages(target, args.coverage_package))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def coverage_sample(args: argparse.Namespace) -> int:
    """1 graph in N traced: as asked, else every graph where the tracer is cheap (sys.monitoring) and
    1 in 3 under coverage.py (tracing every graph cost 1.4x on crucible-interpret, 1 in 3 1.2x: harness/RESULTS.md)."""
    from harness.fuzz.coverage import tracer_kind

    if args.coverage_sample:
        return args.coverage_sample
    return 1 if tracer_kind() == "sys.monitoring" else 3


def _check_fuzz_settings(args: argparse.Namespace) -> str:
    """Every setting of ``crucible fuzz``, before anything runs; the target's name."""
    from harness.fuzz.specs import select_specs
    from harness.targets import default_target, validate_target

    positive("--seconds", args.seconds)
    positive("--examples", args.examples, integer=True)
    positive("--max-nodes", args.max_nodes, integer=True)
    positive("-j/--jobs", args.jobs, integer=True)
    positive("--timeout", args.timeout)
    positive("--shrink-seconds", args.shrink_seconds)
    positive("--max-findings", args.max_findings, integer=True)
    if args.jobs > 1 and args.in_process:
        raise UsageError("--in-process runs one campaign in this process; drop it or -j")
    check_cluster_settings(args)
    if args.cluster and args.in_process:
        raise UsageError("--in-process runs graphs in this process; --cluster runs them on the cluster: give one")
    target = args.target or default_target()
    validate_target(target, args.device)
    select_specs(args.ops)  # a glob matching nothing is a usage error (ValueError)
    check_imports(args.imports)
    coverage_roots(args, target)
    if args.seed_corpus is not None and not args.seed_corpus.strip():
        raise UsageError("--seed-corpus needs a name (any text: the corpus's key in --db)")
    environment()
    check_usable(args.db)
    return target


def cmd_fuzz(args: argparse.Namespace) -> int:
    from harness.fuzz.campaign import CampaignRequest

    if args.list_ops:
        from harness.fuzz.specs import OP_SPECS

        rows = [[s.name, s.family] for s in OP_SPECS.values()]
        print(tabulate(rows, headers=["op", "family"]))
        print(f"{len(rows)} op specs")
        return 0
    target = _check_fuzz_settings(args)
    seconds = args.seconds if args.seconds is not None or args.examples is not None else 60.0
    request = CampaignRequest(target=target, device=args.device, seconds=seconds, examples=args.examples,
                              seed=args.seed, ops=args.ops, max_nodes=args.max_nodes,
                              shrink_seconds=args.shrink_seconds, timeout_s=args.timeout,
                              in_process=args.in_process, max_findings=args.max_findings, capture=args.capture,
                              imports=tuple(args.imports), oracle_tiers=args.oracle_tiers == "on",
                              coverage=coverage_roots(args, target), coverage_sample=coverage_sample(args),
                              dynamic=args.dynamic)
    run_id = args.run_id or f"fuzz-{target}-s{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    return _run_and_store(request, run_id, args.db, args.jobs, args.cluster, args.mixed_versions, args.replay,
                          args.seed_corpus)


def how_found(request: Any, jobs: int = 1, seed_corpus: str | None = None) -> str:
    """The command line of a campaign, shell-quoted (embedded in repros and reports)."""
    words = ["crucible", "fuzz", "--target", request.target, "--seed", str(request.seed)]
    if request.device:
        words += ["--device", request.device]
    if request.ops:
        words += ["--ops", request.ops]
    if request.max_nodes != 6:
        words += ["--max-nodes", str(request.max_nodes)]
    if request.coverage and not seed_corpus:
        words += ["--coverage"]
    if request.capture != "fx":
        words += ["--capture", request.capture]
    if request.dynamic:
        words += ["--dynamic"]
    if not request.oracle_tiers:
        words += ["--oracle-tiers", "off"]
    if request.examples is not None:
        words += ["--examples", str(request.examples)]
    if jobs > 1:
        words += ["-j", str(jobs)]
    for spec in request.imports:
        words += ["--import", spec]
    if seed_corpus:
        words += ["--seed-corpus", seed_corpus]
    return shlex.join(words)


def _run_and_store(request: Any, run_id: str, db: str, jobs: int = 1, cluster: str | None = None,
                   mixed_versions: bool = False, replay: bool = True, seed_corpus: str | None = None) -> int:
    from harness.fuzz.campaign import run_campaign
    from harness.fuzz.coverage_report import coverage_totals, render_coverage
    from harness.fuzz.parallel import run_parallel_campaign
    from harness.fuzz.replay import REPLAY_CAP, stored_findings
    from harness.fuzz.repro import write_repro
    from harness.fuzz.seeds import load_corpus, new_seeds
    from harness.fuzz.workers import WorkerRunner, make_runner
    from harness.runner import run_metadata

    store = ResultStore(db)
    stored = stored_findings(store, request.target, REPLAY_CAP) if replay else None  # before this run's own
    corpus = load_corpus(store, seed_corpus) if seed_corpus else None  # this campaign's input, as it stands now
    request = replace(request, seed_corpus=corpus)
    metadata = run_metadata("fuzz", request.target, request.seed, None, {})
    metadata["fuzz"] = {"ops": request.ops, "examples": request.examples, "seconds": request.seconds,
                        "capture": request.capture, "max_nodes": request.max_nodes, "jobs": jobs,
                        "oracle_tiers": request.oracle_tiers, "dynamic": request.dynamic}
    if corpus is not None:
        metadata["fuzz"]["seed_corpus"] = {"name": corpus.name, "seeds": len(corpus.seeds), "digest": corpus.digest,
                                           "dropped": corpus.dropped}
    store.create_run(run_id, "fuzz", request.target, metadata)
    how = how_found(request, jobs, seed_corpus)

    def save(finding: Any) -> None:
        store.record_finding(run_id, {
            "signature": finding.signature, "kind": "graph", "target": request.target,
            "status": str(finding.status), "op": finding.op, "error": finding.error,
            "error_detail": finding.record.error_detail, "known": finding.known, "hits": finding.hits,
            "nodes": len(finding.graph.nodes), "graph": finding.graph.to_json(),
            "repro": write_repro(finding.graph, request.target, request.device, finding.record, how,
                                  request.oracle_tiers)})

    progress = FuzzProgress(total=0)
    where = ("this process" if request.in_process else f"the cluster {cluster}" if cluster
             else "an isolated worker" if jobs == 1 else f"{jobs} isolated workers")
    print(f"fuzzing {request.target} (seed {request.seed}) in {where}", file=sys.stderr)
    if corpus is not None:
        print(f"seed corpus {corpus.name!r}: {len(corpus.seeds)} seeds (digest {corpus.digest}), "
              f"{len(corpus.lines)} lines reached" + (f"; {corpus.dropped} seeds no longer build, left out"
                                                       if corpus.dropped else ""), file=sys.stderr)
    stats: dict = {}
    try:
        with ExitStack() as stack:
            if cluster:  # every campaign's graphs run on the cluster's workers
                executor = stack.enter_context(open_executor(
                    WorkerConfig(target=request.target, device=request.device, timeout_s=request.timeout_s),
                    cluster, mixed_versions, stats))
                new_runner = lambda: WorkerRunner(executor)  # noqa: E731
            else:
                new_runner = lambda: make_runner(request.target, request.device, request.in_process,  # noqa: E731
                                                 request.timeout_s, None, campaigns=jobs)
            if jobs == 1:
                runner = stack.enter_context(closing(new_runner()))
                summary = run_campaign(request, runner, progress.update, save, replay=stored)
            else:
                summary = run_parallel_campaign(request, jobs, new_runner, progress.update, save, replay=stored)
    except KeyboardInterrupt:
        progress.close()
        print("\ninterrupted: findings so far are stored", file=sys.stderr)
        return 130
    except ClusterError as exc:
        progress.close()
        print(f"error: {exc}; findings so far are stored", file=sys.stderr)
        return 3
    finally:
        progress.close()
    metadata.update(stats)
    for finding in summary.findings.values():  # hit counts and shrunk graphs changed since first saved
        save(finding)
    metadata["fuzz"].update(fuzz_summary(summary))
    coverage_lines = []
    if request.coverage:
        metadata["fuzz"]["coverage"] = coverage_totals(summary.coverage, request.coverage)
        coverage_lines = [f"coverage from {summary.traced} of {summary.graphs} generated graphs (1 in "
                          f"{request.coverage_sample}, and each with an op no traced graph had) and the replays"]
        coverage_lines += render_coverage(summary.coverage, request.coverage, request.target.startswith("crucible"))
    if corpus is not None:
        added = new_seeds(summary.seed_candidates, corpus)
        store.record_seeds(corpus.name, run_id, request.target, added)
        metadata["fuzz"]["seed_corpus"]["added"] = len(added)
        coverage_lines.append(f"seed corpus {corpus.name!r}: {len(added)} graphs added (they reached "
                              f"{sum(n for _, _, n in added)} lines the corpus had not), {len(corpus.seeds) + len(added)} "
                              f"seeds now")
    store.update_metadata(run_id, metadata)
    store.finish_run(run_id)
    store.close()
    print(render_summary(summary))
    if coverage_lines:
        print("\n".join(coverage_lines))
    print(f"results: {db} (run {run_id}); repros: {report_command(run_id, db)} --repro KEY", file=sys.stderr)
    return 1 if summary.open_findings else 0


def report_command(run_id: str, db: str) -> str:
    """``crucible report`` of a run, shell-quoted (the caller appends ``--repro KEY``)."""
    return shlex.join(["crucible", "report", run_id, "--db", db])


def fuzz_summary(summary: Any) -> dict[str, Any]:
    return {"graphs": summary.graphs, "executions": summary.executions, "validity": summary.validity,
            "ops_covered": len(summary.ops_covered), "ops_selected": summary.ops_selected,
            "elapsed_s": summary.elapsed_s, "graphs_per_s": summary.graphs / max(summary.elapsed_s, 1e-9),
            "statuses": dict(summary.statuses), "spec_rejections": summary.spec_rejections,
            "invalid": dict(summary.invalid.most_common(20)), "allowances": dict(summary.allowances),
            "replay": summary.replay.as_dict() if summary.replay is not None else None,
            "dynamic": dict(summary.dynamic), "dynamic_reasons": dict(summary.dynamic_reasons),
            "upstream": dict(summary.upstream.most_common(20))}


def render_summary(summary: Any) -> str:
    s = fuzz_summary(summary)
    lines = [f"ops covered {s['ops_covered']}/{s['ops_selected']}, graphs run {s['graphs']} "
             f"({s['executions']} runs with shrinking), validity {100 * s['validity']:.1f}%, "
             f"{s['graphs_per_s']:.2f} graphs/s over {s['elapsed_s']:.0f}s",
             "statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items()))]
    if s["allowances"]:  # passes the strict RMSE check alone would have failed, or could not judge
        lines.append("passed by an oracle allowance: " + ", ".join(f"{k} {v}" for k, v in sorted(s["allowances"].items())))
    if s["dynamic"]:  # --dynamic: what ran at further sizes, and what the compiler refused with a typed reason
        lines.append("dynamic shapes: " + ", ".join(f"{k} {v}" for k, v in s["dynamic"].items()))
        lines.append("typed dynamic refusals (counted, not findings): " + (", ".join(
            f"{k} {v}" for k, v in sorted(s["dynamic_reasons"].items())) or "none"))
    if s["invalid"]:  # the op specs' gaps: graphs that are not valid by construction
        lines.append("invalid graphs (eager failed), by op and error:\n" +
                     "\n".join(f"  {n:4d}  {what}" for what, n in list(s["invalid"].items())[:8]))
    if s["upstream"]:  # failures of the layers below the target: not findings, worth a look
        lines.append("failing below the target (fail_upstream), by layer, op and error:\n" +
                     "\n".join(f"  {n:4d}  {what}" for what, n in list(s["upstream"].items())[:8]))
    lines += replay_lines(summary.replay)
    if summary.findings:
        rows = [[f.key, f.signature, f.hits, len(f.graph.nodes), f.known or ("REPLAYED" if f.replayed else "NEW")]
                for f in sorted(summary.findings.values(), key=lambda f: (f.known is not None, f.signature))]
        lines.append("findings by signature\n" + tabulate(rows, headers=["key", "signature", "hits", "nodes", "known"]))
    else:
        lines.append("no findings")
    return "\n".join(lines)


def replay_lines(replay: Any) -> list[str]:
    """The summary's lines on the stored findings replayed (``harness.fuzz.replay``)."""
    from harness.fuzz.replay import REPLAY_CAP

    if replay is None:
        return ["stored findings not replayed (--no-replay)"]
    lines = [f"replayed {replay.replayed} stored findings of this target (newest of each signature, at most "
             f"{REPLAY_CAP}) in {replay.seconds:.0f}s: {len(replay.still_failing)} still fail, "
             f"{len(replay.changed)} fail otherwise, {len(replay.fixed)} fixed, {len(replay.not_run)} no longer run"]
    lines += [f"  still fails: {sig}" for sig in replay.still_failing]
    lines += [f"  fails otherwise: {old} -> now {new}" for old, new in replay.changed.items()]
    lines += [f"  fixed: {sig}" for sig in replay.fixed]
    lines += [f"  no longer runs: {sig} ({why})" for sig, why in replay.not_run.items()]
    return lines


@dataclass
class DecompProgress(Progress):
    """rules done / total, cases/s, findings."""

    cases: int = 0
    findings: int = 0
    rule: str = ""

    def advance(self, rule: str, cases: int, findings: int) -> None:
        self.done, self.rule, self.cases, self.findings = self.done + 1, rule, cases, findings
        self._draw()

    def _line(self) -> str:
        elapsed = time.monotonic() - self.started
        return (f"[{self.done}/{self.total} rules] {elapsed:.0f}s {self.cases / max(elapsed, 1e-9):.1f} cases/s "
                f"| findings {self.findings} | {self.rule}")


def _check_decomp_settings(args: argparse.Namespace) -> list[Any]:
    """Every setting of ``crucible fuzz-decomps``, before anything runs; the rules to check. The
    plugins are imported here too: a planted rule must be in the table the rules are chosen from."""
    from harness.fuzz.decomps import select_rules
    from harness.pool import load_plugin

    positive("--examples", args.examples, integer=True)
    positive("-j/--jobs", args.jobs, integer=True)
    positive("--seconds", args.seconds)
    positive("--timeout", args.timeout)
    if args.jobs > 1 and args.in_process:
        raise UsageError("--in-process checks rules in this process; drop it or -j")
    check_imports(args.imports)
    for plugin in args.imports:
        load_plugin(plugin)
    rules = select_rules(args.rule)  # a glob matching no rule is a usage error (ValueError)
    if not args.list:
        environment()
        check_usable(args.db)
        _check_opinfo_samples(rules)
    return rules


def _check_opinfo_samples(rules: list[Any]) -> None:
    """Rules outside the fuzzer's op table take their inputs from OpInfo samples, whose module needs
    ``expecttest``: without it the capture failed with a traceback in the middle of the run."""
    import importlib.util

    from harness.fuzz.specs import OP_SPECS

    sampled = [r for r in rules if str(r.op) not in OP_SPECS]
    if sampled and importlib.util.find_spec("expecttest") is None:
        raise UsageError(f"{len(sampled)} of the chosen rules (e.g. {sampled[0].name}) take their inputs from "
                         f"torch's OpInfo samples, which need the expecttest package: pip install expecttest "
                         f"(it comes with crucible[corpus]), or choose rules of the fuzzer's op table with --rule")


def cmd_fuzz_decomps(args: argparse.Namespace) -> int:
    from harness.fuzz.decomp_campaign import INCOMPARABLE, UNCOVERED, RuleTask
    from harness.fuzz.decomps import reason_kind
    from harness.fuzz.known import match_known
    from harness.fuzz.opinfo_calls import cached_opinfo_calls
    from harness.fuzz.specs import OP_SPECS
    from harness.pool import WorkerConfig, WorkerPool, run_task
    from harness.result import Result
    from harness.runner import run_metadata
    from harness.targets import parse_target

    rules = _check_decomp_settings(args)
    if args.list:
        for r in rules:
            print(f"{r.name}\t{r.op}\t{'op table' if str(r.op) in OP_SPECS else 'OpInfo samples'}")
        return 0
    uncovered_ops = {r.op for r in rules if str(r.op) not in OP_SPECS}
    if uncovered_ops:  # captured once here (a minute when not cached), before the workers load it
        cached_opinfo_calls(uncovered_ops)
    run_id = args.run_id or f"fuzz-decomps-s{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    store = ResultStore(args.db)
    metadata = run_metadata("fuzz-decomps", "decompositions", args.seed, None, {})
    metadata.update(jobs=args.jobs, in_process=args.in_process)
    store.create_run(run_id, "fuzz-decomps", "decompositions", metadata)
    start, deadline = time.monotonic(), time.monotonic() + (args.seconds or float("inf"))
    checked, cases, uncovered, findings, incomparable = 0, 0, [], [], []
    progress = DecompProgress(total=len(rules))

    def record(result: Result) -> None:
        nonlocal checked, cases
        name = result.name.removeprefix("decomp/")
        if result.status == Status.SKIPPED:
            {UNCOVERED: uncovered, INCOMPARABLE: incomparable}.get(result.error or "", []).append(name)
            return
        checked, cases = checked + 1, cases + (result.cases or 0)
        if result.status.failed:  # the rule failed a case, or crashed or hung its worker
            reason = result.error or ""
            sig = f"{result.status} | {name} | {reason_kind(result.status, reason)}"
            known = match_known("decompositions", result.replace(op=name))
            findings.append((sig, known))
            store.record_finding(run_id, {
                "signature": sig, "kind": "decomp", "target": "decompositions", "status": str(result.status),
                "op": name, "error": reason, "error_detail": result.error_detail, "known": known, "hits": 1,
                "nodes": 1, "graph": result.failing_case or "", "repro": result.repro or ""})
        progress.advance(name, cases, len(findings))

    tasks = [RuleTask(f"decomp/{r.name}", r.name, args.examples, args.seed, tuple(args.imports)) for r in rules]
    out_of_time = lambda: time.monotonic() > deadline  # noqa: E731
    where = "this process" if args.in_process else f"{args.jobs} isolated worker{'s' if args.jobs > 1 else ''}"
    print(f"checking {len(rules)} decomposition rules in {where}", file=sys.stderr)
    try:
        if args.in_process:
            target = parse_target("eager")
            for task in tasks:
                if out_of_time():
                    break
                record(run_task(task, target, lambda phase: None))
        else:
            pool = WorkerPool(WorkerConfig(target="eager", timeout_s=args.timeout, jobs=args.jobs), jobs=args.jobs)
            pool.run(tasks, record, stop=out_of_time)
    except KeyboardInterrupt:
        progress.close()
        print("\ninterrupted: findings so far are stored", file=sys.stderr)
        return 130
    finally:
        progress.close()
    metadata["fuzz"] = {"rules": checked, "cases": cases, "uncovered": uncovered, "incomparable": incomparable,
                        "elapsed_s": time.monotonic() - start}
    store.update_metadata(run_id, metadata)
    store.finish_run(run_id)
    store.close()
    print(f"rules checked {checked} of {len(rules)} ({len(uncovered)} without inputs: out=/in-place overloads "
          f"and ops no OpInfo sample reaches; {len(incomparable)} not comparable: random or uninitialized "
          f"outputs), valid cases {cases}, {time.monotonic() - start:.0f}s")
    for sig, known in findings:
        print(f"  {'known: ' + known if known else 'NEW'}  {sig}")
    if not findings:
        print("no findings")
    print(f"results: {args.db} (run {run_id}); repros: {report_command(run_id, args.db)} --repro KEY",
          file=sys.stderr)
    return 1 if any(known is None for _, known in findings) else 0
