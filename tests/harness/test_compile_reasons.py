"""What the compiler left to ATen, per entry and over a run: extern ops with reasons, graphs that
fell back (reason, failed pass), refused fusions; stored, exported and printed by the report."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import torch

from corpus.entry import Built, Entry
from harness.entry_subject import run_entry
from harness.report import render_report
from harness.result import Result
from harness.store import ResultStore, export_json
from harness.targets import parse_target


def _entry(name: str, fn, *inputs: torch.Tensor) -> Entry:
    return Entry(name=f"reasons/{name}", source="reasons", family="f", tier="smoke",
                 factory=lambda scale: Built(fn, inputs))


def _externs_and_refusal(x: torch.Tensor) -> torch.Tensor:
    # cumsum: a library kernel; digamma: no lowering; x - x.sum(0): a refused fusion
    return torch.cumsum(x, 1) + torch.special.digamma(x.abs() + 1) + (x - x.sum(0))


@pytest.fixture
def broken_sin(monkeypatch: pytest.MonkeyPatch):
    import compiler.lowerings  # noqa: F401  (register every rule before patching one)
    from compiler.lowering import LOWERINGS

    def explode(*args, **kwargs):
        raise RuntimeError("planted bug in the sin lowering")

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin, explode)


def test_entry_records_extern_ops_reasons_and_refusals() -> None:
    result = run_entry(_entry("mixed", _externs_and_refusal, torch.randn(6, 9)),
                       parse_target("crucible-interpret"), capture=False, reference="none")
    assert result.status == "pass", result.error
    rows = {(r["op"], r["reason"]): r["calls"] for r in result.extern_ops}
    assert rows == {("aten.cumsum.default", "library_kernel"): 1,
                    ("aten.digamma.default", "no_lowering"): 1}
    assert result.externs == 2 and result.kernels >= 2
    assert result.fallbacks == []
    refusals = result.refused_fusions  # the scheduler's reasons; several per graph are normal
    assert refusals and all(r["count"] >= 1 and r["reason"] and " -> " in r["example"] for r in refusals)
    assert [r["count"] for r in refusals] == sorted((r["count"] for r in refusals), reverse=True)


def test_failed_compile_records_fallback_reason_and_pass(broken_sin) -> None:
    result = run_entry(_entry("broken", lambda a: a.sin() + 1, torch.randn(8)),
                       parse_target("crucible-interpret"), capture=False, reference="none")
    assert result.status == "fail_compile"
    (fallback,) = result.fallbacks
    assert (fallback["reason"], fallback["pass"], fallback["kind"]) == ("compiler_error", "lower", "inference")
    assert "planted bug" in fallback["message"]


def _stored(name: str, **fields) -> Result:
    return Result(**{"name": f"s/{name}", "suite": "s", "target": "crucible-cpp", "status": "pass", **fields})


def test_store_report_and_json_carry_the_reasons(tmp_path: Path) -> None:
    conv = {"op": "aten.convolution.default", "reason": "library_kernel", "calls": 3, "message": ""}
    cumsum = {"op": "aten.cumsum.default", "reason": "library_kernel", "calls": 1, "message": ""}
    fallback = {"graph": 0, "kind": "forward", "reason": "compiler_error", "pass": "schedule",
                "message": "RuntimeError: boom"}
    refusal = {"reason": "reads_across_programs", "count": 2, "example": "sum -> sub"}
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.create_run("r1", "s", "crucible-cpp", {})
        store.record("r1", _stored("a", extern_ops=[conv, cumsum], refused_fusions=[refusal]))
        store.record("r1", _stored("b", extern_ops=[conv], status="fail_compile", fallbacks=[fallback]))
        store.record("r1", _stored("c"))
        results = store.results("r1")
        doc = export_json(store, "r1")
    by_name = {r.name: r for r in results}
    assert by_name["s/a"].extern_ops == [conv, cumsum] and by_name["s/c"].extern_ops is None
    assert by_name["s/b"].fallbacks == [fallback] and by_name["s/a"].refused_fusions == [refusal]
    assert doc["entries"][0]["extern_ops"] == [conv, cumsum]
    text = render_report({"id": "r1", "suite": "s", "target": "crucible-cpp", "finished": True}, results)
    table = text.split("top extern ops / reasons\n")[1].split("\n\n")[0].splitlines()
    # convolution first: 2 entries, 6 calls; then cumsum: 1 entry
    assert table[2].split()[:4] == ["2", "6", "aten.convolution.default", "library_kernel"], table
    assert table[3].split()[:4] == ["1", "1", "aten.cumsum.default", "library_kernel"], table
    fell_back = text.split("graphs that fell back to eager\n")[1].splitlines()
    assert fell_back[2].split()[:4] == ["1", "1", "compiler_error", "schedule"]
    assert "s/b: RuntimeError: boom" in fell_back[2]
    refused = text.split("top refused fusions\n")[1].splitlines()
    assert refused[2].split()[:3] == ["1", "2", "reads_across_programs"]


def test_report_command_prints_the_extern_table(tmp_path: Path, cli) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.create_run("r1", "s", "crucible-cpp", {})
        store.record("r1", _stored("a", break_reasons=[{"reason": "GB0025: graph_break()", "category": "explicit",
                                                        "frame": "m.py:3"}],
                                   extern_ops=[{"op": "aten.mm.default", "reason": "library_kernel", "calls": 2,
                                                "message": "vendor library kernel"}]))
    proc = cli("report", "--db", str(tmp_path / "r.sqlite"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.index("top graph-break reasons") < out.index("top extern ops / reasons")
    assert "aten.mm.default" in out and "library_kernel" in out


def test_database_from_an_older_harness_gains_the_reason_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE results (run_id TEXT NOT NULL, name TEXT, status TEXT, break_reasons TEXT, "
                 "recorded REAL, PRIMARY KEY (run_id, name))")
    conn.execute("INSERT INTO results VALUES ('r1', 's/old', 'pass', '[]', 0)")
    conn.commit()
    conn.close()
    with ResultStore(path) as store:
        (old,) = store.results("r1")
        assert old.extern_ops is None and old.fallbacks is None and old.refused_fusions is None
        store.record("r1", _stored("new", extern_ops=[{"op": "aten.mm.default", "reason": "library_kernel",
                                                       "calls": 1, "message": ""}]))
        assert {r.name: len(r.extern_ops or []) for r in store.results("r1")} == {"s/new": 1, "s/old": 0}


def test_free_text_refusals_group_across_sizes() -> None:
    """Refusals given as text (before typed reasons) differ only in their sizes per graph; grouped
    as written, a corpus run listed one row per shape."""
    from compiler.report import CompileReport, FusionRefusal, GraphReport
    from harness.compile_reasons import entry_fields

    graph = GraphReport(0, "inference", 3, "cpp", refused_fusions=[
        FusionRefusal("buf1", "buf2", "iteration space (6, 9) does not match kernel (9,)|(6,)"),
        FusionRefusal("buf4", "buf5", "iteration space (3, 2) does not match kernel (2,)|(3,)")])
    (row,) = entry_fields(CompileReport([graph]))["refused_fusions"]
    assert row == {"reason": "iteration space (N, N) does not match kernel (N,)|(N,)", "count": 2,
                   "example": "buf1 -> buf2"}
