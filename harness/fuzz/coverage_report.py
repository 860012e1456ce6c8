"""The coverage part of ``crucible fuzz --coverage``'s summary, and what the run's metadata keeps of it.

Per file of the measured packages: covered/total executable lines and the lines never executed
(as ranges); then, for Crucible's compiler, the rules no op can reach (dead) and the rules the
campaign did not reach (``harness.fuzz.unreached``).
"""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from harness.fuzz.coverage import CoverageMap, file_coverage, line_ranges, tracer_kind


def coverage_totals(covered: CoverageMap, roots: tuple[str, ...]) -> dict[str, Any]:
    """What the run's metadata keeps: totals, the tracer, and the executed lines per file."""
    rows = file_coverage(covered, roots)
    return {"covered": sum(r.covered for r in rows), "total": sum(r.total for r in rows), "tracer": tracer_kind(),
            "roots": list(roots), "lines": {f: sorted(v) for f, v in sorted(covered.lines.items())}}


def render_coverage(covered: CoverageMap, roots: tuple[str, ...], crucible: bool) -> list[str]:
    rows = file_coverage(covered, roots)
    hit, total = sum(r.covered for r in rows), sum(r.total for r in rows)
    table = [[r.file, f"{r.covered}/{r.total}", f"{100 * r.covered / r.total:.0f}%", line_ranges(r.missed)]
             for r in rows]
    lines = [f"coverage ({tracer_kind()}): {hit}/{total} lines of function bodies "
             f"({100 * hit / max(total, 1):.1f}%) in {len(rows)} files",
             tabulate(table, headers=["file", "covered", "", "never executed"], maxcolwidths=[None, None, None, 80])]
    if crucible:
        lines += _rule_lines(covered, roots)
    return lines


def _rule_lines(covered: CoverageMap, roots: tuple[str, ...]) -> list[str]:
    from harness.fuzz.specs import OP_SPECS
    from harness.fuzz.unreached import rule_reach

    rules = rule_reach(covered, roots, set(OP_SPECS))
    dead = [r for r in rules if r.dead]
    unreached = [r for r in rules if not r.executed and not r.dead]
    lines = [f"rules executed: {sum(r.executed for r in rules)} of {len(rules)} (decomposition rules and "
             f"lowering functions); dead (no op can reach them): {len(dead)}"]
    lines += [f"  dead {r.kind} {r.name} ({r.where}): {r.dead}" for r in dead]
    if unreached:
        lines.append(f"not reached by this campaign: {len(unreached)}")
        lines += [f"  {r.kind} {r.name} ({r.where}) for {', '.join(r.ops[:3])}{', ...' if len(r.ops) > 3 else ''}"
                  f"{'' if r.in_op_table else ': no op spec calls it'}" for r in unreached]
    return lines
