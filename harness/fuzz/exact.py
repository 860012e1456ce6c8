"""The exact tier of the fuzz oracle: outputs that must equal eager's bit for bit.

An op whose eager result is exact (a copy, a selection, an integer operation) or correctly rounded
(a cast to a narrower float) has one right answer, and any other value is a bug however small its
RMSE: a cast that truncates where eager rounds is half an ulp off on average, within every
tolerance. So an output whose whole dependency cone (``FuzzGraph.upstream``) consists of the ops
below is compared bit for bit (``bitwise_mismatch``: NaN payloads aside, -0.0 differs from +0.0);
an output that depends on any other op keeps the tolerance check (``harness.oracle.ParityOracle``).

To add an op: put it in ``EXACT_OPS`` under the reason it is exact, with the condition under
which it is (``Exact``). Float arithmetic (add, mul, div, ...) is left out on purpose: IEEE
rounds each of them correctly, but a compiler may keep a 16-bit graph's intermediates in float32
(one rounding at the end, as Inductor does), which is a different right answer.
"""

from __future__ import annotations

import enum

import torch

from harness.fuzz.graph import FuzzGraph
from harness.fuzz.values import DTYPES
from harness.oracle import nonfinite_mismatch


class Exact(enum.Enum):
    """When an op's result is exact."""

    ALWAYS = "always"
    INTEGRAL = "integral result"  # every output an integer or bool (integer arithmetic wraps, never rounds)
    NOT_ACCUMULATING = "accumulate=False"  # index_put: with accumulate it sums


_MOVEMENT = "copies elements: views, movement, padding and concatenation move values without arithmetic"
_INDEXING = ("selects elements by index (the fuzzer draws distinct indices where duplicates would make the "
             "write order matter)")
_SELECTION = ("selects one of its operands or a constant rounded to the dtype: comparisons, min/max, clamp, "
              "where, sorting; rounding is monotonic, so computing in float32 and rounding gives the same")
_PREDICATE = "a boolean or integer function of its operands' exact values"
_SIGN = "changes only the sign bit, or maps to -1/0/+1: no rounding"
_INTEGER_VALUED = ("rounds to an integer value, which the float dtype holds exactly (frac: x - trunc(x) is "
                   "exact in binary floating point)")
_CAST = ("a conversion ATen defines: round to nearest even to a narrower float, truncation toward zero to "
         "an integer, exact to a wider type")
_INTEGER_ARITHMETIC = ("integer arithmetic as ATen defines it (two's complement wraparound, floor or trunc "
                       "division, the sign of a remainder): exact when the result is an integer")

EXACT_OPS: dict[str, tuple[Exact, str]] = {
    **{op: (Exact.ALWAYS, _MOVEMENT) for op in (
        "aten.clone.default", "aten.view.default", "aten.reshape.default", "aten.permute.default",
        "aten.transpose.int", "aten.t.default", "aten.expand.default", "aten.squeeze.dim",
        "aten.squeeze.dims", "aten.unsqueeze.default", "aten.select.int", "aten.slice.Tensor",
        "aten.narrow.default", "aten.diagonal.default", "aten.as_strided.default", "aten.unfold.default",
        "aten.unbind.int", "aten.split.Tensor", "aten.flip.default", "aten.roll.default",
        "aten.repeat.default", "aten.cat.default", "aten.stack.default", "aten.constant_pad_nd.default",
        "aten.tril.default", "aten.triu.default", "aten.upsample_nearest2d.vec")},
    **{op: (Exact.ALWAYS, _INDEXING) for op in (
        "aten.gather.default", "aten.index.Tensor", "aten.index_select.default", "aten.embedding.default",
        "aten.scatter.src", "aten.scatter.value")},
    "aten.index_put.default": (Exact.NOT_ACCUMULATING, _INDEXING),
    **{op: (Exact.ALWAYS, _SELECTION) for op in (
        "aten.maximum.default", "aten.minimum.default", "aten.fmax.default", "aten.fmin.default",
        "aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default", "aten.clamp_max.default",
        "aten.hardtanh.default", "aten.relu.default", "aten.threshold.default", "aten.where.self",
        "aten.masked_fill.Scalar", "aten.nan_to_num.default", "aten.amax.default", "aten.amin.default",
        "aten.max.default", "aten.min.default", "aten.max.dim", "aten.min.dim", "aten.argmax.default",
        "aten.argmin.default", "aten.cummax.default", "aten.sort.stable", "aten.argsort.stable",
        "aten.topk.default", "aten.max_pool2d_with_indices.default")},
    **{op: (Exact.ALWAYS, _PREDICATE) for op in (
        "aten.eq.Tensor", "aten.eq.Scalar", "aten.ne.Tensor", "aten.ne.Scalar", "aten.lt.Tensor",
        "aten.lt.Scalar", "aten.le.Tensor", "aten.le.Scalar", "aten.gt.Tensor", "aten.gt.Scalar",
        "aten.ge.Tensor", "aten.ge.Scalar", "aten.isnan.default", "aten.isinf.default",
        "aten.isfinite.default", "aten.signbit.default", "aten.logical_and.default",
        "aten.logical_or.default", "aten.logical_xor.default", "aten.logical_not.default",
        "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor",
        "aten.bitwise_not.default", "aten.all.dim", "aten.any.dim", "aten.count_nonzero.dim_IntList")},
    **{op: (Exact.ALWAYS, _SIGN) for op in (
        "aten.abs.default", "aten.neg.default", "aten.sign.default", "aten.sgn.default",
        "aten.copysign.Tensor")},
    "aten.nextafter.default": (Exact.ALWAYS, "the neighbouring representable value: defined bit for bit"),
    **{op: (Exact.ALWAYS, _INTEGER_VALUED) for op in (
        "aten.floor.default", "aten.ceil.default", "aten.trunc.default", "aten.round.default",
        "aten.frac.default")},
    "aten._to_copy.default": (Exact.ALWAYS, _CAST),
    "aten.view.dtype": (Exact.ALWAYS, "reads its operand's bits as a dtype of their width: no arithmetic"),
    **{op: (Exact.INTEGRAL, _INTEGER_ARITHMETIC) for op in (
        "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar",
        "aten.mul.Tensor", "aten.mul.Scalar", "aten.square.default", "aten.div.Tensor_mode",
        "aten.floor_divide.default", "aten.floor_divide.Scalar", "aten.remainder.Tensor",
        "aten.remainder.Scalar", "aten.fmod.Tensor", "aten.fmod.Scalar", "aten.sum.default",
        "aten.sum.dim_IntList", "aten.prod.dim_int", "aten.cumsum.default", "aten.cumprod.default")},
}


# Ops that pick one of several values comparing equal: between +0.0 and -0.0 (equal under IEEE
# comparison) either is a right answer, and ATen's vectorized and scalar loops pick differently
# (amax of round(x) over [+0.0, -0.0]: eager +0.0; fuzzer, crucible-cpp, seed 41).
EQUAL_VALUE_CHOICE = frozenset({
    "aten.maximum.default", "aten.minimum.default", "aten.fmax.default", "aten.fmin.default",
    "aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default", "aten.clamp_max.default",
    "aten.hardtanh.default", "aten.relu.default", "aten.threshold.default", "aten.amax.default",
    "aten.amin.default", "aten.max.default", "aten.min.default", "aten.max.dim", "aten.min.dim",
    "aten.cummax.default", "aten.sort.stable", "aten.topk.default", "aten.max_pool2d_with_indices.default"})


def zero_sign_choice(graph: FuzzGraph, name: str, eager: torch.Tensor, compiled: torch.Tensor) -> bool:
    """Whether ``compiled`` differs from ``eager`` only in the sign of zeros, downstream of an op that
    chooses between equal values (``EQUAL_VALUE_CHOICE``): the "sign of a zero" allowance."""
    if not eager.is_floating_point() or eager.shape != compiled.shape or eager.dtype != compiled.dtype:
        return False
    upstream = graph.upstream([name])
    if not any(n.op in EQUAL_VALUE_CHOICE for n in graph.nodes if any(o in upstream for o in n.outputs)):
        return False
    e, c = eager.detach().cpu(), compiled.detach().cpu()
    differs = (_bits(e) != _bits(c)) & ~(torch.isnan(e) & torch.isnan(c))
    return bool(differs.any()) and bool(((e == 0) & (c == 0))[differs].all())


def _integral(dtype_name: str) -> bool:
    dtype = DTYPES.get(dtype_name)
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex


def node_is_exact(op: str, expr: str, out_dtypes: list[str]) -> bool:
    """Whether one call of ``op`` (its rendered ``expr``, its outputs' dtypes) is exact."""
    entry = EXACT_OPS.get(op)
    if entry is None:
        return False
    when = entry[0]
    if when is Exact.INTEGRAL:
        return all(_integral(d) for d in out_dtypes)
    if when is Exact.NOT_ACCUMULATING:
        return expr.replace(" ", "").endswith(",False)")
    return True


def exact_cone(graph: FuzzGraph, name: str) -> bool:
    """Whether every node ``name`` depends on (its own included) is exact: then it must equal eager's."""
    upstream = graph.upstream([name])
    return all(node_is_exact(n.op, n.expr, [d for _, d in n.out_meta])
               for n in graph.nodes if any(o in upstream for o in n.outputs))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers (floats), or itself (integers and bools)."""
    if not t.is_floating_point():
        return t
    return t.contiguous().view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


def bitwise_mismatch(eager: torch.Tensor, compiled: torch.Tensor) -> str:
    """How ``compiled`` differs from ``eager`` bit for bit, or "" (a NaN equals any NaN). NaN/inf
    positions and integer values are named as the tolerance check names them (signatures and the
    known list match on those words), the rest "exact tier"."""
    e, c = eager.detach().cpu(), compiled.detach().cpu()
    if e.shape != c.shape:
        return f"shape differs: eager {tuple(e.shape)}, compiled {tuple(c.shape)}"
    if e.dtype != c.dtype:
        return f"dtype differs: eager {e.dtype}, compiled {c.dtype}"
    differs = _bits(e) != _bits(c)
    if e.is_floating_point():
        differs &= ~(torch.isnan(e) & torch.isnan(c))
    count = int(differs.sum())
    if not count:
        return ""
    first = tuple(int(i) for i in differs.nonzero()[0])
    detail = (f"exact tier: {count} of {e.numel()} values differ from eager bit for bit "
              f"(first at {list(first)}: eager {e[first].item()!r}, compiled {c[first].item()!r})")
    if not e.is_floating_point():
        return f"integer/bool values differ from eager ({detail})"
    nonfinite = nonfinite_mismatch(e, c)
    return f"{nonfinite} ({detail})" if nonfinite else detail
