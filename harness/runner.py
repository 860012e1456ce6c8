"""A harness run: select entries, shard, skip finished ones, run them isolated, store results."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from corpus.entry import Entry
from corpus.registry import Catalog
from harness.pool import Task, WorkerConfig, WorkerPool, gpu_for_worker, threads_per_worker
from harness.store import ResultStore, StoreError

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


def _git_commit() -> str | None:
    """HEAD's commit, with ``-dirty`` when tracked files differ from it (results then came from
    code no commit holds)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=False)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                 capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    if not commit:
        return None
    return f"{commit}-dirty" if changed.returncode == 0 and changed.stdout.strip() else commit


def run_metadata(suite: str, target: str, seed: int | None, shard: str | None,
                 unavailable: dict[str, str]) -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"suite": suite, "target": target, "torch": torch.__version__, "triton": triton_version,
            "python": platform.python_version(), "platform": platform.platform(), "gpu": gpu,
            "git_commit": _git_commit(), "seed": seed, "shard": shard, "sources_unavailable": unavailable}


@dataclass
class Progress:
    """A live one-line progress display on stderr.

    On a terminal the line is redrawn in place; otherwise (CI logs, pipes) the same
    line is printed at most every ``LOG_EVERY_S`` seconds, so logs stay short.
    """

    LOG_EVERY_S = 30.0

    total: int
    stream: TextIO = sys.stderr
    done: int = 0
    counts: Counter = field(default_factory=Counter)
    running: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.live = self.stream.isatty()
        self.logged = time.monotonic()

    def phase(self, name: str, phase: str) -> None:
        self.running[name] = phase
        self._draw()

    def finished(self, result: dict) -> None:
        self.done += 1
        self.counts[result["status"]] += 1
        self.running.pop(result["name"], None)
        self._draw()

    def _line(self) -> str:
        status = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        current = ", ".join(f"{n} [{p}]" for n, p in list(self.running.items())[:2])
        return f"[{self.done}/{self.total}] {time.monotonic() - self.started:.0f}s {status} | {current}"

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
    mode: str = "inference"  # see harness.training.MODES
    dynamic: bool = False
    gpus: tuple[str, ...] = ()  # CUDA devices the workers are spread over (CUDA targets)


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


class SafeRecorder:
    """Stores results; when the store refuses a write (locked past its timeout, disk full, the
    file damaged mid-run) the result goes to a JSON-lines file next to it instead, so a finished
    result is never lost, and the run says how to bring those results into the store."""

    def __init__(self, store: ResultStore, run: dict) -> None:
        self.store, self.run = store, run
        self.spill_path = f"{store.path}.unsaved-{run['id']}.jsonl"
        self.spilled = 0
        self.error = ""

    def __call__(self, result: dict) -> None:
        try:
            self.store.record(self.run["id"], result)
            return
        except StoreError as exc:
            self.error = str(exc)
        with open(self.spill_path, "a") as f:
            f.write(json.dumps({"run": self.run, "result": result}, default=str) + "\n")
        self.spilled += 1

    def advice(self) -> str:
        return (f"{self.spilled} result(s) could not be written to {self.store.path} ({self.error}); they are "
                f"in {self.spill_path}: once the store is usable, run `crucible merge {self.store.path} "
                f"{self.spill_path}`")


def execute_run(request: RunRequest) -> str:
    """Run the request's entries; every result is stored as it arrives. Returns the run id."""
    jobs = max(1, request.jobs)
    with ResultStore(request.db) as store:
        run_id = resolve_run_id(store, request)
        existing = store.run(run_id) if run_id else None
        if existing is None:
            seed = request.entries[0].seed if request.entries and len({e.seed for e in request.entries}) == 1 else None
            metadata = run_metadata(request.suite, request.target, seed, request.shard, request.catalog.unavailable)
            metadata.update(mode=request.mode, dynamic=request.dynamic, jobs=jobs,
                            threads_per_worker=threads_per_worker(jobs),
                            worker_gpus=[gpu_for_worker(i, request.gpus) for i in range(jobs)]
                            if request.gpus else None)
            if run_id:
                store.create_run(run_id, request.suite, request.target, metadata)
            else:
                run_id = store.create_unique_run(new_run_base(request), request.suite, request.target, metadata)
        done = store.finished_names(run_id) if (request.resume or existing is not None) else set()
        todo = [e for e in request.entries if e.name not in done]
        if done:
            print(f"resuming run {run_id}: {len(done)} entries already finished, {len(todo)} to go", file=sys.stderr)
        suite_of = {e.name: e.source for e in request.entries}
        progress = Progress(len(todo))

        recorder = SafeRecorder(store, store.run(run_id))

        def store_result(result: dict) -> None:
            result["suite"] = suite_of.get(result["name"], request.suite)
            result.setdefault("mode", request.mode)
            recorder(result)
            progress.finished(result)

        config = WorkerConfig(target=request.target, device=request.device, timeout_s=request.timeout_s,
                              mem_limit_mb=request.mem_limit_mb, capture=request.capture,
                              reference=request.reference, jobs=jobs, mode=request.mode,
                              dynamic=request.dynamic, gpus=request.gpus)
        # Longest first: the slowest entries must not start last on an otherwise idle pool.
        todo.sort(key=lambda e: -(e.eager_ms or _DEFAULT_EAGER_MS))
        tasks = [Task(e.name, request.catalog.origin_of(e.name)) for e in todo]
        try:
            pool = WorkerPool(config, jobs)
            pool.run(tasks, store_result, progress.phase)
            if pool.workers:  # what each worker reported at start-up: its GPU and torch threads
                metadata = store.run(run_id)["metadata"]
                metadata["workers"] = [pool.workers[i] for i in sorted(pool.workers)]
                store.update_metadata(run_id, metadata)
        finally:
            progress.close()
            if recorder.spilled:
                print(recorder.advice(), file=sys.stderr)
        if recorder.spilled:
            raise StoreError(recorder.advice())
        if len(store.finished_names(run_id) & {e.name for e in request.entries}) == len(request.entries):
            store.finish_run(run_id)
        return run_id
