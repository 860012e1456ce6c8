"""diff exits non-zero on regressions; merge joins shards of one run; report renders a stored run."""

from __future__ import annotations

from pathlib import Path

from harness.diff import diff_runs
from harness.report import error_signature, render_report
from harness.store import ResultStore, export_json


def _result(name: str, status: str, breaks: int = 0, coverage: float = 1.0, error: str | None = None) -> dict:
    return {"name": name, "suite": "zoo", "target": "aot_eager", "status": status, "phase": "compare",
            "graphs": breaks + 1, "graph_breaks": breaks, "capture_coverage": coverage, "error": error,
            "break_reasons": [{"reason": "GB0025: Call to `torch._dynamo.graph_break()`", "category": "explicit",
                               "frame": "m.py:3 in f"}] * breaks}


def _store(path: Path, run_id: str, results: list[dict], shard: str | None = None) -> None:
    with ResultStore(path) as store:
        store.create_run(run_id, "smoke", "aot_eager", {"torch": "x", "shard": shard})
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
    # An eager failure in B is not the compiler's regression.
    assert not any(c.regression for c in diff_runs(BASE[:1], [_result("zoo/a", "eager_fail")]))


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
    results = [*BASE, _result("zoo/d", "fail_compile", error="RuntimeError: no lowering for aten.foo at 0x7f99"),
               _result("zoo/e", "eager_fail", error="ValueError: bad model")]
    _store(tmp_path / "r.sqlite", "R", results)
    with ResultStore(tmp_path / "r.sqlite") as store:
        text = render_report(store.run("R"), store.results("R"))
    # 5 entries, 4 eager ok, 2 of them pass -> 50%; one cluster of two fail_compile entries.
    assert "50.0%" in text and "GB0025" in text
    assert error_signature(results[2]["error"]) == error_signature(results[3]["error"])
    cluster_line = next(line for line in text.splitlines() if line.startswith("fail_compile"))
    assert " 2 " in cluster_line
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
        store.record("R", {**_result("zoo/a", "pass"), "capture_s": 1.5})
        assert store.results("R")[0]["capture_s"] == 1.5
