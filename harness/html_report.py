"""The HTML report: one self-contained file (inline CSS and SVG, no script or font from a network).

Sections, top to bottom: the run's header; the summary per suite and target (the text report's
table); pass rate and capture coverage over the store's run history for this suite and mode, one
line per target; the status breakdown per source; the top graph-break and extern reasons; the
compile-time distribution; the failures with the command that reproduces each (``harness.reproduce``),
the improvements (xpass) and the expected failures (xfail) with what was expected and why.
Plots are drawn here as SVG: a fixed 720x220 frame each, so the page looks the same in any browser.
A status's colour and its place in the legend are its ``harness.status.Status`` member's.
"""

from __future__ import annotations

import html
import math
import re
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from harness.compile_reasons import top_extern_ops
from harness.report import (error_signature, expected_rows, failure_clusters, is_failure, machine_rows,
                            missing_lines, summary_rows, top_break_reasons)
from harness.reproduce import reproduce_command
from harness.result import Result
from harness.status import Status

SERIES_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
HISTOGRAM_COLOR = "#4c78a8"
PLOT_W, PLOT_H, MARGIN = 720, 220, 44
# The status legend wraps: 4 columns of 175 px fit the 720 px frame with the longest name
# (eager_nondeterministic, about 130 px at 11 px).
LEGEND_COLUMNS, LEGEND_STEP, LEGEND_ROW = 4, 175, 16

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.meta { color: #555; margin-bottom: 12px; }
table { border-collapse: collapse; margin: 4px 0 8px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f3f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 12px ui-monospace, monospace; background: #f5f5f5; padding: 1px 3px; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; } .empty { color: #777; font-style: italic; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.swatch { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; }
"""


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # ANSI colour codes in compiler messages


def _e(value: Any) -> str:
    return html.escape(_CONTROL.sub("", "" if value is None else str(value)))


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] = frozenset(), raw: set[int] = frozenset()
           ) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f"<td{' class=num' if i in numeric else ''}>{cell if i in raw else _e(cell)}</td>"
        for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def run_rates(results: list[Result]) -> tuple[float | None, float | None]:
    """(pass rate over entries whose eager run works, mean capture coverage) of one run, in [0, 1]."""
    ok = [r for r in results if r.counts]
    rate = sum(r.status.passed for r in ok) / len(ok) if ok else None
    cov = [r.capture_coverage for r in results if r.capture_coverage is not None]
    return rate, (sum(cov) / len(cov) if cov else None)


def _mode_of(run: dict[str, Any]) -> tuple[str, bool]:
    meta = run.get("metadata", {})
    return meta.get("mode", "inference"), bool(meta.get("dynamic"))


def history_series(run: dict[str, Any], history: list[tuple[dict, list[Result]]]) -> dict[str, list[tuple]]:
    """Per target: [(created, run id, pass rate, coverage)] of the runs of this run's suite and mode."""
    series: dict[str, list[tuple]] = defaultdict(list)
    for other, results in history:
        if other["suite"] != run["suite"] or _mode_of(other) != _mode_of(run) or not results:
            continue
        rate, cov = run_rates(results)
        series[other["target"]].append((other.get("created") or 0.0, other["id"], rate, cov))
    return {t: sorted(points) for t, points in sorted(series.items())}


def _line_plot(title: str, series: dict[str, list[tuple]], index: int, css_id: str) -> str:
    """A 0-100% line plot: x = run order in the history (all targets on one time axis)."""
    times = sorted({p[0] for points in series.values() for p in points})
    x_of = {t: i for i, t in enumerate(times)}
    span = max(1, len(times) - 1)
    inner_w, inner_h = PLOT_W - 2 * MARGIN, PLOT_H - 2 * MARGIN

    def xy(t: float, v: float) -> tuple[float, float]:
        x = MARGIN + (inner_w * x_of[t] / span if len(times) > 1 else inner_w / 2)
        return x, MARGIN + inner_h * (1 - v)

    parts = [(f'<svg id="{css_id}" width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}" '
             f'role="img" aria-label="{_e(title)}"><rect width="100%" height="100%" fill="#fafbfc"/>'),
             f'<text x="{MARGIN}" y="18" style="font-weight:600">{_e(title)}</text>']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = MARGIN + inner_h * (1 - tick)
        parts.append(f'<line x1="{MARGIN}" x2="{PLOT_W - MARGIN}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{MARGIN - 6}" y="{y + 4:.1f}" text-anchor="end">{int(tick * 100)}%</text>')
    ends = [(times[0], "start"), (times[-1], "end")] if len(times) > 1 else [(t, "middle") for t in times]
    for label_t, anchor in ends:
        x, _ = xy(label_t, 0)
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(label_t)) if label_t else "?"
        parts.append(f'<text x="{x:.1f}" y="{PLOT_H - MARGIN + 16}" text-anchor="{anchor}">{stamp}</text>')
    for k, (target, points) in enumerate(series.items()):
        color = SERIES_COLORS[k % len(SERIES_COLORS)]
        coords = [(xy(p[0], p[index]), p) for p in points if p[index] is not None]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for (x, y), _ in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for (x, y), p in coords:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}">'
                         f'<title>{_e(target)} {_e(p[1])}: {100 * p[index]:.1f}%</title></circle>')
        parts.append(f'<rect x="{MARGIN + 120 * k}" y="{PLOT_H - 14}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{MARGIN + 14 + 120 * k}" y="{PLOT_H - 5}">{_e(target)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _status_bars(results: list[Result]) -> str:
    """Horizontal stacked bars: the share of each status per source, in the legend's order."""
    per_source: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        per_source[r.suite or "?"][r.status] += 1
    rows = sorted(per_source.items())
    used = [s for s in Status if any(c[s] for _, c in rows)]
    legend_rows = max(1, math.ceil(len(used) / LEGEND_COLUMNS))
    bar_h, label_w, width = 22, 150, PLOT_W
    legend_y = MARGIN + bar_h * len(rows) + 18  # the first legend row's baseline
    height = legend_y + 12 + LEGEND_ROW * (legend_rows - 1)
    parts = [(f'<svg id="status-bars" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="status per source"><rect width="100%" height="100%" fill="#fafbfc"/>'
             f'<text x="8" y="18" style="font-weight:600">status per source</text>')]
    inner = width - label_w - 60
    for i, (source, counts) in enumerate(rows):
        y = MARGIN - 10 + i * bar_h
        total = sum(counts.values())
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{_e(source)}</text>')
        x = float(label_w)
        for status in Status:
            if counts[status]:
                w = inner * counts[status] / total
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h - 6}" '
                             f'fill="{status.color}"><title>{_e(source)}: {status} '
                             f'{counts[status]}</title></rect>')
                x += w
        parts.append(f'<text x="{label_w + inner + 6}" y="{y + 15}">{total}</text>')
    for k, status in enumerate(used):
        x, y = 8 + LEGEND_STEP * (k % LEGEND_COLUMNS), legend_y + LEGEND_ROW * (k // LEGEND_COLUMNS)
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{status.color}">'
                     f'<title>{_e(status.meaning)}</title></rect><text x="{x + 14}" y="{y}">{status}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _histogram(values: list[float]) -> str:
    """Compile seconds on log-spaced bins (compile times span milliseconds to minutes)."""
    if not values:
        return '<p class="empty">no compile times in this run</p>'
    lo = math.floor(math.log10(max(min(values), 1e-3)) * 2) / 2
    hi = max(lo + 0.5, math.ceil(math.log10(max(max(values), 1e-3)) * 2) / 2)
    edges = [10 ** (lo + 0.5 * i) for i in range(round((hi - lo) / 0.5) + 1)]
    counts = [0] * (len(edges) - 1)
    for v in values:
        i = next((k for k in range(len(counts)) if v < edges[k + 1]), len(counts) - 1)
        counts[i] += 1
    inner_w, inner_h = PLOT_W - 2 * MARGIN, PLOT_H - 2 * MARGIN
    bar_w, top = inner_w / len(counts), max(counts)
    parts = [(f'<svg id="compile-hist" width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}" '
             f'role="img" aria-label="compile time distribution"><rect width="100%" height="100%" fill="#fafbfc"/>'
             f'<text x="{MARGIN}" y="18" style="font-weight:600">compile time (s), {len(values)} entries</text>')]
    for i, c in enumerate(counts):
        h = inner_h * c / top
        x = MARGIN + i * bar_w
        parts.append(f'<rect x="{x + 2:.1f}" y="{MARGIN + inner_h - h:.1f}" width="{bar_w - 4:.1f}" '
                     f'height="{h:.1f}" fill="{HISTOGRAM_COLOR}"><title>{edges[i]:.3g}-{edges[i + 1]:.3g} s: {c}'
                     f'</title></rect>')
        if c:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{MARGIN + inner_h - h - 3:.1f}" '
                         f'text-anchor="middle">{c}</text>')
        parts.append(f'<text x="{x:.1f}" y="{PLOT_H - MARGIN + 14}" text-anchor="middle">{edges[i]:.3g}</text>')
    parts.append(f'<line x1="{MARGIN}" x2="{PLOT_W - MARGIN}" y1="{MARGIN + inner_h}" y2="{MARGIN + inner_h}" '
                 f'stroke="#999"/></svg>')
    return "".join(parts)


def _failures(run: dict[str, Any], results: list[Result], compiler: bool) -> str:
    """The failures against the compiler, or the model's own (eager failed, or it died eager-side),
    each with the command that reproduces it and its minimized repro where ``crucible minify`` made one."""
    failed = [r for r in results if is_failure(r) and r.against_compiler == compiler]
    if not failed:
        return '<p class="empty">none</p>'
    rows, anchors = [], set()
    order = {status: i for i, status in enumerate(Status)}  # the legend's
    for r in sorted(failed, key=lambda r: (order[r.status], r.name)):
        anchor = "f-" + "".join(c if c.isalnum() else "-" for c in r.name)
        while anchor in anchors:  # names differing only in punctuation
            anchor += "-"
        anchors.add(anchor)
        link = f'<a id="{anchor}" href="#{anchor}">#</a> <code>{_e(reproduce_command(run, r))}</code>'
        minimized = (r.minimized or {}).get("repro")
        if minimized:
            link += f' <a href="{_e(Path(minimized).resolve().as_uri())}">minimized repro.py</a>'
        rows.append([r.name, r.status, r.phase or "", error_signature(r.error), link])
    return _table(["entry", "status", "phase", "signature", "reproduce"], rows, raw={4})


def _expected(results: list[Result], status: Status, empty: str) -> str:
    """The xpass (improved) or xfail results: what was expected and why, and what happened."""
    rows = expected_rows(results, status)
    return _table(["entry", "expected", "why", "now" if status.passed else "error"], rows) if rows else \
        f'<p class="empty">{_e(empty)}</p>'


def render_html(run: dict[str, Any], results: list[Result],
                history: list[tuple[dict, list[Result]]] = ()) -> str:
    """The page of ``run``; ``history``: every (run, results) of the store, for the trend plots."""
    meta = run.get("metadata", {})
    mode, dynamic = _mode_of(run)
    title = f"Crucible: {run['suite']} on {run['target']}"
    header = (f"<h1>{_e(title)}</h1><div class=meta>run <b>{_e(run['id'])}</b>, {len(results)} entries, "
              f"mode {_e(mode)}{', dynamic shapes' if dynamic else ''}"
              f"{'' if run.get('finished') else ' (unfinished)'}; torch {_e(meta.get('torch'))}, "
              f"triton {_e(meta.get('triton'))}, gpu {_e(meta.get('gpu') or 'none')}, "
              f"commit {_e((meta.get('git_commit') or '?')[:12])}</div>")
    summary = _table(["suite", "target", "entries", "eager ok", "full graph", "breaks", "coverage", "pass rate",
                      "statuses"], summary_rows(results), numeric={2, 3, 4, 5, 6, 7})
    series = history_series(run, list(history) or [(run, results)])
    runs_seen = len({p[1] for points in series.values() for p in points})
    trends = (f'<div class=plots>{_line_plot("pass rate", series, 2, "trend-pass")}'
              f'{_line_plot("capture coverage", series, 3, "trend-coverage")}</div>'
              f'<p class=meta>{runs_seen} run(s) of suite {_e(run["suite"])} in mode {_e(mode)} in the store, '
              f'{len(series)} target(s)</p>')
    breaks = top_break_reasons(results)
    externs = top_extern_ops(results)
    compile_times = [r.compile_s for r in results if r.compile_s is not None]
    clusters = failure_clusters(results)
    machines = machine_rows(results)
    missing = missing_lines(run, results)
    body = [header, f"<pre class=missing>{_e(missing)}</pre>" if missing else "", "<h2>Summary</h2>", summary,
            "<h2>History</h2>", trends,
            "<h2>Statuses per source</h2>", _status_bars(results),
            "<h2>Top graph-break reasons</h2>",
            _table(["breaks", "entries", "category", "reason", "example"], breaks, numeric={0, 1})
            if breaks else '<p class="empty">no graph breaks</p>',
            "<h2>Top extern ops / reasons</h2>",
            _table(["entries", "calls", "op", "reason", "example"], externs, numeric={0, 1})
            if externs else '<p class="empty">no extern reasons recorded in this run</p>',
            "<h2>Compile time</h2>", _histogram(compile_times),
            *(["<h2>Machines (cluster run)</h2>",
               _table(["machine", "workers", "entries", "statuses", "worker s"], machines, numeric={1, 2, 4})]
              if machines else []),
            "<h2>Failures by signature</h2>",
            _table(["status", "entries", "layer", "signature", "example entry"], clusters, numeric={1})
            if clusters else '<p class="empty">no failures</p>',
            "<h2>Failures</h2>", _failures(run, results, compiler=True),
            "<h2>Not counted against the compiler (eager failures, failures below the target)</h2>", _failures(run, results, compiler=False),
            "<h2>Improved (xpass): expected to fail, now pass</h2>",
            _expected(results, Status.XPASS, "none (update the expected file with crucible run --update-expected)"),
            "<h2>Expected failures (xfail)</h2>", _expected(results, Status.XFAIL, "none")]
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_html(path: str | Path, run: dict[str, Any], results: list[Result],
               history: list[tuple[dict, list[Result]]] = ()) -> None:
    Path(path).write_text(render_html(run, results, history), encoding="utf-8")
