"""Decisions on float64 rounding noise (``harness.fuzz.decisions``): a compiled comparison, logical
op or cast may decide differently from eager where its float64 operand is rounding noise around the
threshold, and nowhere else."""

from __future__ import annotations

import pytest
import torch

from harness.fuzz.campaign import allowances
from harness.fuzz.decisions import noise_decisions
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.subject import run_graph
from harness.fuzz.values import make_input
from harness.status import Status
from harness.targets import parse_target

# fuzzer, crucible-cpp, seed 150: both variances of an expanded tensor of one value are exactly 0;
# eager's whole-tensor variance is 5.1e-32, Crucible's 0
EXPANDED = {"shape": [2, 16], "dtype": "float64", "expand_from": [1, 1], "layout": "expanded",
            "profile": "normal", "seed": 0}
PLAIN = {"shape": [2, 16], "dtype": "float64", "profile": "normal", "seed": 0}


def _variances(desc: dict, op: str = "aten.logical_xor.default") -> FuzzGraph:
    nodes = [Node("aten.var.correction", "aten.var.correction(x0, dim=[0])", ["v0"], [([16], "float64")]),
             Node("aten.var.correction", "aten.var.correction(x0, dim=[0, 1])", ["v1"], [([], "float64")]),
             Node(op, f"{op}(v0, v1)", ["v2"], [([16], "bool")])]
    return FuzzGraph([desc], nodes, ["v2"])


def _eager(graph: FuzzGraph) -> torch.Tensor:
    return graph.function()(*graph.make_inputs())[0]


def test_the_seed_150_graph_passes_on_crucible_by_the_allowance() -> None:
    graph = _variances(EXPANDED)
    variance = torch.var(graph.make_inputs()[0])
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS, record.error
    if variance != 0:  # eager's variance is noise: Crucible's exact 0 decides the other way
        assert allowances(record) == ["decisions on rounding noise"]


def _noise_variance() -> None:
    if torch.var(make_input(EXPANDED)) == 0:
        pytest.skip("this ATen's variance of equal float64 values is exact")


def test_a_flip_explained_by_a_noise_operand_passes() -> None:
    _noise_variance()
    for op in ("aten.logical_xor.default", "aten.ne.Tensor", "aten.gt.Tensor", "aten.logical_or.default"):
        graph = _variances(EXPANDED, op)
        eager = _eager(graph)
        assert noise_decisions(graph, "v2", eager, ~eager), op


def test_a_flip_of_a_real_decision_fails() -> None:
    """Real variances of random values are far from 0: any flip is a finding, as is a flip of a
    logical_and whose other operand already decides it."""
    for op in ("aten.logical_xor.default", "aten.logical_and.default", "aten.gt.Tensor", "aten.ne.Tensor"):
        graph = _variances(PLAIN, op)
        eager = _eager(graph)
        flipped = eager.clone()
        flipped[3] = ~flipped[3]
        assert not noise_decisions(graph, "v2", eager, flipped), op
    assert not noise_decisions(_variances(PLAIN), "v2", _eager(_variances(PLAIN)), _eager(_variances(PLAIN)))


def test_and_with_a_false_partner_cannot_flip() -> None:
    """logical_and(noise, x) where x is False is False whatever the noise decides."""
    nodes = [Node("aten.var.correction", "aten.var.correction(x0, dim=[0, 1])", ["v0"], [([], "float64")]),
             Node("aten.gt.Scalar", "aten.gt.Scalar(x0, 100.0)", ["v1"], [([2, 16], "bool")]),
             Node("aten.logical_and.default", "aten.logical_and.default(v0, v1)", ["v2"], [([2, 16], "bool")])]
    graph = FuzzGraph([EXPANDED], nodes, ["v2"])
    eager = _eager(graph)
    assert not eager.any()
    assert not noise_decisions(graph, "v2", eager, ~eager)


def test_only_deciding_ops_and_float64_operands() -> None:
    desc = dict(EXPANDED, dtype="float32")
    nodes = [Node("aten.var.correction", "aten.var.correction(x0, dim=[0, 1])", ["v0"], [([], "float32")]),
             Node("aten.ne.Scalar", "aten.ne.Scalar(v0, 0)", ["v1"], [([], "bool")])]
    graph = FuzzGraph([desc], nodes, ["v1"])  # float32: the float64 reference judges it
    eager = _eager(graph)
    assert not noise_decisions(graph, "v1", eager, ~eager)
    nodes = [Node("aten.var.correction", "aten.var.correction(x0, dim=[0, 1])", ["v0"], [([], "float64")]),
             Node("aten.ceil.default", "aten.ceil.default(v0)", ["v1"], [([], "float64")])]
    graph = FuzzGraph([EXPANDED], nodes, ["v1"])
    eager = _eager(graph)
    assert not noise_decisions(graph, "v1", eager, eager + 1)


def test_a_cast_near_an_integer_lands_only_where_truncating_the_noise_does() -> None:
    """int64(var + 3) of equal values: 3 give or take noise truncates to 2 or 3, nothing else."""
    _noise_variance()
    nodes = [Node("aten.var.correction", "aten.var.correction(x0, dim=[0, 1])", ["v0"], [([], "float64")]),
             Node("aten.add.Scalar", "aten.add.Scalar(v0, 3)", ["v1"], [([], "float64")]),
             Node("aten._to_copy.default", "aten._to_copy.default(v1, dtype=i64)", ["v2"], [([], "int64")])]
    graph = FuzzGraph([EXPANDED], nodes, ["v2"])
    eager = _eager(graph)
    assert int(eager) == 3
    assert noise_decisions(graph, "v2", eager, eager - 1)
    assert not noise_decisions(graph, "v2", eager, eager + 1)
    assert not noise_decisions(graph, "v2", eager, eager - 2)


SINH = {"shape": [65535], "dtype": "float32", "profile": "normal", "seed": 0}


def _compare(op: str, expr: str) -> FuzzGraph:
    nodes = [Node("aten.sinh.default", expr, ["v1"], [([65535], "float32")]),
             Node(op, f"{op}(x0, v1)", ["v4"], [([65535], "bool")])]
    return FuzzGraph([SINH], nodes, ["v4"])


def test_a_near_tied_float32_comparison_may_flip() -> None:
    """Fuzzer, crucible-interpret, seed 153: ge(x, sinh(x)) differed where x and eager's correctly
    rounded sinh are equal and the float64 values are not; the run passes by the allowance."""
    graph = _compare("aten.ge.Tensor", "aten.sinh.default(x0)")
    x = graph.make_inputs()[0]
    eager = _eager(graph)
    near = (x.abs() < 1e-3) & (torch.sinh(x) == x)
    assert near.any()
    flipped = torch.where(near, ~eager, eager)
    assert noise_decisions(graph, "v4", eager, flipped)
    far = eager.clone()
    far[(x.abs() > 0.5).nonzero()[0]] ^= True
    assert not noise_decisions(graph, "v4", eager, far)
    record = run_graph(graph, parse_target("crucible-interpret"))
    assert record.status == Status.PASS, record.error
    assert allowances(record) == ["decisions on rounding noise"]


def test_an_exact_tie_must_be_decided_as_eager_decides() -> None:
    """ge(x, x * 1) compares equal values in eager and float64 alike: a flip there is a ge compiled as gt."""
    graph = _compare("aten.ge.Tensor", "aten.mul.Scalar(x0, 1)")
    eager = _eager(graph)
    assert eager.all()
    flipped = eager.clone()
    flipped[:3] = False
    assert not noise_decisions(graph, "v4", eager, flipped)
