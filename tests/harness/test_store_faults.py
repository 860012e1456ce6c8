"""Fault tests for the results store and the workers: bad --db files, locks, concurrent writers,
results that cannot be written, a full disk, stores of older schemas and in read-only places,
intra-op threads per worker, GPU pinning with a simulated device list."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import store as store_module
from harness.pool import WorkerConfig, WorkerPool, gpu_for_worker, threads_per_worker
from harness.result import Result
from harness.runner import SafeRecorder
from harness.store import ResultStore, StoreError
from harness.tasks import EntryTask

from .conftest import cli_env

TINY = """
    import torch
    from corpus.entry import Built, Entry

    def entries():
        return [Entry(name=f"tiny/op{i}", source="tiny", family="op", tier="smoke",
                      factory=lambda scale, i=i: Built(lambda x: x.sin() * i, (torch.randn(4, 4),)))
                for i in range(3)]
"""


def _valid_store(path: Path) -> None:
    with ResultStore(path) as s:
        s.create_run("r1", "smoke", "eager", {})
        for i in range(200):
            s.record("r1", Result(name=f"e{i}", suite="x", target="eager", status="pass", error="x" * 200))


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    files = {}
    files["garbage"] = tmp_path / "garbage.sqlite"
    files["garbage"].write_bytes(b"this is not a database\n" * 100)
    files["truncated"] = tmp_path / "truncated.sqlite"
    _valid_store(files["truncated"])
    data = files["truncated"].read_bytes()
    files["truncated"].write_bytes(data[: len(data) // 3])
    files["corrupted"] = tmp_path / "corrupted.sqlite"
    _valid_store(files["corrupted"])
    data = bytearray(files["corrupted"].read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    files["corrupted"].write_bytes(bytes(data))
    files["foreign"] = tmp_path / "foreign.sqlite"
    with sqlite3.connect(files["foreign"]) as db:
        db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    files["foreign_results"] = tmp_path / "foreign_results.sqlite"
    with sqlite3.connect(files["foreign_results"]) as db:
        db.execute("CREATE TABLE results (x INTEGER)")
    files["directory"] = tmp_path / "adir.sqlite"
    files["directory"].mkdir()
    return files


@pytest.mark.parametrize("kind", ["garbage", "truncated", "corrupted", "foreign", "foreign_results", "directory"])
def test_bad_store_is_a_one_line_error(tmp_path: Path, kind: str) -> None:
    path = _bad_files(tmp_path)[kind]
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(StoreError) as info, ResultStore(path) as s:
        s.runs()
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "--db" in message
    if before is not None:
        assert path.read_bytes()[:100] == before[:100], "a foreign or damaged file must not be rewritten"


def test_bad_store_cli_exit_2(cli, tmp_path: Path) -> None:
    files = _bad_files(tmp_path)
    for args in (["run", "--suite", "zoo", "--entry", "zoo/mlp", "--target", "eager", "--db", str(files["garbage"])],
                 ["report", "--db", str(files["truncated"])], ["report", str(files["foreign"])],
                 ["report", "--runs", "--db", str(files["corrupted"])]):
        proc = cli(*args)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("error: ")


def test_an_older_fuzz_findings_table_gains_the_traceback_column(tmp_path: Path) -> None:
    """A store written before findings kept their traceback opens, keeps its findings and stores new
    ones with theirs."""
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE runs (id TEXT PRIMARY KEY, suite TEXT, target TEXT, created REAL, finished INTEGER DEFAULT 0,
                           metadata TEXT);
        CREATE TABLE fuzz_findings (run_id TEXT NOT NULL, signature TEXT NOT NULL, kind TEXT, target TEXT,
            status TEXT, op TEXT, error TEXT, known TEXT, hits INTEGER, nodes INTEGER, graph TEXT, repro TEXT,
            recorded REAL, PRIMARY KEY (run_id, signature));
        INSERT INTO fuzz_findings (run_id, signature, status) VALUES ('r', 'old | op | E', 'fail_run');
    """)
    old.close()
    with ResultStore(path) as store:
        store.record_finding("r", {"signature": "new | op | E", "status": "fail_run", "error_detail": "Traceback ..."})
        found = {f["signature"]: f["error_detail"] for f in store.findings("r")}
    assert found == {"old | op | E": None, "new | op | E": "Traceback ..."}


def test_locked_store_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.sqlite"
    _valid_store(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    try:
        with pytest.raises(StoreError, match="locked by another process"), ResultStore(path) as s:
            s.record("r1", Result(name="late", target="eager", status="pass"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_unwritable_results_are_kept_and_merge_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.sqlite"
    with ResultStore(path) as s:
        s.create_run("r1", "smoke", "eager", {"mode": "inference"})
        recorder = SafeRecorder(s, s.run("r1"))
        recorder(Result(name="first", suite="x", target="eager", status="pass"))
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        s.db.execute("PRAGMA busy_timeout = 200")  # give up on the lock after 0.2 s, not 60
        recorder(Result(name="second", suite="x", target="eager", status="fail_run",
                        break_reasons=[{"reason": "r", "category": "c", "frame": "f"}]))
        holder.execute("ROLLBACK")
        holder.close()
    assert recorder.spilled == 1 and "crucible merge" in recorder.advice()
    spill = Path(recorder.spill_path)
    assert json.loads(spill.read_text())["result"]["name"] == "second"
    with ResultStore(path) as s:
        from harness.store import merge

        merge(s, [spill])
        assert {r.name: r.status for r in s.results("r1")} == {"first": "pass", "second": "fail_run"}
        assert s.results("r1")[1].break_reasons == [{"reason": "r", "category": "c", "frame": "f"}]


def test_two_runs_write_one_store_concurrently(tmp_path: Path, make_corpus) -> None:
    corpus = make_corpus(tmp_path / "tiny", {"tiny.py": TINY})
    db = tmp_path / "shared.sqlite"
    cmd = [sys.executable, "-m", "harness", "run", "--corpus", str(corpus), "--suite", "tiny", "--target",
           "eager", "--db", str(db), "-j", "1", "--no-capture", "--no-report"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    with ResultStore(db) as s:
        runs = s.runs()
        # started in the same second: distinct run ids all the same, each with its own 3 results
        assert len(runs) == 2 and len({r["id"] for r in runs}) == 2
        assert all(r["entries"] == 3 and r["finished"] for r in runs)
        assert all(r["metadata"]["threads_per_worker"] >= 1 for r in runs)


def test_threads_per_worker_share_the_cores() -> None:
    assert threads_per_worker(8, cores=16) == 2
    assert threads_per_worker(1, cores=16) == 16
    assert threads_per_worker(32, cores=16) == 1


def test_gpu_assignment_round_robin_any_count() -> None:
    gpus = tuple(str(i) for i in range(8))
    assert [gpu_for_worker(i, gpus) for i in range(16)] == [str(i % 8) for i in range(16)]
    assert [gpu_for_worker(i, ("GPU-a", "GPU-b", "GPU-c")) for i in range(4)] == ["GPU-a", "GPU-b", "GPU-c", "GPU-a"]
    assert gpu_for_worker(3, ()) is None


def test_workers_pinned_to_simulated_gpus_and_threads_recorded(tmp_path: Path, make_corpus,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA run on a machine without CUDA: each entry is skipped, but it reports the device its
    worker was pinned to and the worker's torch threads, so the spread is checked without a GPU."""
    from corpus.registry import catalog

    # loading the corpus takes each worker 10 s (once), so every worker is still busy with its first
    # entry when the others become ready: all three take one
    corpus = make_corpus(tmp_path / "tiny", {"tiny.py": "import os, time\n"
                         "if os.environ.get('CRUCIBLE_TEST_SLOW_LOAD'): time.sleep(10)\n" + textwrap.dedent(TINY)})
    cat = catalog([str(corpus)], builtin=False)
    monkeypatch.setenv("CRUCIBLE_TEST_SLOW_LOAD", "1")  # the workers' listing only, not this one
    tasks = [EntryTask(e.name, cat.origin_of(e.name), capture=False) for e in cat.entries]
    results: list[Result] = []
    config = WorkerConfig(target="eager", device="cuda", jobs=3, gpus=("0", "1", "2"))
    pool = WorkerPool(config, 3)
    pool.run(tasks, results.append)
    assert len(results) == 3 and all(r.status == "skipped" for r in results)
    # each worker reports the one device it sees; the first ready worker may take every entry
    assert {i: w["gpu"] for i, w in pool.workers.items()} == {0: "0", 1: "1", 2: "2"}
    assert all(w["threads"] == threads_per_worker(3) for w in pool.workers.values())
    assert all(r.worker_gpu in ("0", "1", "2") and r.worker_threads == threads_per_worker(3) for r in results)


# The layout of ``results`` before the store had a schema version (every number a REAL), as written
# by the harness up to this change: a store of that era must open, read, merge and diff.
_SCHEMA_1 = """
CREATE TABLE runs (id TEXT PRIMARY KEY, suite TEXT, target TEXT, created REAL, finished INTEGER DEFAULT 0,
                   metadata TEXT);
CREATE TABLE results (run_id TEXT NOT NULL, name TEXT, suite TEXT, target TEXT, status TEXT, phase TEXT,
    graphs REAL, graph_breaks REAL, capture_coverage REAL, compile_s REAL, error TEXT, kernels REAL,
    mode TEXT, break_reasons TEXT, extern_ops TEXT, fallbacks TEXT, refused_fusions TEXT, recorded REAL,
    PRIMARY KEY (run_id, name));
INSERT INTO runs VALUES ('old-1', 'smoke', 'crucible-cpp', 1.0, 1, '{"mode": "inference", "torch": "2.9"}');
INSERT INTO runs VALUES ('old-2', 'smoke', 'crucible-cpp', 2.0, 1, '{"mode": "inference", "torch": "2.9"}');
INSERT INTO results VALUES ('old-1', 'zoo/a', 'zoo', 'crucible-cpp', 'pass', 'compare', 1.0, 0.0, 1.0, 0.5, NULL,
    3.0, 'inference', '[]', '[]', '[]', '[]', 1.0);
INSERT INTO results VALUES ('old-1', 'zoo/b', 'zoo', 'crucible-cpp', 'pass', 'compare', 2.0, 1.0, 0.5, 0.7, NULL,
    2.0, 'inference', '[{"reason": "r", "category": "c", "frame": "f"}]', '[]', '[]', '[]', 1.0);
INSERT INTO results VALUES ('old-2', 'zoo/a', 'zoo', 'crucible-cpp', 'pass', 'compare', 1.0, 0.0, 1.0, 0.5, NULL,
    3.0, 'inference', '[]', '[]', '[]', '[]', 2.0);
INSERT INTO results VALUES ('old-2', 'zoo/b', 'zoo', 'crucible-cpp', 'fail_compile', 'compile', NULL, NULL, NULL,
    NULL, 'CompilerError: boom', NULL, 'inference', '[]', '[]', '[]', '[]', 2.0);
"""


def _schema_1_store(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.executescript(_SCHEMA_1)
    return path


def test_a_store_of_the_first_schema_is_read_as_it_is_and_migrated_when_written(tmp_path: Path) -> None:
    path = _schema_1_store(tmp_path / "old.sqlite")
    with ResultStore(path, read_only=True) as s:  # a report: nothing is written
        assert s.version == 1
        (a, b) = s.results("old-1")
        assert (a.name, a.graphs, type(a.graphs), a.kernels) == ("zoo/a", 1, int, 3)
        assert b.break_reasons == [{"reason": "r", "category": "c", "frame": "f"}] and b.rmse_ratio is None
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 0
    with ResultStore(path) as s:  # opened for writing: migrated
        assert s.version == store_module.SCHEMA_VERSION
        s.create_run("new", "smoke", "crucible-cpp", {"mode": "inference"})
        s.record("new", Result(name="zoo/a", target="crucible-cpp", status="xpass", expected="fail_run: old bug",
                               allowances={"rounding spread": 1}))
        new = s.results("new")[0]
        assert new.status == "xpass" and new.allowances == {"rounding spread": 1}
        assert [r.status for r in s.results("old-2")] == ["pass", "fail_compile"]
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == store_module.SCHEMA_VERSION


def test_history_merge_and_diff_work_across_the_schema_change(tmp_path: Path, capsys) -> None:
    from harness.cli import main

    old = _schema_1_store(tmp_path / "old.sqlite")
    assert main(["diff", "old-1", "old-2", "--db", str(old)]) == 1  # zoo/b regressed
    assert "zoo/b" in capsys.readouterr().out
    merged = tmp_path / "merged.sqlite"
    assert main(["merge", str(merged), str(old)]) == 0
    with ResultStore(merged, read_only=True) as s:
        history = list(s.iter_all())
    assert [run["id"] for run, _ in history] == ["old-1", "old-2"] and len(history[1][1]) == 2
    html = tmp_path / "r.html"
    assert main(["report", f"{old}:old-2", "--html", str(html)]) == 0
    assert "fail_compile" in html.read_text()


def test_a_store_of_a_newer_schema_is_refused_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    with ResultStore(path) as s:
        s.create_run("r", "smoke", "eager", {})
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {store_module.SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    for read_only in (True, False):
        with pytest.raises(StoreError, match="newer than this Crucible"):
            ResultStore(path, read_only=read_only)
    assert path.read_bytes() == before


def test_report_reads_a_store_in_a_read_only_directory(tmp_path: Path, capsys) -> None:
    """Regression: `crucible report` could not read a database in a read-only directory: SQLite's WAL
    mode must create a shared-memory file next to the database. The directory is made read-only, and
    the shared-memory file's name is taken by a directory (root ignores permissions; that it cannot)."""
    from harness.cli import main

    shelf = tmp_path / "shelf"
    shelf.mkdir()
    db = shelf / "r.sqlite"
    with ResultStore(db) as s:
        s.create_run("r1", "smoke", "eager", {"mode": "inference"})
        s.record("r1", Result(name="zoo/a", suite="zoo", target="eager", status="pass"))
    (shelf / "r.sqlite-shm").mkdir()
    before = db.read_bytes()
    shelf.chmod(0o555)
    try:
        assert main(["report", str(db)]) == 0
        assert main(["report", "--runs", "--db", str(db)]) == 0
    finally:
        shelf.chmod(0o755)
    out = capsys.readouterr().out
    assert "run r1" in out and "r1" in out.splitlines()[-1]
    assert db.read_bytes() == before  # read, never migrated or rewritten


def test_a_full_disk_stops_the_run_keeps_what_is_stored_and_resume_finishes(tmp_path: Path, make_corpus,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           capsys) -> None:
    """Regression: when the disk filled mid-run, the spill file went to the same disk and the run
    ended in a traceback. ENOSPC is injected (the store refuses the third result as SQLite does when
    the disk is full, and the spill file cannot be written either)."""
    import errno

    from harness import runner
    from harness.cli import main

    corpus = make_corpus(tmp_path / "tiny", {"tiny.py": TINY})
    db = tmp_path / "r.sqlite"
    real_record, real_open = ResultStore.record, open
    writes = [0]

    def full_after_two(self, run_id, result):
        writes[0] += 1
        if writes[0] > 2:
            raise StoreError(store_module._describe(self.path, sqlite3.OperationalError("database or disk is full")))
        return real_record(self, run_id, result)

    def no_space(path, *args, **kwargs):
        if str(path).endswith(".jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(ResultStore, "record", full_after_two)
    monkeypatch.setattr(runner, "open", no_space, raising=False)
    args = ["run", "--corpus", str(corpus), "--suite", "tiny", "--target", "eager", "-j", "1", "--no-capture",
            "--db", str(db), "--no-report"]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "the disk is full" in err and "--resume" in err and "Traceback" not in err
    with ResultStore(db, read_only=True) as s:
        (run,) = s.runs()
        assert run["entries"] == 2 and not run["finished"]
    monkeypatch.setattr(ResultStore, "record", real_record)
    assert main([*args, "--resume"]) == 0
    with ResultStore(db, read_only=True) as s:
        (run,) = s.runs()
        assert run["entries"] == 3 and run["finished"]
