"""Where a fuzz example runs: an isolated harness worker (default) or this process.

Hypothesis draws and shrinks one example at a time in the parent, so the fuzzer keeps one
worker of ``harness.pool.WorkerPool`` alive across examples and sends it tasks one by one:
the same spawn, deadline, memory limit and crash/hang/OOM accounting as a corpus run. A graph
that kills its worker is a result (``crash``/``oom``/``timeout``); a fresh worker replaces it.

``InProcessRunner`` runs examples in the calling process: faster to start, no isolation (a
crash ends the campaign). It exists for tests that plant a bug by monkeypatching, and for
debugging a finding under a debugger.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from multiprocessing.connection import wait
from typing import Any, Protocol

from harness.pool import Task, WorkerConfig, WorkerPool, _Slot
from harness.status import Status
from harness.targets import parse_target

START_TIMEOUT_S = 300.0  # importing torch in a fresh worker on a busy 2-core machine


class ExampleRunner(Protocol):
    def run(self, payload: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


class InProcessRunner:
    def __init__(self, target: str, device: str | None = None) -> None:
        self.target = parse_target(target, device)

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        from harness.execute import describe_error
        from harness.fuzz.execute import execute_payload

        start = time.monotonic()
        try:
            record = execute_payload(payload, self.target, lambda phase: None)
        except Exception as exc:  # noqa: BLE001 -- the harness failed on this example: a result
            error, detail = describe_error(exc)
            record = {"name": payload["name"], "status": Status.CRASH, "phase": "harness",
                      "error": f"harness error: {error}", "error_detail": detail}
        record.setdefault("wall_s", time.monotonic() - start)
        return record

    def close(self) -> None:
        return None


class WorkerRunner(WorkerPool):
    """One persistent isolated worker that runs payload tasks one at a time."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config, jobs=1)
        self._logdir = tempfile.mkdtemp(prefix="crucible-fuzz-")
        self._slot = _Slot(0, os.path.join(self._logdir, "worker-0.log"))

    def _wait_ready(self) -> None:
        slot = self._slot
        deadline = time.monotonic() + START_TIMEOUT_S
        while not slot.ready:
            if slot.proc is None:
                self._start(slot)
            if time.monotonic() > deadline:
                raise RuntimeError(f"fuzz worker did not start within {START_TIMEOUT_S:g}s:\n{self._log_tail(slot)}")
            if wait([slot.conn], timeout=1.0):
                self._receive(slot, lambda record: None, lambda name, phase: None)

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._wait_ready()
        slot = self._slot
        records: list[dict] = []
        self._dispatch(slot, Task(payload["name"], None, payload))
        while slot.task is not None:
            if wait([slot.conn], timeout=max(0.0, min(1.0, slot.deadline - time.monotonic()))):
                self._receive(slot, records.append, lambda name, phase: None)
            if slot.task is not None and time.monotonic() > slot.deadline:
                self._stop(slot, kill=True)
                records.append(self._died(slot, Status.TIMEOUT, "timeout"))
                slot.task = None
        return records[-1]

    def close(self) -> None:
        slot = self._slot
        if slot.conn is not None:
            try:
                slot.conn.send(None)
            except OSError:
                pass
        self._stop(slot, kill=slot.task is not None)
        shutil.rmtree(self._logdir, ignore_errors=True)


def make_runner(target: str, device: str | None, in_process: bool, timeout_s: float,
                mem_limit_mb: int | None) -> ExampleRunner:
    if in_process:
        return InProcessRunner(target, device)
    return WorkerRunner(WorkerConfig(target=target, device=device, timeout_s=timeout_s,
                                     mem_limit_mb=mem_limit_mb, capture=False, jobs=1))
