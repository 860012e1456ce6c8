"""The smoke tier end to end through the CLI, on the compiler's CPU target (CI has no GPU)."""

from __future__ import annotations

from pathlib import Path

from corpus import zoo

# Our Triton kernels in Triton's interpreter, every launch checked by the simulator (bounds, poison,
# races, ...): the CPU stand-in for crucible-triton. It checks strictly more than crucible-interpret
# at a measured 1.17x of its kernel time (python -m harness.bench.simulator overhead, 10 smoke entries).
TARGET = "crucible-sim"
# Statuses that do not count against the compiler (eager trouble, known failures).
NOT_COMPILER_FAILURES = {"pass", "xfail", "skipped", "eager_fail", "eager_nondeterministic"}


def test_smoke_suite_end_to_end(tmp_path: Path, cli, load_json) -> None:
    out = tmp_path / "smoke.json"
    # The whole smoke tier (zoo, opinfo, timm, torchvision, transformers), sized to run in CI.
    proc = cli("run", "--suite", "smoke", "--target", TARGET, "-j", "2", "--timeout", "400",
               "--json", str(out), timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = load_json(out)
    assert len(doc["entries"]) >= 60
    smoke_zoo = [e for e in zoo.entries() if e.tier == "smoke"]  # the deep networks are nightly-cpu
    assert {e["name"] for e in doc["entries"]} >= {e.name for e in smoke_zoo}
    assert len({e["name"].split("/")[0] for e in doc["entries"]}) >= 4  # every installed source
    failed = {e["name"]: (e["status"], e["error"]) for e in doc["entries"]
              if e["status"] not in NOT_COMPILER_FAILURES}
    assert not failed
    assert sum(e["status"] == "pass" for e in doc["entries"]) >= 60
    for entry in smoke_zoo:  # the run's capture analysis agrees with the zoo's pinned counts
        graphs, breaks = zoo.expected_counts(entry, doc["run"]["torch"])
        result = doc["by_name"][entry.name]
        assert (result["graphs"], result["graph_breaks"]) == (graphs, breaks), entry.name
        assert len(result["break_reasons"]) == breaks
    assert doc["run"]["git_commit"] and doc["run"]["python"]
    assert "pass rate" in proc.stdout and "top graph-break reasons" in proc.stdout
    # every extern call the compile reports counted is listed with its op and reason
    compiled = [e for e in doc["entries"] if e.get("externs") is not None]
    assert compiled and all(sum(r["calls"] for r in e["extern_ops"]) == e["externs"] for e in compiled)
    assert "top extern ops / reasons" in proc.stdout  # the smoke tier has matmuls and convolutions
    # The default database holds the run; report and list work on it.
    assert (tmp_path / "crucible-results.sqlite").exists()
    report = cli("report")
    assert report.returncode == 0 and doc["run"]["id"] in report.stdout
    listing = cli("list", "--source", "zoo", "--summary")
    assert listing.returncode == 0 and str(len(zoo.entries())) in listing.stdout
