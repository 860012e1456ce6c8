"""Isolation: corpus entries run in spawned worker processes.

Each of the ``jobs`` workers is a ``harness.worker_process.WorkerProcess`` (a spawn process, its
output in a log) that imports torch once and then runs entries one at a time, sent over a pipe. The parent
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

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from corpus.registry import Origin
from harness.status import Status
from harness.worker_process import WorkerProcess, death_status, serve

__all__ = ["Task", "WorkerConfig", "WorkerPool", "available_cores", "death_status", "gpu_for_worker",
           "threads_per_worker", "visible_gpus", "worker_main"]


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


def _run_task(task: Task, target: Any, config: WorkerConfig, progress: Callable[[str], None]) -> dict:
    from corpus.registry import find_entry
    from harness.execute import execute_entry

    if task.payload is not None:
        from harness.fuzz.execute import execute_payload
        from harness.oracle import working_precision

        with working_precision():  # as execute_entry grades entries: float32 without TF32
            return execute_payload(task.payload, target, progress)
    entry = find_entry(task.name, task.origin)
    return execute_entry(entry, target, progress, capture=config.capture, reference=config.reference,
                         mode=config.mode, dynamic=config.dynamic)


def worker_main(conn: Connection, config: WorkerConfig, gpu: str | None = None) -> None:
    """Entry point of a worker process (``harness.worker_process`` spawns it and sets up its log).

    ``gpu``: the CUDA device this worker is pinned to (it sees only that one, as ``cuda:0``)."""
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

    from harness.errors import describe_error

    def handle(task: Task, progress: Callable[[str], None]) -> dict:
        if target.device == "cpu":
            _limit_memory(config.mem_limit_mb)
        try:
            progress("load")
            result = _run_task(task, target, config, progress)
        except Exception as exc:  # noqa: BLE001 -- the harness itself failed on this entry: record, keep going
            error, detail = describe_error(exc)
            result = {"name": task.name, "target": target.name, "status": Status.CRASH,
                      "phase": "harness", "error": f"harness error: {error}", "error_detail": detail}
        # what the worker actually runs with (the environment it set), not what it was asked for
        result.update(worker_threads=torch.get_num_threads(),
                      worker_gpu=os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is not None else None)
        return result

    # the environment the worker really runs with, for the run metadata
    serve(conn, handle, {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is not None else None,
                         "threads": torch.get_num_threads()})


@dataclass
class _Slot:
    index: int
    worker: WorkerProcess
    task: Task | None = None
    phase: str = ""
    deadline: float = 0.0
    started: float = 0.0
    failed_starts: int = 0
    load_s: float | None = None


class WorkerPool:
    """Runs tasks on ``jobs`` isolated workers; calls ``on_result(record)`` as each finishes."""

    def __init__(self, config: WorkerConfig, jobs: int = 1, keep: bool = False) -> None:
        """``keep=True``: the workers outlive a call of ``run`` (for callers that hand over one task
        at a time, such as the pytest plugin and the fuzzer); ``close()`` stops them."""
        self.config = config
        self.jobs = max(1, jobs)
        self.keep = keep
        self._kept: list[_Slot] = []
        self._logdir = ""
        # per worker slot, as the worker reported it at start-up: {"gpu": ..., "threads": ...}
        self.workers: dict[int, dict] = {}

    def _slot(self, index: int) -> _Slot:
        gpu = gpu_for_worker(index, self.config.gpus) if self._pins_gpus() else None
        log_path = os.path.join(self._logdir, f"worker-{index}.log")
        return _Slot(index, WorkerProcess(worker_main, (self.config, gpu), log_path))

    def _pins_gpus(self) -> bool:
        from harness.targets import parse_target

        return bool(self.config.gpus) and parse_target(self.config.target, self.config.device).device == "cuda"

    def _dispatch(self, slot: _Slot, task: Task) -> None:
        slot.task, slot.phase, slot.load_s = task, "load", None
        slot.started = time.monotonic()
        slot.deadline = slot.started + self.config.timeout_s
        slot.worker.send(task)

    def _died(self, slot: _Slot, status: str, message: str) -> dict:
        task = slot.task
        record = {"name": task.name, "target": self.config.target, "status": status, "phase": slot.phase,
                  "error": f"{message} during {slot.phase}", "error_detail": slot.worker.log_tail()}
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
            slots = [self._slot(i) for i in range(min(self.jobs, len(tasks)))]
        try:
            for slot in slots:
                if not slot.worker.running:
                    slot.worker.start()
            while any(s.task is not None for s in slots) or pending:
                for slot in slots:
                    if slot.worker.ready and slot.task is None and pending:
                        self._dispatch(slot, pending.pop())
                    elif not slot.worker.running and pending:
                        slot.worker.start()
                live = [s for s in slots if s.worker.running]
                if not live:
                    break
                now = time.monotonic()
                busy = [s.deadline for s in slots if s.task is not None]
                timeout = min([1.0] + [max(0.0, d - now) for d in busy])
                ready_conns = wait([s.worker.conn for s in live], timeout=timeout)
                for slot in live:
                    if slot.worker.conn in ready_conns:
                        self._receive(slot, on_result, on_phase)
                now = time.monotonic()
                for slot in slots:
                    if slot.task is not None and now > slot.deadline:
                        slot.worker.stop(kill=True)
                        on_result(self._died(slot, Status.TIMEOUT, "timeout"))
                        slot.task = None
                    elif slot.worker.start_overdue():  # hung while importing: counts as a failed start
                        slot.worker.stop(kill=True)
                        self._failed_start(slot)
        finally:
            if self.keep:
                self._kept = slots
                for slot in slots:
                    if slot.task is not None:  # interrupted mid-entry: that worker cannot be reused
                        slot.worker.stop(kill=True)
                        slot.task = None
            else:
                self._close(slots)

    def close(self) -> None:
        """Stop the workers a ``keep=True`` pool kept between calls of ``run``."""
        self._close(self._kept)
        self._kept = []

    def _close(self, slots: list[_Slot]) -> None:
        for slot in slots:
            if slot.task is None:
                slot.worker.close()
            else:
                slot.worker.stop(kill=True)
        # Crashed entries already carry their log tail in their result.
        if self._logdir:
            shutil.rmtree(self._logdir, ignore_errors=True)

    def _failed_start(self, slot: _Slot) -> None:
        slot.failed_starts += 1
        if slot.failed_starts >= 3:
            raise RuntimeError(f"worker failed to start 3 times; see {slot.worker.log_path}:\n"
                               f"{slot.worker.log_tail(0)}") from None

    def _receive(self, slot: _Slot, on_result: Callable[[dict], None],
                 on_phase: Callable[[str, str], None]) -> None:
        kind, payload = slot.worker.receive()
        if kind == "died":
            if slot.task is not None:
                status, message = death_status(payload)
                on_result(self._died(slot, status, message))
                slot.task = None
            else:
                self._failed_start(slot)
        elif kind == "ready":
            slot.failed_starts = 0
            if payload:
                self.workers[slot.index] = payload
        elif kind == "progress":
            if slot.phase == "load" and payload == "build":
                # Listing the entry's source (once per worker, slow for some sources) is
                # not the entry's time: its deadline starts when it is built.
                slot.deadline = time.monotonic() + self.config.timeout_s
                slot.load_s = time.monotonic() - slot.started
            slot.phase = payload
            on_phase(slot.task.name, payload)
        elif kind == "done":
            payload.setdefault("wall_s", time.monotonic() - slot.started)
            payload.setdefault("load_s", slot.load_s)
            slot.task = None
            on_result(payload)
