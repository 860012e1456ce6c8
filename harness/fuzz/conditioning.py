"""Outputs the float64 reference cannot judge: their value depends on the evaluation order.

Two rules, both from the inputs and the float64 reference alone, both counted by the campaign as
oracle allowances (``harness.fuzz.campaign.allowances``):

- ``order_dependent``: a float64 output downstream of an accumulating op (reduction, scan, nn) that
  float64 inputs of magnitude >= 2^1000 reach, or of one that squares its inputs (var, std, the
  norms) that inputs of magnitude >= 2^500 reach. Partial sums and products near the top of
  float64's range overflow (inf, or inf - inf = NaN) or cancel by the summation order, and no wider
  type can say which order is right (fuzzer, crucible-interpret, seed 386: the variance of five
  copies of 1.29e154 is 0, Crucible's too, and ATen's two-pass 2.8e276: its mean rounded, and
  (x - mean)^2 of the rounding is 2^1000 times the variance's own scale of error).
- ``ill_conditioned``: an output downstream of a sum, mean (var_mean's too), cumsum or matrix
  product that cancels beyond its working precision, sum|terms| / |sum| >= 1/u somewhere (u: the
  unit roundoff of the op's result dtype) at a position where eager's value (on the CPU) is off
  the float64 one, measured by running the op on the absolute values of its float64 inputs; or an
  output downstream of one of those, or of a prod or cumprod, whose sum|terms| (product of
  max(|term|, 1)) passes the dtype's max: which partial sums or products overflow, to +-inf or to
  NaN, depends on the order, whether or not eager's did; or a prod or cumprod whose product of
  min(|term|, 1) is below the dtype's smallest normal where the product does not round to 0 (which partial
  products go subnormal or to 0 depends on the order). Every digit of the working-precision
  result is then rounding noise whose value depends on the order (fuzzer, crucible-cpp, seed 21:
  digamma of a float32 sum of int32 extremes, 36 in float64, was 0 in eager (digamma -inf) and 2
  in Crucible).
"""

from __future__ import annotations

import fnmatch
from typing import Any

import torch

from harness.fuzz.graph import ACCUMULATION_NOISE, FuzzGraph, _absolute, magnitude_expr, namespace, taken_output
from harness.fuzz.specs import OP_SPECS
from harness.fuzz.values import DTYPES, make_input

HUGE_FLOAT64 = 2.0 ** 1000  # inputs this large overflow float64 partial sums and products
SQUARED_HUGE = 2.0 ** 500  # inputs this large square to HUGE_FLOAT64 in the ops below
SQUARING = ("aten.var*", "aten.std*", "aten.*norm*")  # statistics over squares of their inputs
ACCUMULATING = ("reduction", "nn", "scan")  # op families whose result sums many values
# products whose partial products may pass the dtype's max in one order and not in another: the
# product of max(|term|, 1) bounds every partial product
PRODUCTS = {"aten.prod.dim_int": 0, "aten.prod.default": 0, "aten.cumprod.default": 0}


def _holds_huge(t: torch.Tensor, limit: float = HUGE_FLOAT64) -> bool:
    return bool((torch.isfinite(t) & (t.abs() >= limit)).any())


def order_dependent(graph: FuzzGraph, name: str) -> bool:
    """Whether ``name`` is downstream of an accumulating op that a float64 input holding a finite
    value of magnitude >= HUGE_FLOAT64 reaches, or of a SQUARING one that a value >= SQUARED_HUGE reaches."""
    floats = [(x, make_input(desc)) for x, desc in zip(graph.input_names(), graph.inputs) if desc["dtype"] == "float64"]
    squared = {x for x, t in floats if _holds_huge(t, SQUARED_HUGE)}
    huge = {x for x, t in floats if _holds_huge(t)}
    if not squared:
        return False
    made = {out: n for n in graph.nodes for out in n.outputs}
    for value in graph.upstream([name]):
        node = made.get(value)
        spec = OP_SPECS.get(node.op) if node is not None else None
        if spec is None or spec.family not in ACCUMULATING:
            continue
        reached = graph.upstream(node.outputs)
        if reached & huge or (reached & squared and any(fnmatch.fnmatchcase(node.op, p) for p in SQUARING)):
            return True
    return False


def ill_conditioned(graph: FuzzGraph, name: str) -> bool:
    """Whether a sum, mean, cumsum or matrix product upstream of ``name`` (itself included) cancels
    beyond the unit roundoff of its float result dtype, in the float64 reference, or it or a
    product may overflow by its order (see the module's docstring)."""
    upstream = graph.upstream([name])
    kinds = {**ACCUMULATION_NOISE, **PRODUCTS}  # op -> its accumulating output
    # (node, where its accumulating output is among its values): a node that takes one output of the op
    # (native_group_norm(...)[1]) names only that one (``taken_output``)
    nodes = []
    for n in graph.nodes:
        at = taken_output(n, kinds[n.op]) if n.op in kinds else None
        if at is not None and n.outputs[at] in upstream and DTYPES.get(n.out_meta[at][1], torch.int64).is_floating_point:
            nodes.append((n, at))
    if not nodes:
        return False
    try:
        full = graph.prefix(len(graph.nodes))
        values = dict(zip(full.outputs, full.function(reference=True)(*full.make_inputs("cpu", reference=True))))
        values.update(zip(graph.input_names(), graph.make_inputs("cpu", reference=True)))
        eager = dict(zip(full.outputs, full.function()(*full.make_inputs("cpu"))))
        # the overflow bounds read the finite terms: an infinite or NaN term gives the same result in
        # every order (it alone would otherwise excuse a whole sum over a tensor holding one inf); the
        # partial sums of finite terms are what overflow by the order
        finite = lambda m: torch.where(torch.isfinite(m), m, 0.0)  # noqa: E731
        at_least_one = lambda m: finite(m).clamp_min(1)  # noqa: E731
        at_most_one = lambda m: m.clamp_max(1)  # noqa: E731
        for node, k in nodes:
            out = values[node.outputs[k]]
            overflow_bound = _evaluate(node, k, values, at_least_one if node.op in PRODUCTS else finite)
            info = torch.finfo(DTYPES[node.out_meta[k][1]])
            u = info.eps / 2
            # a sum of |terms| (a product of max(|term|, 1)) past the dtype's max: which partial sums
            # or products overflow, to +-inf or to NaN (inf - inf), depends on the order, whether or
            # not eager's did (H200 crucible-triton, seed 12: matmul of rows of +-3.4e38, NaN in eager,
            # -inf in tl.dot's order; crucible-cpp, seed 26: prod of (-3.4e38, -0.37, -1.06, 1), finite
            # in eager's order, -inf in Crucible's lanes)
            if bool((overflow_bound.double() > info.max).any()):
                return True
            if node.op in PRODUCTS:
                # a product of min(|term|, 1) below the smallest normal: some order's partial products
                # go subnormal or to 0 where the product itself is not 0, and another's do not (H200,
                # float32: prod([1, 1e-38, 1e38, 1e-38, 0.5]) is 5e-39; eager's order gave 0, Inductor's
                # and Crucible's 5e-39 or 0 by the row, so logical_not(prod) flipped)
                low = _evaluate(node, k, values, at_most_one)
                representable = out.double().abs() >= info.smallest_normal * info.eps / 2  # rounds to nonzero
                if bool(((low.double() < info.smallest_normal) & representable).any()):
                    return True
                continue
            bound = _evaluate(node, k, values)
            # (at a finite result: an infinite one is an infinite term's, the same in every order)
            cancels = (bound.double() * u >= out.double().abs()) & (bound > 0) & torch.isfinite(out)
            # ... where eager's working-precision value did lose the digits (an exact cancellation of
            # small integers to 0 is well computed, and judged; NaN counts as lost), or where another
            # order could have: a sum of |terms| past 1/u leaves the range in which every order's
            # partial sums of integers are exact (fuzzer, crucible-interpret, seed 263: a float32 sum
            # of int64 extremes and small integers, exact in eager's order, 5 lost in the
            # interpreter's, and a layer norm of that pair turned it into 314). The accumulation's own
            # output is judged per position by the terms noise instead (``ACCUMULATION_NOISE``), which
            # still sees a missing term where the result is large
            eager_kept = (eager[node.outputs[k]].double() - out.double()).abs() <= 2 * u * out.double().abs()
            kept = eager_kept & ((bound.double() * u <= 1) | (node.outputs[k] == name))
            if bool((cancels & ~kept).any()):
                return True
    except Exception:  # noqa: BLE001 -- no float64 kernel or a call |x| does not fit: judged strictly
        return False
    return False


def _evaluate(node: Any, k: int, values: dict, transform: Any = None) -> torch.Tensor:
    """Output ``k`` of ``node``'s op in float64 on the magnitudes of the graph's ``values``
    (``_absolute``, as the rounding-noise references' terms), each float one passed through
    ``transform``: integers' magnitudes too, or, where the op needs them as integers (index_put's
    indices), the integers as they are."""
    for integers in (True, False):
        operands = {}
        for name, value in values.items():
            m = _absolute(value, integers)
            is_float = isinstance(m, torch.Tensor) and m.is_floating_point()
            operands[name] = transform(m) if transform is not None and is_float else m
        try:
            call = magnitude_expr(node.expr, "{}")  # the operands are magnitudes already; scales too
            out = eval(call, {**namespace(reference=True), **operands})  # noqa: S307 -- our own op table
            break
        except (RuntimeError, IndexError, TypeError):
            if not integers:
                raise
    return out[k] if isinstance(out, tuple) else out
