"""Index outputs over near-ties (``harness.fuzz.ties``): a compiled argsort, argmax or cummax index
may differ from eager's where the values it indexes are equal to within rounding, never where they
are an exact tie in eager and float64 alike (a wrong tie-breaking rule stays a finding), never with
indices that are out of range or not a permutation, and never where the values are far apart."""

from __future__ import annotations

import pytest
import torch

from harness.fuzz.campaign import allowances
from harness.fuzz.subject import run_graph
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.ties import near_tied_indices
from harness.fuzz.values import make_input
from harness.status import Status
from harness.targets import parse_target

X = {"shape": [1, 12], "dtype": "float32", "profile": "normal", "seed": 3}
META = [([1, 12], "float32")]
# round(x) has exact ties, in float32 and float64 alike; round(x) + x * 1e-7 near-ties in float32 only
EXACT = "aten.round.default(x0)"
NEAR = "aten.add.Tensor(aten.round.default(x0), aten.mul.Scalar(x0, 1e-7))"


def _graph(values: str, op: str, expr: str, out_meta: list, outputs: list[str]) -> FuzzGraph:
    nodes = [Node("aten.add.Tensor", values, ["v0"], META),
             Node(op, expr, outputs, out_meta, len(outputs) > 1)]
    return FuzzGraph([X], nodes, [outputs[-1] if op != "aten.argsort.stable" else outputs[0]])


def _argsort(values: str) -> FuzzGraph:
    return _graph(values, "aten.argsort.stable", "aten.argsort.stable(v0, stable=True, dim=1)",
                  [([1, 12], "int64")], ["v1"])


def _swap_a_tie(graph: FuzzGraph) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Eager's argsort and the same with the first pair of equal-after-rounding neighbours swapped."""
    v = graph.pruned(["v0"]).function()(*graph.pruned(["v0"]).make_inputs())[0]
    eager = torch.argsort(v, stable=True, dim=1)
    ordered = v[0, eager[0]]
    close = ((ordered[1:] - ordered[:-1]).abs() <= 1e-6 * ordered[1:].abs().clamp_min(1)).nonzero().flatten()
    compiled = eager.clone()
    if close.numel():
        i = int(close[0])
        compiled[0, i], compiled[0, i + 1] = eager[0, i + 1], eager[0, i]
    return eager, compiled, bool(close.numel())


def test_a_swap_of_near_tied_values_passes() -> None:
    graph = _argsort(NEAR)
    eager, compiled, found = _swap_a_tie(graph)
    assert found and not torch.equal(eager, compiled)
    assert near_tied_indices(graph, "v1", eager, compiled)


def test_a_swap_of_an_exact_tie_fails() -> None:
    """A stable sort (or argmax) must break a real tie as eager does: a planted tie-breaking bug stays found."""
    graph = _argsort(EXACT)
    eager, compiled, found = _swap_a_tie(graph)
    assert found and not torch.equal(eager, compiled)
    assert not near_tied_indices(graph, "v1", eager, compiled)


def test_indices_that_are_not_a_permutation_or_far_apart_fail() -> None:
    graph = _argsort(NEAR)
    eager, compiled, _ = _swap_a_tie(graph)
    duplicated = eager.clone()
    duplicated[0, 1] = eager[0, 0]
    assert not near_tied_indices(graph, "v1", eager, duplicated)
    reversed_ = eager.flip(1)  # every value moved: far from eager's
    assert not near_tied_indices(graph, "v1", eager, reversed_)
    out_of_range = eager.clone()
    out_of_range[0, 0] = 12
    assert not near_tied_indices(graph, "v1", eager, out_of_range)


def test_argmax_and_max_dim_indices() -> None:
    for values, expect in ((NEAR, True), (EXACT, False)):
        graph = _graph(values, "aten.argmax.default", "aten.argmax.default(v0, 1, False)", [([1], "int64")], ["v1"])
        v = graph.pruned(["v0"]).function()(*graph.pruned(["v0"]).make_inputs())[0]
        eager = torch.argmax(v, 1)
        top = v[0, eager[0]]
        others = [i for i in range(12) if i != int(eager[0]) and abs(float(v[0, i] - top)) <= 1e-6 * abs(float(top))]
        assert others, v
        assert near_tied_indices(graph, "v1", eager, torch.tensor([others[0]])) is expect
        graph = _graph(values, "aten.max.dim", "aten.max.dim(v0, 1, True)", [([1, 1], "float32"), ([1, 1], "int64")],
                       ["v1_0", "v1_1"])
        assert near_tied_indices(graph, "v1_1", eager.reshape(1, 1), torch.tensor([[others[0]]])) is expect
        assert not near_tied_indices(graph, "v1_0", eager.reshape(1, 1), torch.tensor([[others[0]]]))  # values: no


def test_cummax_over_atens_inconsistent_exp2_passes_on_crucible() -> None:
    """Fuzzer, crucible-cpp, seed 23: ``cummax(exp2(x))[1]`` over equal float64 inputs. ATen's exp2 of
    one value differs by an ulp between its vectorized loop and its scalar tail, so eager's running
    maximum moves; Crucible's exp2 is consistent, a true tie, whose latest index cummax takes."""
    for seed in range(300):
        desc = {"shape": [2, 20], "dtype": "float64", "layout": "expanded", "expand_from": [1, 1],
                "profile": "normal", "seed": seed}
        if torch.exp2(make_input(desc)).unique().numel() > 1:
            break
    else:
        pytest.skip("this ATen's float64 exp2 is consistent across its loops")
    meta = [([2, 20], "float64")]
    graph = FuzzGraph([desc], [Node("aten.exp2.default", "aten.exp2.default(x0)", ["v0"], meta),
                               Node("aten.cummax.default", "aten.cummax.default(v0, 1)", ["v1_0", "v1_1"],
                                    meta + [([2, 20], "int64")], True)], ["v1_1"])
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS, record.error
    assert allowances(record) == ["near-tied indices"]


def test_an_index_seen_through_an_unsqueeze_is_judged_as_the_index_ops_own() -> None:
    """Fuzzer, crucible-interpret, seed 171: ``unsqueeze(argmax(mish(x)))`` over 65,535 bfloat16 values
    in (-1, 1) picked another of the maxima that are equal to within bfloat16 rounding. Through the
    unsqueeze the allowance saw no index op and the graph failed; a far smaller value still fails."""
    x = {"dtype": "bfloat16", "layout": "contiguous", "profile": "unit", "seed": 0, "shape": [4096]}
    nodes = [Node("aten.mish.default", "aten.mish.default(x0)", ["v1"], [([4096], "bfloat16")]),
             Node("aten.argmax.default", "aten.argmax.default(v1, 0, False)", ["v2"], [([], "int64")]),
             Node("aten.unsqueeze.default", "aten.unsqueeze.default(v2, 0)", ["v5"], [([1], "int64")])]
    graph = FuzzGraph([x], nodes, ["v5"])
    values = graph.pruned(["v1"]).function()(*graph.pruned(["v1"]).make_inputs())[0].float()
    eager = graph.function()(*graph.make_inputs())[0]
    top = values.max()
    near = ((values < top) & (values >= top * (1 - 1e-2))).nonzero().flatten()  # bfloat16's rtol is 1.6e-2
    assert near.numel()
    assert near_tied_indices(graph, "v5", eager, near[:1].clone())
    far = (values < top * 0.5).nonzero().flatten()
    assert not near_tied_indices(graph, "v5", eager, far[:1].clone())
