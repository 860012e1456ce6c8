"""Turns on the GPU host for ``harness.bench.models``: several rows (model x dtype, each in its own
process) compile at once, a row's timing runs alone.

A cold compile is CPU work (Dynamo, lowering, Triton's and Inductor's builds): on a host with many
cores several rows' compiles overlap. A timing must see an otherwise idle host: host-bound models
measure the CPU as much as the GPU. So each worker process alternates between two phases under one
lock shared by every worker of a run, a file lock (POSIX record locks: held per process, released
when the process dies, not inherited by Inductor's compile workers):

- ``compiling()``: a shared hold; any number of rows compile (or start up, or build models) at once;
- ``timing()``: an exclusive hold; it waits until the running compiles finish and no other row
  times. While any row waits to time, no new compile starts: every waiting timing runs before
  (a lock's waiters race when it is released: without that rule a row just started could slip in
  ahead of the waiting timings, and they would all wait out its whole compile).

Three bytes of the lock file: HOLD (shared by compiles, exclusive for the timing), TURNSTILE (one
timing at a time queues for HOLD) and PENDING (shared by every row waiting to time or timing; a
compile starts only once it can take it exclusively, i.e. when no timing is pending).

Each worker prints its changes of phase (``phase``), so a row that times out says whether it was
compiling, waiting for its turn or timing, and for how long.
This module imports nothing heavy: run as a script it is the worker's entry point, taking its
shared hold before ``import torch`` so that even a worker's start-up never overlaps a timing.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_TURNSTILE, _HOLD, _PENDING = 0, 1, 2  # byte offsets in the lock file


class Turns:
    """One worker's side of the run's lock (``path``); None: no lock (a run of one process)."""

    def __init__(self, path: str | None) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600) if path else None
        self.state = "none"  # "none" | "compiling" | "timing"

    def _lock(self, how: int, offset: int) -> None:
        fcntl.lockf(self.fd, how, 1, offset)

    def release(self) -> None:
        if self.fd is None or self.state == "none":
            self.state = "none"
            return
        self._lock(fcntl.LOCK_UN, _HOLD)
        if self.state == "timing":
            self._lock(fcntl.LOCK_UN, _TURNSTILE)
            self._lock(fcntl.LOCK_UN, _PENDING)
        self.state = "none"

    def compiling(self) -> None:
        """From here on this process compiles: shared with other compiling rows, never with a timing."""
        if self.fd is None or self.state == "compiling":
            self.state = "compiling"
            return
        self.release()
        phase("waiting to compile")
        self._lock(fcntl.LOCK_EX, _PENDING)  # waits while any timing runs or is waiting to
        self._lock(fcntl.LOCK_UN, _PENDING)
        self._lock(fcntl.LOCK_EX, _TURNSTILE)  # a timing that asked since then goes first
        self._lock(fcntl.LOCK_SH, _HOLD)
        self._lock(fcntl.LOCK_UN, _TURNSTILE)
        self.state = "compiling"
        phase("compiling")

    def timing(self) -> None:
        """From here on this process times: alone on the host (among this run's workers)."""
        if self.fd is None or self.state == "timing":
            self.state = "timing"
            return
        self.release()
        phase("waiting to time")
        self._lock(fcntl.LOCK_SH, _PENDING)  # no new compile starts from now on
        self._lock(fcntl.LOCK_EX, _TURNSTILE)  # one timing at a time
        self._lock(fcntl.LOCK_EX, _HOLD)  # until the running compiles finish
        self.state = "timing"
        phase("timing")


PHASE = "TURN "  # a worker under a lock prints each change of phase: this prefix, the phase, the wall time
WAITS = {"waiting to time": "waiting for its timing turn: a timing waits until every running compile of "
                            "the rows sharing the lock has finished",
         "waiting to compile": "waiting to compile: a compile waits while any timing runs or waits"}


def phase(name: str) -> None:
    """Tell the parent (``run_row``) what this worker does from now on: a row that times out says where."""
    print(f"{PHASE}{name} {time.time():.3f}", flush=True)


def where_it_stopped(out: str, now: float) -> str:
    """The phase a worker's output last announced (``phase``) and for how long, for a timeout's message."""
    last = [line[len(PHASE):].rsplit(" ", 1) for line in out.splitlines() if line.startswith(PHASE)]
    if not last:
        return "starting up"
    name, since = last[-1]
    return f"{WAITS.get(name, name)}, for its last {now - float(since):.0f} s"


def _turns_file(text: str) -> Path:
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {path.parent} does not exist (name a file in an existing folder; "
                                         f"every run that shares the turns names the same file)")
    return path


def add_turns_option(parser: argparse.ArgumentParser) -> None:
    """``--turns FILE`` on a benchmark's command line (``run_lock``)."""
    parser.add_argument("--turns", type=_turns_file, metavar="FILE",
                        help="a lock file shared with other benchmark runs started on this host at the same time "
                             "(the training and inference tables together, say): every row's timing runs alone "
                             "among all of them while their compiles overlap; each run's compile workers are its "
                             "own share of the cores, so give the runs --jobs that add up to what one would take")


def run_lock(turns: Path | None, jobs: int, folder: str) -> str | None:
    """The lock a run's workers share: ``turns`` (other runs on the host share it too), else one in
    the run's temporary ``folder`` when rows run at once, else None (one row at a time)."""
    if turns is not None:
        return str(turns)
    return str(Path(folder) / "turns.lock") if jobs > 1 else None


BENCHMARKS = ("models", "training")  # the benchmarks whose rows run through turns (``harness.bench.<name>``)


def worker_command(lock: str | None, argv: list[str], bench: str = "models") -> list[str]:
    """The command line of a worker of ``harness.bench.<bench>``: ``turns_worker.py`` as a script
    (the shared hold first, then the benchmark), or ``python -m harness.bench.<bench>`` without a lock."""
    if bench not in BENCHMARKS:
        raise ValueError(f"bench={bench!r}: expected one of {', '.join(BENCHMARKS)}")
    if lock is None:
        return [sys.executable, "-m", f"harness.bench.{bench}", *argv]
    return [sys.executable, str(Path(__file__).resolve().with_name("turns_worker.py")), lock, bench, *argv]


def run_worker(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """(exit status or None on timeout, stdout, stderr) of a worker in its own process group: a
    timeout ends the worker and whatever it started (Inductor's compile workers), nothing else."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


RESULT = "RESULT "  # a worker prints its row as one line: this prefix, then the row as JSON


def run_row(bench: str, lock: str | None, argv: list[str], timeout: float, name: str, dtype: str) -> dict:
    """One row (``name`` in ``dtype``) of ``harness.bench.<bench>`` in a worker process: the row it
    printed, or the row's error (a timeout, or the exit status and the last line of stderr)."""
    status, out, err = run_worker(worker_command(lock, argv, bench), timeout)
    if status is None:
        where = f" ({where_it_stopped(out, time.time())})" if lock is not None else ""
        return {"model": name, "dtype": dtype, "error": f"timeout after {timeout:.0f} s{where}", "backends": {}}
    for line in out.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return {"model": name, "dtype": dtype, "error": f"exit {status}: {tail[:300]}", "backends": {}}


def run_all(jobs: list[Any], run: Callable[[Any, float], dict], workers: int, budget: float | None,
            timeout: float, done: Callable[[Any, dict, float], None],
            not_run: Callable[[Any], dict], least: float = 1.0) -> list[dict]:
    """``run(job, timeout)`` for every job on ``workers`` threads, results in the order of ``jobs``.

    ``budget`` (seconds for the whole run): a job gets at most what is left of it as its timeout,
    and one that would start with less than ``least`` seconds left is ``not_run(job)`` (it could not
    finish); ``done(job, result, seconds)`` is called as each one finishes (progress lines)."""
    start = time.perf_counter()
    lock = threading.Lock()

    def one(job: Any) -> dict:
        began = time.perf_counter()
        left = timeout if budget is None else min(timeout, budget - (began - start))
        result = not_run(job) if left < least else run(job, left)
        with lock:
            done(job, result, time.perf_counter() - began)
        return result

    if workers <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench-row") as pool:
        return list(pool.map(one, jobs))
