"""Where a fuzz example runs: an isolated harness worker (default) or this process.

Hypothesis draws and shrinks one example at a time in the parent, so the fuzzer keeps one
worker of ``harness.pool.WorkerPool`` alive across examples and sends it tasks one by one
(``harness.fuzz.tasks``): the same spawn, deadline, memory limit and crash/hang/OOM accounting as
a corpus run. A graph that kills its worker is a result (``crash``/``oom``/``timeout``); a fresh
worker replaces it.

``InProcessRunner`` runs tasks in the calling process (``harness.pool.run_task``): faster to start,
no isolation (a crash ends the campaign). It exists for tests that plant a bug by monkeypatching,
and for debugging a finding under a debugger.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from harness.fuzz.coverage import stop_process_tracer
from harness.pool import Task, WorkerConfig, WorkerPool, run_task
from harness.result import Result
from harness.targets import parse_target


class ExampleRunner(Protocol):
    def run(self, task: Task) -> Result: ...

    def close(self) -> None: ...


class InProcessRunner:
    def __init__(self, target: str, device: str | None = None) -> None:
        self.target = parse_target(target, device)

    def run(self, task: Task) -> Result:
        start = time.monotonic()
        result = run_task(task, self.target, lambda phase: None)
        return result if result.wall_s is not None else result.replace(wall_s=time.monotonic() - start)

    def close(self) -> None:
        stop_process_tracer()  # a --coverage campaign's tracer runs in this process


class WorkerRunner:
    """Runs tasks one at a time on an executor: a persistent isolated worker (a ``keep=True`` pool of
    one, ``make_runner``), or a cluster's executor shared by every campaign thread (``harness.cluster``:
    closing the runner leaves the cluster to its owner)."""

    def __init__(self, executor: Any) -> None:
        self._executor = executor

    def run(self, task: Task) -> Result:
        results: list[Result] = []
        self._executor.run([task], results.append)
        return results[-1]

    def close(self) -> None:
        self._executor.close()


def make_runner(target: str, device: str | None, in_process: bool, timeout_s: float,
                mem_limit_mb: int | None, campaigns: int = 1) -> ExampleRunner:
    """A runner for one of ``campaigns`` campaigns side by side: its worker gets that share of the
    cores' torch threads (one worker per campaign each on all cores oversubscribed them: ``-j 2``
    ran 4 threads on 2 cores at 10.5 graphs/s, 1 thread each gives 18)."""
    if in_process:
        return InProcessRunner(target, device)
    return WorkerRunner(WorkerPool(WorkerConfig(target=target, device=device, timeout_s=timeout_s,
                                                mem_limit_mb=mem_limit_mb, jobs=campaigns), jobs=1, keep=True))
