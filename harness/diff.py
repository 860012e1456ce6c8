"""Comparing two runs entry by entry: regressions and improvements.

A regression is an entry that passed in A and does not in B (eager failures in B
excepted: they are not the compiler's), more graph breaks than in A, or capture
coverage lower by more than ``COVERAGE_SLACK``. Improvements are the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.status import Status, eager_ok

COVERAGE_SLACK = 0.005


@dataclass(frozen=True)
class Change:
    name: str
    kind: str  # "status" | "breaks" | "coverage" | "missing" | "new"
    before: Any
    after: Any
    regression: bool


def _status_rank(result: dict) -> int:
    # pass > accuracy failure > every other compiler failure; eager problems rank none.
    status = result["status"]
    return {Status.PASS: 2, Status.XFAIL: 1, Status.FAIL_ACCURACY: 1}.get(status, 0)


def diff_runs(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[Change]:
    by_a = {r["name"]: r for r in a}
    by_b = {r["name"]: r for r in b}
    changes: list[Change] = []
    for name in sorted(by_a.keys() | by_b.keys()):
        ra, rb = by_a.get(name), by_b.get(name)
        if ra is None:
            changes.append(Change(name, "new", None, rb["status"], False))
            continue
        if rb is None:
            changes.append(Change(name, "missing", ra["status"], None, False))
            continue
        if ra["status"] != rb["status"]:
            comparable = eager_ok(ra["status"], ra.get("phase")) and eager_ok(rb["status"], rb.get("phase"))
            worse = comparable and _status_rank(rb) < _status_rank(ra)
            changes.append(Change(name, "status", ra["status"], rb["status"], worse))
        ba, bb = ra.get("graph_breaks"), rb.get("graph_breaks")
        if ba is not None and bb is not None and ba != bb:
            changes.append(Change(name, "breaks", ba, bb, bb > ba))
        ca, cb = ra.get("capture_coverage"), rb.get("capture_coverage")
        if ca is not None and cb is not None and abs(ca - cb) > COVERAGE_SLACK:
            changes.append(Change(name, "coverage", round(ca, 4), round(cb, 4), cb < ca))
    return changes


def render_diff(changes: list[Change]) -> str:
    from tabulate import tabulate

    regressions = [c for c in changes if c.regression]
    improvements = [c for c in changes if not c.regression and c.kind in ("status", "breaks", "coverage")]
    other = [c for c in changes if c.kind in ("new", "missing")]
    parts = []
    for title, items in (("regressions", regressions), ("improvements", improvements), ("added/removed", other)):
        if items:
            rows = [[c.name, c.kind, c.before, c.after] for c in items]
            parts.append(f"{title} ({len(items)})\n" + tabulate(rows, headers=["entry", "what", "A", "B"]))
    return "\n\n".join(parts) if parts else "no differences"
