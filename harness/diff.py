"""Comparing two runs entry by entry: regressions and improvements.

A regression is an entry that passed in A and does not in B (eager failures in B
excepted: they are not the compiler's), more graph breaks than in A, or capture
coverage lower by more than ``COVERAGE_SLACK``. Improvements are the reverse.
An expected failure (``xfail``) compares as the status it was expected to fail with, and an
``xpass`` as a pass: a run made with an expected-results file compares with one made without.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.report import expectation_of
from harness.result import Result
from harness.status import Kind, Status

COVERAGE_SLACK = 0.005


@dataclass(frozen=True)
class Change:
    name: str
    kind: str  # "status" | "breaks" | "coverage" | "missing" | "new"
    before: Any
    after: Any
    regression: bool
    improvement: bool = False


def _outcome(result: Result) -> Status:
    """What happened, expectations aside: an xfail's expected status, an xpass's pass."""
    if result.status.kind is Kind.EXPECTED:
        try:
            return Status(expectation_of(result)[0])
        except ValueError:  # no expectation recorded: an unknown failure
            return Status.FAIL_COMPILE
    return Status.PASS if result.status.passed else result.status


def _rank(result: Result) -> int:
    # a pass > an accuracy failure (it compiled and ran) > every other failure of the compiler
    outcome = _outcome(result)
    return 2 if outcome.passed else 1 if outcome == Status.FAIL_ACCURACY else 0


def diff_runs(a: list[Result], b: list[Result]) -> list[Change]:
    by_a = {r.name: r for r in a}
    by_b = {r.name: r for r in b}
    changes: list[Change] = []
    for name in sorted(by_a.keys() | by_b.keys()):
        ra, rb = by_a.get(name), by_b.get(name)
        if ra is None:
            changes.append(Change(name, "new", None, rb.status.value, False))
            continue
        if rb is None:
            changes.append(Change(name, "missing", ra.status.value, None, False))
            continue
        if ra.status != rb.status:
            comparable = ra.counts and rb.counts
            changes.append(Change(name, "status", ra.status.value, rb.status.value,
                                  comparable and _rank(rb) < _rank(ra), comparable and _rank(rb) > _rank(ra)))
        ba, bb = ra.graph_breaks, rb.graph_breaks
        if ba is not None and bb is not None and ba != bb:
            changes.append(Change(name, "breaks", ba, bb, bb > ba, bb < ba))
        ca, cb = ra.capture_coverage, rb.capture_coverage
        if ca is not None and cb is not None and abs(ca - cb) > COVERAGE_SLACK:
            changes.append(Change(name, "coverage", round(ca, 4), round(cb, 4), cb < ca, cb > ca))
    return changes


def render_diff(changes: list[Change]) -> str:
    from tabulate import tabulate

    groups = (("regressions", [c for c in changes if c.regression]),
              ("improvements", [c for c in changes if c.improvement]),
              # e.g. eager_fail -> pass (the model's, not the compiler's), xfail -> the same failure unexpected
              ("other status changes", [c for c in changes if c.kind == "status"
                                        and not c.regression and not c.improvement]),
              ("added/removed", [c for c in changes if c.kind in ("new", "missing")]))
    parts = []
    for title, items in groups:
        if items:
            rows = [[c.name, c.kind, c.before, c.after] for c in items]
            parts.append(f"{title} ({len(items)})\n" + tabulate(rows, headers=["entry", "what", "A", "B"]))
    return "\n\n".join(parts) if parts else "no differences"
