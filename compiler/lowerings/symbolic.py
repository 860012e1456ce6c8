"""Lowering over symbolic sizes (``compiler.sizes``): the typed refusals of a dynamic graph and the
layout facts lowering reads from FX meta values, which hold ``torch.SymInt`` sizes there.

Two levels of "not yet": a rule that needs a static size (it compares, divides or converts a
symbolic one) makes its op an extern call with ``ExternReason.SYMBOLIC_SIZE`` naming the rule and
the failing step; a graph that needs what no extern call can give (a symbolic float or bool input)
falls back to eager with ``FallbackReason.DYNAMIC_UNSUPPORTED`` and the
feature's name.

A number computed from sizes (``1 / numel`` in a norm's backward, a mean's divisor) is a
``torch.SymFloat`` in the graph; lowering keeps its sympy expression and ``size_scalar`` spells it
in the IR as arithmetic on ``SIZE`` leaves in float64, as eager computes the Python number before
reading it at the tensor's dtype.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from compiler import ir
from compiler.ir import Expr, Op
from compiler.sizes import all_static, shape_of


class DynamicUnsupported(Exception):
    """A dynamic-shape graph needs ``feature``, which this compiler does not handle yet; the graph runs
    in eager with this as its fallback reason (``FallbackReason.DYNAMIC_UNSUPPORTED``)."""

    def __init__(self, feature: str, message: str) -> None:
        super().__init__(f"{feature}: {message}")
        self.feature = feature


def has_symbolic_sizes(val: Any) -> bool:
    """Whether a meta value (a tensor, a size, nested lists of them) has a symbolic size or stride."""
    if isinstance(val, torch.Tensor):
        return not all_static(shape_of(val.shape)) or not all_static(shape_of(val.stride()))
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(val, (list, tuple)):
        return any(has_symbolic_sizes(v) for v in val)
    return False


def plain_strides(val: Any, shape: tuple) -> tuple | None:
    """``val``'s strides when a buffer (viewed with stride 0 on broadcast dims) can have them:
    same shape, and apart from broadcast dims positive strides with no two elements sharing
    memory (dense or, like a slice of a padded tensor, with gaps); 1 for dims of size 1.
    None for negative or otherwise overlapping layouts. With symbolic sizes, dense layouts in any dim
    order are recognized (their strides are products of the sizes, equal by structure)."""
    if not isinstance(val, torch.Tensor) or shape_of(val.shape) != tuple(shape):
        return None
    stride = shape_of(val.stride())
    if not all_static([*stride, *shape]):
        return _dense_permuted(tuple(shape), stride)
    dims = sorted((st, n) for st, n in zip(stride, shape) if n > 1 and st != 0)
    span = 1
    for st, n in dims:
        if st < span:
            return None
        span = st * n
    return tuple(st if n > 1 else max(st, 1) for st, n in zip(stride, shape))


def dense_order(shape: tuple, stride: tuple) -> tuple[int, ...] | None:
    """The dims of ``shape`` from the largest stride to the smallest when, apart from dims of size 1
    (first, in order), ``stride`` is a dense layout in some dim order (row-major, a transpose,
    channels-last): every stride the product of the faster dims' sizes, equal by structure, so this
    works on symbolic sizes, which cannot be sorted. None otherwise."""
    fastest_first, expected = [], 1
    left = [d for d, n in enumerate(shape) if n != 1]
    while left:
        d = next((d for d in left if stride[d] == expected), None)
        if d is None:
            return None
        fastest_first.append(d)
        expected = expected * shape[d]
        left.remove(d)
    return (*(d for d, n in enumerate(shape) if n == 1), *reversed(fastest_first))


def _dense_permuted(shape: tuple, stride: tuple) -> tuple | None:
    """``stride`` (sizes of 1 keeping theirs) when it is a dense layout of ``shape`` (``dense_order``)."""
    if dense_order(shape, stride) is None:
        return None
    return tuple(st if n != 1 or not isinstance(st, int) else max(st, 1) for st, n in zip(stride, shape))


def check_dynamic(gm: torch.fx.GraphModule) -> dict[str, int]:
    """The size symbols of ``gm``'s inputs with their example values ({} for a static graph). Inference,
    forward and backward graphs alike: AOTAutograd hands the backward the sizes it needs as inputs
    (saved ``SymInt``s), so a training graph binds its symbols as an inference graph does."""
    found: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            _symbols_of(n.meta.get("val"), found)
    return dict(sorted(found.items()))


_TRUE_DIVISIONS = ("IntTrueDiv", "FloatTrueDiv")


def size_scalar(e: sympy.Expr) -> Expr:
    """A number computed from sizes as an IR expression: an int64 ``SIZE`` leaf when it is an integer,
    else float64 arithmetic over such leaves (true divisions, conversions, sums, products, integer
    powers), the way Python computes the number eager then reads. Raises ``ValueError`` for a
    function it cannot spell (lowering makes that node's op a typed extern call)."""
    if e.is_integer:
        return ir.size(e)
    if e.is_Number:
        return ir.const(float(e), torch.float64)
    name = type(e).__name__
    f64 = torch.float64
    if name in _TRUE_DIVISIONS:
        a, b = (ir.cast(size_scalar(x), f64) for x in e.args)
        return ir.binary(Op.DIV, a, b)
    if name == "ToFloat":
        return ir.cast(size_scalar(e.args[0]), f64)
    if e.is_Add or e.is_Mul:
        terms = [ir.cast(size_scalar(x), f64) for x in e.args]
        out = terms[0]
        for t in terms[1:]:
            out = ir.binary(Op.ADD if e.is_Add else Op.MUL, out, t)
        return out
    if e.is_Pow and e.exp.is_Integer and int(e.exp) != 0:
        base = ir.cast(size_scalar(e.base), f64)
        out = base
        for _ in range(abs(int(e.exp)) - 1):
            out = ir.binary(Op.MUL, out, base)
        return out if int(e.exp) > 0 else ir.binary(Op.DIV, ir.const(1.0, f64), out)
    raise ValueError(f"the number {e} computed from sizes uses {name}, which has no IR spelling")


def _symbols_of(val: Any, found: dict[str, int]) -> None:
    if isinstance(val, torch.Tensor):
        for s in (*val.shape, *val.stride(), val.storage_offset()):
            _symbols_of(s, found)
    elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        env = val.node.shape_env
        hints = getattr(env, "backed_var_to_val", None) or env.var_to_val
        for sym in val.node.expr.free_symbols:
            found[sym.name] = int(hints[sym]) if sym in hints else -1
