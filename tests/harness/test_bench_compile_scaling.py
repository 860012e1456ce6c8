"""harness.bench.compile_scaling: the slope arithmetic, the graph families and one real row."""

from __future__ import annotations

import math

import pytest

from harness.bench import compile_scaling


def test_slope_is_the_log_log_fit() -> None:
    linear = [(1000, 2.0), (4000, 8.0), (20000, 40.0)]
    assert compile_scaling.slope(linear) == pytest.approx(1.0)
    quadratic = [(1000, 1.0), (2000, 4.0), (8000, 64.0)]
    assert compile_scaling.slope(quadratic) == pytest.approx(2.0)
    assert compile_scaling.slope([(1000, 1.0)]) is None  # one point says nothing
    assert compile_scaling.slope([(1000, 1.0), (1000, 2.0)]) is None


def test_slopes_per_family_and_stage() -> None:
    rows = [{"family": "mlp", "compiler": "cpp", "size": n, "nodes": n, "lower": n / 1000, "wrap": 0.0005 * math.sqrt(n)}
            for n in (100, 1000, 4000)]
    # asked for 20,000 nodes, came out at 20,001: still in the range (it was left out, and with it the slope's top)
    rows.append({"family": "mlp", "compiler": "cpp", "size": 20000, "nodes": 20001, "lower": 100.0,
                 "wrap": 0.04})
    rows.append({"family": "mlp", "compiler": "inductor", "size": 4000, "nodes": 4000, "whole": 9.0})
    text = compile_scaling.slopes(rows)
    assert set(text) == {"cpp"}
    assert text["cpp"]["lower"] == "mlp 1.55"  # the 100-node row is outside the range, the steep top is in (1.00 without it)
    assert text["cpp"]["wrap"] == "mlp -"  # under 0.05 s: too small to say


def test_families_reach_the_asked_size() -> None:
    model, (x,) = compile_scaling.build("convnet", 130)
    assert len(model) == 10 and tuple(x.shape) == (1, 8, 8, 8)


def test_one_cpp_row_in_a_worker() -> None:
    row = compile_scaling.run_row("mlp", 60, "cpp", 300)
    assert "error" not in row and "timeout" not in row, row
    assert row["nodes"] > 30 and row["whole"] > 0
    assert {"dynamo", "aot_capture", "lower", "schedule", "load"} <= set(row)
