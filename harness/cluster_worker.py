"""The worker side of the cluster executor (``harness.cluster``): what runs inside a Dask worker.

``run_on_worker`` is the function of every Dask task: it checks the worker's build against the
submitter's and runs the harness task in an isolated process of a ``harness.pool.WorkerPool`` of
one. The pools are the worker's state (``WarmPools``, a worker plugin the submitter registers): one
per worker thread, kept warm between tasks (torch imported once) and closed with the worker.
This module imports Dask's distributed; ``harness.cluster`` imports it only when a cluster runs.
"""

from __future__ import annotations

import multiprocessing
import threading
from dataclasses import replace
from typing import Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from harness.pool import Task, WorkerConfig, WorkerPool
from harness.result import Result
from harness.versions import Build, this_build


def host_of(address: str) -> str:
    """The host part of a Dask address (``tcp://10.0.0.5:40123`` -> ``10.0.0.5``)."""
    return address.rpartition("://")[2].rpartition(":")[0]


class WarmPools(WorkerPlugin):
    """A Dask worker's warm isolated processes: per worker thread, a pool of one for the config of
    its last task (another config replaces it); all closed when the worker closes."""

    name = "crucible-pools"

    def __init__(self) -> None:
        self.pools: dict[int, tuple[WorkerConfig, WorkerPool]] = {}

    def pool(self, config: WorkerConfig) -> WorkerPool:
        key = threading.get_ident()
        kept = self.pools.get(key)
        if kept is None or kept[0] != config:
            if kept is not None:
                kept[1].close()
            kept = self.pools[key] = (config, WorkerPool(config, 1, keep=True))
        return kept[1]

    def teardown(self, worker: Any) -> None:
        for _, pool in self.pools.values():
            pool.close()
        self.pools.clear()


def worker_build() -> Build:
    """The build of the Dask worker this runs in (``Client.run`` asks each worker for it)."""
    return this_build()


def run_on_worker(task: Task, config: WorkerConfig, expected: Build | None,
                  workers_per_host: dict[str, int]) -> tuple[str, Any]:
    """Run ``task`` in an isolated process of this Dask worker: ("done", Result), or ("refused",
    this worker's Build) when its build differs from ``expected``, or ("unusable", why)."""
    build = this_build()
    if expected is not None and expected.differences(build):
        return "refused", build
    if multiprocessing.current_process().daemon:
        return "unusable", ("the Dask worker runs as a daemonic process, which may not start the isolated "
                            "process each task runs in: start workers with DASK_DISTRIBUTED__WORKER__DAEMON=False "
                            "in their environment (docs/cluster.md)")
    worker = get_worker()
    if config.threads is None:  # torch threads: this machine's cores shared by its workers
        config = replace(config, jobs=max(1, workers_per_host.get(host_of(worker.address), 1)))
    results: list[Result] = []
    worker.plugins[WarmPools.name].pool(config).run([task], results.append)
    return "done", results[-1].replace(worker_host=f"{build.host} {worker.address}", worker_build=build.label())
