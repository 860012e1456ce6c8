"""Isolated checks: every predicate check of the minimizer runs in a separate worker process.

A crash (segfault, abort), a hang or a memory blow-up of the target under test must not take the
minimizer down, and it is itself a failure to reproduce. A server process
(``harness.worker_process.WorkerProcess``, as the runner's pool uses) imports torch (and the plugins)
once; each CPU check runs in a child forked from it, so every check starts from the same clean state
and a child that dies yields a ``crash``/``oom`` result (``death_status``), one past its deadline a
``timeout``, at the cost of a fork rather than of torch's import. CUDA cannot be initialized again in
a forked child, so GPU checks run in the server itself. A server that dies is replaced for the next
check.

Either way a check is a ``CaseCheck`` task run by the execution engine (``harness.pool.run_task``),
which reports each phase it enters: a death or a timeout is recorded with the phase it happened in
(a candidate whose eager run dies is the candidate's fault, not the target's).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from harness.minify.case import GraphCase
from harness.minify.check import CaseCheck, case_device, case_target
from harness.minify.plugins import load_plugins
from harness.pool import run_task
from harness.result import Result
from harness.status import Phase, Status
from harness.worker_process import WorkerProcess, death_status, serve

# A forked child that cannot send its result (an unpicklable value) exits with this code.
_CHILD_FAILED = 3


def _died(check: CaseCheck, status: str, message: str, phase: str | None, detail: str | None = None) -> Result:
    """The result of a check whose process died or ran past its deadline in ``phase``."""
    return Result(name=check.name, target=check.target, status=status, phase=phase, error=message,
                  error_detail=detail)


def _send(fd: int, message: tuple[str, Any]) -> None:
    data = pickle.dumps(message)
    data = struct.pack("<Q", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _frames(buffer: bytearray) -> list[tuple[str, Any]]:
    """The complete messages at the start of ``buffer`` (removed from it)."""
    out = []
    while len(buffer) >= 8:
        (size,) = struct.unpack("<Q", buffer[:8])
        if len(buffer) < 8 + size:
            break
        out.append(pickle.loads(bytes(buffer[8:8 + size])))
        del buffer[:8 + size]
    return out


def _forked_check(check: CaseCheck, timeout_s: float) -> Result:
    """Run one CPU check in a child forked from this (torch-importing, otherwise idle) server process.

    Forking costs milliseconds where a fresh process costs torch's import: a crashing target kills
    a child per check, not the server. The server never runs an op itself, so no thread pool or
    CUDA context exists to be broken by the fork; the child initializes what it needs. The child
    sends each phase it enters, then its result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: check, send phases and the result, leave without cleanup handlers
        os.close(read_end)
        code = 0
        try:
            result = run_task(check, case_target(check.target), lambda phase: _send(write_end, ("progress", phase)))
            _send(write_end, ("done", result))
        except BaseException:  # noqa: BLE001 -- the parent reports it as the harness's failure
            code = _CHILD_FAILED
        finally:
            os._exit(code)
    os.close(write_end)
    buffer, deadline = bytearray(), time.monotonic() + timeout_s
    phase, result, timed_out = None, None, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_end], [], [], left)
        if not ready:
            continue
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        buffer += chunk
        for kind, payload in _frames(buffer):
            if kind == "progress":
                phase = payload
            else:
                result = payload
    os.close(read_end)
    if timed_out:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return _died(check, Status.TIMEOUT, f"check timed out after {timeout_s:g}s", phase)
    if result is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return result
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if code == _CHILD_FAILED:
        return _died(check, Status.CRASH, "harness error: the check's process could not send its result",
                     Phase.HARNESS.value)
    return _died(check, *death_status(code), phase)


def _preload(target: str | None) -> None:
    """Import the compilers once in the server: a forked child would otherwise import them per check
    (Inductor only when asked: its import costs seconds that crucible checks never need; the
    simulator's checks, for crucible-sim, cost 0.1 s)."""
    import importlib

    names = ["compiler", "compiler.lowerings", "compiler.codegen.triton", "compiler.codegen.cpp", "simulator.session"]
    if target is None or not target.startswith("crucible"):
        names.append("torch._inductor.compile_fx")
    for name in names:
        # a compiler that fails to import here is reported by the check that needs it
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _server_main(conn: Connection, hide_gpus: bool, timeout_s: float, target: str | None) -> None:
    if hide_gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch._dynamo  # noqa: F401  (once per server, before the first deadline)

    _preload(target)
    load_plugins()

    def handle(job: tuple[CaseCheck, str], progress: Callable[[Any], None]) -> Result:
        check, device = job
        if device == "cpu":
            return _forked_check(check, timeout_s)
        # CUDA cannot be initialized again in a forked child: GPU checks run in the server itself
        # (a crash kills it and the parent replaces it; the parent enforces the deadline and learns
        # the phase from the progress messages)
        moved = CaseCheck(check.case.to(device), check.target, check.imports)
        return run_task(moved, case_target(check.target, device), progress)

    serve(conn, handle)


class CheckWorker:
    """``check(case)`` in a worker process; restarts the worker after a crash or a timeout."""

    def __init__(self, timeout_s: float = 300.0, device: str = "cpu", target: str | None = None) -> None:
        self.timeout_s = timeout_s
        self.checks = 0
        self._logdir = tempfile.mkdtemp(prefix="crucible-minify-")
        self._worker = WorkerProcess(_server_main, (device == "cpu", timeout_s, target),
                                     os.path.join(self._logdir, "worker.log"), "the minimizer's check worker")

    def check(self, case: GraphCase, target: str | None = None) -> Result:
        self.checks += 1
        check = CaseCheck(case.to("cpu"), target or case.target)
        # Tensors travel on the CPU and move to their device in the server: a CUDA tensor unpickled
        # in the server before a fork would create a CUDA context there, which no fork survives.
        device = case_device(case)
        phases: list[str] = []
        # on the CPU the server enforces timeout_s on its forked child and this is the backstop;
        # a GPU check runs in the server itself, so this is its deadline
        reply = self._worker.call((check, device), self.timeout_s + (60 if device == "cpu" else 0), phases.append)
        if reply.kind == "done":
            return reply.payload
        # a GPU check reports its phases; a CPU server that dies was not running the check itself
        phase = phases[-1] if phases else (Phase.HARNESS.value if device == "cpu" else None)
        if reply.kind == "died":
            return _died(check, *death_status(reply.payload), phase, self._worker.log_tail())
        return _died(check, Status.TIMEOUT, f"check timed out after {self.timeout_s:g}s", phase)

    def close(self) -> None:
        self._worker.close()
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> CheckWorker:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
