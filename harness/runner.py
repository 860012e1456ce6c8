"""A harness run: select entries, shard, skip finished ones, run them isolated, store results."""

from __future__ import annotations

import errno
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TextIO

from corpus.entry import Entry
from corpus.registry import Catalog
from harness.cluster import ClusterError, open_executor
from harness.engine import Expectation
from harness.pool import WorkerConfig, gpu_for_worker, threads_per_worker
from harness.result import Result
from harness.status import Status
from harness.store import ResultStore, StoreError
from harness.tasks import EntryTask
from harness.versions import git_commit, triton_version

# Cost assumed for entries without a measured eager time when balancing shards.
_DEFAULT_EAGER_MS = 100.0


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' with 1 <= i <= n -> (i, n)."""
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/n (e.g. 2/4), got {text!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: need 1 <= i <= n")
    return i, n


def shard_entries(entries: list[Entry], index: int, count: int) -> list[Entry]:
    """The entries of shard ``index`` (1-based) of ``count``.

    Deterministic and balanced: longest-first greedy assignment by Entry.eager_ms
    (names break ties), so every entry lands in exactly one shard whatever order
    the sources listed them in.
    """
    loads = [0.0] * count
    owner: dict[str, int] = {}
    ordered = sorted(entries, key=lambda e: (-(e.eager_ms or _DEFAULT_EAGER_MS), e.name))
    for e in ordered:
        shard = min(range(count), key=lambda s: (loads[s], s))
        owner[e.name] = shard
        loads[shard] += e.eager_ms or _DEFAULT_EAGER_MS
    return [e for e in entries if owner[e.name] == index - 1]


def entry_costs(entries: list[Entry], history: dict[str, float]) -> dict[str, float]:
    """Seconds each entry is expected to take on the run's target, to order a run longest first.

    An entry's own last time on the target (``ResultStore.durations``: compile and run included);
    without one, the median of its family's times there; without those, its eager time scaled by
    the median ratio of target time to eager time over the entries that have both (a compile can
    take 50x the eager run, so eager time alone misorders a run that has a history)."""
    by_family: dict[str, list[float]] = {}
    ratios = []
    for e in entries:
        if e.name in history:
            by_family.setdefault(e.family, []).append(history[e.name])
            if e.eager_ms:
                ratios.append(history[e.name] / (e.eager_ms / 1000))
    scale = statistics.median(ratios) if ratios else 1.0
    costs = {}
    for e in entries:
        if e.name in history:
            costs[e.name] = history[e.name]
        elif e.family in by_family:
            costs[e.name] = statistics.median(by_family[e.family])
        else:
            costs[e.name] = (e.eager_ms or _DEFAULT_EAGER_MS) / 1000 * scale
    return costs


def run_metadata(suite: str, target: str, seed: int | None, shard: str | None,
                 unavailable: dict[str, str]) -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"suite": suite, "target": target, "torch": torch.__version__, "triton": triton_version(),
            "python": platform.python_version(), "platform": platform.platform(), "gpu": gpu,
            "git_commit": git_commit(), "seed": seed, "shard": shard, "sources_unavailable": unavailable}


@dataclass
class Progress:
    """A live one-line progress display on stderr: done/total, elapsed, an ETA, statuses, what runs.

    On a terminal the line is redrawn in place; otherwise (CI logs, pipes) the same line is printed
    at most every ``LOG_EVERY_S`` seconds, so logs stay short. The ETA assumes the remaining entries
    take what the finished ones took on average (the pool's parallelism is in that average)."""

    LOG_EVERY_S = 30.0

    total: int
    stream: TextIO | None = None  # None: sys.stderr as it is when the display starts (not at import)
    done: int = 0
    counts: Counter = field(default_factory=Counter)
    running: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    extra: Callable[[], str] | None = None  # more to show (a cluster's workers and what each runs)

    def __post_init__(self) -> None:
        if self.stream is None:
            self.stream = sys.stderr
        self.live = self.stream.isatty()
        self.logged = time.monotonic()

    def phase(self, name: str, phase: str) -> None:
        self.running[name] = phase
        self._draw()

    def finished(self, result: Result) -> None:
        self.done += 1
        self.counts[str(result.status)] += 1
        self.running.pop(result.name, None)
        self._draw()

    def eta(self) -> str:
        elapsed = time.monotonic() - self.started
        if not self.done or self.done >= self.total:
            return ""
        return f" ETA {_duration(elapsed / self.done * (self.total - self.done))}"

    def _line(self) -> str:
        status = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        current = ", ".join(f"{n} [{p}]" for n, p in list(self.running.items())[:2])
        elapsed = time.monotonic() - self.started
        rate = f" {60 * self.done / elapsed:.1f}/min" if self.done and elapsed > 0 else ""
        extra = f" | {self.extra()}" if self.extra else ""
        return f"[{self.done}/{self.total}] {_duration(elapsed)}{self.eta()}{rate} {status}{extra} | {current}"

    def _draw(self) -> None:
        if not self.live:
            if time.monotonic() - self.logged >= self.LOG_EVERY_S:
                self.logged = time.monotonic()
                self.stream.write(self._line() + "\n")
                self.stream.flush()
            return
        line = self._line()
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            width = 120
        self.stream.write("\r\033[K" + line[: width - 1])
        self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class RunRequest:
    suite: str
    target: str
    entries: list[Entry]
    catalog: Catalog
    db: str
    run_id: str | None = None
    resume: bool = False
    jobs: int = 1
    shard: str | None = None
    timeout_s: float = 600.0
    mem_limit_mb: int | None = None
    device: str | None = None
    capture: bool = True
    reference: str = "auto"
    mode: str = "inference"  # see harness.targets.MODES
    dynamic: bool = False
    gpus: tuple[str, ...] = ()  # CUDA devices the workers are spread over (CUDA targets)
    maxfail: int | None = None  # stop starting entries after this many failures against the compiler
    # what the expected-results file says per entry name (harness.expected); entries not in it must pass
    expected: dict[str, Expectation] = field(default_factory=dict)
    expected_file: str | None = None
    corpus: list[str] = field(default_factory=list)  # external corpus directories (absolute), for repro commands
    cluster: str | None = None  # run on a Dask cluster (harness.cluster): local:N or a scheduler's address
    mixed_versions: bool = False  # use cluster workers of another build, their results labelled


@dataclass
class RunOutcome:
    """How a run ended: its id, and what the exit status is made of."""

    run_id: str
    results: list[Result]
    stopped: str = ""  # why the run stopped before every entry ran (--maxfail), "" when it did not
    missing: list[str] = field(default_factory=list)  # planned entries without a result (the count check)

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.against_compiler]

    @property
    def improved(self) -> list[Result]:
        return [r for r in self.results if r.status == Status.XPASS]


def resolve_run_id(store: ResultStore, request: RunRequest) -> str | None:
    """The id of the run to continue (``--run-id`` or ``--resume``), or None for a new run."""
    if request.run_id:
        return request.run_id
    if request.resume:
        # Continue the latest unfinished run of this suite, target and mode.
        unfinished = [r for r in store.runs() if r["suite"] == request.suite and r["target"] == request.target
                      and not r["finished"] and r["metadata"].get("shard") == request.shard
                      and r["metadata"].get("mode", "inference") == request.mode
                      and bool(r["metadata"].get("dynamic")) == request.dynamic]
        if unfinished:
            return unfinished[-1]["id"]
    return None


def new_run_base(request: RunRequest) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    shard = f"-shard{request.shard.replace('/', 'of')}" if request.shard else ""
    mode = "-train" if request.mode == "train" else ""
    dynamic = "-dynamic" if request.dynamic else ""
    return f"{request.suite}-{request.target}{mode}{dynamic}-{stamp}{shard}"


class RunStopped(RuntimeError):
    """The run cannot go on (the disk is full, the store refuses writes and nothing can take them):
    what finished is stored, ``--resume`` continues once the cause is gone."""


class SafeRecorder:
    """Stores results; when the store refuses a write (locked past its timeout, the file damaged
    mid-run) the result goes to a JSON-lines file next to it instead, so a finished result is never
    lost, and the run says how to bring those results into the store. When that file cannot be
    written either (the disk is full: it is on the same disk), the run stops (``RunStopped``)."""

    def __init__(self, store: ResultStore, run: dict) -> None:
        self.store, self.run = store, run
        self.spill_path = f"{store.path}.unsaved-{run['id']}.jsonl"
        self.spilled = 0
        self.stored = 0
        self.error = ""

    def __call__(self, result: Result) -> None:
        try:
            self.store.record(self.run["id"], result)
            self.stored += 1
            return
        except StoreError as exc:
            self.error = str(exc)
        try:
            with open(self.spill_path, "a") as f:
                f.write(json.dumps({"run": self.run, "result": result.to_dict()}, default=str) + "\n")
        except OSError as exc:
            raise RunStopped(self._stop_message(exc)) from None
        self.spilled += 1

    def _stop_message(self, exc: OSError) -> str:
        cause = "the disk is full" if exc.errno == errno.ENOSPC else f"{exc.strerror or exc}"
        return (f"the run stops: {self.error}; the results could not be kept next to it either ({cause}: "
                f"{self.spill_path}). The {self.stored} results already stored in {self.store.path} are safe; "
                f"free space (or fix the store), then continue with `crucible run ... --resume` "
                f"(or --run-id {self.run['id']})")

    def advice(self) -> str:
        return (f"{self.spilled} result(s) could not be written to {self.store.path} ({self.error}); they are "
                f"in {self.spill_path}: once the store is usable, run `crucible merge {self.store.path} "
                f"{self.spill_path}`")


def planned_key(shard: str | None) -> str:
    """The key of a run's ``planned`` metadata a shard's entries are listed under."""
    return shard or "all"


def execute_run(request: RunRequest) -> RunOutcome:
    """Run the request's entries; every result is stored as it arrives."""
    jobs = max(1, request.jobs)
    selected = {e.name for e in request.entries}
    with ResultStore(request.db) as store:
        run_id = resolve_run_id(store, request)
        existing = store.run(run_id) if run_id else None
        if existing is None:
            seed = request.entries[0].seed if request.entries and len({e.seed for e in request.entries}) == 1 else None
            metadata = run_metadata(request.suite, request.target, seed, request.shard, request.catalog.unavailable)
            metadata.update(mode=request.mode, dynamic=request.dynamic, jobs=jobs, corpus=request.corpus,
                            device=request.device, reference=request.reference, capture=request.capture,
                            threads_per_worker=threads_per_worker(jobs), expected_file=request.expected_file,
                            worker_gpus=[gpu_for_worker(i, request.gpus) for i in range(jobs)]
                            if request.gpus and not request.cluster else None)
            if run_id:
                store.create_run(run_id, request.suite, request.target, metadata)
            else:
                run_id = store.create_unique_run(new_run_base(request), request.suite, request.target, metadata)
        # What this run (this shard of it) is to run: the count check at the end, and at merge time.
        metadata = store.run(run_id)["metadata"]
        planned = metadata.setdefault("planned", {})
        planned[planned_key(request.shard)] = sorted(set(planned.get(planned_key(request.shard), [])) | selected)
        store.update_metadata(run_id, metadata)
        done = store.finished_names(run_id) if (request.resume or existing is not None) else set()
        todo = [e for e in request.entries if e.name not in done]
        if done:
            print(f"resuming run {run_id}: {len(done)} entries already finished, {len(todo)} to go", file=sys.stderr)
        progress = Progress(len(todo))
        recorder = SafeRecorder(store, store.run(run_id))
        failures = [0]
        source_of = {e.name: e.source for e in request.entries}

        def store_result(result: Result) -> None:
            # a worker that died left a result without them
            result = result.replace(mode=result.mode or request.mode,
                                    suite=result.suite or source_of.get(result.name, request.suite))
            recorder(result)
            progress.finished(result)
            failures[0] += result.against_compiler

        config = WorkerConfig(target=request.target, device=request.device, timeout_s=request.timeout_s,
                              mem_limit_mb=request.mem_limit_mb, jobs=jobs, gpus=request.gpus)
        # Longest first (by this target's history in the store): the slowest entries must not start
        # last on an otherwise idle pool.
        costs = entry_costs(request.entries, store.durations(request.target, request.mode))
        todo.sort(key=lambda e: (-costs[e.name], e.name))
        tasks = [EntryTask(e.name, request.catalog.origin_of(e.name), mode=request.mode, dynamic=request.dynamic,
                           reference=request.reference, capture=request.capture,
                           expectation=request.expected.get(e.name)) for e in todo]
        stop = (lambda: failures[0] >= request.maxfail) if request.maxfail else (lambda: False)
        try:
            workers = _execute(request, config, tasks, store_result, progress, stop)
            if workers:
                metadata = store.run(run_id)["metadata"]
                metadata.update(workers)
                store.update_metadata(run_id, metadata)
        finally:
            progress.close()
            if recorder.spilled:
                print(recorder.advice(), file=sys.stderr)
        if recorder.spilled:
            raise StoreError(recorder.advice())
        finished = store.finished_names(run_id) & selected
        if len(finished) == len(request.entries):
            store.finish_run(run_id)
        results = [r for r in store.results(run_id) if r.name in selected]
        stopped = ""
        if len(finished) < len(request.entries) and request.maxfail and failures[0] >= request.maxfail:
            stopped = (f"stopped after {failures[0]} failure(s) (--maxfail {request.maxfail}); "
                       f"{len(request.entries) - len(finished)} entries not run: continue with --resume")
        missing = [] if stopped else sorted(selected - finished)
        return RunOutcome(run_id, results, stopped, missing)


def _execute(request: RunRequest, config: WorkerConfig, tasks: list[EntryTask], on_result: Callable[[Result], None],
             progress: Progress, stop: Callable[[], bool]) -> dict:
    """Run ``tasks`` on the single-host pool or on a cluster; returns what the run's metadata records
    of the workers."""
    stats: dict = {}
    try:
        with open_executor(config, request.cluster, request.mixed_versions, stats) as executor:
            progress.extra = getattr(executor, "describe", None)
            executor.run(tasks, on_result, progress.phase, stop)
    except ClusterError as exc:
        raise RunStopped(f"{exc}. Finished entries are stored; continue with `crucible run ... --resume`") from None
    return stats
