"""Runs tasks on a cluster of Dask's distributed engine: ``--cluster local:N`` or ``--cluster ADDRESS``.

The engine schedules, the harness isolates. Each task (an entry, a fuzz graph, a corpus check) is
one Dask task whose function (``harness.cluster_worker.run_on_worker``) runs on a Dask worker and
hands the task to a ``harness.pool.WorkerPool`` of one, kept warm in that worker (``WarmPools``, a
worker plugin): the same spawned process, deadline, memory limit and crash/hang/OOM statuses as the
single-host pool. Dask adds what one host cannot:
workers on many machines, per-task resources (a CUDA target's task asks for ``GPU=1``; a GPU worker
declares ``--resources GPU=1`` and sees one device), and rescheduling when a worker dies. The
scheduler re-queues a task whose worker died once (``allowed-failures`` = 1); a second death records
the task ``crash`` with the worker named.

``ClusterExecutor.run`` has the single-host pool's interface (tasks in, ``on_result`` per result as
it finishes, ``stop``), so the runner, the corpus checks and the fuzzer use either. Tasks are
submitted in the caller's order as priorities (the runner orders longest first).

Versions: each worker's build (``harness.versions.Build``: commit, sources digest, torch, triton) is
asked for when it is first seen. A worker whose build differs from the submitter's is refused (no
task runs there; a task it was sent comes back unrun and goes to a matching worker), or with
``mixed_versions`` used and its results labelled. Every result of a cluster run records the machine
and worker that ran it and that worker's build.

``local:N`` starts a scheduler and N worker processes on 127.0.0.1 for the run (no dashboard, no
other address) and stops them after it; they also end when the submitting process dies.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from harness.pool import Task, WorkerConfig, WorkerPool, gpu_for_worker
from harness.result import Result
from harness.status import Status
from harness.targets import parse_target
from harness.validation import UsageError
from harness.versions import Build, this_build

LOCAL = "local:"
ALLOWED_FAILURES = 1  # worker deaths a task survives (re-queued); one more records it crash
NO_WORKERS_S = 120.0  # how long a run waits with no worker in the cluster before it stops
_POLL_S = 0.2
_REFRESH_S = 2.0
_ADDRESS = re.compile(r"^(tcp|tls|ucx|inproc)://[^\s/]+:\d+$|^[\w.\-]+:\d+$")
INSTALL_HINT = "install it with: python -m pip install 'crucible[cluster]' (Dask's distributed)"


def cluster_worker() -> Any:
    """``harness.cluster_worker``, imported when a cluster runs (it imports Dask's distributed)."""
    import harness.cluster_worker

    return harness.cluster_worker


class ClusterError(RuntimeError):
    """The cluster cannot run the tasks (no workers, none of this build, none with a GPU): finished
    results are stored; ``--resume`` continues once the cluster is fixed."""


def check_cluster_option(text: str) -> str:
    """``--cluster``'s value, checked before any work starts (a ValueError says what is wrong)."""
    if text.startswith(LOCAL):
        count = text[len(LOCAL):]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--cluster {text}: local:N takes a number of workers >= 1 (e.g. local:4)")
    elif not _ADDRESS.match(text):
        raise ValueError(f"--cluster {text}: give local:N (a cluster of N workers on this machine) or a "
                         "scheduler's address, host:port or tcp://host:port")
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ValueError(f"--cluster needs Dask's distributed, which is not installed: {INSTALL_HINT}") from None
    return text


def cluster_options(p: argparse.ArgumentParser) -> None:
    """``--cluster`` and ``--mixed-versions`` of the commands that run tasks (run, fuzz, corpus check)."""
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run on a Dask cluster: local:N starts N workers on this machine for the run, otherwise "
                        "a scheduler's host:port (docs/cluster.md)")
    p.add_argument("--mixed-versions", action="store_true",
                   help="--cluster: use workers whose commit or torch/triton differ from this one's, labelling "
                        "their results (default: such workers are refused)")


def check_cluster_settings(args: argparse.Namespace) -> None:
    """``--cluster`` and ``--mixed-versions``, checked before any work starts."""
    if args.mixed_versions and not args.cluster:
        raise UsageError("--mixed-versions applies to --cluster runs")
    if args.cluster:
        check_cluster_option(args.cluster)


# -- the submitting side -----------------------------------------------------

@dataclass
class WorkerInfo:
    """What the submitter knows of one Dask worker."""

    address: str
    build: Build | None = None
    refused: str = ""  # why no task runs there ("" when it is used)
    in_flight: int = 0
    done: int = 0
    wall_s: float = 0.0
    alive: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "host": self.build.host if self.build else None,
                "build": self.build.label() if self.build else None, "refused": self.refused or None,
                "entries": self.done, "wall_s": round(self.wall_s, 3), "alive": self.alive}


class Cluster:
    """A client of a Dask cluster: started here for ``local:N`` (on 127.0.0.1), else connected to."""

    def __init__(self, spec: str, target: str, device: str | None = None, gpus: tuple[str, ...] = ()) -> None:
        self.spec = check_cluster_option(spec)
        self.cuda = parse_target(target, device).device == "cuda"
        self.gpus = gpus
        self.client: Any = None
        self._cluster: Any = None
        self._config: Any = None
        self.allowed_failures: int | None = None

    def __enter__(self) -> Cluster:
        import dask
        from distributed import Client

        # Each task starts an isolated process: a daemonic Dask worker may not have children.
        # The nanny's memory monitor stays off: each task runs under the harness's own limit.
        self._config = dask.config.set({"distributed.worker.daemon": False,
                                        "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                                        "distributed.scheduler.worker-saturation": 1.0,
                                        "distributed.worker.memory.terminate": False,
                                        "distributed.admin.system-monitor.gil.enabled": False})
        self._config.__enter__()
        try:
            if self.spec.startswith(LOCAL):
                self._cluster = self._start_local(int(self.spec[len(LOCAL):]))
                self.client = Client(self._cluster)
            else:
                address = self.spec if "://" in self.spec else f"tcp://{self.spec}"
                try:
                    self.client = Client(address, timeout="30s")
                except OSError as exc:
                    raise ClusterError(f"--cluster {self.spec}: no scheduler answers there ({exc}); start one "
                                       "with `dask scheduler` (docs/cluster.md)") from None
            self.allowed_failures = self.client.run_on_scheduler(_allowed_failures)
        except BaseException:
            self.close()
            raise
        return self

    def _start_local(self, count: int) -> Any:
        import logging

        from distributed import Nanny, Scheduler, SpecCluster

        workers = {}
        for i in range(count):
            gpu = gpu_for_worker(i, self.gpus) if self.cuda else None
            env = {"CUDA_VISIBLE_DEVICES": gpu if gpu is not None else ""} if self.cuda else {}
            workers[f"worker-{i}"] = {"cls": Nanny, "options": {
                "host": "127.0.0.1", "nthreads": 1, "memory_limit": 0, "dashboard": False, "env": env,
                "resources": {"GPU": 1} if gpu is not None else None, "death_timeout": 60,
                "silence_logs": logging.ERROR}}
        scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard": False,
                                                   # its HTTP server (health, metrics) runs anyway: on
                                                   # loopback, any free port, not the fixed 8787 a
                                                   # user's own cluster may hold
                                                   "dashboard_address": "127.0.0.1:0",
                                                   "allowed_failures": ALLOWED_FAILURES}}
        return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR,
                           name=f"crucible-{self.spec}")

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._config is not None:
            self._config.__exit__(None, None, None)
            self._config = None

    def describe(self) -> dict[str, Any]:
        """For the run's metadata: the scheduler and its re-queue policy."""
        return {"cluster": self.spec, "scheduler": self.client.scheduler.address if self.client else None,
                "allowed_failures": self.allowed_failures}


def _allowed_failures(dask_scheduler: Any) -> int:
    return dask_scheduler.allowed_failures


@dataclass
class _Pending:
    task: Task
    priority: int
    refusals: int = 0
    started: float = field(default_factory=time.monotonic)


class ClusterExecutor:
    """Runs tasks on a ``Cluster`` with the single-host pool's interface (``harness.pool.WorkerPool``)."""

    def __init__(self, cluster: Cluster, config: WorkerConfig, mixed_versions: bool = False,
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> None:
        self.cluster = cluster
        self.config = replace(config, gpus=())  # a worker is pinned by its own environment
        self.mixed_versions = mixed_versions
        self.log = log
        self.build = this_build()
        self.workers: dict[str, WorkerInfo] = {}
        self._lock = threading.Lock()
        self._refreshed = 0.0
        self._per_host: dict[str, int] = {}
        self._resources: dict[str, dict] = {}
        pools = cluster_worker().WarmPools()
        cluster.client.register_plugin(pools, name=pools.name)  # each worker's warm processes

    # -- the workers --------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Learn the cluster's workers (their builds, the first time each is seen) and what runs where."""
        with self._lock:
            if not force and time.monotonic() - self._refreshed < _REFRESH_S:
                return
            self._refreshed = time.monotonic()
            client = self.cluster.client
            info = client.scheduler_info(n_workers=-1)["workers"]
            new = [address for address in info if address not in self.workers]
            if new:
                try:
                    builds = client.run(cluster_worker().worker_build, workers=new, on_error="return")
                except Exception as exc:  # noqa: BLE001 -- a worker that left meanwhile: asked again next time
                    builds = {address: exc for address in new}
                for address, build in builds.items():
                    if isinstance(build, Build):
                        self._admit(address, build)
            processing = client.processing()
            for address, worker in self.workers.items():
                worker.alive = address in info
                worker.in_flight = len(processing.get(address, ()))
            self._per_host = {}
            for address in info:
                host = cluster_worker().host_of(address)
                self._per_host[host] = self._per_host.get(host, 0) + 1
            self._resources = {address: w.get("resources") or {} for address, w in info.items()}

    def _admit(self, address: str, build: Build) -> None:
        differences = self.build.differences(build)
        worker = self.workers[address] = WorkerInfo(address, build)
        if differences and not self.mixed_versions:
            worker.refused = "; ".join(differences)
            self.log(f"cluster: refusing worker {address} on {build.host}: it runs {worker.refused} "
                     "(start it from the submitter's checkout, or pass --mixed-versions to use it and label its results)")
        elif differences:
            self.log(f"cluster: worker {address} on {build.host} runs {'; '.join(differences)}: "
                     "its results are labelled with its build (--mixed-versions)")

    def accepted(self) -> list[str]:
        return [a for a, w in self.workers.items() if w.alive and not w.refused]

    def describe(self) -> str:
        """For the progress line: workers alive and what each runs."""
        alive = [w for w in self.workers.values() if w.alive and not w.refused]
        refused = sum(1 for w in self.workers.values() if w.alive and w.refused)
        busy = " ".join(str(w.in_flight) for w in alive)
        return (f"workers {len(alive)}" + (f" (+{refused} refused)" if refused else "") +
                (f", in flight per worker [{busy}]" if alive else ""))

    def _wait_for_workers(self) -> None:
        if self.accepted():
            return
        deadline = time.monotonic() + NO_WORKERS_S
        while True:
            self.refresh(force=True)
            if self.accepted():
                break
            if any(w.alive for w in self.workers.values()):  # workers, none of this build
                raise ClusterError(
                    f"no worker of the cluster at {self.cluster.spec} runs this build ({self.build.label()}): "
                    + "; ".join(f"{a} runs {w.refused}" for a, w in self.workers.items() if w.refused)
                    + ". Start workers from this checkout, or pass --mixed-versions")
            if time.monotonic() > deadline:
                raise ClusterError(f"no worker joined the cluster at {self.cluster.spec} within {NO_WORKERS_S:g}s: "
                                   "start workers with `dask worker ADDRESS` (docs/cluster.md)")
            time.sleep(1.0)
        if self.cluster.cuda and not any(self._resources.get(a, {}).get("GPU") for a in self.accepted()):
            raise ClusterError(f"a CUDA target needs GPU workers, and no worker of the cluster at {self.cluster.spec} "
                               "declares a GPU: start one per GPU with CUDA_VISIBLE_DEVICES=<id> dask worker ADDRESS "
                               "--resources GPU=1 (docs/cluster.md)")

    # -- running ------------------------------------------------------------
    def _submit(self, pending: _Pending, only: list[str] | None = None) -> Any:
        expected = None if self.mixed_versions else self.build
        return self.cluster.client.submit(
            cluster_worker().run_on_worker, pending.task, self.config, expected, dict(self._per_host),
            # one task group ("crucible"), so the scheduler queues the tasks and hands each worker
            # one at a time in priority order (a group per task would be assigned to workers at once)
            key=f"crucible-{uuid.uuid4().hex}", pure=False, priority=pending.priority,
            resources={"GPU": 1} if self.cluster.cuda else None, workers=only, allow_other_workers=False)

    def run(self, tasks: list[Task], on_result: Callable[[Result], None],
            on_phase: Callable[[str, str], None] = lambda name, phase: None,
            stop: Callable[[], bool] = lambda: False) -> None:
        """Run ``tasks`` on the cluster; ``on_result`` gets each Result as it finishes. Once ``stop()``
        is true, tasks not yet started are cancelled; those in flight finish and are reported."""
        from distributed import as_completed

        if not tasks:
            return
        self._wait_for_workers()
        futures: dict[Any, _Pending] = {}
        for i, task in enumerate(tasks):
            pending = _Pending(task, priority=len(tasks) - i)
            futures[self._submit(pending)] = pending
        finished = as_completed(list(futures))
        stopping = False
        idle_since: float | None = None
        try:
            while not finished.is_empty():
                batch = finished.next_batch(block=False) if finished.has_ready() else []
                for future in batch:
                    pending = futures.pop(future)
                    follow_up = self._finished(future, pending, on_result)
                    if follow_up is not None and not stopping:
                        futures[follow_up] = pending
                        finished.add(follow_up)
                if batch:
                    continue
                with finished.thread_condition:  # until a task finishes, or the poll's time is up
                    if not finished.has_ready():
                        finished.thread_condition.wait(timeout=_POLL_S)
                if finished.has_ready():
                    continue
                self.refresh()
                if stop() and not stopping:
                    stopping = True
                    started = {key for keys in self.cluster.client.processing().values() for key in keys}
                    self.cluster.client.cancel([f for f in futures if f.key not in started])
                if not any(w.alive for w in self.workers.values()):
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > NO_WORKERS_S:
                        raise ClusterError(f"the cluster at {self.cluster.spec} has had no worker for "
                                           f"{NO_WORKERS_S:g}s with {len(futures)} tasks left")
                else:
                    idle_since = None
        finally:
            if futures:
                self.cluster.client.cancel(list(futures))

    def _finished(self, future: Any, pending: _Pending, on_result: Callable[[Result], None]) -> Any:
        """Report a finished future; returns the future of a resubmission (a refused task), or None."""
        if future.status == "cancelled":
            return None
        if future.status == "error":
            on_result(self._died(pending, future.exception()))
            return None
        kind, payload = future.result()
        if kind == "refused":
            if not any(w.build == payload for w in self.workers.values()):
                self.refresh(force=True)  # a worker that joined since: learn (and refuse) it
            pending.refusals += 1
            accepted = self.accepted()
            if not accepted or pending.refusals > 3:
                raise ClusterError(f"task {pending.task.name} was sent to workers of another build {pending.refusals} "
                                   f"times ({payload.label()} vs {self.build.label()}); no worker of this build is "
                                   "left: start one, or pass --mixed-versions")
            return self._submit(pending, only=accepted)
        if kind == "unusable":
            raise ClusterError(payload)
        result: Result = payload
        address = (result.worker_host or "").rpartition(" ")[2]
        worker = self.workers.get(address)
        if worker is not None:
            worker.done += 1
            worker.wall_s += result.wall_s or 0.0
        on_result(result)
        return None

    def _died(self, pending: _Pending, exc: BaseException | None) -> Result:
        """A task whose worker died, twice (``KilledWorker``), or that the engine could not run."""
        last = getattr(exc, "last_worker", None)
        address = getattr(last, "address", None) or (str(last) if last is not None else None)
        host = self.workers[address].build.host if address in self.workers and self.workers[address].build else None
        if type(exc).__name__ == "KilledWorker":
            error = (f"the cluster worker {address or '?'} died running it (it had been re-queued "
                     f"{self.cluster.allowed_failures} time(s) after an earlier worker died running it)")
        else:
            error = f"the cluster could not run it: {type(exc).__name__}: {exc}"
        return Result(name=pending.task.name, target=self.config.target, status=Status.CRASH, error=error,
                      worker_host=f"{host or '?'} {address}" if address else None,
                      wall_s=time.monotonic() - pending.started)

    def close(self) -> None:
        """Nothing to stop: the cluster's owner closes it (``Cluster``)."""
        return None


@contextmanager
def open_executor(config: WorkerConfig, cluster: str | None = None, mixed_versions: bool = False,
                  stats: dict | None = None) -> Iterator[WorkerPool | ClusterExecutor]:
    """What runs tasks: the single-host pool of ``config.jobs`` workers, or (``cluster`` given) that
    cluster. ``stats`` receives what the run's metadata records of the workers when it ends."""
    if cluster is None:
        pool = WorkerPool(config, config.jobs)
        yield pool
        if stats is not None and pool.workers:  # what each worker reported at start-up: GPU, threads
            stats["workers"] = [pool.workers[i] for i in sorted(pool.workers)]
        return
    with Cluster(cluster, config.target, config.device, config.gpus) as running:
        executor = ClusterExecutor(running, config, mixed_versions)
        try:
            yield executor
        finally:
            if stats is not None:
                stats.update(running.describe(), mixed_versions=mixed_versions,
                             workers=[w.to_dict() for w in executor.workers.values()])
