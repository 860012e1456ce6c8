"""A fuzz campaign: hypothesis draws graphs, a worker judges them, failures shrink and dedupe.

Each graph is a task (``harness.fuzz.tasks``) the runner (``harness.fuzz.workers``) hands to the
execution engine; its ``Result`` is a failure when it is one of the compiler under test
(``Result.against_compiler``); a graph eager cannot run (or that dies in eager) is invalid, never
a finding.

Hypothesis runs in rounds of ``ROUND_EXAMPLES`` examples, round ``i`` seeded with
``(seed, i)``, until the example budget or the time box is spent: a campaign is deterministic
for a given seed, example count and installed versions. In a round, the first failure whose
signature is new is raised to hypothesis, which shrinks it; while shrinking, only candidates
failing with the *same* signature count as failing (no slipping onto another bug), and the
shrink phase is time-boxed. Before a failure is shrunk it is triaged: an accuracy failure is
localized (the first diverging op, one more compile), a compile, run or memory error charged to the
last node of the shortest prefix that fails the same way (bisection), and when its signature, raw or
localized, is a finding of this campaign, another campaign's, or on the known list
(``harness.fuzz.known``), it counts as a hit and is not shrunk: the shrink budget goes to new
failures only. After shrinking, the minimal graph is localized and the final signature decides
whether it is new.

Signature = (status, the op the failure is charged to, the error kind): the exception type for
errors, the oracle's criterion (NaN positions, integer values, RMSE, ...) for accuracy failures.

With ``coverage`` (package roots) the replayed graphs and the sampled generated graphs (``_sampled``)
run under the worker's tracer and report the lines of the compiler they executed first in the
campaign (``harness.fuzz.coverage``); the summary merges them, and a generated graph that reached
lines neither the seed corpus nor an earlier graph had is remembered as a new seed. With a seed
corpus (``harness.fuzz.seeds``, an input of the campaign) examples are drawn from plain generation
and from mutations of the seeds.

Before the first round, the findings the results file holds for the target are replayed
(``harness.fuzz.replay``): each stored graph runs once and is triaged like a generated failure; one
failing with its stored signature is a hit of that signature (a finding of this campaign too, never
shrunk again), one failing otherwise is a finding under its new signature, one passing is fixed.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed

from harness.fuzz.builder import GraphLimits
from harness.fuzz.coverage import CoverageMap
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.known import match_known
from harness.fuzz.replay import ReplayOutcome, StoredFinding
from harness.fuzz.seeds import SeedCorpus, corpus_graphs
from harness.fuzz.sizes import target_blocks
from harness.fuzz.specs import select_specs
from harness.fuzz.subject import blamed_op
from harness.fuzz.tasks import GraphTask, LocalizeTask
from harness.result import Result
from harness.status import Status

ROUND_EXAMPLES = 40
# failures charged to the last node of the shortest prefix failing the same way
ERRORS = (Status.FAIL_COMPILE, Status.FAIL_RUN, Status.FAIL_MEMORY)


def error_kind(result: Result) -> str:
    """The error part of a signature: what went wrong, without the values."""
    error = result.error or ""
    if result.status == Status.FAIL_ACCURACY:
        for marker, kind in (("NaN positions", "nan_positions"), ("Inf positions", "inf_positions"),
                             ("integer/bool values", "integer_values"), ("shape differs", "shape"),
                             ("dtype differs", "dtype"), ("structure differs", "structure"),
                             ("RMSE", "rmse"), ("cosine", "cosine"), ("exact tier", "exact"), ("biased", "bias"),
                             ("relative error", "relative")):
            if marker in error:
                return kind
        return "accuracy"
    if result.status in (Status.TIMEOUT, Status.OOM):
        return result.status.value
    if result.status == Status.CRASH:
        return error.split(" during ")[0].removeprefix("worker died from ")
    return error.split(":")[0].strip() or "error"


def signature(result: Result) -> str:
    return f"{result.status} | {result.op or '?'} | {error_kind(result)}"


@dataclass
class Finding:
    signature: str
    status: str
    op: str
    error: str
    graph: FuzzGraph
    record: Result
    hits: int = 1
    known: str | None = None  # the documented reason when it matches harness.fuzz.known
    replayed: str | None = None  # the run that stored it, when this campaign found it by replaying it

    @property
    def key(self) -> str:
        return hashlib.sha1(self.signature.encode()).hexdigest()[:10]


@dataclass
class CampaignRequest:
    target: str
    device: str | None = None
    seconds: float | None = None
    examples: int | None = None
    seed: int = 0
    ops: str | None = None
    max_nodes: int = 6
    shrink_seconds: float = 120.0
    timeout_s: float = 120.0
    mem_limit_mb: int | None = None
    in_process: bool = False
    max_findings: int | None = None  # stop once this many new (not known) findings are in
    capture: str = "fx"  # harness.targets.CAPTURES
    imports: tuple[str, ...] = ()
    oracle_tiers: bool = True  # the exact tier, relative and bias checks (harness.fuzz.subject.compare_outputs)
    coverage: tuple[str, ...] = ()  # package roots whose executed lines are recorded (harness.fuzz.coverage)
    coverage_session: str = ""  # set by run_campaign: the workers report lines per campaign
    coverage_sample: int = 1  # trace 1 generated graph in N, and every graph with an op none traced had
    seed_corpus: SeedCorpus | None = None  # seeds mutated besides plain generation (harness.fuzz.seeds)
    dynamic: bool = False  # compile each graph with symbolic sizes and run it at further sizes


@dataclass
class CampaignSummary:
    graphs: int = 0  # examples generated and run (shrink runs excluded)
    executions: int = 0  # every run, shrink runs included
    statuses: Counter = field(default_factory=Counter)
    ops_covered: set = field(default_factory=set)
    ops_selected: int = 0
    spec_rejections: int = 0
    findings: dict[str, Finding] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # signature -> hits of failures another campaign of a ``-j`` run found first (harness.fuzz.parallel)
    foreign_hits: Counter = field(default_factory=Counter)
    # "op | error" -> graphs eager could not run (or ran twice differently, or died running them):
    # what costs validity; one count per invalid graph
    invalid: Counter = field(default_factory=Counter)
    # "layer | op | error" -> graphs failing in a layer below the target (fail_upstream: Dynamo's capture
    # or AOTAutograd fail the same way on their own backends): never findings, shown in the summary
    upstream: Counter = field(default_factory=Counter)
    # graphs the oracle passed by an allowance (``harness.fuzz.subject.compare_outputs``): "rounding
    # spread" (within the rounding-noise references' error), "float64 order-dependent" (outputs
    # not compared): shown in the summary, so a campaign says how much it could not judge strictly
    allowances: Counter = field(default_factory=Counter)
    # the stored findings replayed before generating (harness.fuzz.replay); None: replay was off
    replay: ReplayOutcome | None = None
    # with coverage: the lines every run executed, and (graph JSON, the lines it reached first) of each
    # generated graph that reached lines neither the seed corpus nor an earlier graph had
    coverage: CoverageMap = field(default_factory=CoverageMap)
    seed_candidates: list = field(default_factory=list)
    traced: int = 0  # generated graphs run under the tracer (all of them unless sampled)
    traced_ops: set = field(default_factory=set)
    # --dynamic: graphs with further calls, the calls run and dropped, recompiles (``dynamic_counts``)
    dynamic: Counter = field(default_factory=Counter)
    # --dynamic: typed refusals, "fallback dynamic_unsupported: feature" or "extern symbolic_size: op"
    dynamic_reasons: Counter = field(default_factory=Counter)

    @property
    def valid(self) -> int:
        return self.graphs - sum(self.invalid.values())

    @property
    def validity(self) -> float:
        return self.valid / self.graphs if self.graphs else 1.0

    @property
    def new_findings(self) -> list[Finding]:
        """Findings generation made that are not on the known list."""
        return [f for f in self.findings.values() if f.known is None and f.replayed is None]

    @property
    def open_findings(self) -> list[Finding]:
        """Findings not on the known list: the new ones and stored ones that still fail (the exit status)."""
        return [f for f in self.findings.values() if f.known is None]


def allowances(result: Result) -> list[str]:
    """The oracle allowances a passing result used."""
    return sorted(result.allowances or {})


def count_dynamic(summary: CampaignSummary, record: Result, graph: FuzzGraph) -> None:
    """A --dynamic graph's share of the summary: further calls run, sizes dropped, recompiles, and the
    typed refusals (``dynamic_unsupported`` fallbacks, ``symbolic_size`` extern calls) by reason."""
    from harness.fuzz.dynamic_run import TYPED_REASONS

    summary.dynamic["graphs with further calls"] += 1
    summary.dynamic["further calls"] += len(graph.calls)
    rows = record.sizes or []
    summary.dynamic["further calls graded"] += max(0, len(rows) - 1)
    summary.dynamic["further calls eager could not run"] += (record.dynamic_note or "").count("eager fails")
    summary.dynamic["recompiles"] += record.recompiles or 0
    for fallback in record.fallbacks or []:
        if fallback.get("reason") in TYPED_REASONS:
            feature = (fallback.get("message") or "").removeprefix("DynamicUnsupported: ").split(":")[0]
            summary.dynamic_reasons[f"fallback {fallback['reason']}: {feature}"] += 1
    for extern in record.extern_ops or []:
        if extern.get("reason") in TYPED_REASONS:
            summary.dynamic_reasons[f"extern {extern['reason']}: {extern['op']}"] += extern.get("calls", 1)


class _Found(Exception):
    """Raised to hypothesis for a failing example (one class: signatures are tracked by us)."""

    def __init__(self, record: Result, graph: FuzzGraph) -> None:
        super().__init__(signature(record))
        self.record, self.graph = record, graph


def _graph_task(graph: FuzzGraph, request: CampaignRequest, traced: bool = False) -> GraphTask:
    """A graph's task; ``traced``: under the coverage tracer (the re-runs of triage and shrinking are not:
    they run the graph that was, or parts of it)."""
    return GraphTask.of(graph, request.capture, request.imports, request.oracle_tiers,
                        request.coverage if traced else (), request.coverage_session)


def _localize_task(graph: FuzzGraph, request: CampaignRequest) -> LocalizeTask:
    return LocalizeTask.of(graph, request.capture, request.imports, request.oracle_tiers)


def _sampled(graph: FuzzGraph, request: CampaignRequest, summary: CampaignSummary) -> bool:
    """Whether a generated graph runs under the tracer: with coverage, 1 graph in ``coverage_sample``
    and every graph with an op no traced graph had (on Python 3.11 tracing every graph cost 1.4x on
    crucible-interpret; harness.bench.fuzz_coverage)."""
    if not request.coverage:
        return False
    ops = set(graph.ops)
    if summary.graphs % request.coverage_sample and ops <= summary.traced_ops:
        return False
    summary.traced += 1
    summary.traced_ops |= ops
    return True


def _run(task: Any, runner: Any, summary: CampaignSummary, graph: FuzzGraph | None = None) -> Result:
    """Run one task; with coverage, merge the lines it reached, and keep a generated ``graph``
    that reached lines first (``harness.fuzz.seeds.new_seeds`` then leaves out what the corpus had)."""
    record = runner.run(task)
    summary.executions += 1
    if record.covered:
        lines = CoverageMap.from_json(record.covered)
        new = summary.coverage.merge(lines)
        if graph is not None and len(new):
            summary.seed_candidates.append((graph.to_json(), new))
    return record


def run_campaign(request: CampaignRequest, runner: Any,
                 on_progress: Callable[[CampaignSummary], None] = lambda s: None,
                 on_finding: Callable[[Finding], None] = lambda f: None,
                 claim: Callable[[Finding], bool] = lambda f: True,
                 should_stop: Callable[[], bool] = lambda: False,
                 found_elsewhere: Callable[[str], bool] = lambda sig: False,
                 replay: list[StoredFinding] | None = None,
                 on_graph: Callable[[FuzzGraph], None] = lambda graph: None) -> CampaignSummary:
    """Fuzz ``request.target`` through ``runner`` (``harness.fuzz.workers``) until the budget is spent.

    ``claim``, ``found_elsewhere`` and ``should_stop`` let campaigns run side by side
    (``harness.fuzz.parallel``): ``claim(finding)`` is False when another campaign found that
    signature first, and a failure whose signature is ``found_elsewhere`` is not shrunk here:
    both count as hits of the other campaign's finding; ``should_stop()`` ends the campaign.
    ``replay``: stored findings to re-run first (``harness.fuzz.replay``); None when replay is off.
    ``on_graph(graph)``: after each generated graph ran (not the shrinker's)."""
    foreign: set[str] = set()
    if request.seconds is None and request.examples is None:
        raise ValueError("give a budget: seconds or examples")
    if request.coverage and not request.coverage_session:
        request = replace(request, coverage_session=uuid.uuid4().hex)
    specs = select_specs(request.ops)
    limits = GraphLimits(max_nodes=request.max_nodes, blocks=target_blocks(request.target), dynamic=request.dynamic)
    summary = CampaignSummary(ops_selected=len(specs))
    if replay is not None:
        summary.replay = _replay(replay, request, runner, summary, on_finding, claim, foreign)
        on_progress(summary)
    start = time.monotonic()
    stop_at = start + request.seconds if request.seconds is not None else float("inf")

    def budget_left() -> bool:
        under_count = request.examples is None or summary.graphs < request.examples
        enough = request.max_findings is not None and len(summary.new_findings) >= request.max_findings
        return under_count and not enough and not should_stop() and time.monotonic() < stop_at

    round_index = 0
    while budget_left():
        # failed: graph JSON -> record of every example that failed with the target signature, so
        # hypothesis's final replay of the minimal example never depends on the time box.
        state: dict[str, Any] = {"target": None, "shrink_until": 0.0, "failed": {}, "best": None}

        @settings(max_examples=ROUND_EXAMPLES, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                  phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False)
        @hypothesis_seed(request.seed * 1_000_003 + round_index)
        @given(corpus_graphs(specs, limits, request.seed_corpus))
        def check(graph: FuzzGraph) -> None:
            shrinking = state["target"] is not None
            if shrinking and graph.to_json() in state["failed"]:
                _fail_example(state["failed"][graph.to_json()], graph)
            if shrinking and time.monotonic() > state["shrink_until"]:
                return  # shrink time box spent: the smallest failing graph so far stands
            if not shrinking and not budget_left():
                return
            traced = not shrinking and _sampled(graph, request, summary)
            record = _run(_graph_task(graph, request, traced), runner, summary, None if shrinking else graph)
            if not shrinking:
                summary.graphs += 1
                summary.statuses[record.status] += 1
                if record.status.passed:
                    summary.allowances.update(allowances(record))
                if graph.dynamic:
                    count_dynamic(summary, record, graph)
                if _invalid(record):
                    error = str(record.error or record.status).splitlines()[0]
                    summary.invalid[f"{blamed_op(graph, error)} | {error[:120]}"] += 1
                if record.status == Status.FAIL_UPSTREAM:  # no finding, but what the layers below break on
                    error = str(record.error or "").splitlines()[0] if record.error else "?"
                    summary.upstream[f"{record.failing_layer} | {blamed_op(graph, error)} | {error[:120]}"] += 1
                summary.ops_covered.update(graph.ops)
                summary.spec_rejections += len(getattr(graph, "rejected", []))
                on_graph(graph)
                on_progress(summary)
            if not record.against_compiler:
                return
            sig = signature(record)
            if shrinking:
                if sig == state["target"]:
                    _remember(state, record, graph)
                    _fail_example(record, graph)
                return
            if _seen(sig, summary, foreign, found_elsewhere):
                return
            triaged = _localized(record, graph, request, runner, summary)
            tsig = signature(triaged)
            if tsig != sig and _seen(tsig, summary, foreign, found_elsewhere):
                return  # the root cause, once localized, is a finding this campaign already has
            known = match_known(request.target, triaged)
            if known is not None:  # documented upstream finding: counted, never shrunk
                finding = Finding(tsig, triaged.status, triaged.op or "?", triaged.error or "", graph, triaged,
                                  known=known)
                _report(finding, summary, on_finding, claim, foreign)
                return
            state.update(target=sig, shrink_until=time.monotonic() + request.shrink_seconds)
            _remember(state, record, graph)
            _fail_example(record, graph)

        try:
            check()
        except _Found as found:
            _conclude(found, request, runner, summary, on_finding, claim, foreign)
        except Exception:  # hypothesis's own complaint (flaky replay, ...): keep the smallest failure
            if state["best"] is None:
                raise
            _conclude(_Found(*state["best"]), request, runner, summary, on_finding, claim, foreign)
        round_index += 1
        on_progress(summary)
    summary.elapsed_s = time.monotonic() - start
    return summary


def _replay(stored: list[StoredFinding], request: CampaignRequest, runner: Any, summary: CampaignSummary,
            on_finding: Callable[[Finding], None], claim: Callable[[Finding], bool],
            foreign: set[str]) -> ReplayOutcome:
    """Run each stored finding's graph once, triage a failure as a generated one is triaged, and
    record it as a finding of this campaign (not shrunk: the stored graph was)."""
    outcome = ReplayOutcome(replayed=len(stored))
    start = time.monotonic()
    for item in stored:
        graph = FuzzGraph.from_json(item.graph)
        record = _run(_graph_task(graph, request, traced=bool(request.coverage)), runner, summary)
        if not record.against_compiler:
            if record.status.passed:
                outcome.fixed.append(item.signature)
            else:  # eager cannot run it any more (an op's contract changed), or it is skipped here
                outcome.not_run[item.signature] = f"{record.status}: {(record.error or '').splitlines()[0][:120]}"
            continue
        record = _localized(record, graph, request, runner, summary)
        sig = signature(record)
        if sig == item.signature:
            outcome.still_failing.append(sig)
        else:
            outcome.changed[item.signature] = sig
        if _seen(sig, summary, foreign, lambda s: False):
            continue
        finding = Finding(sig, record.status, record.op or "?", record.error or "", graph, record,
                          known=match_known(request.target, record), replayed=item.run_id)
        _report(finding, summary, on_finding, claim, foreign)
    outcome.seconds = time.monotonic() - start
    return outcome


def _invalid(result: Result) -> bool:
    """A graph that is not a valid example: eager could not run it (or ran it twice differently, or
    died running it); a skipped one (a target this machine lacks) is neither valid nor invalid, and
    one failing in a layer below the target (``fail_upstream``) is valid, but no finding."""
    return not result.counts and result.status not in (Status.SKIPPED, Status.FAIL_UPSTREAM)


def _seen(sig: str, summary: CampaignSummary, foreign: set[str], found_elsewhere: Callable[[str], bool]) -> bool:
    """Count a hit and say True when ``sig`` is a finding already: this campaign's or another's."""
    if sig in summary.findings:
        summary.findings[sig].hits += 1
        return True
    if sig in foreign or found_elsewhere(sig):
        foreign.add(sig)
        summary.foreign_hits[sig] += 1
        return True
    return False


def _localized(record: Result, graph: FuzzGraph, request: CampaignRequest, runner: Any,
               summary: CampaignSummary) -> Result:
    """``record`` charged to the first diverging op of ``graph`` (one more compile, of the graph
    with every intermediate an output), for accuracy failures of graphs of several nodes; else
    ``record``. Dedupe and the known list look at this before shrinking, so a failure that is
    known or already found costs one compile, not a shrink."""
    if record.status in ERRORS and len(graph.nodes) > 1 and not record.prefix:
        return _error_localized(record, graph, request, runner, summary)
    if record.status != Status.FAIL_ACCURACY or len(graph.nodes) <= 1 or record.diverged:
        return record
    found = _run(_localize_task(graph, request), runner, summary)
    if found.status != Status.FAIL_ACCURACY or not found.op:
        return record  # no intermediate diverges (the failure needs the fusion) or the run failed
    return record.replace(op=found.op, diverged=found.diverged or "")


def _error_localized(record: Result, graph: FuzzGraph, request: CampaignRequest, runner: Any,
                     summary: CampaignSummary) -> Result:
    """A compile or run error charged to the last node of the shortest prefix of ``graph`` (every
    value an output) that fails the same way: bisection, a few runs; the error text seldom names
    the op whose kernel failed (a Triton CompilationError names none). ``record`` when no prefix
    fails alone (the error needs a later node)."""
    want = (record.status, error_kind(record))
    low, high, found = 1, len(graph.nodes), None  # the shortest failing prefix is in [low, high]
    while low <= high:
        mid = (low + high) // 2
        got = _run(_graph_task(graph.prefix(mid), request), runner, summary)
        if (got.status, error_kind(got)) == want:
            found, high = mid, mid - 1
        else:
            low = mid + 1
    if found is None:
        return record
    return record.replace(op=graph.nodes[found - 1].op, prefix=found)


def _pruned(graph: FuzzGraph, record: Result, request: CampaignRequest, runner: Any,
            summary: CampaignSummary) -> tuple[FuzzGraph, Result]:
    """(graph, record) cut down to the nodes and inputs the failure needs, when the cut graph fails
    with the same signature (one run per try). Hypothesis shrinks values and drops the nodes at
    the end of the list; an unrelated node before the failing one (an exp beside a batch norm, three
    in a 6-node fmod repro) stayed. Tries, smallest first: the diverging value alone, the failing
    output alone, the last node of the shortest failing prefix alone."""
    names: list[list[str]] = []
    for text in (record.diverged, record.error):
        name = (text or "").split(":")[0].strip()
        if name and any(name in n.outputs for n in graph.nodes):
            names.append([name])
    if record.prefix:
        names.append(list(graph.nodes[record.prefix - 1].outputs))
    want = signature(record)
    for outputs in names:
        cut = graph.pruned(outputs)
        if len(cut.nodes) >= len(graph.nodes) and len(cut.inputs) >= len(graph.inputs):
            continue
        got = _run(_graph_task(cut, request), runner, summary)
        if not got.against_compiler:
            continue
        got = _localized(got, cut, request, runner, summary)
        if signature(got) == want:
            return cut, got
    return graph, record


def _fail_example(record: Result, graph: FuzzGraph) -> None:
    # One raise site: hypothesis tells bugs apart by where they are raised, and a second site
    # would make it call the replay of a cached failure a different (flaky) bug.
    raise _Found(record, graph)


def _remember(state: dict[str, Any], record: Result, graph: FuzzGraph) -> None:
    state["failed"][graph.to_json()] = record
    best = state["best"]
    if best is None or len(graph.nodes) <= len(best[1].nodes):
        state["best"] = (record, graph)


def _conclude(found: _Found, request: CampaignRequest, runner: Any, summary: CampaignSummary,
              on_finding: Callable[[Finding], None], claim: Callable[[Finding], bool] = lambda f: True,
              foreign: set[str] | None = None) -> None:
    """Localize the shrunk graph, prune it to what the failure needs, dedupe by final signature,
    report the finding."""
    record = _localized(found.record, found.graph, request, runner, summary)
    graph, record = _pruned(found.graph, record, request, runner, summary)
    sig = signature(record)
    if sig in summary.findings:
        existing = summary.findings[sig]
        existing.hits += 1
        if len(graph.nodes) < len(existing.graph.nodes):
            existing.graph, existing.record = graph, record
        return
    finding = Finding(sig, record.status, record.op or "?", record.error or "", graph, record,
                      known=match_known(request.target, record))
    _report(finding, summary, on_finding, claim, foreign)


def _report(finding: Finding, summary: CampaignSummary, on_finding: Callable[[Finding], None],
            claim: Callable[[Finding], bool], foreign: set[str] | None) -> None:
    """A new finding is this campaign's, unless a parallel campaign claimed its signature first:
    then that one's finding gets the hit."""
    if claim(finding):
        summary.findings[finding.signature] = finding
        on_finding(finding)
        return
    if foreign is not None:
        foreign.add(finding.signature)
    summary.foreign_hits[finding.signature] += 1
