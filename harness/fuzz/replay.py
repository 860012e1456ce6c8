"""Findings replay: what a campaign runs before it generates anything.

Campaigns run hypothesis without its example database (a campaign is deterministic for its seed),
so a bug that comes back after a fix would be found again only if generation happened to draw it
again. The results file remembers better: every finding is stored with its shrunk graph, and a
graph's inputs are rebuilt from their descriptions (``harness.fuzz.values.make_input``: the values
depend only on the description's seed), so a stored finding is a complete, deterministic test case.

A campaign on target T first re-runs the newest stored finding of each signature that any earlier
run in the same results file found on T (the target string as given, options included), at most
``REPLAY_CAP`` of them (the newest signatures), in signature order. The campaign
(``harness.fuzz.campaign``) triages each as it triages a generated failure; the outcome of each is
one of ``ReplayOutcome``'s lists. ``crucible fuzz --no-replay`` skips it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Stored findings replayed at most, per campaign: the newest signatures. A replay costs one run of
# a shrunk graph (a few nodes: ~0.1-2 s), so the cap bounds it to minutes on the slowest targets.
REPLAY_CAP = 200


@dataclass(frozen=True)
class StoredFinding:
    """A finding of an earlier run: its signature, its graph (``FuzzGraph`` JSON) and the run."""

    signature: str
    graph: str
    run_id: str


@dataclass
class ReplayOutcome:
    """What replaying the stored findings showed (signatures as stored)."""

    replayed: int = 0
    still_failing: list[str] = field(default_factory=list)  # the same signature again: a hit of it
    changed: dict[str, str] = field(default_factory=dict)  # stored signature -> the one it fails with now
    fixed: list[str] = field(default_factory=list)  # passes now
    not_run: dict[str, str] = field(default_factory=dict)  # signature -> why it is no test now (eager fails)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"replayed": self.replayed, "still_failing": self.still_failing, "changed": self.changed,
                "fixed": self.fixed, "not_run": self.not_run, "seconds": self.seconds}


def stored_findings(store: Any, target: str, cap: int = REPLAY_CAP) -> list[StoredFinding]:
    """The findings a campaign on ``target`` replays from ``store`` (a ``harness.store.ResultStore``):
    the newest of each signature, the ``cap`` newest signatures, in signature order."""
    rows = store.latest_findings(target, "graph", cap)
    return sorted((StoredFinding(r["signature"], r["graph"], r["run_id"]) for r in rows),
                  key=lambda f: f.signature)
