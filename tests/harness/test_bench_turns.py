"""``harness.bench.turns``: rows of the model benchmark compile at once, each timing runs alone.

The lock is exercised across real processes (POSIX record locks are per process); the children load
``turns_worker.py`` by path, so they start in a fraction of a second (no torch import)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.bench import models, training, turns
from harness.bench.turns import Turns, run_all, run_worker

CHILD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("turns", {path!r})
turns = importlib.util.module_from_spec(spec); spec.loader.exec_module(turns)
t = turns.Turns({lock!r})
getattr(t, {phase!r})()
print(time.time(), flush=True)
time.sleep({hold})
"""


def _child(lock: Path, phase: str, hold: float = 0.0) -> subprocess.Popen:
    code = CHILD.format(path=turns.__file__, lock=str(lock), phase=phase, hold=hold)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _started(proc: subprocess.Popen) -> float:
    out, _ = proc.communicate(timeout=30)
    (line,) = [line for line in out.splitlines() if not line.startswith(turns.PHASE)]  # its phases aside
    return float(line)


def test_a_timing_waits_for_compiles_and_later_compiles_wait_for_it(tmp_path) -> None:
    """While this process compiles, a timing row waits; a row that asks to compile after the timing
    asked waits behind it (compiles that keep coming never starve a timing)."""
    lock = tmp_path / "turns.lock"
    mine = Turns(str(lock))
    mine.compiling()
    timing = _child(lock, "timing", hold=0.5)
    time.sleep(0.5)  # the timing child is now waiting for this compile
    compiling = _child(lock, "compiling")
    time.sleep(0.5)
    released = time.time()
    mine.release()
    timed_at, compiled_at = _started(timing), _started(compiling)
    assert timed_at >= released
    assert compiled_at >= timed_at + 0.4  # after the timing's half-second hold, not beside it


def test_every_waiting_timing_runs_before_a_new_compile(tmp_path) -> None:
    """Two rows wait to time; a row asking to compile meanwhile starts only after both timed (the
    waiters of a released lock race: it must not slip in between and hold them for its compile)."""
    lock = tmp_path / "turns.lock"
    mine = Turns(str(lock))
    mine.compiling()
    timings = [_child(lock, "timing", hold=0.5) for _ in range(2)]
    time.sleep(0.5)
    compiling = _child(lock, "compiling")
    time.sleep(0.5)
    mine.release()
    timed = sorted(_started(t) for t in timings)
    assert timed[1] >= timed[0] + 0.4  # one at a time
    assert _started(compiling) >= timed[1] + 0.4


def test_compiles_share_the_lock(tmp_path) -> None:
    lock = tmp_path / "turns.lock"
    mine = Turns(str(lock))
    mine.compiling()
    start = time.time()
    other = _started(_child(lock, "compiling"))
    assert other - start < 10  # did not wait for this process's release
    mine.timing()  # the other compile has exited: nothing holds the lock
    mine.release()


def test_a_row_that_times_out_says_which_phase_it_was_in(tmp_path, monkeypatch) -> None:
    """The forty-fourth session's inference rows shared the lock with max-autotune rows and timed out at
    280 s, saying only that: they had compiled and then waited out the others' minutes of compiles for
    their timing turn. A worker announces each phase, and a timeout names the last one and its length."""
    lock = tmp_path / "turns.lock"
    mine = Turns(str(lock))
    mine.compiling()  # a long compile elsewhere: the row's timing waits for it
    code = CHILD.format(path=turns.__file__, lock=str(lock), phase="compiling", hold=0) + "t.timing()\n"
    monkeypatch.setattr(turns, "worker_command", lambda lock, argv, bench: [sys.executable, "-c", code])
    try:
        row = turns.run_row("models", str(lock), [], 2.0, "m", "fp32")
    finally:
        mine.release()
    assert row["error"].startswith("timeout after 2 s (waiting for its timing turn: a timing waits until every "
                                   "running compile of the rows sharing the lock has finished, for its last ")
    assert turns.where_it_stopped("", 0.0) == "starting up"
    assert turns.where_it_stopped(f"{turns.PHASE}compiling 100.0\n", 130.4) == "compiling, for its last 30 s"


def test_run_all_keeps_order_runs_at_once_and_spends_its_budget(tmp_path) -> None:
    seen = []

    def run(job: float, timeout: float) -> dict:
        time.sleep(job)
        return {"job": job, "timeout": timeout}

    start = time.perf_counter()
    out = run_all([0.4, 0.1, 0.4, 0.1], run, 2, None, 60, lambda job, row, s: seen.append(job), lambda j: {})
    assert [r["job"] for r in out] == [0.4, 0.1, 0.4, 0.1] and sorted(seen) == sorted([0.4, 0.1, 0.4, 0.1])
    assert time.perf_counter() - start < 0.95  # 1.0 s one by one
    out = run_all([1.5, 0.1, 0.1], run, 1, 1.2, 60, lambda *a: None, lambda job: {"not run": job})
    assert out[0]["timeout"] <= 1.2 and out[1:] == [{"not run": 0.1}, {"not run": 0.1}]
    # 1.5 s of a 3 s budget left, but a job needs 2: not started (it would only time out)
    out = run_all([1.5, 0.1], run, 1, 3.0, 60, lambda *a: None, lambda job: {"not run": job}, least=2.0)
    assert out[1] == {"not run": 0.1}


def test_a_worker_past_its_timeout_is_ended_with_what_it_started() -> None:
    start = time.perf_counter()
    status, _, _ = run_worker(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert status is None and time.perf_counter() - start < 10


def test_a_row_in_a_worker_started_through_a_shared_turns_file(tmp_path, capsys) -> None:
    """The whole path of ``--jobs 2`` (one row: the lock's behaviour is tested above) with the lock
    another run could share (``--turns``): the worker starts through ``turns_worker.py`` with its
    shared hold on that file, and its result reaches the table."""
    shared = tmp_path / "host.turns"
    assert models.main(["--tiny", "--device", "cpu", "--jobs", "2", "--backends", "eager", "--turns", str(shared),
                        "--pairs", "resnet50:fp32", "--timeout", "300", "--no-launch-bench"]) == 0
    out = capsys.readouterr().out
    assert "2 rows at once" in out and "sharing the turns file host.turns" in out and shared.exists()
    (line,) = [line for line in out.splitlines() if line.startswith("| resnet50")]
    assert "FAILED" not in out and "error" not in line and float(line.split("|")[3]) > 0  # eager ms


def test_the_run_lock_is_the_shared_file_else_the_runs_own_when_rows_overlap(tmp_path) -> None:
    shared = tmp_path / "host.turns"
    assert turns.run_lock(shared, 1, "/run") == turns.run_lock(shared, 4, "/run") == str(shared)
    assert turns.run_lock(None, 4, "/run") == "/run/turns.lock" and turns.run_lock(None, 1, "/run") is None


@pytest.mark.parametrize("bench", [models, training])
def test_a_turns_file_in_a_missing_folder_is_a_clear_error(bench, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--turns", str(tmp_path / "nowhere" / "host.turns")])
    assert f"folder {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err


def test_turns_with_a_run_in_one_process_is_a_clear_error(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        models.main(["--device", "cpu", "--in-process", "--turns", str(tmp_path / "host.turns")])
    assert "rows run in this process take no turns" in capsys.readouterr().err


def test_bad_jobs_is_a_clear_error(capsys) -> None:
    with pytest.raises(SystemExit):
        models.main(["--jobs", "0", "--device", "cpu"])
    assert "--jobs 0: expected at least 1" in capsys.readouterr().err
