"""signbit of a NaN (``harness.fuzz.nan_sign``): the sign of a NaN result is unspecified, so a
compiled signbit may differ from eager's where its input is NaN, and nowhere else."""

from __future__ import annotations

import torch

from harness.fuzz.campaign import allowances
from harness.fuzz.subject import run_graph
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.nan_sign import nan_sign_only
from harness.status import Status
from harness.targets import parse_target

X = {"shape": [8], "dtype": "bfloat16", "layout": "sliced", "profile": "special", "seed": 1}  # NaN at [1]
META = [([8], "bfloat16")]


def _graph(source: str = "v1") -> FuzzGraph:
    return FuzzGraph([X], [Node("aten.exp.default", "aten.exp.default(x0)", ["v1"], META),
                           Node("aten.signbit.default", f"aten.signbit.default({source})", ["v3"], [([8], "bool")])],
                     ["v3"])


def test_signbit_of_exp_of_a_nan_passes_on_crucible() -> None:
    """Fuzzer, crucible-cpp, seed 24: ATen's bfloat16 exp keeps a NaN's sign bit, Crucible's gives
    the canonical positive NaN; signbit tells them apart."""
    graph = _graph()
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS, record.error
    eager = graph.function()(*graph.make_inputs())[0]
    if bool(eager[1]):  # ATen's NaN kept its sign: the allowance was what passed it
        assert allowances(record) == ["sign of a NaN"]


def test_only_nan_positions_are_excused() -> None:
    graph = _graph()
    eager = graph.function()(*graph.make_inputs())[0]
    nan_flip = eager.clone()
    nan_flip[1] = ~nan_flip[1]
    assert nan_sign_only(graph, "v3", eager, nan_flip)
    number_flip = eager.clone()
    number_flip[0] = ~number_flip[0]  # exp(-0.31): a number, its sign is defined
    assert not nan_sign_only(graph, "v3", eager, number_flip)
    assert not nan_sign_only(_graph("x0"), "v1", eager, nan_flip)  # not a signbit output


def test_copysign_from_a_nan_may_differ_in_sign_only() -> None:
    """Fuzzer, crucible-cpp, seed 28: ``copysign(x0, layer_norm(x0))`` over rows holding inf: every
    normalized value is NaN, eager's negative and Crucible's positive, so copysign gave +inf for -inf.
    Excused where the sign operand is NaN and the magnitudes agree; nowhere else."""
    import torch

    y = {"shape": [8], "dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 1}
    nodes = [Node("aten.exp.default", "aten.exp.default(x0)", ["v1"], META),
             Node("aten.copysign.Tensor", "aten.copysign.Tensor(x1, v1)", ["v2"], [([8], "float32")])]
    graph = FuzzGraph([X, y], nodes, ["v2"])
    sign = graph.pruned(["v1"]).function()(*graph.pruned(["v1"]).make_inputs())[0]
    eager = graph.function()(*graph.make_inputs())[0]
    nan = torch.isnan(sign)
    assert nan.any() and not nan.all()
    flipped = torch.where(nan, -eager, eager)
    assert nan_sign_only(graph, "v2", eager, flipped)
    number_flip = torch.where(~nan, -eager, eager)
    assert not nan_sign_only(graph, "v2", eager, number_flip)
    assert not nan_sign_only(graph, "v2", eager, torch.where(nan, eager * 2, eager))  # a magnitude changed


def test_a_logical_op_of_a_signbit_differs_only_where_the_signbit_read_a_nan() -> None:
    """Fuzzer, crucible-interpret, seed 266: logical_and(x, signbit(log(x))): the interpreter's log of a
    negative number is a NaN with the sign bit set (FINDINGS.md), ATen's is positive. The logical op
    passes where it differs only at the signbit's NaN positions; a difference elsewhere still fails."""
    x = {"dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0, "shape": [2]}
    graph = FuzzGraph([x], [Node("aten.log.default", "aten.log.default(x0)", ["v0"], [([2], "float32")]),
                            Node("aten.signbit.default", "aten.signbit.default(v0)", ["v1"], [([2], "bool")]),
                            Node("aten.logical_and.default", "aten.logical_and.default(x0, v1)", ["v3"], [([2], "bool")])],
                      ["v3"])
    values = graph.make_inputs()[0]
    eager = graph.function()(values)[0]
    nan = torch.isnan(torch.log(values))
    assert bool(nan.any()) and not bool(nan.all())
    flipped = eager.clone()
    flipped[nan] = ~flipped[nan]
    assert nan_sign_only(graph, "v3", eager, flipped)
    wrong = eager.clone()
    wrong[~nan] = ~wrong[~nan]
    assert not nan_sign_only(graph, "v3", eager, wrong)
    assert run_graph(graph, parse_target("crucible-interpret")).status == Status.PASS


def test_what_follows_a_copysign_of_a_nan_is_judged_with_nans_of_one_sign() -> None:
    """Fuzzer, crucible-interpret, seed 441: ``topk(copysign(x, pow(x, x)), 1, dim=0)`` over a dim of
    one: ATen's pow of a negative base is a NaN with the sign bit set, the interpreter's is not, and
    the topk passed copysign's sign on. Excused where eager with every NaN of one sign gives the
    compiled value; a difference that no NaN sign explains still fails."""
    x = {"shape": [1, 1, 2], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0}
    nodes = [Node("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Tensor(x0, x0)", ["v1"], [([1, 1, 2], "float32")]),
             Node("aten.copysign.Tensor", "aten.copysign.Tensor(x0, v1)", ["v4"], [([1, 1, 2], "float32")]),
             Node("aten.topk.default", "aten.topk.default(v4, 1, dim=0)[0]", ["v9"], [([1, 1, 2], "float32")])]
    graph = FuzzGraph([x], nodes, ["v9"])
    eager = graph.function()(*graph.make_inputs())[0]
    positive = eager.abs()  # the negative base's NaN taken as positive: copysign gives |x|
    assert nan_sign_only(graph, "v9", eager, positive)
    assert not nan_sign_only(graph, "v9", eager, positive * 2)
    record = run_graph(graph, parse_target("crucible-interpret"))
    assert record.status == Status.PASS, record.error


def test_a_selection_by_the_sign_of_a_nan_is_judged_with_nans_of_either_sign() -> None:
    """Fuzzer, crucible-cpp, seed 452: ``where(signbit(fmod(x, -0.0)), clamp_min(x, 2), x)``: ATen's
    float64 fmod by -0.0 is a positive NaN, Crucible's a negative one, so Crucible selected
    clamp_min(x, 2) everywhere. The run with negative NaNs had set their sign by a product with -1,
    which keeps a NaN's sign on x86, so it selected x as eager did. Now both runs set the sign, and
    each position may take either (a kernel's NaN signs need not agree across positions); a value that
    neither selects still fails."""
    x = {"shape": [1, 8], "dtype": "float64", "layout": "narrowed", "profile": "normal", "seed": 0}
    meta = [([1, 8], "float64")]
    nodes = [Node("aten.clamp_min.default", "aten.clamp_min.default(x0, 2.0)", ["v0"], meta),
             Node("aten.fmod.Scalar", "aten.fmod.Scalar(x0, -0.0)", ["v2"], meta),
             Node("aten.signbit.default", "aten.signbit.default(v2)", ["v7"], [([1, 8], "bool")]),
             Node("aten.where.self", "aten.where.self(v7, v0, x0)", ["v8"], meta)]
    graph = FuzzGraph([x], nodes, ["v8"])
    (x0,) = graph.make_inputs()
    eager = graph.function()(x0)[0]
    assert not torch.signbit(torch.fmod(x0, -0.0)).any() and torch.equal(eager, x0)
    selected = x0.clamp_min(2.0)
    assert nan_sign_only(graph, "v8", eager, selected)
    mixed = torch.where(torch.arange(8).reshape(1, 8) % 2 == 0, selected, x0)
    assert nan_sign_only(graph, "v8", eager, mixed)
    wrong = selected.clone()
    wrong[0, 3] = 3.0
    assert not nan_sign_only(graph, "v8", eager, wrong)
    for target in ("crucible-cpp", "crucible-interpret"):
        record = run_graph(graph, parse_target(target))
        assert record.status == Status.PASS, record.error
