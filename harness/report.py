"""Reports over stored results: summary tables, top graph breaks, what the compiler left to
ATen (extern ops with reasons, graph fallbacks, refused fusions), failure clusters with the command
that reproduces an example of each, expected failures (xfail) and improvements (xpass).

Every table reads the typed ``harness.result.Result`` and what a status means from its
``harness.status.Status`` member (order, kind, ``counts``): no status is listed here.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from tabulate import tabulate

from harness.compile_reasons import fallback_reasons, top_extern_ops, top_refused_fusions
from harness.errors import raised_at
from harness.reproduce import reproduce_command
from harness.result import Result
from harness.status import Kind, Status
from harness.store import missing_entries


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


def expectation_of(result: Result) -> tuple[str, str]:
    """(the expected status, why) of an xfail or xpass result (``Result.expected``: "status: reason")."""
    status, _, reason = (result.expected or "").partition(": ")
    return status or "?", reason


def is_failure(result: Result) -> bool:
    """A failure to look at: the compiler's, a layer's below it, or the model's own (eager failed, or it
    died eager-side). Passes, expected failures and skips are not."""
    return result.status.kind in (Kind.FAILED, Kind.UPSTREAM, Kind.MODEL)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def status_counts(results: list[Result]) -> str:
    """"pass 3, fail_compile 1, ...": every status present, in the legend's order."""
    counts = Counter(r.status for r in results)
    return ", ".join(f"{s} {counts[s]}" for s in Status if counts[s])


def summary_rows(results: list[Result]) -> list[list[Any]]:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        groups[(r.suite or "?", r.target)].append(r)
    if len(groups) > 1:
        groups[("(all)", "")] = list(results)
    rows = []
    for (suite, target), items in groups.items():
        ok = [r for r in items if r.counts]
        passed = sum(r.status.passed for r in ok)
        full = sum(r.graphs == 1 and r.graph_breaks == 0 for r in items)
        breaks = sum(r.graph_breaks or 0 for r in items)
        coverage = _mean([r.capture_coverage for r in items if r.capture_coverage is not None])
        rate = f"{100 * passed / len(ok):.1f}%" if ok else "-"
        rows.append([suite, target, len(items), len(ok), full, breaks,
                     "-" if coverage is None else f"{100 * coverage:.1f}%",
                     rate, status_counts(items)])
    return rows


def top_break_reasons(results: list[Result], limit: int = 15) -> list[list[Any]]:
    count: Counter = Counter()
    entries: dict[str, set[str]] = defaultdict(set)
    category: dict[str, str] = {}
    example: dict[str, str] = {}
    for r in results:
        for b in r.break_reasons or []:
            count[b["reason"]] += 1
            entries[b["reason"]].add(r.name)
            category[b["reason"]] = b.get("category", "")
            example.setdefault(b["reason"], f"{r.name} ({b.get('frame') or '?'})")
    return [[n, len(entries[reason]), category[reason], reason[:90], example[reason]]
            for reason, n in count.most_common(limit)]


def clusters(results: list[Result], limit: int = 20) -> list[tuple[Status, str, list[Result]]]:
    """Failures grouped by (status, signature), largest first: the minimized signature (``crucible
    minify``) where an entry has one, so entries failing from one bug form one group, else the
    blurred error message."""
    groups: dict[tuple[Status, str], list[Result]] = defaultdict(list)
    for r in results:
        if not is_failure(r):
            continue
        minimized = r.minimized or {}
        signature = f"minimized: {minimized['signature']}" if minimized.get("signature") else \
            error_signature(r.error)
        groups[(r.status, signature)].append(r)
    order = {status: i for i, status in enumerate(Status)}  # ties: the legend's order
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), order[kv[0][0]], kv[0][1]))
    return [(status, signature, items) for (status, signature), items in ranked[:limit]]


def failure_clusters(results: list[Result], limit: int = 20) -> list[list[Any]]:
    """Rows (status, entries, failing layer, signature, example entry and its minimized repro) of
    ``clusters``; the layer column counts the entries per layer where they differ ("-": not attributed)."""
    rows = []
    for status, signature, items in clusters(results, limit):
        repro = next(((r.minimized or {}).get("repro") for r in items if r.minimized), None)
        rows.append([status.value, len(items), failing_layers(items), signature,
                     items[0].name + (f" ({repro})" if repro else "")])
    return rows


def failing_layers(items: list[Result]) -> str:
    """"target", or "aot_autograd 3, target 1" when a cluster's entries failed in several layers."""
    layers = Counter(r.failing_layer or "-" for r in items)
    if len(layers) == 1:
        return next(iter(layers))
    return ", ".join(f"{layer} {n}" for layer, n in layers.most_common())


def expected_rows(results: list[Result], status: Status) -> list[list[Any]]:
    """Rows (entry, expected status, why, what happened) of the xfail or xpass results."""
    rows = []
    for r in sorted((r for r in results if r.status == status), key=lambda r: r.name):
        expected, reason = expectation_of(r)
        happened = "passes" if r.status.passed else (r.error or "").strip().partition("\n")[0]
        rows.append([r.name, expected, reason[:80], happened[:90]])
    return rows


def memory_error_kernels(results: list[Result], limit: int = 20) -> list[list[Any]]:
    """Kernels the simulator found memory errors in (crucible-sim), with the entries they broke."""
    entries: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        for kernel in (r.memory_kernels or "").split(", "):
            if kernel:
                entries[kernel].append(r)
    ranked = sorted(entries.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [[kernel, len(items), items[0].name, (items[0].error or "")[:90]]
            for kernel, items in ranked[:limit]]


def worst_traffic(results: list[Result], limit: int = 10) -> list[list[Any]]:
    """Entries whose worst kernel moves the most bytes relative to its ideal (inputs read once, outputs
    written once); above 1.5x a kernel is flagged."""
    rows = sorted((r for r in results if r.traffic_ratio is not None), key=lambda r: -r.traffic_ratio)
    return [[r.name, r.traffic_kernel or "-", f"{r.traffic_ratio:.2f}x",
             "yes" if r.traffic_ratio > 1.5 else "", _fmt(r.bytes_moved, ".0f"),
             _fmt(None if r.est_h200_s is None else r.est_h200_s * 1e6, ".1f")] for r in rows[:limit]]


def machine_rows(results: list[Result]) -> list[list[Any]]:
    """Cluster runs: per machine, its workers, entries, statuses and the seconds its workers spent."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.worker_host:
            groups[r.worker_host.partition(" ")[0]].append(r)
    return [[host, len({r.worker_host for r in items}), len(items), status_counts(items),
             f"{sum(r.wall_s or 0.0 for r in items):.1f}"] for host, items in sorted(groups.items())]


def missing_lines(run: dict[str, Any], results: list[Result]) -> str:
    """The count check's report line: planned entries (per shard) without a result, or ""."""
    planned = run.get("metadata", {}).get("planned") or {}
    lines = [f"  {shard}: {len(missing)} of {len(planned[shard])} planned entries have no result: "
             f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}"
             for shard, missing in missing_entries(run, {r.name for r in results}).items()]
    return "COUNT CHECK FAILED\n" + "\n".join(lines) if lines else ""


def _reproduce_lines(run: dict[str, Any], results: list[Result]) -> str:
    """The command that reruns each failure cluster's example entry, one per cluster in table order."""
    return "".join(f"\n  reproduce: {reproduce_command(run, items[0])}" for _, _, items in clusters(results))


def dynamic_rows(results: list[Result], limit: int = 20) -> tuple[str, list[list[Any]]]:
    """--dynamic runs: a totals line, and the entries that recompiled or failed at a later size (most
    recompiles first), each with its sizes' statuses."""
    graded = [r for r in results if r.recompiles is not None]
    if not graded:
        return "", []
    sizes = sum(len(r.sizes or ()) for r in graded)
    recompiled = [r for r in graded if r.recompiles]
    title = (f"dynamic shapes: {len(graded)} entries at {sizes} sizes, {sum(r.recompiles for r in graded)} "
             f"recompiles in {len(recompiled)} entries, {sum(r.guard_failures or 0 for r in graded)} guard failures")
    shown = [r for r in graded if r.recompiles or any(s.get("status") != Status.PASS for s in r.sizes or ())]
    shown.sort(key=lambda r: (-r.recompiles, r.name))
    rows = [[r.name, len(r.sizes or ()), r.recompiles, r.guard_failures,
             next((f"{s.get('batch')}/{s.get('seq')}: {s.get('status')}" for s in r.sizes or ()
                   if s.get("status") != Status.PASS), "")] for r in shown[:limit]]
    return title, rows


def render_report(run: dict[str, Any], results: list[Result]) -> str:
    meta = run.get("metadata", {})
    header = (f"run {run['id']}: suite {run['suite']}, target {run['target']}, {len(results)} entries"
              f"{'' if run.get('finished') else ' (unfinished)'}\n"
              f"torch {meta.get('torch')}, triton {meta.get('triton')}, python {meta.get('python')}, "
              f"gpu {meta.get('gpu') or 'none'}, commit {(meta.get('git_commit') or '?')[:12]}")
    parts = [header]
    if meta.get("sources_unavailable"):
        parts.append("unavailable sources:\n" + "\n".join(f"  {k}: {v}" for k, v in
                                                           meta["sources_unavailable"].items()))
    if missing_lines(run, results):
        parts.append(missing_lines(run, results))
    parts.append(tabulate(summary_rows(results), headers=[
        "suite", "target", "entries", "eager ok", "full graph", "breaks", "coverage", "pass rate", "statuses"]))
    dynamic_title, dynamic = dynamic_rows(results)
    if dynamic_title and not dynamic:
        parts.append(dynamic_title + ": every entry passed every size without recompiling")
    sections = [
        (dynamic_title, dynamic, ["entry", "sizes", "recompiles", "guard failures", "first failing size (batch/seq)"]),
        ("top graph-break reasons", top_break_reasons(results),
         ["breaks", "entries", "category", "reason", "example"]),
        ("top extern ops / reasons", top_extern_ops(results), ["entries", "calls", "op", "reason", "example"]),
        ("graphs that fell back to eager", fallback_reasons(results),
         ["entries", "graphs", "reason", "failed pass", "example"]),
        ("top refused fusions", top_refused_fusions(results), ["entries", "refusals", "reason", "example"]),
        ("failures by error signature", failure_clusters(results), ["status", "entries", "layer", "signature",
                                                                          "example entry"],
         _reproduce_lines(run, results)),
        ("improved (xpass): expected to fail, now pass; update the expected file (crucible run --update-expected)",
         expected_rows(results, Status.XPASS), ["entry", "expected", "why", "now"]),
        ("expected failures (xfail)", expected_rows(results, Status.XFAIL), ["entry", "expected", "why", "error"]),
        ("kernels with memory errors", memory_error_kernels(results), ["kernel", "entries", "example entry", "error"]),
        ("machines (cluster run)", machine_rows(results), ["machine", "workers", "entries", "statuses", "worker s"]),
        ("worst traffic ratios (bytes moved / ideal bytes, run phase)", worst_traffic(results),
         ["entry", "kernel", "ratio", "> 1.5x", "bytes moved", "est. H200 us"]),
    ]
    parts += [f"{title}\n{tabulate(rows, headers=headers)}{''.join(footer)}"
              for title, rows, headers, *footer in sections if rows]
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
