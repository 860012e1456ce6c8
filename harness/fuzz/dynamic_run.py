"""Running a generated graph with symbolic sizes (``crucible fuzz --dynamic``).

A graph with further calls (``FuzzGraph.calls``, drawn by ``harness.fuzz.dynamic``) is compiled once
through ``torch.compile(dynamic=True)``, as ``crucible run --dynamic`` compiles a corpus entry
(``Target.compile``), and called at its generated size (the engine's first and second call), then at
each further size, graded there against eager and the float64 reference at that size by the same
oracle. A size eager cannot run is dropped and noted.

Two findings of their own besides wrong values and errors at a size:

- ``UnexpectedRecompile``: Dynamo compiled more graphs for the further sizes than it does for the
  same calls with its ``eager`` backend. The sizes satisfy the guards of the graph's own trace, so a
  backend that handles symbolic sizes adds no recompile; one more means the compiler specialized.
- ``DynamicFallback``: a Crucible graph fell back to eager with reason ``compiler_error`` while the same
  graph compiles with static sizes (when it fails there too, the static error is the finding).

Crucible compiles non-strict here, so that a typed refusal (a ``dynamic_unsupported`` fallback, a
``symbolic_size`` extern call) is counted in the result's ``fallbacks``/``extern_ops`` and the
campaign's summary instead of failing the graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from harness.compile_reasons import entry_fields
from harness.engine import Context, Grade, optional_reference
from harness.errors import FIRST_CALL, SubjectFailed, classify, describe_error
from harness.fuzz.graph import FuzzGraph
from harness.shapes import dynamo_counters
from harness.status import Phase, Status
from harness.targets import Target

UNEXPECTED_RECOMPILE = "UnexpectedRecompile"
DYNAMIC_FALLBACK = "DynamicFallback"
# fallback and extern reasons that say "not compiled for symbolic sizes yet": counted, never findings
TYPED_REASONS = ("dynamic_unsupported", "symbolic_size")

Judge = Callable[[FuzzGraph, list[str], tuple, tuple, Any], tuple[str, str, dict[str, Any]]]


class DynamicSizes:
    """The dynamic-shape side of one ``GraphSubject``: its compile, and the grading at further sizes."""

    def __init__(self, graph: FuzzGraph, fn: Callable[..., Any], inputs: list[torch.Tensor], judge: Judge,
                 trace: Callable[[Callable[..., Any], list[torch.Tensor]], Any]) -> None:
        """``judge``: the oracle over one call's outputs (``compare_outputs``); ``trace``: a function and
        its inputs to the ATen graph a static fx compile takes (``harness.fuzz.subject.capture_aten``)."""
        self.graph, self.fn, self.inputs, self.judge, self.trace = graph, fn, inputs, judge, trace
        self.compiled: Callable[..., Any] | None = None
        self.reports: list[Any] = []  # Crucible's GraphReports of every compile, first call onwards
        self.verdict: Grade | SubjectFailed | None = None  # the further sizes' verdict, once graded

    def compile(self, ctx: Context) -> Callable[[], Any]:
        target = ctx.target
        if target.is_crucible:  # typed refusals are counted from the reports, not raised
            target = dataclasses.replace(target, options={**target.options, "strict": False})
        compiled = target.compile(self.fn, capture="dynamo", dynamic=True)
        self.compiled = compiled
        calls = [0]

        def call() -> Any:
            calls[0] += 1
            inputs = self.inputs if calls[0] == 1 else self.graph.make_inputs(ctx.device)
            with self._collect(target):
                return compiled(*inputs)

        return call

    @contextlib.contextmanager
    def _collect(self, target: Target) -> Iterator[None]:
        if not target.is_crucible:
            yield
            return
        from compiler.report import collect_reports

        with collect_reports() as report:
            try:
                yield
            finally:
                self.reports.extend(report.graphs)

    def grade(self, ctx: Context, first: Grade) -> Grade:
        """``first`` (the generated size's verdict, a pass) and every further size's, with the fields
        of a ``--dynamic`` result; raises ``SubjectFailed`` for an error at a size, a dynamic-only
        compiler error or an unexpected recompile. The further sizes run once: the engine grades the
        first and the second call at the generated size, and the second gets the same verdict."""
        if self.verdict is None:
            try:
                self.verdict = self._grade(ctx, first)
            except SubjectFailed as failed:
                self.verdict = failed
        if isinstance(self.verdict, SubjectFailed):
            raise self.verdict
        return self.verdict

    def _grade(self, ctx: Context, first: Grade) -> Grade:
        fields = dict(first.fields or {}, dynamic=1)
        self._check_fallbacks(ctx, fields)
        rows: list[dict[str, Any]] = [{"batch": None, "shapes": [d["shape"] for d in self.graph.inputs],
                                       "status": Status.PASS, "graphs": 0}]
        dropped, ran = [], []
        for index, shapes in enumerate(self.graph.calls):
            sized = self.graph.at_call(index)
            label = f"call {index + 2} at {_shapes(shapes)}"
            ctx.phase(Phase.EAGER)  # a hang or crash of eager at a size is the graph's, not the compiler's
            try:
                eager = sized.function()(*sized.make_inputs(ctx.device))
            except Exception as exc:  # noqa: BLE001 -- the graph is not valid at this size
                dropped.append(f"{label}: eager fails ({type(exc).__name__})")
                continue
            ctx.phase(Phase.REFERENCE)
            reference = optional_reference(ctx, lambda sized=sized: sized.function(reference=True)(
                *sized.make_inputs("cpu", reference=True)))
            ctx.phase(Phase.COMPILE)  # a new size may compile; --coverage traces this phase
            before = dynamo_counters()[0]
            try:
                with self._collect(ctx.target):
                    compiled = self.compiled(*sized.make_inputs(ctx.device))  # type: ignore[misc]
                graphs = dynamo_counters()[0] - before
            except Exception as exc:  # noqa: BLE001 -- a new size may compile: classified as the first call
                reason, detail = describe_error(exc)
                self._finish(ctx, fields, rows, dropped)
                raise SubjectFailed(classify(exc, Phase.COMPILE, FIRST_CALL), f"{reason} ({label})", detail) from exc
            ctx.phase(Phase.COMPARE)
            failing, reason, metrics = self.judge(sized, sized.outputs, eager, compiled, reference)
            rows.append({"batch": None, "shapes": shapes, "status": Status.FAIL_ACCURACY if failing else Status.PASS,
                         "graphs": graphs, "error": reason or None})
            ran.append(index)
            if failing:
                self._finish(ctx, fields, rows, dropped)
                fields.update(metrics, op=self.graph.output_ops()[failing],
                              failing_outputs=[self.graph.outputs.index(failing)])
                return Grade(False, f"{reason} ({label})", fields)
        self._finish(ctx, fields, rows, dropped)
        self._check_fallbacks(ctx, fields)  # a further size's recompile may have fallen back
        if fields["recompiles"]:
            expected = self._dynamo_recompiles(ctx, ran)
            if fields["recompiles"] > expected:
                ctx.draft.update(fields)
                raise SubjectFailed(Status.FAIL_COMPILE, f"{UNEXPECTED_RECOMPILE}: {fields['recompiles']} graphs "
                                    f"compiled for the further sizes, Dynamo's eager backend compiled {expected} "
                                    f"for the same calls ({_shapes(self.graph.calls[ran[0]])} ...)")
        return Grade(True, "", fields)

    def _finish(self, ctx: Context, fields: dict[str, Any], rows: list[dict[str, Any]], dropped: list[str]) -> None:
        # counted around the further calls alone: the baseline's own compiles must not count
        fields.update(sizes=rows, recompiles=sum(row["graphs"] for row in rows))
        if dropped:
            fields["dynamic_note"] = "; ".join(dropped)
        if self.reports:
            from compiler.report import CompileReport

            fields.update(entry_fields(CompileReport(graphs=list(self.reports))))
        ctx.draft.update(fields)

    def _check_fallbacks(self, ctx: Context, fields: dict[str, Any]) -> None:
        """A ``compiler_error`` fallback is a finding: the static compile's error when it fails too,
        else ``DynamicFallback``."""
        broken = [g for g in self.reports if g.fallback is not None and g.fallback.value not in TYPED_REASONS]
        if not broken:
            return
        graph = broken[0]
        message = f"{graph.fallback.value} in pass {graph.failed_pass!r}: {graph.fallback_message}"
        self._compile_static(ctx)  # raises the static compile's own error
        if self.reports:
            from compiler.report import CompileReport

            fields.update(entry_fields(CompileReport(graphs=list(self.reports))))
        ctx.draft.update(fields)
        raise SubjectFailed(Status.FAIL_COMPILE, f"{DYNAMIC_FALLBACK}: {message} (static sizes compile)")

    def _compile_static(self, ctx: Context) -> None:
        static = FuzzGraph(self.graph.inputs, self.graph.nodes, self.graph.outputs)
        inputs = static.make_inputs(ctx.device)
        fn = static.function()
        try:
            ctx.target.compile(self.trace(fn, inputs), inputs, capture="fx")(*inputs)
        except Exception as exc:  # noqa: BLE001 -- the static compile fails too: its error is the finding
            reason, detail = describe_error(exc)
            raise SubjectFailed(classify(exc, Phase.COMPILE, FIRST_CALL), reason, detail) from exc

    def _dynamo_recompiles(self, ctx: Context, ran: list[int]) -> int:
        """The graphs Dynamo's ``eager`` backend compiles for the same further calls (its own guards)."""
        compiled = torch.compile(self.graph.function(), backend="eager", dynamic=True)
        compiled(*self.graph.make_inputs(ctx.device))
        start = dynamo_counters()[0]
        for index in ran:
            compiled(*self.graph.at_call(index).make_inputs(ctx.device))
        return dynamo_counters()[0] - start


def _shapes(shapes: list[list[int]]) -> str:
    return ", ".join("x".join(map(str, s)) or "()" for s in shapes)
