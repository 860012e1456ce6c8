"""Tasks for the cluster tests: picklable, importable by the cluster's workers, no model to build."""

from __future__ import annotations

import time
from dataclasses import dataclass

from harness.pool import WorkerContext
from harness.result import Result
from harness.status import Status


@dataclass(frozen=True)
class EchoTask:
    """Passes after ``sleep_s`` seconds."""

    name: str
    sleep_s: float = 0.0
    imports: tuple[str, ...] = ()

    def __call__(self, worker: WorkerContext) -> Result:
        time.sleep(self.sleep_s)
        return Result(name=self.name, target=worker.target.name, status=Status.PASS)
