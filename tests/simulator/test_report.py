"""crucible-sim's fields in the results store and its sections of ``crucible report``."""

from __future__ import annotations

from pathlib import Path

from harness.report import memory_error_kernels, render_report, worst_traffic
from harness.result import Result
from harness.status import Status, against_compiler
from harness.store import ResultStore

RESULTS = [Result(**fields) for fields in [
    {"name": "zoo/a", "suite": "zoo", "target": "crucible-sim", "status": Status.FAIL_MEMORY, "phase": "compile",
     "error": "SimulatorMemoryError: memory error in kernel k_1: 1 finding(s) (out_of_bounds)",
     "memory_kernels": "k_1"},
    {"name": "zoo/b", "suite": "zoo", "target": "crucible-sim", "status": Status.PASS, "phase": "compare",
     "bytes_moved": 4096.0, "ideal_bytes": 1024.0, "est_h200_s": 3e-6, "traffic_ratio": 4.0,
     "traffic_kernel": "k_2"},
    {"name": "zoo/c", "suite": "zoo", "target": "crucible-sim", "status": Status.PASS, "phase": "compare",
     "bytes_moved": 800.0, "ideal_bytes": 800.0, "est_h200_s": 2.6e-6, "traffic_ratio": 1.0,
     "traffic_kernel": "k_3"},
]]


def test_fail_memory_counts_against_the_compiler() -> None:
    assert against_compiler(Status.FAIL_MEMORY, "compile")


def test_store_keeps_simulator_fields(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.create_run("r1", "zoo", "crucible-sim", {})
        for r in RESULTS:
            store.record("r1", r)
        got = {r.name: r for r in store.results("r1")}
    assert got["zoo/a"].memory_kernels == "k_1" and got["zoo/a"].status == Status.FAIL_MEMORY
    assert got["zoo/b"].traffic_ratio == 4.0 and got["zoo/b"].traffic_kernel == "k_2"
    assert got["zoo/b"].bytes_moved == 4096.0 and got["zoo/b"].est_h200_s == 3e-6


def test_report_lists_memory_error_kernels_and_worst_traffic() -> None:
    assert memory_error_kernels(RESULTS) == [["k_1", 1, "zoo/a", RESULTS[0].error[:90]]]
    rows = worst_traffic(RESULTS)
    assert [r[0] for r in rows] == ["zoo/b", "zoo/c"] and rows[0][3] == "yes" and rows[1][3] == ""
    text = render_report({"id": "r1", "suite": "zoo", "target": "crucible-sim", "finished": True, "metadata": {}},
                         RESULTS)
    assert "kernels with memory errors" in text and "worst traffic ratios" in text and "fail_memory 1" in text
