"""The smoke suite end to end through the CLI (CI target: aot_eager, no GPU)."""

from __future__ import annotations

from pathlib import Path

from corpus import zoo

# Later this becomes crucible-interpret, once the compiler passes the zoo.
TARGET = "aot_eager"


def test_smoke_suite_end_to_end(tmp_path: Path, cli, load_json) -> None:
    out = tmp_path / "smoke.json"
    # The zoo's smoke tier: the other sources' smoke entries are real models, too slow for CI.
    proc = cli("run", "--suite", "smoke", "--source", "zoo", "--target", TARGET, "-j", "2",
               "--json", str(out), timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = load_json(out)
    assert len(doc["entries"]) == len(zoo.entries())
    failed = {e["name"]: (e["status"], e["error"]) for e in doc["entries"] if e["status"] != "pass"}
    assert not failed
    for entry in zoo.entries():  # the run's capture analysis agrees with the zoo's pinned counts
        graphs, breaks = zoo.expected_counts(entry, doc["run"]["torch"])
        result = doc["by_name"][entry.name]
        assert (result["graphs"], result["graph_breaks"]) == (graphs, breaks), entry.name
        assert len(result["break_reasons"]) == breaks
    assert doc["run"]["git_commit"] and doc["run"]["python"]
    assert "pass rate" in proc.stdout and "top graph-break reasons" in proc.stdout
    # The default database holds the run; report and list work on it.
    assert (tmp_path / "crucible-results.sqlite").exists()
    report = cli("report")
    assert report.returncode == 0 and doc["run"]["id"] in report.stdout
    listing = cli("list", "--source", "zoo", "--summary")
    assert listing.returncode == 0 and str(len(zoo.entries())) in listing.stdout
