"""Findings replay (``harness.fuzz.replay``): a campaign first re-runs the findings its target has
stored in the results file, so a bug that comes back is found whatever generation draws."""

from __future__ import annotations

import re

from harness.fuzz.replay import stored_findings
from harness.store import ResultStore

PLANT = ["--import", "tests.harness.fuzz_plants:exp_lowering_raises"]
CAMPAIGN = ["fuzz", "--target", "crucible-cpp", "--max-nodes", "2", "--shrink-seconds", "5", "--in-process"]
EXP_RAISES = "fail_compile | aten.exp.default | KeyError"


def _finding(store: ResultStore, run: str, signature: str, target: str = "crucible-cpp", graph: str = "{}",
             kind: str = "graph") -> None:
    store.create_run(run, "fuzz", target, {})
    store.record_finding(run, {"signature": signature, "kind": kind, "target": target, "graph": graph})


def test_replay_takes_the_newest_of_each_signature_of_the_same_target_capped(tmp_path) -> None:
    """Same target string only (options included), graph findings only, the newest graph per
    signature, the cap keeping the newest signatures, replayed in signature order."""
    with ResultStore(tmp_path / "r.sqlite") as store:
        _finding(store, "r1", "sig-b", graph="old-b")
        _finding(store, "r2", "sig-b", graph="new-b")
        _finding(store, "r3", "sig-a", graph="a")
        _finding(store, "r4", "sig-c", target="crucible-cpp:extern=none", graph="other target")
        _finding(store, "r5", "sig-d", target="decompositions", kind="decomp", graph="rule case")
        _finding(store, "r6", "sig-e", graph="")
        found = stored_findings(store, "crucible-cpp")
        assert [(f.signature, f.graph, f.run_id) for f in found] == [("sig-a", "a", "r3"), ("sig-b", "new-b", "r2")]
        assert [f.signature for f in stored_findings(store, "crucible-cpp", cap=1)] == ["sig-a"]  # newest only


def test_a_stored_finding_is_found_again_with_replay_and_missed_without(cli, tmp_path) -> None:
    """A/B: a campaign finds a planted lowering error and stores it; a second campaign whose one
    example cannot reach exp (--ops add.Tensor) finds it again by replaying it (exit 1, a hit of the
    same signature, stored under the new run), and misses it with --no-replay (exit 0). Without the
    planted bug the replay reports it fixed."""
    db = str(tmp_path / "fuzz.sqlite")
    first = cli(*CAMPAIGN, "--ops", "exp.default,add.Tensor", "--examples", "6", "--max-findings", "1",
                "--db", db, *PLANT, timeout=300)
    assert first.returncode == 1 and EXP_RAISES in first.stdout, first.stdout + first.stderr[-3000:]
    assert "replayed 0 stored findings" in first.stdout

    tiny = [*CAMPAIGN, "--ops", "add.Tensor", "--examples", "1", "--db", db]
    replayed = cli(*tiny, "--run-id", "again", *PLANT, timeout=300)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr[-3000:]
    assert f"still fails: {EXP_RAISES}" in replayed.stdout
    assert re.search(rf"{re.escape(EXP_RAISES)}\s+1\s+\d+\s+REPLAYED", replayed.stdout), replayed.stdout
    with ResultStore(db, read_only=True) as store:
        assert [f["signature"] for f in store.findings("again")] == [EXP_RAISES]

    missed = cli(*tiny, "--no-replay", *PLANT, timeout=300)
    assert missed.returncode == 0, missed.stdout + missed.stderr[-3000:]
    assert "no findings" in missed.stdout and "not replayed (--no-replay)" in missed.stdout

    fixed = cli(*tiny, timeout=300)
    assert fixed.returncode == 0 and f"fixed: {EXP_RAISES}" in fixed.stdout, fixed.stdout + fixed.stderr[-3000:]
