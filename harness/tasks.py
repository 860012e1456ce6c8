"""The corpus entry as a worker task: a picklable callable that looks the entry up and runs it.

Other tasks live with what they run: fuzz graphs and their localization (``harness.fuzz.tasks``),
decomposition rules (``harness.fuzz.decomp_campaign``), corpus checks (``harness.corpus_check``).
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus.registry import Origin, find_entry
from harness.engine import Expectation
from harness.entry_subject import EntrySubject, run_entry
from harness.pool import WorkerContext
from harness.result import Result


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
        entry = find_entry(self.name, self.origin)
        expectation = self.expectation or EntrySubject(entry).expectation(worker.target)
        return run_entry(entry, worker.target, worker.progress, capture=self.capture, reference=self.reference,
                         mode=self.mode, dynamic=self.dynamic, expectation=expectation).replace(suite=entry.source)
