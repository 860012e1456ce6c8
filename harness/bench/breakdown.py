"""Where Crucible's cold compile goes, per benchmark row (``harness.bench.models``): its passes,
the graphs' first calls on the host, launch-config timing, and the deferred tuning after them."""

from __future__ import annotations

from typing import Any


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def compile_passes(report: Any) -> dict[str, float]:
    """Seconds per Crucible pass, summed over the graphs of a compile (lower, schedule, render,
    load: Triton's builds, ...; first_call: the graphs' first calls on the host)."""
    total: dict[str, float] = {}
    for graph in report.graphs:
        for name, seconds in graph.pass_seconds.items():
            total[name] = total.get(name, 0.0) + seconds
        total["first_call"] = total.get("first_call", 0.0) + (graph.first_call_seconds or 0.0)
    return total


PASSES = ("late_decompositions", "fold_batch_norm", "lower", "schedule", "render", "load", "wrap", "first_call", "tuning")


def compile_breakdown(results: list[dict]) -> str:
    """Where Crucible's cold compile goes, per row: its passes (``load``: building the kernels),
    timing launch configs in the first call, and the rest (Dynamo, AOTAutograd, the run)."""
    from tabulate import tabulate

    rows = []
    for r in results:
        row = r["backends"].get("crucible", {})
        if "passes_s" not in row:
            continue
        passes = {**row["passes_s"], "tuning": row.get("tuning_s", 0.0)}
        # the graphs' first calls on the host, less the timing of launch configs inside them
        passes["first_call"] = max(0.0, passes.get("first_call", 0.0) - passes["tuning"])
        rest = row["compile_s"] - sum(passes.get(n, 0.0) for n in PASSES)
        rows.append([r["model"], r["dtype"], f"{row['compile_s']:.1f}",
                     *[f"{passes.get(n, 0.0):.1f}" for n in PASSES], f"{rest:.1f}",
                     _fmt(row["tuned_s"] - row["compile_s"] if "tuned_s" in row else None, ".1f")])
    if not rows:
        return ""
    return ("crucible cold compile, seconds by pass (first_call: the graphs' first calls on the host; rest: "
            "Dynamo, AOTAutograd, the other passes; deferred: "
            "after the first call, until the other launch configs are built and timed):\n" +
            tabulate(rows, headers=["model", "dtype", "compile s", *PASSES, "rest", "deferred"], tablefmt="github"))
