"""The worker lifecycle the runner's pool, the fuzzer and the minimizer share
(``harness.worker_process``): results, progress, crashes and hangs as replies, failed starts as
clear errors. The workers here import no torch, so each test takes a fraction of a second."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from harness.worker_process import WorkerProcess, death_status, serve


def _handle(task: Any, progress: Callable[[Any], None]) -> Any:
    if task == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "hang":
        time.sleep(60)
    progress(f"working on {task}")
    return (task, os.getpid())


def _echo_main(conn: Connection) -> None:
    print("worker up", flush=True)  # goes to the log
    serve(conn, _handle, {"pid": os.getpid()})


def _broken_main(conn: Connection) -> None:
    raise RuntimeError("no compiler here")


def _slow_main(conn: Connection) -> None:
    time.sleep(60)


def _worker(tmp_path: Path, main: Callable[..., None] = _echo_main, **options: Any) -> WorkerProcess:
    return WorkerProcess(main, (), str(tmp_path / "worker.log"), "the test worker", **options)


def test_one_worker_serves_tasks_in_turn_with_progress(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        seen: list[str] = []
        first = worker.call("a", timeout_s=60, on_progress=seen.append)
        second = worker.call("b", timeout_s=60)
        assert first.kind == second.kind == "done"
        assert first.payload[0] == "a" and second.payload[0] == "b"
        assert first.payload[1] == second.payload[1] == worker.info["pid"]  # the same process, kept
        assert seen == ["working on a"]
        assert "worker up" in worker.log_tail(0)
    finally:
        worker.close()
    assert not worker.running


def test_a_crash_is_a_reply_with_its_traceback_and_the_next_task_gets_a_fresh_worker(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        reply = worker.call("segfault", timeout_s=60)
        assert reply.kind == "died" and death_status(reply.payload) == ("crash", "worker died from SIGSEGV")
        assert worker.log_tail().startswith("Fatal Python error")  # faulthandler's report, from its start
        assert "worker up" not in worker.log_tail()  # only what the crashing task printed
        assert worker.call("after", timeout_s=60).kind == "done"
    finally:
        worker.close()


def test_a_hang_past_its_deadline_is_killed(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        start = time.monotonic()
        assert worker.call("hang", timeout_s=1).kind == "timeout"
        assert time.monotonic() - start < 20 and not worker.running
        assert worker.call("after", timeout_s=60).kind == "done"
    finally:
        worker.close()


def test_a_worker_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the test worker failed to start(.|\n)*no compiler here"):
        _worker(tmp_path, _broken_main).call("a", timeout_s=60)
    slow = _worker(tmp_path, _slow_main, start_timeout_s=1)
    with pytest.raises(RuntimeError, match="the test worker did not start within 1s"):
        slow.call("a", timeout_s=60)
    assert not slow.running


def test_death_status_names_the_signal_and_the_oom_killer() -> None:
    assert death_status(-signal.SIGKILL)[0] == "oom"
    assert death_status(-signal.SIGABRT) == ("crash", "worker died from SIGABRT")
    assert death_status(3) == ("crash", "worker exited with code 3 while running the entry")
