"""The cluster executor (``harness.cluster``): a Dask cluster on 127.0.0.1 runs what the single-host pool
runs, with the same statuses; a worker killed mid-run loses no entry; a planned entry without a result
fails the run; a killed submitter's run resumes with each entry once; workers of another build are
refused. Every cluster here is ``local:N``: it listens on 127.0.0.1 only and stops with its run."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import psutil
import pytest

from harness import cli, runner
from harness.cluster import Cluster, ClusterError, ClusterExecutor, check_cluster_option
from harness.pool import WorkerConfig, run_task
from harness.targets import parse_target
from harness.versions import this_build
from tests.harness.cluster_tasks import EchoTask

STATUSES = """
    import os
    import signal
    import time

    import torch
    from corpus.entry import Built, Entry


    def _model(kind):
        def forward(x):
            if kind == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if kind == "hang":
                time.sleep(600)
            if kind == "raise":
                raise RuntimeError("the model itself fails")
            return x * 2
        return forward


    def entries():
        return [Entry(name=f"st/{kind}", source="st", family=kind, tier="smoke",
                      factory=lambda scale, kind=kind: Built(_model(kind), (torch.ones(3),)))
                for kind in ("pass_a", "pass_b", "crash", "hang", "raise")]
"""

SLOW = """
    import os
    import time
    from pathlib import Path

    import torch
    from corpus.entry import Built, Entry

    LOG = Path(__file__).with_name("builds.log")


    def _factory(name, seconds):
        def build(scale):
            with LOG.open("a") as f:  # one line per build, with the cluster worker that runs it
                f.write(f"{name} {os.getppid()}\\n")
            time.sleep(seconds)
            return Built(lambda x: x * 2, (torch.ones(3),))
        return build


    def entries():
        return [Entry(name=f"slow/e{i}", source="slow", family="f", tier="smoke", factory=_factory(f"e{i}", 2.0))
                for i in range(6)]
"""


def _results(db: Path) -> dict[str, str]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db) as conn:
            return dict(conn.execute("SELECT name, status FROM results"))
    except sqlite3.OperationalError:  # schema not created yet
        return {}


def _builds(corpus_dir: Path) -> list[tuple[str, int]]:
    log = corpus_dir / "builds.log"
    lines = log.read_text().split("\n") if log.exists() else []
    return [(name, int(pid)) for name, pid in (line.split() for line in lines if line.strip())]


def _wait(predicate, seconds: float, proc=None) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        assert proc is None or proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
        time.sleep(0.2)


# -- options, ordering and counting (no cluster) ------------------------------

def test_cluster_option_is_checked_before_any_work() -> None:
    assert check_cluster_option("local:3") == "local:3"
    assert check_cluster_option("tcp://10.0.0.5:8786") and check_cluster_option("scheduler:8786")
    for bad, words in (("local:0", "local:N"), ("local:x", "local:N"), ("nowhere", "host:port")):
        with pytest.raises(ValueError, match=words):
            check_cluster_option(bad)


def test_cli_refuses_cluster_settings_that_make_no_sense(cli) -> None:
    out = cli("run", "--suite", "smoke", "--target", "eager", "--cluster", "local:2", "-j", "2")
    assert out.returncode == 2 and "single-host pool" in out.stderr
    out = cli("run", "--suite", "smoke", "--target", "eager", "--mixed-versions")
    assert out.returncode == 2 and "--mixed-versions applies to --cluster" in out.stderr
    out = cli("fuzz", "--cluster", "local:2", "--in-process", "--examples", "1")
    assert out.returncode == 2 and "give one" in out.stderr


def test_runs_are_ordered_longest_first_by_the_targets_history() -> None:
    from corpus.entry import Built, Entry

    def entry(name: str, family: str, eager_ms: float | None) -> Entry:
        return Entry(name=name, source="x", family=family, factory=lambda s: Built(None), eager_ms=eager_ms)

    entries = [entry("x/fast_eager_slow_compile", "a", 1.0), entry("x/slow_eager", "b", 900.0),
               entry("x/new_in_family_a", "a", 1.0), entry("x/unknown", "c", 100.0)]
    history = {"x/fast_eager_slow_compile": 60.0, "x/slow_eager": 3.0}
    costs = runner.entry_costs(entries, history)
    # its own history beats its eager time; a new entry takes its family's; the rest scale eager time
    # by the median target/eager ratio ((60/0.001 + 3/0.9) / 2)
    assert costs["x/fast_eager_slow_compile"] == 60.0 and costs["x/slow_eager"] == 3.0
    assert costs["x/new_in_family_a"] == 60.0
    assert costs["x/unknown"] == pytest.approx(0.1 * (60 / 0.001 + 3 / 0.9) / 2)
    assert runner.entry_costs(entries, {})["x/slow_eager"] == 0.9  # no history: eager time


def test_a_planned_entry_without_a_result_fails_the_run(tmp_path: Path, make_corpus, monkeypatch, capsys) -> None:
    """The count check: an executor that loses one entry (silently, as a skipped test job did) makes
    the run exit 1 naming it, and the report says so."""
    from contextlib import contextmanager

    corpus_dir = make_corpus(tmp_path / "st", {"slow.py": SLOW.replace("2.0)", "0.0)")})

    class LosesTheLast:
        def run(self, tasks, on_result, on_phase=None, stop=None):
            target = parse_target("eager")
            for task in tasks[:-1]:
                on_result(run_task(task, target, lambda phase: None))

    @contextmanager
    def losing_executor(config, cluster=None, mixed_versions=False, stats=None):
        yield LosesTheLast()

    monkeypatch.setattr(runner, "open_executor", losing_executor)
    db = tmp_path / "r.sqlite"
    code = cli.main(["run", "--corpus", str(corpus_dir), "--suite", "slow", "--target", "eager", "--db", str(db)])
    err = capsys.readouterr()
    assert code == 1
    assert "count check: 1 planned entry has no result" in err.err
    assert "COUNT CHECK FAILED" in err.out and "all: 1 of 6 planned entries have no result" in err.out


def test_merge_checks_every_shard_ran_what_it_was_given(tmp_path: Path, make_corpus, cli) -> None:
    corpus_dir = make_corpus(tmp_path / "st", {"slow.py": SLOW.replace("2.0)", "0.0)")})
    common = ["--corpus", str(corpus_dir), "--suite", "slow", "--target", "eager", "--run-id", "nightly", "-j", "1"]
    for i in (1, 2):
        assert cli("run", *common, "--shard", f"{i}/3", "--db", f"s{i}.sqlite").returncode == 0
    merged = cli("merge", "all.sqlite", "s1.sqlite", "s2.sqlite")
    assert merged.returncode == 1 and "shard(s) 3/3 of 3 not merged" in merged.stderr
    assert cli("run", *common, "--shard", "3/3", "--db", "s3.sqlite").returncode == 0
    # a shard that lost an entry: its planned list still names it
    with sqlite3.connect(tmp_path / "s3.sqlite") as conn:
        lost = conn.execute("SELECT name FROM results LIMIT 1").fetchone()[0]
        conn.execute("DELETE FROM results WHERE name = ?", (lost,))
    merged = cli("merge", "all2.sqlite", "s1.sqlite", "s2.sqlite", "s3.sqlite")
    assert merged.returncode == 1 and f"shard 3/3: 1 planned entries have no result: {lost}" in merged.stderr


# -- a cluster in this process ------------------------------------------------

@pytest.fixture(scope="module")
def local_cluster():
    with Cluster("local:3", "eager") as cluster:
        yield cluster


def test_a_local_cluster_listens_on_loopback_only(local_cluster) -> None:
    me = psutil.Process()
    listening = [c.laddr for p in [me, *me.children(recursive=True)] for c in p.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening, "the scheduler and its workers listen somewhere"
    assert {address.ip for address in listening} == {"127.0.0.1"}


def test_cluster_runs_tasks_and_names_the_worker_of_each(local_cluster) -> None:
    executor = ClusterExecutor(local_cluster, WorkerConfig(target="eager", timeout_s=120), log=lambda line: None)
    results = []
    executor.run([EchoTask(f"t{i}", sleep_s=0.5) for i in range(6)], results.append)
    assert sorted(r.name for r in results) == [f"t{i}" for i in range(6)]
    assert all(r.status == "pass" for r in results)
    build = this_build()
    assert {r.worker_build for r in results} == {build.label()}
    assert all(r.worker_host.startswith(f"{build.host} tcp://127.0.0.1:") for r in results)
    assert len(executor.accepted()) == 3 and sum(w.done for w in executor.workers.values()) == 6
    assert "workers 3" in executor.describe()


def test_workers_of_another_build_are_refused_or_labelled(local_cluster) -> None:
    lines: list[str] = []
    other = ClusterExecutor(local_cluster, WorkerConfig(target="eager", timeout_s=120), log=lines.append)
    other.build = dataclasses.replace(other.build, torch="0.0.1")  # the submitter runs another torch
    with pytest.raises(ClusterError, match="no worker of the cluster at local:3 runs this build"):
        other.run([EchoTask("t")], lambda result: None)
    assert lines and "refusing worker" in lines[0] and "torch" in lines[0] and "--mixed-versions" in lines[0]

    mixed = ClusterExecutor(local_cluster, WorkerConfig(target="eager", timeout_s=120), mixed_versions=True,
                            log=lines.append)
    mixed.build = other.build
    results = []
    mixed.run([EchoTask("t")], results.append)
    assert results[0].status == "pass" and results[0].worker_build == this_build().label()
    assert "labelled" in lines[-1]


def test_stop_cancels_what_has_not_started(local_cluster) -> None:
    executor = ClusterExecutor(local_cluster, WorkerConfig(target="eager", timeout_s=120), log=lambda line: None)
    results = []
    executor.run([EchoTask(f"t{i}", sleep_s=1.0) for i in range(12)], results.append, stop=lambda: bool(results))
    assert 1 <= len(results) < 12


# -- whole runs through the command line ---------------------------------------

def test_cluster_run_gives_the_statuses_of_the_pool(tmp_path: Path, make_corpus, spawn_cli, cli) -> None:
    """The same entries (pass, a segfault, a hang past 15 s, a model that raises) on the pool and on a local
    cluster of 3 workers, side by side: the same status for each; the cluster's report names the
    machine and the worker of every result."""
    corpus_dir = make_corpus(tmp_path / "st", {"st.py": STATUSES})
    common = ["run", "--corpus", str(corpus_dir), "--suite", "st", "--target", "eager", "--timeout", "15",
              "--no-capture"]
    pool = spawn_cli(*common, "-j", "2", "--db", "pool.sqlite", "--json", "pool.json")
    cluster = spawn_cli(*common, "--cluster", "local:3", "--db", "cluster.sqlite", "--json", "cluster.json")
    for proc in (pool, cluster):
        proc.wait(timeout=300)
        # on the eager target a crash or a hang is the model's own (phase eager), not a failure
        assert proc.returncode == 0, proc.stderr.read()[-3000:]
    by_pool = {e["name"]: e for e in json.loads((tmp_path / "pool.json").read_text())["entries"]}
    by_cluster = {e["name"]: e for e in json.loads((tmp_path / "cluster.json").read_text())["entries"]}
    assert {n: e["status"] for n, e in by_cluster.items()} == {n: e["status"] for n, e in by_pool.items()}
    assert by_cluster["st/hang"]["status"] == "timeout" and by_cluster["st/crash"]["status"] == "crash"
    assert by_cluster["st/pass_a"]["status"] == "pass" and by_cluster["st/raise"]["status"] == "eager_fail"
    assert all(e["worker_host"] and " tcp://127.0.0.1:" in e["worker_host"] for e in by_cluster.values())
    assert all(e["worker_host"] is None for e in by_pool.values())
    report = cli("report", "--db", "cluster.sqlite")
    assert "machines (cluster run)" in report.stdout and "COUNT CHECK" not in report.stdout
    run = json.loads((tmp_path / "cluster.json").read_text())["run"]
    assert run["cluster"] == "local:3" and run["allowed_failures"] == 1 and len(run["workers"]) == 3
    assert run["planned"] == {"all": sorted(by_pool)}


@pytest.mark.nightly
def test_a_worker_killed_mid_run_loses_no_entry(tmp_path: Path, make_corpus, spawn_cli, load_json) -> None:
    corpus_dir = make_corpus(tmp_path / "slow", {"slow.py": SLOW})
    proc = spawn_cli("run", "--corpus", str(corpus_dir), "--suite", "slow", "--target", "eager", "--no-capture",
                     "--cluster", "local:3", "--db", "r.sqlite", "--json", "r.json", "--timeout", "120")
    _wait(lambda: _builds(corpus_dir), 240, proc)
    victim, worker = _builds(corpus_dir)[0]
    os.kill(worker, signal.SIGKILL)  # the Dask worker running it (its nanny starts a fresh one)
    proc.wait(timeout=300)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    doc = load_json(tmp_path / "r.json")
    assert sorted(doc["by_name"]) == [f"slow/e{i}" for i in range(6)]
    assert all(e["status"] == "pass" for e in doc["entries"])
    names = [name for name, _ in _builds(corpus_dir)]
    assert names.count(victim) == 2, "the killed worker's entry was re-queued once"
    assert doc["by_name"][f"slow/{victim}"]["worker_host"].rpartition(" ")[2] != ""


def test_an_entry_that_kills_its_worker_twice_is_a_crash_naming_the_worker(tmp_path: Path, make_corpus, cli,
                                                                            load_json) -> None:
    """Re-queued once after the first death; the second death records ``crash`` with the worker named,
    and the other entries still run."""
    killer = SLOW.replace("time.sleep(seconds)", "time.sleep(seconds)\n            if name == 'e0':\n"
                                                  "                os.kill(os.getppid(), 9)  # its cluster worker")
    corpus_dir = make_corpus(tmp_path / "slow", {"slow.py": killer.replace("2.0)", "0.1)")})
    out = cli("run", "--corpus", str(corpus_dir), "--suite", "slow", "--target", "eager", "--no-capture",
              "--cluster", "local:2", "--db", "r.sqlite", "--json", "r.json", "--timeout", "120", timeout=300)
    doc = load_json(tmp_path / "r.json")
    assert sorted(doc["by_name"]) == [f"slow/e{i}" for i in range(6)], out.stderr[-3000:]
    killed = doc["by_name"]["slow/e0"]
    assert killed["status"] == "crash" and "the cluster worker tcp://127.0.0.1:" in killed["error"]
    assert "re-queued 1 time" in killed["error"] and killed["worker_host"]
    assert [name for name, _ in _builds(corpus_dir)].count("e0") == 2
    assert all(doc["by_name"][f"slow/e{i}"]["status"] == "pass" for i in range(1, 6))
    assert out.returncode == 1  # a crash counts against the compiler: the entry took its worker down


@pytest.mark.nightly
def test_fuzz_and_corpus_checks_run_on_a_cluster(tmp_path: Path, cli, monkeypatch) -> None:
    from corpus import tiers
    from harness import corpus_check

    out = cli("fuzz", "--target", "eager", "--cluster", "local:2", "-j", "2", "--examples", "6", "--db", "f.sqlite")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "in the cluster local:2" in out.stderr and "statuses: pass 6" in out.stdout
    with sqlite3.connect(tmp_path / "f.sqlite") as conn:
        metadata = json.loads(conn.execute("SELECT metadata FROM runs").fetchone()[0])
    assert metadata["cluster"] == "local:2" and sum(w["entries"] for w in metadata["workers"]) == 6

    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    names = ["opinfo/add-float32-0", "opinfo/sum-float32-0"]
    assert corpus_check.run_checks([("opinfo", n) for n in names], jobs=1, timeout_s=60, cluster="local:2") == {"ok": 2}
    assert sorted(tiers.load_measurements("opinfo")) == names


@pytest.mark.nightly
def test_a_killed_submitter_resumes_with_each_entry_once(tmp_path: Path, make_corpus, spawn_cli, cli,
                                                         load_json) -> None:
    """The submitting process is killed half-way: its cluster's workers end by themselves, and
    ``--resume`` runs what was left, each entry stored once."""
    corpus_dir = make_corpus(tmp_path / "slow", {"slow.py": SLOW})
    db = tmp_path / "r.sqlite"
    args = ("run", "--corpus", str(corpus_dir), "--suite", "slow", "--target", "eager", "--no-capture",
            "--cluster", "local:3", "--db", str(db), "--timeout", "120")
    proc = spawn_cli(*args)
    _wait(lambda: len(_results(db)) >= 2, 240, proc)
    children = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)  # the submitter alone: its workers must notice and end
    proc.wait()
    before = _results(db)
    assert 2 <= len(before) < 6, "the run should have been killed half-way"
    gone, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"left running after the submitter died: {[p.cmdline()[:3] for p in alive]}"

    resumed = cli(*args, "--resume", "--json", str(tmp_path / "r.json"), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming run" in resumed.stderr
    doc = load_json(tmp_path / "r.json")
    assert sorted(doc["by_name"]) == [f"slow/e{i}" for i in range(6)] and doc["run"]["finished"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 6
    builds = [name for name, _ in _builds(corpus_dir)]
    for name in before:  # entries finished before the kill were not run again
        assert builds.count(name.split("/")[1]) == 1
