"""One isolated worker process: the lifecycle the runner's pool, the fuzzer and the minimizer share.

A worker is a ``multiprocessing`` spawn process (it inherits nothing but its arguments) whose stdout
and stderr go to a log file, with faulthandler on (a segfault's Python traceback lands in the log)
and a thread that ends it when its parent dies. It runs ``main(conn, *args)``, which sets itself up
and calls ``serve``: the child announces ``("ready", info)`` once, then answers each task sent over
the pipe with any number of ``("progress", value)`` and one ``("done", result)``; ``None`` stops it.

The parent side, ``WorkerProcess``, turns a closed pipe into ``("died", exit code)``: a segfault, an
abort or the kernel's OOM killer becomes a result (``death_status``), never the caller's crash. A
worker past its deadline is killed; the next task starts a fresh one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from harness.status import Status

# Importing torch (and Dynamo, and the compilers) in a fresh worker on a busy 2-core machine.
START_TIMEOUT_S = 300.0

_CRASH_SIGNALS = {signal.SIGSEGV: "SIGSEGV", signal.SIGABRT: "SIGABRT", signal.SIGBUS: "SIGBUS",
                  signal.SIGILL: "SIGILL", signal.SIGFPE: "SIGFPE"}


def death_status(exitcode: int | None) -> tuple[str, str]:
    """(status, message) for a worker that died while running a task."""
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        if sig == signal.SIGKILL:
            return Status.OOM, "worker killed by SIGKILL (out of memory: the kernel's OOM killer)"
        name = _CRASH_SIGNALS.get(sig) or signal.Signals(sig).name
        return Status.CRASH, f"worker died from {name}"
    return Status.CRASH, f"worker exited with code {exitcode} while running the entry"


def serve(conn: Connection, handle: Callable[[Any, Callable[[Any], None]], Any], info: Any = None) -> None:
    """The child's loop: ``handle(task, progress)`` per task until the parent sends ``None`` or goes away."""
    conn.send(("ready", info))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send(("done", handle(task, lambda value: conn.send(("progress", value)))))


def _exit_with_parent(parent: int) -> None:
    # A worker hung in a task never reads its pipe again; if the parent is killed, this ends the orphan.
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _bootstrap(main: Callable[..., None], conn: Connection, log_path: str, parent: int, args: tuple) -> None:
    import faulthandler

    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    main(conn, *args)


@dataclass(frozen=True)
class Reply:
    kind: str  # "done", "died" (payload: the exit code) or "timeout"
    payload: Any = None


class WorkerProcess:
    """The parent's handle on one worker: start, send, receive, deadlines, stop, the log's tail.

    ``name`` appears in the error raised when the worker cannot start (it dies at start-up or is not
    ready within ``start_timeout_s``)."""

    def __init__(self, main: Callable[..., None], args: tuple, log_path: str, name: str = "worker",
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.main, self.args, self.log_path, self.name = main, args, log_path, name
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")
        self.proc: Any = None
        self.conn: Connection | None = None
        self.ready = False
        self.info: Any = None  # what the worker announced with "ready"
        self.start_deadline = 0.0
        self.log_offset = 0  # the log's size when the current task was sent

    @property
    def running(self) -> bool:
        return self.proc is not None

    def start(self) -> None:
        parent_conn, child_conn = self._ctx.Pipe()
        proc = self._ctx.Process(target=_bootstrap, daemon=True,
                                 args=(self.main, child_conn, self.log_path, os.getpid(), self.args))
        try:
            proc.start()
        finally:  # a process that did not start is not this worker's (stop() would wait on it)
            child_conn.close()
        self.proc = proc
        self.conn, self.ready, self.info = parent_conn, False, None
        self.start_deadline = time.monotonic() + self.start_timeout_s

    def start_overdue(self) -> bool:
        return self.running and not self.ready and time.monotonic() > self.start_deadline

    def receive(self) -> tuple[str, Any]:
        """The next message; ``("died", exit code)`` when the worker is gone (it is then stopped)."""
        assert self.conn is not None
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError):
            return "died", self.stop(kill=False)
        if kind == "ready":
            self.ready, self.info = True, payload
        return kind, payload

    def wait_ready(self) -> None:
        """Start the worker if needed and wait for its "ready"; a clear error when it does not come."""
        if not self.running:
            self.start()
        while not self.ready:
            if self.start_overdue():
                self.stop(kill=True)
                raise RuntimeError(f"{self.name} did not start within {self.start_timeout_s:g}s; see "
                                   f"{self.log_path}:\n{self.log_tail(0)}")
            if self.conn is not None and self.conn.poll(1.0) and self.receive()[0] == "died":
                raise RuntimeError(f"{self.name} failed to start; see {self.log_path}:\n{self.log_tail(0)}")

    def send(self, task: Any) -> None:
        """Send a task (the log's tail from here on is this task's); a dead worker shows at receive."""
        assert self.conn is not None
        self.log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        try:
            self.conn.send(task)
        except OSError:
            pass  # it just died: the next receive sees EOF and reports it

    def call(self, task: Any, timeout_s: float, on_progress: Callable[[Any], None] = lambda value: None) -> Reply:
        """Run one task and wait for it: its result, the worker's death, or a timeout (then it is killed)."""
        self.wait_ready()
        self.send(task)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop(kill=True)
                return Reply("timeout")
            assert self.conn is not None
            if not self.conn.poll(min(left, 1.0)):
                continue
            kind, payload = self.receive()
            if kind in ("done", "died"):
                return Reply(kind, payload)
            if kind == "progress":
                on_progress(payload)

    def stop(self, kill: bool) -> int | None:
        """End the worker (``kill``: at once) and return its exit code."""
        if self.proc is None:
            return None
        if kill and self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        code = self.proc.exitcode
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn, self.ready = None, None, False
        return code

    def close(self) -> None:
        """Ask an idle worker to exit, then stop it."""
        if self.conn is not None:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.stop(kill=False)

    def log_tail(self, offset: int | None = None) -> str:
        """The worker's output since ``offset`` (default: since the last task was sent): a crash's
        traceback, innermost frame first."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset if offset is None else offset)
                text = f.read()[-200_000:].decode(errors="replace")
        except OSError:
            return ""
        # faulthandler lists every extension module after the traceback: noise here.
        lines = [line for line in text.splitlines() if not line.startswith("Extension modules:")]
        # Keep the start of the fault report (the innermost frames are printed first).
        start = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
        kept = "\n".join(lines[start:] if start is not None else lines)
        return kept[:4000] if start is not None else kept[-4000:]
