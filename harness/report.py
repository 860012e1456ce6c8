"""Reports over stored results: summary tables, top graph breaks, what the compiler left to
ATen (extern ops with reasons, graph fallbacks, refused fusions), failure clusters."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from tabulate import tabulate

from harness.compile_reasons import fallback_reasons, top_extern_ops, top_refused_fusions
from harness.errors import raised_at
from harness.status import ALL_STATUSES, Status, eager_ok


def error_signature(error: str | None) -> str:
    """A failure's cluster key: the message with numbers, addresses, paths and quoted names blurred."""
    if not error:
        return "(no message)"
    text = error.splitlines()[0]
    text = re.sub(r"0x[0-9a-fA-F]+", "<addr>", text)
    text = re.sub(r"(/[\w.\-]+)+", "<path>", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'?'", text)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text[:140]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def summary_rows(results: list[dict[str, Any]]) -> list[list[Any]]:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["suite"], r["target"])].append(r)
    if len(groups) > 1:
        groups[("(all)", "")] = list(results)
    rows = []
    for (suite, target), items in groups.items():
        ok = [r for r in items if eager_ok(r["status"], r.get("phase"))]
        passed = sum(r["status"] == Status.PASS for r in ok)
        full = sum(r.get("graphs") == 1 and r.get("graph_breaks") == 0 for r in items)
        breaks = sum(r.get("graph_breaks") or 0 for r in items)
        coverage = _mean([r["capture_coverage"] for r in items if r.get("capture_coverage") is not None])
        counts = Counter(r["status"] for r in items)
        status_text = ", ".join(f"{s} {counts[s]}" for s in ALL_STATUSES if counts[s])
        rate = f"{100 * passed / len(ok):.1f}%" if ok else "-"
        rows.append([suite, target, len(items), len(ok), full, breaks,
                     "-" if coverage is None else f"{100 * coverage:.1f}%",
                     rate, status_text])
    return rows


def top_break_reasons(results: list[dict[str, Any]], limit: int = 15) -> list[list[Any]]:
    count: Counter = Counter()
    entries: dict[str, set[str]] = defaultdict(set)
    category: dict[str, str] = {}
    example: dict[str, str] = {}
    for r in results:
        for b in r.get("break_reasons") or []:
            count[b["reason"]] += 1
            entries[b["reason"]].add(r["name"])
            category[b["reason"]] = b.get("category", "")
            example.setdefault(b["reason"], f"{r['name']} ({b.get('frame') or '?'})")
    return [[n, len(entries[reason]), category[reason], reason[:90], example[reason]]
            for reason, n in count.most_common(limit)]


def failure_clusters(results: list[dict[str, Any]], limit: int = 20) -> list[list[Any]]:
    """Failures grouped by signature: the minimized one (``crucible minify``) where an entry has it,
    so entries failing from one bug form one group, else the blurred error message."""
    clusters: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        if r["status"] in (Status.PASS, Status.SKIPPED, Status.XFAIL):
            continue
        minimized = r.get("minimized") or {}
        signature = f"minimized: {minimized['signature']}" if minimized.get("signature") else \
            error_signature(r.get("error"))
        clusters[(r["status"], signature)].append(r)
    ranked = sorted(clusters.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    rows = []
    for (status, signature), items in ranked[:limit]:
        repro = next(((r.get("minimized") or {}).get("repro") for r in items if r.get("minimized")), None)
        rows.append([status, len(items), signature, items[0]["name"] + (f" ({repro})" if repro else "")])
    return rows


def memory_error_kernels(results: list[dict[str, Any]], limit: int = 20) -> list[list[Any]]:
    """Kernels the simulator found memory errors in (crucible-sim), with the entries they broke."""
    entries: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        for kernel in (r.get("memory_kernels") or "").split(", "):
            if kernel:
                entries[kernel].append(r)
    ranked = sorted(entries.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [[kernel, len(items), items[0]["name"], (items[0].get("error") or "")[:90]]
            for kernel, items in ranked[:limit]]


def worst_traffic(results: list[dict[str, Any]], limit: int = 10) -> list[list[Any]]:
    """Entries whose worst kernel moves the most bytes relative to its ideal (inputs read once, outputs
    written once); above 1.5x a kernel is flagged."""
    rows = [r for r in results if r.get("traffic_ratio") is not None]
    rows.sort(key=lambda r: -r["traffic_ratio"])
    return [[r["name"], r.get("traffic_kernel") or "-", f"{r['traffic_ratio']:.2f}x",
             "yes" if r["traffic_ratio"] > 1.5 else "", _fmt(r.get("bytes_moved"), ".0f"),
             _fmt(None if r.get("est_h200_s") is None else r["est_h200_s"] * 1e6, ".1f")] for r in rows[:limit]]


def render_report(run: dict[str, Any], results: list[dict[str, Any]]) -> str:
    meta = run.get("metadata", {})
    header = (f"run {run['id']}: suite {run['suite']}, target {run['target']}, {len(results)} entries"
              f"{'' if run.get('finished') else ' (unfinished)'}\n"
              f"torch {meta.get('torch')}, triton {meta.get('triton')}, python {meta.get('python')}, "
              f"gpu {meta.get('gpu') or 'none'}, commit {(meta.get('git_commit') or '?')[:12]}")
    parts = [header]
    if meta.get("sources_unavailable"):
        parts.append("unavailable sources:\n" + "\n".join(f"  {k}: {v}" for k, v in
                                                           meta["sources_unavailable"].items()))
    parts.append(tabulate(summary_rows(results), headers=[
        "suite", "target", "entries", "eager ok", "full graph", "breaks", "coverage", "pass rate", "statuses"]))
    sections = [
        ("top graph-break reasons", top_break_reasons(results),
         ["breaks", "entries", "category", "reason", "example"]),
        ("top extern ops / reasons", top_extern_ops(results), ["entries", "calls", "op", "reason", "example"]),
        ("graphs that fell back to eager", fallback_reasons(results),
         ["entries", "graphs", "reason", "failed pass", "example"]),
        ("top refused fusions", top_refused_fusions(results), ["entries", "refusals", "reason", "example"]),
        ("failures by error signature", failure_clusters(results), ["status", "entries", "signature", "example entry"]),
        ("kernels with memory errors", memory_error_kernels(results), ["kernel", "entries", "example entry", "error"]),
        ("worst traffic ratios (bytes moved / ideal bytes, run phase)", worst_traffic(results),
         ["entry", "kernel", "ratio", "> 1.5x", "bytes moved", "est. H200 us"]),
    ]
    parts += [f"{title}\n{tabulate(rows, headers=headers)}" for title, rows, headers in sections if rows]
    return "\n\n".join(parts)


def render_runs(runs: list[dict[str, Any]]) -> str:
    rows = [[r["id"], r["suite"], r["target"], r["entries"], "yes" if r["finished"] else "no"] for r in runs]
    return tabulate(rows, headers=["run", "suite", "target", "entries", "finished"])


def render_fuzz_findings(run: dict[str, Any], findings: list[dict[str, Any]]) -> str:
    """A fuzz run (``crucible fuzz``/``fuzz-decomps``): its summary and findings, shrunk graph each."""
    meta = run.get("metadata", {})
    fuzz = meta.get("fuzz", {})
    header = (f"run {run['id']}: {run['suite']} on {run['target']}, seed {meta.get('seed')}"
              f"{'' if run.get('finished') else ' (unfinished)'}\n"
              f"torch {meta.get('torch')}, triton {meta.get('triton')}, commit {(meta.get('git_commit') or '?')[:12]}")
    parts = [header]
    if fuzz.get("graphs") is not None:
        parts.append(f"graphs {fuzz['graphs']}, validity {100 * fuzz.get('validity', 1.0):.1f}%, ops covered "
                     f"{fuzz.get('ops_covered')}/{fuzz.get('ops_selected')}, {fuzz.get('graphs_per_s', 0):.2f} graphs/s")
    if fuzz.get("rules") is not None:
        parts.append(f"rules checked {fuzz['rules']}, cases {fuzz.get('cases')}")
    if not findings:
        parts.append("no findings")
        return "\n\n".join(parts)
    import hashlib

    rows = [[hashlib.sha1(f["signature"].encode()).hexdigest()[:10], f["signature"], f["hits"], f["nodes"],
             f["known"] or "NEW"] for f in findings]
    parts.append("fuzz findings by signature\n" + tabulate(rows, headers=["key", "signature", "hits", "nodes", "known"]))
    for f, row in zip(findings, rows):
        where = raised_at(f.get("error_detail"))
        raised = (f"\n  raised at {where} (crucible report {run['id']} --traceback {row[0]})" if where else "")
        parts.append(f"[{row[0]}] {f['signature']}\n  {(f['error'] or '')[:300]}{raised}\n  repro: crucible report "
                     f"{run['id']} --repro {row[0]} > repro.py")
    return "\n\n".join(parts)
