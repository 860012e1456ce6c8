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

import time
from typing import Any, Protocol

from harness.pool import Task, WorkerConfig, WorkerPool
from harness.status import Status
from harness.targets import parse_target


class ExampleRunner(Protocol):
    def run(self, payload: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


class InProcessRunner:
    def __init__(self, target: str, device: str | None = None) -> None:
        self.target = parse_target(target, device)

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        from harness.errors import describe_error
        from harness.fuzz.execute import execute_payload
        from harness.oracle import working_precision

        start = time.monotonic()
        try:
            with working_precision():  # as the pool's workers run payloads: float32 without TF32
                record = execute_payload(payload, self.target, lambda phase: None)
        except Exception as exc:  # noqa: BLE001 -- the harness failed on this example: a result
            error, detail = describe_error(exc)
            record = {"name": payload["name"], "status": Status.CRASH, "phase": "harness",
                      "error": f"harness error: {error}", "error_detail": detail}
        record.setdefault("wall_s", time.monotonic() - start)
        return record

    def close(self) -> None:
        return None


class WorkerRunner:
    """One persistent isolated worker (a ``keep=True`` pool of one) that runs payload tasks one at a time."""

    def __init__(self, config: WorkerConfig) -> None:
        self._pool = WorkerPool(config, jobs=1, keep=True)

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        records: list[dict] = []
        self._pool.run([Task(payload["name"], None, payload)], records.append)
        return records[-1]

    def close(self) -> None:
        self._pool.close()


def make_runner(target: str, device: str | None, in_process: bool, timeout_s: float,
                mem_limit_mb: int | None) -> ExampleRunner:
    if in_process:
        return InProcessRunner(target, device)
    return WorkerRunner(WorkerConfig(target=target, device=device, timeout_s=timeout_s,
                                     mem_limit_mb=mem_limit_mb, capture=False, jobs=1))
