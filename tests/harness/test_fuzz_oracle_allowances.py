"""What the fuzz oracle may and may not excuse: a float64 reference that is float64 all the way
(integer inputs too), the rounding spread of ill-conditioned graphs, and float64 accumulations over
values near the top of its range (order-dependent, not compared); wrong results still fail."""

from __future__ import annotations

import math

import torch

from harness.fuzz.campaign import CampaignSummary
from harness.fuzz.cli import render_summary
from harness.fuzz.conditioning import order_dependent
from harness.fuzz.subject import compare_outputs, run_graph
from harness.fuzz.graph import FuzzGraph, Node
from harness.oracle import ParityOracle
from harness.status import Status
from harness.targets import parse_target

SHAPE = [1, 1, 2, 16]
FOURS = {"shape": SHAPE, "dtype": "int32", "layout": "expanded", "expand_from": [1, 1, 1, 1],
         "profile": "small_int", "seed": 15}  # every element 4


def _exp_exp(x: dict) -> FuzzGraph:
    meta = [(list(x["shape"]), "float32")]
    return FuzzGraph([x], [Node("aten.exp.default", "aten.exp.default(x0)", ["v0"], meta),
                           Node("aten.exp.default", "aten.exp.default(v0)", ["v1"], meta)], ["v1"])


def test_the_reference_of_an_integer_input_is_float64() -> None:
    """Fuzzer, crucible-cpp, seed 13: exp(exp(x)) over int32 fours was 1.98e18 off eager, judged
    against a "float64" reference that computed in float32 (exp of an int32 takes torch's default
    dtype), so eager's error was 0. The reference now runs with float64 as the default dtype."""
    graph = _exp_exp(FOURS)
    assert graph.make_inputs()[0].unique().tolist() == [4]
    (ref,) = graph.function(reference=True)(*graph.make_inputs(reference=True))
    assert ref.dtype == torch.float64 and torch.get_default_dtype() == torch.float32
    assert ref[0, 0, 0, 0].item() == math.exp(math.exp(4.0))
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS, record.error


def test_rounding_noise_perturbs_only_values_the_working_dtype_rounds() -> None:
    x = {"shape": [3, 5], "dtype": "float32", "seed": 1}
    graph = FuzzGraph([x], [Node("aten.t.default", "aten.t.default(x0)", ["v0"], [([5, 3], "float32")]),
                            Node("aten.exp.default", "aten.exp.default(v0)", ["v1"], [([5, 3], "float32")])],
                      ["v0", "v1"])
    inputs = graph.make_inputs(reference=True)
    t, e = graph.function(reference=True)(*inputs)
    noisy = [graph.function(reference=True, rounding_noise=s)(*inputs) for s in (0, 0, 1)]
    assert torch.equal(noisy[0][0], t)  # a transpose of float32 values rounds nothing
    relative = (noisy[0][1] / e - 1).abs()
    u = torch.finfo(torch.float32).eps / 2
    assert torch.allclose(relative, torch.full_like(relative, u), rtol=1e-6)  # one unit roundoff each
    assert torch.equal(noisy[0][1], noisy[1][1]) and not torch.equal(noisy[0][1], noisy[2][1])  # seeded


def _lucky_eager_case():
    """exp(exp(4)): eager correctly rounded at the end (as if its intermediate were exact); the
    compiled value's intermediate one ulp off, which the outer exp (condition 54.6) makes ~55 ulp."""
    inner = torch.tensor(math.exp(4.0), dtype=torch.float64)
    reference = torch.exp(inner).expand(32).clone()
    eager = reference.float()
    one_ulp_up = torch.nextafter(inner.float(), torch.tensor(math.inf)).double()
    compiled = torch.exp(one_ulp_up).float().expand(32).clone()
    u = torch.finfo(torch.float32).eps / 2
    spread = [torch.exp(inner * (1 + u)).expand(32).clone(), torch.exp(inner * (1 - u)).expand(32).clone()]
    return reference, eager, compiled, spread


def test_the_rounding_spread_excuses_amplified_rounding_and_nothing_more() -> None:
    reference, eager, compiled, spread = _lucky_eager_case()
    oracle = ParityOracle("float32")
    strict = oracle.compare(eager, compiled, reference)
    assert not strict.passed and strict.needs_spread and "RMSE" in strict.reason
    allowed = oracle.compare(eager, compiled, reference, spread=spread)
    assert allowed.passed, allowed.reason
    assert allowed.rounding_spread > 0
    wrong = (compiled.double() * (1 + 1e-4)).float()  # a real error: ~12 times the spread
    verdict = oracle.compare(eager, wrong, reference, spread=spread)
    assert not verdict.passed and "rounding spread" in verdict.reason


def _mean_graph(profile: str, seed: int) -> FuzzGraph:
    x = {"shape": [4, 8], "dtype": "float64", "profile": profile, "seed": seed}
    return FuzzGraph([x], [Node("aten.mean.dim", "aten.mean.dim(x0, [1], False)", ["v0"], [([4], "float64")]),
                           Node("aten.mul.Tensor", "aten.mul.Tensor(x0, 3.0)", ["v1"], [([4, 8], "float64")])],
                     ["v0", "v1"])


def _judge(graph: FuzzGraph, wrong: str) -> tuple[str, str, dict]:
    inputs = graph.make_inputs()
    eager = graph.function()(*inputs)
    compiled = tuple(v + 1 if name == wrong else v for name, v in zip(graph.outputs, eager))
    reference = graph.function(reference=True)(*graph.make_inputs(reference=True))
    return compare_outputs(graph, graph.outputs, eager, compiled, reference, rounding_spread=True)


def test_float64_accumulations_over_huge_values_are_not_compared_and_the_rest_is() -> None:
    """Fuzzer, crucible-cpp, seed 13: a float64 mean.dim over a row holding +-1.8e308 gave NaN where
    eager gave -inf (and elsewhere 0.02 where eager gave 0): partial sums overflow or cancel by
    evaluation order, and the float64 reference is eager's own order, no wider."""
    huge = _mean_graph("special", 49)
    assert huge.make_inputs()[0].abs().max().item() == torch.finfo(torch.float64).max
    failing, reason, metrics = _judge(huge, "v0")
    assert failing == "" and metrics["allowances"] == {"float64 order-dependent": 1}  # the mean is not compared
    failing, reason, _ = _judge(huge, "v1")  # pointwise over the same values still is
    assert failing == "v1", reason
    failing, reason, _ = _judge(_mean_graph("normal", 49), "v0")  # and a mean over ordinary values
    assert failing == "v0" and "RMSE" in reason


def test_the_summary_says_what_passed_by_an_allowance() -> None:
    summary = CampaignSummary(graphs=3)
    summary.allowances.update({"rounding spread": 1, "float64 order-dependent": 2})
    assert "passed by an oracle allowance: float64 order-dependent 2, rounding spread 1" in render_summary(summary)


def test_a_nan_difference_passes_where_compiled_is_the_correctly_rounded_computation() -> None:
    """Fuzzer, crucible-cpp, seed 21: float16 pow(x, log_softmax(x)) at x = -0.98: log_softmax is
    -6.000345, which rounds to -6.0 (Crucible) and eager's kernel gives -6.0039; pow of a negative
    base is NaN at a non-integer exponent (eager, float64) and 1.122 at -6 (Crucible). Judged
    against the reference with every step rounded to float16, Crucible's value is the right one."""
    d = {"shape": [1, 1, 130], "dtype": "float16", "layout": "contiguous", "profile": "unit", "seed": 4}
    meta = [([1, 1, 130], "float16")]
    graph = FuzzGraph([d], [Node("aten._log_softmax.default", "aten._log_softmax.default(x0, -1, False)", ["v1"], meta),
                            Node("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Tensor(x0, v1)", ["v2"], meta)], ["v2"])
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS and record.allowances == {"rounded steps": 1}
    oracle = ParityOracle("float16")
    eager, reference = torch.tensor([math.nan, 1.0]).half(), torch.tensor([math.nan, 1.0], dtype=torch.float64)
    compiled = torch.tensor([1.122, 1.0]).half()
    assert not oracle.compare(eager, compiled, reference).passed
    assert oracle.compare(eager, compiled, reference, rounded_steps=torch.tensor([1.122, 1.0])).passed
    assert not oracle.compare(eager, compiled, reference, rounded_steps=reference).passed


def _sum_digamma(profile: str) -> FuzzGraph:
    x = {"shape": [33, 1, 1, 17], "dtype": "int32", "layout": "contiguous", "profile": profile, "seed": 0}
    return FuzzGraph([x], [Node("aten.sum.dim_IntList", "aten.sum.dim_IntList(x0, [0], False, dtype=f32)", ["v0"],
                                [([1, 1, 17], "float32")]),
                           Node("aten.digamma.default", "aten.digamma.default(v0)", ["v1"], [([1, 1, 17], "float32")])],
                     ["v1"])


def test_an_accumulation_that_cancels_beyond_its_precision_is_not_compared() -> None:
    """Fuzzer, crucible-cpp, seed 21: digamma of a float32 sum of 33 int32 values holding +-2^31: the
    float64 sum is 36, eager's float32 sum 0 (digamma -inf), Crucible's 2 (0.42): no digit of either
    float32 sum is right, and which wrong value comes out depends on the summation order."""
    from harness.fuzz.conditioning import ill_conditioned

    graph = _sum_digamma("extreme")
    assert ill_conditioned(graph, "v1")
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS and record.allowances == {"ill-conditioned accumulation": 1}
    assert not ill_conditioned(_sum_digamma("small_int"), "v1")
    x = {"shape": [5, 3], "dtype": "int32", "profile": "small_int", "seed": 2}
    exact = FuzzGraph([x], [Node("aten.neg.default", "aten.neg.default(x0)", ["v0"], [([5, 3], "int32")]),
                            Node("aten.cat.default", "aten.cat.default([x0, v0], 0)", ["v1"], [([10, 3], "int32")]),
                            Node("aten.sum.dim_IntList", "aten.sum.dim_IntList(v1, [0], False, dtype=f32)", ["v2"],
                                 [([3], "float32")])], ["v2"])
    assert not ill_conditioned(exact, "v2")  # x - x sums to an exact 0: well computed, judged


def test_var_means_mean_that_cancels_beyond_its_precision_is_not_compared() -> None:
    """var_mean's mean cancels like mean: digamma of the float32 mean of 33 int32 extremes (+-2^31)
    came out -8.6 in eager where float64 gives 32.4 (Crucible's mean rounded to a pole: -inf
    positions differed). Its variance output is not excused by it."""
    from harness.fuzz.conditioning import ill_conditioned

    x = {"shape": [33, 1, 1, 17], "dtype": "int32", "layout": "contiguous", "profile": "extreme", "seed": 0}
    meta = ([1, 1, 17], "float32")
    graph = FuzzGraph([x], [
        Node("aten._to_copy.default", "aten._to_copy.default(x0, dtype=f32)", ["v0"], [([33, 1, 1, 17], "float32")]),
        Node("aten.var_mean.correction", "aten.var_mean.correction(v0, [0], correction=1, keepdim=False)",
             ["v1", "v2"], [meta, meta]),
        Node("aten.digamma.default", "aten.digamma.default(v2)", ["v3"], [meta])], ["v3"])
    assert ill_conditioned(graph, "v3") and not ill_conditioned(graph, "v1")
    # Crucible's float64 deviation sums may land on eager's rounding or not: either way it passes
    record = run_graph(graph, parse_target("crucible-cpp"))
    assert record.status == Status.PASS, record.error


def test_an_accumulation_whose_terms_pass_the_dtypes_max_is_not_compared() -> None:
    """H200, crucible-triton, seed 12: exp(matmul(x0, x1)) with x1 holding +-3.4e38: the float32
    partial sums overflow, to +-inf or to NaN (inf - inf) by the summation order: eager NaN where
    Triton's tl.dot order gave -inf. Ordinary operands are judged."""
    from harness.fuzz.conditioning import ill_conditioned

    x0 = {"shape": [2, 5, 65], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0}
    x1 = {"shape": [65], "dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 0}
    nodes = [Node("aten.matmul.default", "aten.matmul.default(x0, x1)", ["v0"], [([2, 5], "float32")]),
             Node("aten.exp.default", "aten.exp.default(v0)", ["v2"], [([2, 5], "float32")])]
    assert ill_conditioned(FuzzGraph([x0, x1], nodes, ["v2"]), "v2")
    assert not ill_conditioned(FuzzGraph([x0, dict(x1, profile="normal")], nodes, ["v2"]), "v2")


def test_addmm_is_an_accumulation_too() -> None:
    """Fuzzer, crucible-interpret:extern=none, seed 228: addmm(bias, x0 [1025, 7] holding +-3.4e38 and
    inf, x2): the interpreter's blocked matmul summed -2.0e38 and -1.95e38 to -inf before an inf term
    (NaN) where eager's order and float64 give inf. addmm was missing from the accumulating ops."""
    from harness.fuzz.conditioning import ill_conditioned

    x0 = {"shape": [1025, 7], "dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 1}
    x1 = {"shape": [8], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0}
    x2 = {"shape": [7, 8], "dtype": "float32", "layout": "transposed", "profile": "normal", "seed": 1}
    nodes = [Node("aten.addmm.default", "aten.addmm.default(x1, x0, x2)", ["v0"], [([1025, 8], "float32")])]
    assert ill_conditioned(FuzzGraph([x0, x1, x2], nodes, ["v0"]), "v0")
    assert not ill_conditioned(FuzzGraph([dict(x0, profile="normal"), x1, x2], nodes, ["v0"]), "v0")


def test_a_negative_scale_does_not_hide_an_accumulation_past_the_dtypes_max() -> None:
    """Fuzzer, crucible-sim, seed 433: addmm(x1, x0, x2, alpha=-1) over bfloat16 rows whose float32
    partial sums overflow (float64: -4.97e38, past bfloat16's and float32's max): eager's two ATen
    threads summed to +inf (-inf after alpha), the interpreted graph's one thread to NaN. The bound
    on |terms| kept alpha's sign and came out below 0, so the row was judged as ordinary."""
    from harness.fuzz.conditioning import ill_conditioned
    from harness.fuzz.graph import magnitude_expr

    assert magnitude_expr("aten.addmm.default(x1, v0, x2, beta=-0.5, alpha=-1)") == (
        "aten.addmm.default(_absolute(x1, integers), _absolute(v0, integers), _absolute(x2, integers), "
        "beta=0.5, alpha=1)")
    assert magnitude_expr("aten.cumsum.default(x0, -1)", "{}") == "aten.cumsum.default(x0, -1)"  # a dim
    x0 = {"shape": [65, 33], "dtype": "bfloat16", "layout": "contiguous", "profile": "special", "seed": 0}
    x1 = {"shape": [3], "dtype": "bfloat16", "layout": "contiguous", "profile": "normal", "seed": 0}
    x2 = {"shape": [33, 3], "dtype": "bfloat16", "layout": "contiguous", "profile": "normal", "seed": 0}
    nodes = [Node("aten.addmm.default", "aten.addmm.default(x1, x0, x2, alpha=-1)", ["v0"], [([65, 3], "bfloat16")])]
    assert ill_conditioned(FuzzGraph([x0, x1, x2], nodes, ["v0"]), "v0")
    assert not ill_conditioned(FuzzGraph([dict(x0, profile="normal"), x1, x2], nodes, ["v0"]), "v0")
    record = run_graph(FuzzGraph([x0, x1, x2], nodes, ["v0"]), parse_target("crucible-interpret"))
    assert record.status == Status.PASS, record.error


def test_a_convolution_is_an_accumulation_too() -> None:
    """Fuzzer, crucible-interpret:extern=none, seed 237: a grouped 1x1 convolution over channels holding
    -inf and 3.4e38: the template's separate product overflowed to +inf (NaN with the -inf) where
    eager's fused multiply-add gives -inf."""
    from harness.fuzz.conditioning import ill_conditioned

    x0 = {"shape": [2, 4, 8, 8], "dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 74}
    x1 = {"shape": [4, 2, 1, 1], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0}
    nodes = [Node("aten.convolution.default",
                  "aten.convolution.default(x0, x1, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2)", ["v0"],
                  [([2, 4, 8, 8], "float32")])]
    assert ill_conditioned(FuzzGraph([x0, x1], nodes, ["v0"]), "v0")
    assert not ill_conditioned(FuzzGraph([dict(x0, profile="normal"), x1], nodes, ["v0"]), "v0")


def test_a_product_whose_partial_products_may_overflow_is_not_compared() -> None:
    """Fuzzer, crucible-cpp, seed 26: prod over rows like (-3.4e38, -0.37, -1.06, 1.0) is -1.35e38 in
    eager's sequential order and -inf in Crucible's lanes ((a0 * a2) * (a1 * a3) passes max): both
    are orders of the same product. Rows of ordinary values are judged."""
    from harness.fuzz.conditioning import ill_conditioned

    x = {"shape": [1, 17, 4], "dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 0}
    node = Node("aten.prod.dim_int", "aten.prod.dim_int(x0, -1, False)", ["v0"], [([1, 17], "float32")])
    graph = FuzzGraph([x], [node], ["v0"])
    assert ill_conditioned(graph, "v0")
    assert not ill_conditioned(FuzzGraph([dict(x, profile="normal")], [node], ["v0"]), "v0")
    assert run_graph(graph, parse_target("crucible-cpp")).status == Status.PASS


def test_a_product_whose_partial_products_may_underflow_is_not_compared() -> None:
    """H200, float32: prod([1, 1e-38, 1e38, 1e-38, 0.5]) is 5e-39; eager's order gave 0 and Inductor's
    5e-39, so logical_not(prod) flipped (the crucible-triton finding of seed 5, over special values).
    Terms scaled to 1e-13 (a product of three is 1e-39, subnormal) are order-dependent too; products
    of ordinary values, and one that rounds to 0 in every order, are judged."""
    from harness.fuzz.conditioning import ill_conditioned

    x = {"shape": [4, 3], "dtype": "float32", "layout": "contiguous", "profile": "positive", "seed": 0}

    def scaled(factor: float) -> FuzzGraph:
        nodes = [Node("aten.mul.Scalar", f"aten.mul.Scalar(x0, {factor})", ["v0"], [([4, 3], "float32")]),
                 Node("aten.prod.dim_int", "aten.prod.dim_int(v0, -1, False)", ["v1"], [([4], "float32")]),
                 Node("aten.logical_not.default", "aten.logical_not.default(v1)", ["v2"], [([4], "bool")])]
        return FuzzGraph([x], nodes, ["v2"])

    assert ill_conditioned(scaled(1e-13), "v2")
    assert not ill_conditioned(scaled(1.0), "v2")
    assert not ill_conditioned(scaled(1e-20), "v2")  # 1e-60: 0 whatever the order


def test_eagers_overflow_is_excused_where_the_target_is_the_truth_at_the_outputs_scale() -> None:
    """Fuzzer, crucible-cpp, seed 27: layer norm of (1.1, -3.4e38, -1.2, 3.4e38) is NaN in eager (its
    Welford overflows); Crucible gives (4.7e-39, -1.41, -4.9e-39, 1.41) where float64 gives 4.6e-39 and
    -5.0e-39 for the small elements: 3% off each, noise at the row's scale. A value off at the
    output's scale still fails."""
    oracle = ParityOracle("float32")
    eager = torch.full((4,), math.nan)
    reference = torch.tensor([4.5705e-39, -1.4142, -5.0245e-39, 1.4142], dtype=torch.float64)
    crucible = torch.tensor([4.7408e-39, -1.4142, -4.8543e-39, 1.4142])
    assert oracle.compare(eager, crucible, reference).passed
    assert not oracle.compare(eager, torch.tensor([0.01, -1.4142, -4.8543e-39, 1.4142]), reference).passed


def test_group_norm_reference_is_sound_and_a_flipped_comparison_may_follow_it() -> None:
    """Fuzzer, crucible-cpp, seed 22: a group norm over groups of one element is exactly 0, but ATen's
    CPU kernel (x * a - mean * a) gives ~1e-8 in float32 and garbage in float64, so log10 of it was
    NaN in eager and the reference (Crucible: -inf) and logical_and with it True (Crucible: False).
    The reference group norm normalizes first; a bool output may differ from eager where it is the
    reference's."""
    x = {"shape": [1, 1, 1], "dtype": "float32", "profile": "normal", "seed": 0}
    w = {"shape": [1], "dtype": "float32", "profile": "normal", "seed": 1}
    norm = Node("aten.native_group_norm.default", "aten.native_group_norm.default(x0, x1, None, 1, 1, 1, 1, 1e-5)[0]",
                ["v0"], [([1, 1, 1], "float32")])
    graph = FuzzGraph([x, w], [norm], ["v0"])
    (ref,) = graph.function(reference=True)(*graph.make_inputs(reference=True))
    assert ref.item() == 0.0
    for last, meta in (("aten.log10.default(v0)", "float32"), ("aten.logical_and.default(v0, x0)", "bool")):
        op = last.split("(")[0]
        g = FuzzGraph([x, w], [norm, Node(op, last, ["v1"], [([1, 1, 1], meta)])], ["v1"])
        record = run_graph(g, parse_target("crucible-cpp"))
        assert record.status == Status.PASS, (last, record.error)
    oracle = ParityOracle("float32")
    eager, compiled = torch.tensor([True, True]), torch.tensor([False, True])
    assert oracle.compare(eager, compiled, torch.tensor([False, True])).passed
    assert not oracle.compare(eager, compiled, torch.tensor([True, True])).passed  # not the reference's
    assert not oracle.compare(eager, compiled).passed


def test_indices_of_values_that_cancel_by_their_order_are_not_compared() -> None:
    """Fuzzer, crucible-interpret, seed 82: a stable sort of sums over columns holding +3.4e38 and
    -3.4e38 among ordinary values: eager's sum cancels the two first (2.30), the compiled one adds
    2.30 to one of them first (0.0): both float32 sums are order-dependent rounding noise (excused),
    and so are the sort's indices over them, which differed at 3 positions."""
    from harness.fuzz.conditioning import ill_conditioned

    x = {"shape": [7, 7, 1, 7], "dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 1}
    meta = ([7, 1, 7], "float32")
    graph = FuzzGraph([x], [
        Node("aten.sum.dim_IntList", "aten.sum.dim_IntList(x0, [0], False)", ["v0"], [meta]),
        Node("aten.sort.stable", "aten.sort.stable(v0, stable=True, dim=0, descending=False)", ["v1_0", "v1_1"],
             [meta, ([7, 1, 7], "int64")])], ["v1_0", "v1_1"])
    assert ill_conditioned(graph, "v1_1")
    record = run_graph(graph, parse_target("crucible-interpret"))
    assert record.status == Status.PASS, record.error
    oracle = ParityOracle("float32")
    eager, other = torch.tensor([2, 0, 1]), torch.tensor([0, 2, 1])
    assert not oracle.compare(eager, other, None).passed  # integers are still exact where the order cannot matter
    assert oracle.compare(eager, other, None, order_dependent=True).passed


def test_an_index_put_that_accumulates_past_the_max_is_not_compared() -> None:
    """Fuzzer, crucible-interpret, seed 258: index_put with accumulate of rows (0.15, 3.4e38, 3.4e38)
    into a row holding -inf: eager's sequential order stays -inf, Crucible's reduction summed the
    values first (inf) and gave NaN. Both are orders of the same sum; ordinary values are judged."""
    from harness.fuzz.conditioning import ill_conditioned

    x0 = {"dtype": "float32", "layout": "contiguous", "profile": "special", "seed": 174, "shape": [1, 1, 16, 64]}
    x1 = {"bound": 1, "dtype": "int64", "layout": "contiguous", "negative": False, "profile": "index", "seed": 0,
          "shape": [3]}
    x2 = {"dtype": "float32", "layout": "transposed", "profile": "special", "seed": 124, "shape": [3, 1, 16, 64]}
    nodes = [Node("aten.index_put.default", "aten.index_put.default(x0, [x1], x2, True)", ["v1"],
                  [([1, 1, 16, 64], "float32")])]
    graph = FuzzGraph([x0, x1, x2], nodes, ["v1"])
    assert ill_conditioned(graph, "v1")
    assert run_graph(graph, parse_target("crucible-interpret")).status == Status.PASS
    assert not ill_conditioned(FuzzGraph([x0, x1, dict(x2, profile="normal")], nodes, ["v1"]), "v1")


def test_an_infinite_term_alone_does_not_excuse_a_sum(monkeypatch) -> None:
    """An inf among a sum's terms gives inf (or NaN) in every order: a sum over a tensor holding an inf
    and ordinary finite values is judged (before, its infinite outputs made the whole output
    ill-conditioned, through the overflow bound and the cancellation test alike); finite terms whose
    partial sums pass the max still excuse it."""
    from harness.fuzz.conditioning import ill_conditioned

    x = {"shape": [4, 33], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 3}
    node = Node("aten.sum.dim_IntList", "aten.sum.dim_IntList(x0, [1])", ["v0"], [([4], "float32")])
    graph = FuzzGraph([x], [node], ["v0"])
    values = graph.make_inputs("cpu")[0].clone()
    values[0, 5] = math.inf
    monkeypatch.setattr(FuzzGraph, "make_inputs",
                        lambda self, *a, reference=False: [values.double() if reference else values])
    assert not ill_conditioned(graph, "v0")
    values[1, 7] = values[1, 8] = 3.0e38
    assert ill_conditioned(graph, "v0")  # finite partial sums past the max: order-dependent


def test_a_cancelling_sum_exact_only_in_eagers_order_is_not_compared() -> None:
    """Fuzzer, crucible-interpret, seed 263: a float32 sum over 5 int64 rows holding int64's extremes and
    small integers is exact in eager's sequential order (the extremes cancel first) and loses a small
    term in the interpreter's (2^63 + 5 rounds to 2^63); a layer norm of the pair made it 314 off. The
    sum of |terms| is past 1/u, so no order is exact by construction: the layer norm after it is not
    compared. Small integers that cancel exactly in every order are still judged (the seed-21 test
    above), and so is the sum itself, per position, by its terms noise (the seed-262 tests)."""
    from harness.fuzz.conditioning import ill_conditioned

    x = {"dtype": "int64", "layout": "contiguous", "profile": "extreme", "seed": 0, "shape": [5, 3, 65, 2]}
    nodes = [Node("aten.sum.dim_IntList", "aten.sum.dim_IntList(x0, [0], dtype=f32)", ["v0"], [([3, 65, 2], "float32")]),
             Node("aten.native_layer_norm.default", "aten.native_layer_norm.default(v0, [2], None, None, 1e-05)",
                  ["v2_0", "v2_1", "v2_2"], [([3, 65, 2], "float32"), ([3, 65, 1], "float32"), ([3, 65, 1], "float32")])]
    graph = FuzzGraph([x], nodes, ["v2_2"])
    assert ill_conditioned(graph, "v2_2")
    assert run_graph(graph, parse_target("crucible-interpret")).status == Status.PASS
    assert not ill_conditioned(FuzzGraph([dict(x, profile="small_int")], nodes, ["v2_2"]), "v2_2")
    assert not ill_conditioned(FuzzGraph([x], nodes[:1], ["v0"]), "v0")


def test_a_narrower_output_of_a_float64_accumulation_over_huge_values_is_not_compared() -> None:
    """Fuzzer, crucible-cpp:extern=none, seed 274: a float64 layer norm over a single -1.8e308, then a
    float32 mean of it: ATen's order gave NaN (and rstd NaN), Crucible's the exact 0 (rstd 316). The
    float64 reference was ATen's own order, so the float32 output was no more judgeable than a float64
    one; the reference's own layer norm (``harness.fuzz.reference_ops``) now gives the exact 0 itself.
    Ordinary values are judged."""
    x = {"dtype": "float64", "layout": "sliced", "profile": "special", "seed": 401, "shape": [1, 1, 1]}
    nodes = [Node("aten.native_layer_norm.default", "aten.native_layer_norm.default(x0, [1], None, None, 1e-05)",
                  ["v0_0", "v0_1", "v0_2"], [([1, 1, 1], "float64")] * 3),
             Node("aten.mean.dim", "aten.mean.dim(v0_0, [0], dtype=f32)", ["v3"], [([1, 1], "float32")])]
    graph = FuzzGraph([x], nodes, ["v3"])
    record = run_graph(graph, parse_target("crucible-cpp:extern=none"))
    assert record.status == Status.PASS, record.error
    reference = graph.function(reference=True)(*graph.make_inputs("cpu", reference=True))
    assert reference[0].item() == 0.0
    ordinary = FuzzGraph([dict(x, profile="normal", shape=[4, 1, 8])], [
        Node("aten.native_layer_norm.default", "aten.native_layer_norm.default(x0, [8], None, None, 1e-05)",
             ["v0_0", "v0_1", "v0_2"], [([4, 1, 8], "float64"), ([4, 1, 1], "float64"), ([4, 1, 1], "float64")]),
        Node("aten.mean.dim", "aten.mean.dim(v0_0, [0], dtype=f32)", ["v3"], [([1, 8], "float32")])], ["v3"])
    failing, reason, _ = _judge(ordinary, "v3")
    assert failing == "v3", reason


def test_a_float64_variance_over_values_whose_squares_are_huge_is_not_compared() -> None:
    """Fuzzer, crucible-interpret, seed 386: the variance of five copies of 1.29e154 is 0 (Crucible's
    too), ATen's two-pass 2.8e276: its mean rounds, and the square of that rounding is near 2^1000. The
    squares of values >= 2^500 are where a variance's order decides; a mean of them, and a variance of
    ordinary values, are still compared."""
    x = {"shape": [5], "dtype": "float64", "expand_from": [1], "layout": "expanded", "profile": "accumulation",
         "seed": 1633}
    var = Node("aten.var.correction", "aten.var.correction(x0, dim=[0])", ["v0"], [([], "float64")])
    graph = FuzzGraph([x], [var], ["v0"])
    assert 2.0 ** 500 <= graph.make_inputs()[0].abs().max().item() < 2.0 ** 1000
    record = run_graph(graph, parse_target("crucible-interpret"))
    assert record.status == Status.PASS and record.allowances == {"float64 order-dependent": 1}, record.error
    mean = FuzzGraph([x], [Node("aten.mean.dim", "aten.mean.dim(x0, [0], False)", ["v0"], [([], "float64")])], ["v0"])
    assert not order_dependent(mean, "v0")
    failing, reason, _ = _judge(FuzzGraph([dict(x, profile="normal", layout="contiguous")], [var], ["v0"]), "v0")
    assert failing == "v0", reason
