"""Isolation: corpus entries run in spawned worker processes.

Each of the ``jobs`` workers is a ``multiprocessing`` spawn process that imports
torch once and then runs entries one at a time, sent over a pipe. The parent
keeps a wall-clock deadline per entry. When a worker segfaults, aborts, is
killed by the kernel for memory, or passes its deadline (and is then killed),
the entry is recorded as ``crash``/``oom``/``timeout`` together with the phase
it was in, a fresh worker replaces it and the run goes on.

Memory: on CPU targets each entry runs under ``RLIMIT_AS`` = the worker's
address space when the entry starts + the limit, so a runaway allocation raises
(``oom``) instead of taking the machine down. CUDA targets skip this limit
(the CUDA driver reserves huge virtual ranges); GPU OOM is caught as an error.
Workers of CPU targets run with the GPUs hidden (``CUDA_VISIBLE_DEVICES=""``); workers of CUDA
targets are pinned round-robin to ``WorkerConfig.gpus``, each seeing one device.
Each worker sets torch's intra-op threads to its share of the cores (``threads_per_worker``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from corpus.registry import Origin
from harness.status import Status


@dataclass(frozen=True)
class Task:
    name: str
    origin: Origin | None
    # A task that is not a corpus entry (a fuzz graph, a decomposition check): run by
    # harness.fuzz.execute.execute_payload instead of building an entry by name.
    payload: dict | None = None


@dataclass(frozen=True)
class WorkerConfig:
    target: str
    device: str | None = None
    timeout_s: float = 600.0
    mem_limit_mb: int | None = None
    capture: bool = True
    reference: str = "auto"  # see harness.execute.REFERENCE_CHOICES
    jobs: int = 1  # workers sharing the machine
    mode: str = "inference"  # see harness.training.MODES
    dynamic: bool = False
    gpus: tuple[str, ...] = ()  # CUDA device ids the workers are spread over; () = all visible


def available_cores() -> int:
    """Cores this process may run on (the affinity mask: a container or taskset may restrict it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_worker(jobs: int, cores: int | None = None) -> int:
    """torch intra-op threads of each of ``jobs`` workers: their share of the cores.

    Left alone, every worker starts one thread per core: 8 workers on a 16-core host ran 128
    threads, and a float64 reference that takes seconds alone took over 300 s."""
    return max(1, (cores or available_cores()) // max(1, jobs))


def gpu_for_worker(index: int, gpus: tuple[str, ...]) -> str | None:
    """The CUDA device worker ``index`` is pinned to: workers go round-robin over ``gpus``, so
    ``-j 16`` on 8 GPUs puts two workers on each."""
    return gpus[index % len(gpus)] if gpus else None


def visible_gpus() -> tuple[str, ...]:
    """The CUDA devices this process may use, as ids for ``CUDA_VISIBLE_DEVICES``.

    Honours an existing ``CUDA_VISIBLE_DEVICES`` (ids or UUIDs); otherwise asks torch how many
    devices there are. ``CRUCIBLE_GPUS`` (comma-separated) overrides both."""
    listed = os.environ.get("CRUCIBLE_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip():
        return tuple(d.strip() for d in listed.split(",") if d.strip())
    import torch

    return tuple(str(i) for i in range(torch.cuda.device_count())) if torch.cuda.is_available() else ()


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _limit_memory(mb: int | None) -> None:
    import resource

    if not mb or not os.path.exists("/proc/self/status"):
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = _address_space_bytes() + mb * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _exit_with_parent(parent: int) -> None:
    # A worker hung in an entry never reads its pipe again; if the parent is
    # killed, this thread ends the orphan.
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def worker_main(conn: Connection, config: WorkerConfig, log_path: str, parent: int,
                gpu: str | None = None) -> None:
    """Entry point of a worker process (spawned: nothing is inherited but arguments).

    ``gpu``: the CUDA device this worker is pinned to (it sees only that one, as ``cuda:0``)."""
    import faulthandler

    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable()  # a segfault's Python traceback goes to the log
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()

    from harness.targets import parse_target

    target = parse_target(config.target, config.device)
    if target.device == "cpu":
        # CPU targets never see the GPUs: under the address-space limit below, creating a CUDA
        # context fails as "out of memory", and some torch versions touch the accelerator while
        # tracing (Dynamo 2.11 asks for its current stream), which made CPU entries 'oom'.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    threads = threads_per_worker(config.jobs)
    # the compiler builds a graph's kernels on several threads; workers share the cores
    os.environ.setdefault("CRUCIBLE_COMPILE_THREADS", str(threads))
    # OpenMP reads this at start-up (before torch sets its pool), torch.set_num_threads below
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # torch and Dynamo take seconds to import: once per worker, before the first deadline.
    import torch
    import torch._dynamo

    torch.set_num_threads(threads)

    from corpus.registry import find_entry
    from harness.execute import describe_error, execute_entry

    # the environment the worker really runs with, for the run metadata
    conn.send(("ready", None, {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is not None else None,
                               "threads": torch.get_num_threads()}))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        if target.device == "cpu":
            _limit_memory(config.mem_limit_mb)
        try:
            conn.send(("phase", task.name, "load"))
            if task.payload is not None:
                from harness.fuzz.execute import execute_payload

                result = execute_payload(task.payload, target, lambda p, n=task.name: conn.send(("phase", n, p)))
            else:
                entry = find_entry(task.name, task.origin)
                result = execute_entry(entry, target, lambda p, n=task.name: conn.send(("phase", n, p)),
                                       capture=config.capture, reference=config.reference, mode=config.mode,
                                       dynamic=config.dynamic)
        except Exception as exc:  # noqa: BLE001 -- the harness itself failed on this entry: record, keep going
            error, detail = describe_error(exc)
            result = {"name": task.name, "target": target.name, "status": Status.CRASH,
                      "phase": "harness", "error": f"harness error: {error}", "error_detail": detail}
        # what the worker actually runs with (the environment it set), not what it was asked for
        result.update(worker_threads=torch.get_num_threads(),
                      worker_gpu=os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is not None else None)
        conn.send(("done", task.name, result))


_CRASH_SIGNALS = {signal.SIGSEGV: "SIGSEGV", signal.SIGABRT: "SIGABRT", signal.SIGBUS: "SIGBUS",
                  signal.SIGILL: "SIGILL", signal.SIGFPE: "SIGFPE"}


def death_status(exitcode: int | None) -> tuple[str, str]:
    """(status, message) for a worker that died while running an entry."""
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        if sig == signal.SIGKILL:
            return Status.OOM, "worker killed by SIGKILL (out of memory: the kernel's OOM killer)"
        name = _CRASH_SIGNALS.get(sig) or signal.Signals(sig).name
        return Status.CRASH, f"worker died from {name}"
    return Status.CRASH, f"worker exited with code {exitcode} while running the entry"


@dataclass
class _Slot:
    index: int
    log_path: str
    proc: Any = None
    conn: Connection | None = None
    ready: bool = False
    task: Task | None = None
    phase: str = ""
    deadline: float = 0.0
    started: float = 0.0
    log_offset: int = 0
    failed_starts: int = 0
    load_s: float | None = None


class WorkerPool:
    """Runs tasks on ``jobs`` isolated workers; calls ``on_result(record)`` as each finishes."""

    def __init__(self, config: WorkerConfig, jobs: int = 1, keep: bool = False) -> None:
        """``keep=True``: the workers outlive a call of ``run`` (for callers that hand over one task
        at a time, such as the pytest plugin); ``close()`` stops them."""
        self.config = config
        self.jobs = max(1, jobs)
        self.keep = keep
        self._kept: list[_Slot] = []
        self._ctx = mp.get_context("spawn")
        self._logdir = ""
        # per worker slot, as the worker reported it at start-up: {"gpu": ..., "threads": ...}
        self.workers: dict[int, dict] = {}

    def _start(self, slot: _Slot) -> None:
        parent_conn, child_conn = self._ctx.Pipe()
        gpu = gpu_for_worker(slot.index, self.config.gpus) if self._pins_gpus() else None
        slot.proc = self._ctx.Process(target=worker_main, daemon=True,
                                      args=(child_conn, self.config, slot.log_path, os.getpid(), gpu))
        slot.proc.start()
        child_conn.close()
        slot.conn, slot.ready, slot.task = parent_conn, False, None

    def _pins_gpus(self) -> bool:
        from harness.targets import parse_target

        return bool(self.config.gpus) and parse_target(self.config.target, self.config.device).device == "cuda"

    def _stop(self, slot: _Slot, kill: bool) -> int | None:
        if slot.proc is None:
            return None
        if kill and slot.proc.is_alive():
            slot.proc.kill()
        slot.proc.join(timeout=10)
        code = slot.proc.exitcode
        if slot.conn is not None:
            slot.conn.close()
        slot.proc, slot.conn, slot.ready = None, None, False
        return code

    def _log_tail(self, slot: _Slot) -> str:
        """The worker's output since the entry started: a crash's traceback (innermost frame first)."""
        try:
            with open(slot.log_path, "rb") as f:
                f.seek(slot.log_offset)
                text = f.read()[-200_000:].decode(errors="replace")
        except OSError:
            return ""
        # faulthandler lists every extension module after the traceback: noise here.
        lines = [line for line in text.splitlines() if not line.startswith("Extension modules:")]
        # Keep the start of the fault report (the innermost frames are printed first).
        start = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
        kept = "\n".join(lines[start:] if start is not None else lines)
        return kept[:4000] if start is not None else kept[-4000:]

    def _dispatch(self, slot: _Slot, task: Task) -> None:
        slot.task, slot.phase, slot.load_s = task, "load", None
        slot.started = time.monotonic()
        slot.deadline = slot.started + self.config.timeout_s
        slot.log_offset = os.path.getsize(slot.log_path) if os.path.exists(slot.log_path) else 0
        try:
            slot.conn.send(task)
        except OSError:
            pass  # the worker just died: the next wait() sees EOF and records it

    def _died(self, slot: _Slot, status: str, message: str) -> dict:
        task = slot.task
        record = {"name": task.name, "target": self.config.target, "status": status, "phase": slot.phase,
                  "error": f"{message} during {slot.phase}", "error_detail": self._log_tail(slot)}
        if status == Status.TIMEOUT:
            record["error"] = f"timed out after {self.config.timeout_s:g}s during {slot.phase}"
        if self._pins_gpus():
            record["worker_gpu"] = gpu_for_worker(slot.index, self.config.gpus)
        return record

    def run(self, tasks: list[Task], on_result: Callable[[dict], None],
            on_phase: Callable[[str, str], None] = lambda name, phase: None) -> None:
        pending = list(reversed(tasks))
        if self._kept:  # kept=True: the workers of the previous call, still warm
            slots = self._kept
        else:
            self._logdir = tempfile.mkdtemp(prefix="crucible-workers-")
            slots = [_Slot(i, os.path.join(self._logdir, f"worker-{i}.log"))
                     for i in range(min(self.jobs, len(tasks)))]
        try:
            for slot in slots:
                if slot.proc is None:
                    self._start(slot)
            while any(s.task is not None for s in slots) or pending:
                for slot in slots:
                    if slot.ready and slot.task is None and pending:
                        self._dispatch(slot, pending.pop())
                    elif slot.proc is None and pending:
                        self._start(slot)
                live = [s for s in slots if s.conn is not None]
                if not live:
                    break
                now = time.monotonic()
                busy = [s.deadline for s in slots if s.task is not None]
                timeout = min([1.0] + [max(0.0, d - now) for d in busy])
                ready_conns = wait([s.conn for s in live], timeout=timeout)
                for slot in live:
                    if slot.conn in ready_conns:
                        self._receive(slot, on_result, on_phase)
                now = time.monotonic()
                for slot in slots:
                    if slot.task is not None and now > slot.deadline:
                        self._stop(slot, kill=True)
                        on_result(self._died(slot, Status.TIMEOUT, "timeout"))
                        slot.task = None
        finally:
            if self.keep:
                self._kept = slots
                for slot in slots:
                    if slot.task is not None:  # interrupted mid-entry: that worker cannot be reused
                        self._stop(slot, kill=True)
                        slot.task = None
            else:
                self._close(slots)

    def close(self) -> None:
        """Stop the workers a ``keep=True`` pool kept between calls of ``run``."""
        self._close(self._kept)
        self._kept = []

    def _close(self, slots: list[_Slot]) -> None:
        for slot in slots:
            if slot.conn is not None and slot.task is None:
                try:
                    slot.conn.send(None)
                except OSError:
                    pass
            self._stop(slot, kill=slot.task is not None)
        # Crashed entries already carry their log tail in their result.
        if self._logdir:
            shutil.rmtree(self._logdir, ignore_errors=True)

    def _receive(self, slot: _Slot, on_result: Callable[[dict], None],
                 on_phase: Callable[[str, str], None]) -> None:
        try:
            kind, name, payload = slot.conn.recv()
        except (EOFError, OSError):
            code = self._stop(slot, kill=False)
            if slot.task is not None:
                status, message = death_status(code)
                on_result(self._died(slot, status, message))
                slot.task = None
            else:
                slot.failed_starts += 1
                if slot.failed_starts >= 3:
                    raise RuntimeError(f"worker failed to start 3 times; see {slot.log_path}:\n"
                                       f"{self._log_tail(slot)}") from None
            return
        if kind == "ready":
            slot.ready, slot.failed_starts = True, 0
            if payload:
                self.workers[slot.index] = payload
        elif kind == "phase":
            if slot.phase == "load" and payload == "build":
                # Listing the entry's source (once per worker, slow for some sources) is
                # not the entry's time: its deadline starts when it is built.
                slot.deadline = time.monotonic() + self.config.timeout_s
                slot.load_s = time.monotonic() - slot.started
            slot.phase = payload
            on_phase(name, payload)
        elif kind == "done":
            payload.setdefault("wall_s", time.monotonic() - slot.started)
            payload.setdefault("load_s", slot.load_s)
            slot.task = None
            on_result(payload)
