"""Corpus entries as worker tasks: picklable callables that look an entry up and run it, on a target
(``EntryTask``) or in eager only, to measure it (``CorpusCheckTask``: ``crucible corpus check``).

Other tasks live with what they run: fuzz graphs and their localization (``harness.fuzz.tasks``),
decomposition rules (``harness.fuzz.decomp_campaign``), minimizer checks (``harness.minify.check``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from corpus import SOURCES
from corpus.entry import EntryUnavailable
from corpus.registry import Origin, find_entry
from harness.engine import Context, Expectation, Subject, execute
from harness.entry_subject import run_entry
from harness.errors import SubjectSkipped
from harness.oracle import flatten_outputs
from harness.pool import WorkerContext
from harness.result import Result
from harness.status import Phase


@dataclass(frozen=True)
class EntryTask:
    """Run the corpus entry ``name`` (found through ``origin``: its source or external corpus file)."""

    name: str
    origin: Origin | None
    mode: str = "inference"
    dynamic: bool = False
    reference: str = "auto"
    capture: bool = True
    # what an expected-results file says of the entry on this target (else the entry's own ExpectedFailure)
    expectation: Expectation | None = None
    imports: tuple[str, ...] = ()

    def __call__(self, worker: WorkerContext) -> Result:
        entry = find_entry(self.name, self.origin)  # run_entry falls back on the entry's own ExpectedFailure
        return run_entry(entry, worker.target, worker.progress, capture=self.capture, reference=self.reference,
                         mode=self.mode, dynamic=self.dynamic, expectation=self.expectation).replace(suite=entry.source)


class CorpusCheckSubject(Subject):
    """An entry built and run in eager only: the engine stops after the eager phase."""

    last_phase = Phase.EAGER
    eager_calls = 3  # a warm-up, then the two timed calls that must agree

    def __init__(self, entry: Any) -> None:
        self.entry, self.name = entry, entry.name
        self.built: Any = None

    def build(self, ctx: Context) -> None:
        try:
            self.built = self.entry.build("small")
        except EntryUnavailable as exc:
            raise SubjectSkipped(f"unavailable here: {exc}") from None
        if isinstance(self.built.model, torch.nn.Module):
            ctx.draft["params"] = sum(p.numel() for p in self.built.model.parameters())
        ctx.draft["input_shapes"] = [list(t.shape) for t in _tensors([self.built.inputs, self.built.kwargs])][:8]

    def eager(self, ctx: Context) -> Any:
        out = self.built.model(*self.built.inputs, **self.built.kwargs)
        tensors = [t.detach().clone() for t in _tensors(out)]
        if not tensors:
            raise ValueError("the output holds no tensor")
        return tensors


def _tensors(value: Any) -> list:
    """Every tensor in a model output (tensors, tuples, lists, dicts, ModelOutput)."""
    return [leaf for _, leaf in flatten_outputs(value) if isinstance(leaf, torch.Tensor)]


@dataclass(frozen=True)
class CorpusCheckTask:
    """Check the entry ``name`` of the built-in source ``source`` in a worker."""

    source: str
    name: str
    imports: tuple[str, ...] = ()

    def __call__(self, worker: WorkerContext) -> Result:
        entry = find_entry(self.name, Origin(SOURCES[self.source]))
        return execute(CorpusCheckSubject(entry), worker.target, worker.progress, suite=self.source)
