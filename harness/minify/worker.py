"""Isolated checks: every predicate check of the minimizer runs in a separate worker process.

A crash (segfault, abort), a hang or a memory blow-up of the target under test must not take the
minimizer down, and it is itself a failure to reproduce. A server process
(``harness.worker_process.WorkerProcess``, as the runner's pool uses) imports torch (and the plugins)
once; each CPU check runs in a child forked from it, so every check starts from the same clean state
and a child that dies yields a ``crash``/``oom`` outcome (``death_status``), one past its deadline a
``timeout``, at the cost of a fork rather than of torch's import. CUDA cannot be initialized again in
a forked child, so GPU checks run in the server itself. A server that dies is replaced for the next
check.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch

from harness.minify.case import GraphCase
from harness.minify.check import Outcome
from harness.status import Status
from harness.worker_process import WorkerProcess, death_status, serve

# The message of an outcome where the minimizer's own check failed, not the target under test.
HARNESS_ERROR = "harness error in the check"


def _forked_check(case: GraphCase, target: str | None, device: str, timeout_s: float) -> Outcome:
    """Run one check in a child forked from this (torch-importing, otherwise idle) server process.

    Forking costs milliseconds where a fresh process costs torch's import: a crashing target kills
    a child per check, not the server. The server never runs an op itself, so no thread pool or
    CUDA context exists to be broken by the fork; the child initializes what it needs."""
    import pickle
    import select

    from harness.minify.check import check_case

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: check, send the pickled outcome, leave without cleanup handlers
        os.close(read_end)
        code = 0
        try:
            try:
                outcome = check_case(case.to(device) if device != "cpu" else case, target)
            except Exception as exc:  # noqa: BLE001 -- a harness error is reported, never a silent pass
                outcome = Outcome(Status.CRASH, f"{HARNESS_ERROR}: {type(exc).__name__}: {exc}")
            data = pickle.dumps(outcome)
            while data:
                data = data[os.write(write_end, data):]
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout_s
    timed_out = False
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
        chunks.append(chunk)
    os.close(read_end)
    if timed_out:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return Outcome(Status.TIMEOUT, f"check timed out after {timeout_s:g}s")
    if chunks and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return pickle.loads(b"".join(chunks))
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    status_name, message = death_status(code)
    return Outcome(status_name, message)


def _check_here(case: GraphCase, target: str | None) -> Outcome:
    from harness.minify.check import check_case

    try:
        return check_case(case, target)
    except Exception as exc:  # noqa: BLE001 -- a harness error is reported, never a silent pass
        return Outcome(Status.CRASH, f"{HARNESS_ERROR}: {type(exc).__name__}: {exc}")


def _preload_compilers(inductor: bool) -> None:
    """Import the compilers once in the server: a forked child would otherwise import them per check
    (Inductor only when asked: its import costs seconds that crucible checks never need)."""
    import importlib

    names = ["compiler", "compiler.lowerings", "compiler.codegen.triton", "compiler.codegen.cpp"]
    for name in names + (["torch._inductor.compile_fx"] if inductor else []):
        # a compiler that fails to import here is reported by the check that needs it
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _server_main(conn: Connection, hide_gpus: bool, timeout_s: float, preload_inductor: bool) -> None:
    if hide_gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch._dynamo  # noqa: F401  (once per server, before the first deadline)

    import harness.minify.check  # noqa: F401
    from harness.minify.plugins import load_plugins

    _preload_compilers(preload_inductor)
    load_plugins()

    def handle(job: tuple[GraphCase, str | None, str], progress: Callable[[Any], None]) -> Outcome:
        case, target, device = job
        if device == "cpu":
            return _forked_check(case, target, device, timeout_s)
        # CUDA cannot be initialized again in a forked child: GPU checks run in the server itself
        # (a crash kills it and the parent replaces it; the parent enforces the deadline)
        return _check_here(case.to(device), target)

    serve(conn, handle)


class CheckWorker:
    """``check(case)`` in a worker process; restarts the worker after a crash or a timeout."""

    def __init__(self, timeout_s: float = 300.0, device: str = "cpu", target: str | None = None) -> None:
        self.timeout_s = timeout_s
        self.checks = 0
        preload_inductor = target is None or not target.startswith("crucible")
        self._logdir = tempfile.mkdtemp(prefix="crucible-minify-")
        self._worker = WorkerProcess(_server_main, (device == "cpu", timeout_s, preload_inductor),
                                     os.path.join(self._logdir, "worker.log"), "the minimizer's check worker")

    def check(self, case: GraphCase, target: str | None = None) -> Outcome:
        self.checks += 1
        # Tensors travel on the CPU and move to their device in the forked child: a CUDA
        # tensor unpickled in the server would create a CUDA context there, which no fork survives.
        device = next((str(v.device) for v in case.inputs if isinstance(v, torch.Tensor)), "cpu")
        # on the CPU the server enforces timeout_s on its forked child and this is the backstop;
        # a GPU check runs in the server itself, so this is its deadline
        reply = self._worker.call((case.to("cpu"), target, device), self.timeout_s + (60 if device == "cpu" else 0))
        if reply.kind == "done":
            return reply.payload
        if reply.kind == "died":
            status, message = death_status(reply.payload)
            return Outcome(status, message, detail=self._worker.log_tail())
        return Outcome(Status.TIMEOUT, f"check timed out after {self.timeout_s:g}s")

    def close(self) -> None:
        self._worker.close()
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> CheckWorker:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
