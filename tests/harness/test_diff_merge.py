"""diff exits non-zero on regressions; merge joins shards of one run; report renders a stored run."""

from __future__ import annotations

import shlex
from pathlib import Path

from harness.diff import diff_runs, render_diff
from harness.report import error_signature, render_report
from harness.result import Result
from harness.store import ResultStore, export_json


def _result(name: str, status: str, breaks: int = 0, coverage: float = 1.0, error: str | None = None,
            **fields) -> Result:
    return Result(name=name, suite="zoo", target="aot_eager", status=status, phase=fields.pop("phase", "compare"),
                  graphs=breaks + 1, graph_breaks=breaks, capture_coverage=coverage, error=error,
                  break_reasons=[{"reason": "GB0025: Call to `torch._dynamo.graph_break()`", "category": "explicit",
                                  "frame": "m.py:3 in f"}] * breaks, **fields)


def _store(path: Path, run_id: str, results: list[Result], shard: str | None = None,
           metadata: dict | None = None) -> None:
    with ResultStore(path) as store:
        store.create_run(run_id, "smoke", "aot_eager", {"torch": "x", "shard": shard, **(metadata or {})})
        for r in results:
            store.record(run_id, r)
        store.finish_run(run_id)


BASE = [_result("zoo/a", "pass"), _result("zoo/b", "pass", breaks=1, coverage=0.5),
        _result("zoo/c", "fail_compile", error="RuntimeError: no lowering for aten.foo at 0x7f00")]


def test_diff_reports_regressions_and_exits_non_zero(tmp_path: Path, cli) -> None:
    _store(tmp_path / "a.sqlite", "A", BASE)
    regressed = [_result("zoo/a", "fail_accuracy"), _result("zoo/b", "pass", breaks=2, coverage=0.4),
                 _result("zoo/c", "pass")]
    _store(tmp_path / "b.sqlite", "B", regressed)
    changes = diff_runs(BASE, regressed)
    kinds = {(c.name, c.kind): c.regression for c in changes}
    assert kinds == {("zoo/a", "status"): True, ("zoo/b", "breaks"): True, ("zoo/b", "coverage"): True,
                     ("zoo/c", "status"): False}
    proc = cli("diff", "a.sqlite", "b.sqlite")
    assert proc.returncode == 1 and "regressions (3)" in proc.stdout and "improvements (1)" in proc.stdout
    same = cli("diff", "a.sqlite:A", "a.sqlite:A")
    assert same.returncode == 0 and "no differences" in same.stdout
    # An eager failure in B is not the compiler's regression, nor is a crash while building the model.
    assert not any(c.regression for c in diff_runs(BASE[:1], [_result("zoo/a", "eager_fail")]))
    assert not any(c.regression for c in diff_runs(BASE[:1], [_result("zoo/a", "crash", phase="build")]))
    assert [c.regression for c in diff_runs(BASE[:1], [_result("zoo/a", "crash", phase="compile")])] == [True]


def test_diff_compares_expected_failures_by_what_happened() -> None:
    """A run made with an expected-results file compares with one made without: an xfail is the failure
    it was expected to be, an xpass a pass."""
    known = _result("zoo/c", "xfail", expected="fail_compile: no lowering for aten.foo")
    (change,) = diff_runs([known], [BASE[2]])  # xfail -> the same failure, unexpected: neither way
    assert (change.before, change.after, change.regression, change.improvement) == \
        ("xfail", "fail_compile", False, False)
    assert "other status changes (1)" in render_diff([change])
    (change,) = diff_runs([BASE[2]], [_result("zoo/c", "xpass", expected="fail_compile: no lowering for aten.foo")])
    assert change.improvement and not change.regression
    (change,) = diff_runs([_result("zoo/a", "xpass", expected="fail_accuracy: was off")],
                          [_result("zoo/a", "xfail", expected="fail_accuracy: was off")])
    assert change.regression  # passed (unexpectedly) in A, fails again in B


def test_merge_joins_shards_into_one_run(tmp_path: Path, cli) -> None:
    _store(tmp_path / "s1.sqlite", "nightly", BASE[:2], shard="1/2")
    _store(tmp_path / "s2.sqlite", "nightly", BASE[2:], shard="2/2")
    proc = cli("merge", "all.sqlite", "s1.sqlite", "s2.sqlite")
    assert proc.returncode == 0, proc.stderr
    with ResultStore(tmp_path / "all.sqlite") as store:
        doc = export_json(store, "nightly")
    assert sorted(e["name"] for e in doc["entries"]) == ["zoo/a", "zoo/b", "zoo/c"]
    assert doc["run"]["shards"] == ["1/2", "2/2"] and doc["run"]["finished"]


def test_report_summarizes_breaks_and_clusters_failures(tmp_path: Path, cli) -> None:
    nasty = "zoo/it's $(touch pwned); x"
    results = [*BASE, _result("zoo/d", "fail_compile", error="RuntimeError: no lowering for aten.foo at 0x7f99"),
               _result("zoo/e", "eager_fail", error="ValueError: bad model"),
               _result(nasty, "fail_run", error="RuntimeError: boom"),
               _result("zoo/f", "xfail", expected="fail_accuracy: known rounding", error="RMSE 3 > 2"),
               _result("zoo/g", "xpass", expected="fail_compile: no lowering for aten.bar")]
    corpus = ["/data/my corpus"]
    _store(tmp_path / "r.sqlite", "R", results, metadata={"corpus": corpus, "device": "cpu"})
    with ResultStore(tmp_path / "r.sqlite") as store:
        text = render_report(store.run("R"), store.results("R"))
    # 8 entries, 7 eager ok, 3 of them pass (an xpass passes) -> 42.9%; one cluster of two fail_compile entries.
    assert "42.9%" in text and "GB0025" in text
    assert "pass 2, xpass 1, fail_compile 2, fail_run 1, eager_fail 1, xfail 1" in text  # the enum's order
    assert error_signature(results[2].error) == error_signature(results[3].error)
    cluster_line = next(line for line in text.splitlines() if line.startswith("fail_compile"))
    assert " 2 " in cluster_line
    # each cluster's example comes with the command that reruns it, quoted for a shell
    commands = [shlex.split(line.split("reproduce: ", 1)[1]) for line in text.splitlines() if "reproduce: " in line]
    assert len(commands) == 3  # fail_compile, fail_run, eager_fail
    assert ["crucible", "run", "--entry", nasty, "--target", "aot_eager", "--corpus", "/data/my corpus",
            "--device", "cpu"] in commands
    improved = text.split("improved (xpass)")[1].split("\n\n")[0]
    assert "zoo/g" in improved and "fail_compile" in improved and "no lowering for aten.bar" in improved
    known = text.split("expected failures (xfail)")[1].split("\n\n")[0]
    assert "zoo/f" in known and "known rounding" in known and "RMSE 3 > 2" in known
    proc = cli("report", "--db", "r.sqlite")
    assert proc.returncode == 0 and "failures by error signature" in proc.stdout


def test_an_older_database_gains_new_columns(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:  # a results table from before capture_s existed
        conn.execute("CREATE TABLE results (run_id TEXT NOT NULL, name TEXT, status TEXT, break_reasons TEXT, "
                     "recorded REAL, PRIMARY KEY (run_id, name))")
    with ResultStore(db) as store:
        store.create_run("R", "smoke", "eager", {})
        store.record("R", _result("zoo/a", "pass", capture_s=1.5))
        assert store.results("R")[0].capture_s == 1.5
