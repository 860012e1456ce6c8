"""Isolation: subjects run in spawned worker processes, as picklable task callables.

Each of the ``jobs`` workers is a ``harness.worker_process.WorkerProcess`` (a spawn process, its
output in a log) that imports torch once and then runs tasks one at a time, sent over a pipe. A
task is a picklable callable (``Task``: an entry, a fuzz graph, a decomposition rule, a corpus
check) that the worker calls with a ``WorkerContext`` and that returns a ``harness.result.Result``.
The parent keeps a wall-clock deadline per task. When a worker segfaults, aborts, is killed by the
kernel for memory, or passes its deadline (and is then killed), the task is recorded as
``crash``/``oom``/``timeout`` together with the phase it was in, a fresh worker replaces it and the
run goes on.

Memory: on CPU targets each task runs under ``RLIMIT_AS`` = the worker's address space when the
task starts + the limit, so a runaway allocation raises (``oom``) instead of taking the machine
down. CUDA targets skip this limit (the CUDA driver reserves huge virtual ranges); GPU OOM is
caught as an error. Workers of CPU targets run with the GPUs hidden (``CUDA_VISIBLE_DEVICES=""``);
workers of CUDA targets are pinned round-robin to ``WorkerConfig.gpus``, each seeing one device.
Each worker sets torch's intra-op threads to its share of the cores (``threads_per_worker``), or to
``WorkerConfig.threads``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Protocol

from harness.errors import describe_error
from harness.result import Result
from harness.status import Phase, Status
from harness.targets import Target, parse_target
from harness.worker_process import WorkerProcess, death_status, serve

__all__ = ["Task", "WorkerConfig", "WorkerContext", "WorkerPool", "available_cores", "death_status", "default_mem_limit",
           "gpu_for_worker", "load_plugin", "threads_per_worker", "visible_gpus", "worker_main"]


@dataclass(frozen=True)
class WorkerContext:
    """What a task sees in its worker: the target (parsed once per worker) and the phase callback
    (the parent learns from it where a task was when its worker died)."""

    target: Target
    progress: Callable[[str], None]


class Task(Protocol):
    """A unit of work for a worker: picklable (a module-level dataclass), named, returns a Result.

    ``imports``: plugin modules the worker imports first (``MODULE`` or ``MODULE:FUNCTION``, the
    function called once per process: a backend to register, or in tests a bug to plant)."""

    name: str
    imports: tuple[str, ...]

    def __call__(self, worker: WorkerContext) -> Result: ...


@dataclass(frozen=True)
class WorkerConfig:
    target: str
    device: str | None = None
    timeout_s: float = 600.0
    mem_limit_mb: int | None = None
    jobs: int = 1  # workers sharing the machine
    gpus: tuple[str, ...] = ()  # CUDA device ids the workers are spread over; () = all visible
    threads: int | None = None  # torch threads per worker; None: the worker's share of the cores
    max_tasks: int | None = None  # a worker is replaced after this many tasks (its memory only grows)


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


def default_mem_limit(jobs: int) -> int | None:
    """MB of address space per worker when none is given: 80% of the RAM shared by ``jobs`` workers."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return max(1024, int(total * 0.8 / max(1, jobs)) // (1024 * 1024))


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


_PLUGINS_CALLED: set[str] = set()


def load_plugin(spec: str) -> None:
    """Import ``MODULE``, or import ``MODULE:FUNCTION`` and call it (once per process)."""
    module_name, _, function = spec.partition(":")
    module = importlib.import_module(module_name)
    if function and spec not in _PLUGINS_CALLED:
        getattr(module, function)()
        _PLUGINS_CALLED.add(spec)


def run_task(task: Task, target: Target, progress: Callable[[str], None]) -> Result:
    """Call ``task`` in this process; a failure of the harness itself is a ``crash`` result of phase
    ``harness``, never the caller's exception (the in-process runners call this too)."""
    try:
        for spec in task.imports:
            load_plugin(spec)
        return task(WorkerContext(target, progress))
    except Exception as exc:  # noqa: BLE001 -- the harness itself failed on this task: record, keep going
        error, detail = describe_error(exc)
        return Result(name=task.name, target=target.name, status=Status.CRASH, phase=Phase.HARNESS,
                      error=f"harness error: {error}", error_detail=detail)


def worker_main(conn: Connection, config: WorkerConfig, gpu: str | None = None) -> None:
    """Entry point of a worker process (``harness.worker_process`` spawns it and sets up its log).

    ``gpu``: the CUDA device this worker is pinned to (it sees only that one, as ``cuda:0``)."""
    target = parse_target(config.target, config.device)
    if target.device == "cpu":
        # CPU targets never see the GPUs: under the address-space limit below, creating a CUDA
        # context fails as "out of memory", and some torch versions touch the accelerator while
        # tracing (Dynamo 2.11 asks for its current stream), which made CPU entries 'oom'.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    threads = config.threads or threads_per_worker(config.jobs)
    # the compiler builds a graph's kernels on several threads; workers share the cores
    os.environ.setdefault("CRUCIBLE_COMPILE_THREADS", str(threads))
    # OpenMP reads this at start-up (before torch sets its pool), torch.set_num_threads below
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # torch and Dynamo take seconds to import: once per worker, before the first deadline.
    import torch
    import torch._dynamo

    torch.set_num_threads(threads)

    def handle(task: Task, progress: Callable[[str], None]) -> Result:
        if target.device == "cpu":
            _limit_memory(config.mem_limit_mb)
        progress(Phase.LOAD.value)
        result = run_task(task, target, progress)
        # what the worker actually runs with (the environment it set), not what it was asked for
        return result.replace(worker_threads=torch.get_num_threads(),
                              worker_gpu=os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is not None else None)

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
    tasks_done: int = 0


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
        return bool(self.config.gpus) and parse_target(self.config.target, self.config.device).device == "cuda"

    def _dispatch(self, slot: _Slot, task: Task) -> None:
        slot.task, slot.phase, slot.load_s = task, Phase.LOAD.value, None
        slot.started = time.monotonic()
        slot.deadline = slot.started + self.config.timeout_s
        slot.worker.send(task)

    def _died(self, slot: _Slot, status: Status, message: str) -> Result:
        assert slot.task is not None
        error = f"{message} during {slot.phase}"
        if status == Status.TIMEOUT:
            error = f"timed out after {self.config.timeout_s:g}s during {slot.phase}"
        return Result(name=slot.task.name, target=self.config.target, status=status, phase=slot.phase or None,
                      error=error, error_detail=slot.worker.log_tail(),
                      worker_gpu=gpu_for_worker(slot.index, self.config.gpus) if self._pins_gpus() else None,
                      wall_s=time.monotonic() - slot.started)

    def run(self, tasks: list[Task], on_result: Callable[[Result], None],
            on_phase: Callable[[str, str], None] = lambda name, phase: None,
            stop: Callable[[], bool] = lambda: False) -> None:
        """Run ``tasks``; ``on_result`` gets each Result as it arrives (an exception it raises ends the
        run, killing the tasks in flight). Once ``stop()`` is true no further task starts; the tasks
        in flight finish and are reported."""
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
                if pending and stop():
                    pending.clear()
                    continue
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

    def _receive(self, slot: _Slot, on_result: Callable[[Result], None],
                 on_phase: Callable[[str, str], None]) -> None:
        kind, payload = slot.worker.receive()
        now = time.monotonic()
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
            if slot.phase == Phase.LOAD.value and payload == Phase.BUILD.value:
                # Listing the entry's source (once per worker, slow for some sources) is
                # not the entry's time: its deadline starts when it is built.
                slot.deadline = time.monotonic() + self.config.timeout_s
                slot.load_s = time.monotonic() - slot.started
            slot.phase = payload
            on_phase(slot.task.name, payload)
        elif kind == "done":
            result: Result = payload
            slot.task = None
            slot.tasks_done += 1
            if self.config.max_tasks and slot.tasks_done >= self.config.max_tasks:
                slot.worker.close()  # replaced before its next task: a long-lived worker's memory only grows
                slot.tasks_done = 0
            on_result(result.replace(wall_s=result.wall_s if result.wall_s is not None else now - slot.started,
                                     load_s=result.load_s if result.load_s is not None else slot.load_s))
