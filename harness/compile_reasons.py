"""What a compiler's own reports say about an entry: which ops it left to ATen and why, which
graphs fell back to eager in which pass, which fusions it refused.

A worker turns Crucible's ``CompileReport`` (``compiler/report.py``) into plain JSON-able
fields of the entry's result (``entry_fields``); the store keeps them per entry and the report
aggregates them over a run (``top_extern_ops``, ``fallback_reasons``, ``top_refused_fusions``):
a corpus-wide view of what the compiler does not handle yet, built from typed reasons, never
from log text. Other backends publish no reports, so their entries carry none of these fields.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from harness.result import Result

MAX_MESSAGE = 200


def _value(reason: Any) -> str:
    """An enum reason's value; a free-text reason (older reports) with its numbers blurred, so
    refusals that differ only in sizes group together."""
    if hasattr(reason, "value"):
        return str(reason.value)
    return re.sub(r"\d+", "N", str(reason))


def entry_fields(report: Any) -> dict[str, Any]:
    """The result fields of one entry from the ``CompileReport`` of everything it compiled.

    ``extern_ops``: one row per (op, reason) with the number of calls and the first message;
    ``fallbacks``: one row per graph that ran in eager (graph kind, reason, failed pass, message);
    ``refused_fusions``: one row per refusal reason with its count and a first example."""
    externs: dict[tuple[str, str], dict[str, Any]] = {}
    for ext in report.externs:
        key = (ext.op, _value(ext.reason))
        row = externs.setdefault(key, {"op": key[0], "reason": key[1], "calls": 0,
                                       "message": (ext.message or "")[:MAX_MESSAGE]})
        row["calls"] += 1
    fallbacks = [{"graph": g.graph_id, "kind": g.kind, "reason": _value(g.fallback),
                  "pass": g.failed_pass, "message": (g.fallback_message or "")[:MAX_MESSAGE]}
                 for g in report.fallbacks]
    refusals: dict[str, dict[str, Any]] = {}
    for graph in report.graphs:
        for refusal in graph.refused_fusions:
            reason = _value(refusal.reason)
            message = getattr(refusal, "message", "") or ""
            row = refusals.setdefault(reason, {"reason": reason, "count": 0,
                                               "example": f"{refusal.producer} -> {refusal.consumer}"
                                                          + (f": {message}" if message else "")})
            row["count"] += 1
    return {"kernels": len(report.kernels), "externs": len(report.externs),
            "extern_ops": sorted(externs.values(), key=lambda r: (-r["calls"], r["op"], r["reason"])),
            "fallbacks": fallbacks,
            "refused_fusions": sorted(refusals.values(), key=lambda r: (-r["count"], r["reason"]))}


def top_extern_ops(results: list[Result], limit: int = 15) -> list[list[Any]]:
    """Rows (entries, calls, op, reason, example entry and message), most entries first."""
    entries: dict[tuple[str, str], set[str]] = defaultdict(set)
    calls: Counter = Counter()
    example: dict[tuple[str, str], str] = {}
    for r in results:
        for row in r.extern_ops or []:
            key = (row["op"], row["reason"])
            entries[key].add(r.name)
            calls[key] += row.get("calls", 1)
            message = row.get("message") or ""
            example.setdefault(key, r.name + (f" ({message[:60]})" if message else ""))
    ranked = sorted(entries, key=lambda k: (-len(entries[k]), -calls[k], k))
    return [[len(entries[k]), calls[k], k[0], k[1], example[k]] for k in ranked[:limit]]


def fallback_reasons(results: list[Result], limit: int = 15) -> list[list[Any]]:
    """Rows (entries, graphs, reason, failed pass, example entry and message) of graphs that ran
    in eager instead of compiled code."""
    entries: dict[tuple[str, str], set[str]] = defaultdict(set)
    graphs: Counter = Counter()
    example: dict[tuple[str, str], str] = {}
    for r in results:
        for row in r.fallbacks or []:
            key = (row["reason"], row.get("pass") or "-")
            entries[key].add(r.name)
            graphs[key] += 1
            example.setdefault(key, f"{r.name}: {(row.get('message') or '')[:80]}")
    ranked = sorted(entries, key=lambda k: (-len(entries[k]), k))
    return [[len(entries[k]), graphs[k], k[0], k[1], example[k]] for k in ranked[:limit]]


def top_refused_fusions(results: list[Result], limit: int = 10) -> list[list[Any]]:
    """Rows (entries, refusals, reason, example entry and fusion)."""
    entries: dict[str, set[str]] = defaultdict(set)
    count: Counter = Counter()
    example: dict[str, str] = {}
    for r in results:
        for row in r.refused_fusions or []:
            entries[row["reason"]].add(r.name)
            count[row["reason"]] += row.get("count", 1)
            example.setdefault(row["reason"], f"{r.name}: {row.get('example', '')}"[:120])
    ranked = sorted(entries, key=lambda k: (-len(entries[k]), -count[k], k))
    return [[len(entries[k]), count[k], k, example[k]] for k in ranked[:limit]]
