"""The fuzzer's worker tasks: picklable callables a ``harness.pool`` worker (or this process, through
``harness.pool.run_task``) calls with its ``WorkerContext``; each returns a ``Result``.

``GraphTask`` runs one generated graph (``harness.fuzz.subject``), ``LocalizeTask`` finds where a
failure the campaign already has starts (``harness.fuzz.localize``). The decomposition fuzzer's
rule task is ``harness.fuzz.decomp_campaign.RuleTask``.

With ``coverage`` (package roots, ``crucible fuzz --coverage``) a task runs under the worker's line
tracer (``harness.fuzz.coverage``, started by the first such task and kept for the worker's life)
and its result carries the lines the worker executed for the first time for its campaign
(``session``; ``Result.covered``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.fuzz.coverage import pause_process_tracer, process_tracer
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.localize import localize, localize_divergence
from harness.fuzz.subject import graph_name, run_graph
from harness.pool import WorkerContext
from harness.result import Result
from harness.status import Phase, Status


@dataclass(frozen=True)
class GraphTask:
    """Run the graph ``graph`` (``FuzzGraph`` JSON); ``localize``: charge an accuracy failure to the
    first diverging value at once (one more compile)."""

    name: str
    graph: str
    capture: str = "fx"
    localize: bool = False
    imports: tuple[str, ...] = ()
    tiers: bool = True  # the oracle's exact tier, relative and bias checks (harness.fuzz.subject.compare_outputs)
    coverage: tuple[str, ...] = ()  # package roots whose executed lines the result reports
    session: str = ""  # the campaign the lines are reported to (harness.fuzz.coverage.LineTracer.begin)

    @classmethod
    def of(cls, graph: FuzzGraph, capture: str = "fx", imports: tuple[str, ...] = (), tiers: bool = True,
           coverage: tuple[str, ...] = (), session: str = "") -> GraphTask:
        return cls(graph_name(graph), graph.to_json(), capture, imports=imports, tiers=tiers, coverage=coverage,
                   session=session)

    def __call__(self, worker: WorkerContext) -> Result:
        return _measured(self.coverage, self.session, worker, self._run)

    def _run(self, worker: WorkerContext) -> Result:
        graph = FuzzGraph.from_json(self.graph)
        result = run_graph(graph, worker.target, worker.progress, self.capture, self.name, self.tiers)
        if self.localize and result.status == Status.FAIL_ACCURACY and len(graph.nodes) > 1:
            op, diverged = localize_divergence(graph, worker.target, self.capture, self.tiers)
            if op:
                result = result.replace(op=op, diverged=diverged)
        return result


@dataclass(frozen=True)
class LocalizeTask:
    """Localize a failure of ``graph`` the campaign has the result of: ``fail_accuracy`` with ``op``
    and ``diverged`` when a value diverges, ``pass`` when none does. It does not run the graph as
    it is again."""

    name: str
    graph: str
    capture: str = "fx"
    imports: tuple[str, ...] = ()
    tiers: bool = True
    coverage: tuple[str, ...] = ()
    session: str = ""

    @classmethod
    def of(cls, graph: FuzzGraph, capture: str = "fx", imports: tuple[str, ...] = (),
           tiers: bool = True, coverage: tuple[str, ...] = (), session: str = "") -> LocalizeTask:
        return cls(graph_name(graph), graph.to_json(), capture, imports, tiers, coverage, session)

    def __call__(self, worker: WorkerContext) -> Result:
        return _measured(self.coverage, self.session, worker, lambda w: localize(
            FuzzGraph.from_json(self.graph), w.target, self.name, self.capture, w.progress, self.tiers))


# The phases in which the compiler under test runs: capture (``trace_aten`` on the fx path), compile
# and the first call. Eager, the float64 reference, the second call (the first call's code again) and
# the comparison run with the tracer paused: under coverage.py the second call in Triton's
# interpreter ran 2-3x slower traced, for no line the first call had not run (40 graphs on
# crucible-interpret: 1816 lines either way, 4.0 s against 4.7 s). A tracer's first task is traced
# whole: the compiler is imported during it, and the registration code run at import counts.
MEASURED_PHASES = frozenset(p.value for p in (Phase.CAPTURE, Phase.COMPILE, Phase.FORWARD, Phase.BACKWARD))


def _measured(roots: tuple[str, ...], session: str, worker: WorkerContext,
              run: Callable[[WorkerContext], Result]) -> Result:
    """``run(worker)``, and with ``roots`` the lines it executed first in ``session`` (``Result.covered``)."""
    if not roots:
        pause_process_tracer()  # a campaign's graph it does not sample runs at full speed
        return run(worker)
    tracer = process_tracer(roots, session)
    first, tracer.tasks = tracer.tasks == 0, tracer.tasks + 1

    def progress(phase: str) -> None:
        worker.progress(phase)
        if not first:
            (tracer.resume if phase in MEASURED_PHASES else tracer.pause)()

    result = run(WorkerContext(worker.target, progress))
    tracer.resume()
    return result.replace(covered=tracer.take().to_json())
