"""Index arithmetic past the affine form: unravelled positions merged back where dims nest in memory.

A flat position ``f`` unravelled over several dims (a split reduction's chunk position over the
reduced dims, ``compiler.split_reductions``) reaches a load as one term a dim,
``((f // d_i) % m_i) * stride_i``. Where two neighbouring dims nest in memory (the outer one's
divisor and stride are the inner one's times its extent: ``d_o == d_i * m_i`` and
``stride_o == stride_i * m_i``) the two terms are one, ``((f // d_i) % (m_o * m_i)) * stride_i``,
and the outermost term, which has no remainder, merged down to ``d == 1`` is ``f * stride``: affine
again. resnet50's batch-norm statistics over (N, H, W) of a channels-last activation read each
element at ``(f // 12544) * 802816 + ((f // 112) % 112) * 7168 + (f % 112) * 64 + c``, two floor
divisions (each with Python's sign fix) and two remainders an element where ``f * 64 + c`` does; in
NCHW, ``(f // 12544) * 802816 + (f % 12544) + c * 12544``. ``compiler.split_reductions`` passes
its first stage's body through ``simplify_loads``.

The identities hold for floor division and a floor remainder of any sign, but the renderers'
remainder is C's (``Op.MOD``), so terms merge only over a non-negative ``f`` (``nonnegative``: loop
variables, and sums, products, floor divisions and remainders of them and non-negative constants).
``nonnegative`` also lets the renderers divide without the floor fix (the quotient of non-negative
operands truncates to the floor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compiler import ir
from compiler.ir import Expr, Op

_NONNEGATIVE_OPS = (Op.ADD, Op.MUL, Op.FLOORDIV, Op.MOD)


def nonnegative(expr: Expr) -> bool:
    """Whether an integer expression is never negative (a sufficient test: loop variables,
    non-negative constants and symbolic sizes, and sums, products, floor divisions and remainders of
    such)."""
    if expr.dtype.is_floating_point or expr.dtype == torch.bool:
        return False
    if expr.op in (Op.XVAR, Op.RVAR, Op.SIZE):
        return True
    if expr.op is Op.CONST:
        return isinstance(expr.arg, int) and expr.arg >= 0
    if expr.op in _NONNEGATIVE_OPS:
        return all(nonnegative(s) for s in expr.src)
    return False


def positive_divisor(division: Expr) -> bool:
    """Whether a division's divisor is a positive integer constant."""
    d = division.src[1]
    return d.op is Op.CONST and isinstance(d.arg, int) and not isinstance(d.arg, bool) and d.arg > 0


@dataclass(frozen=True)
class _Unravelled:
    """``((base // divisor) % extent) * coef``; extent None: no remainder."""
    base: Expr
    divisor: int
    extent: int | None
    coef: int

    def expr(self) -> Expr:
        out = self.base
        if self.divisor != 1:
            out = ir.binary(Op.FLOORDIV, out, ir.const(self.divisor, ir.INDEX_DTYPE))
        if self.extent is not None:
            out = ir.binary(Op.MOD, out, ir.const(self.extent, ir.INDEX_DTYPE))
        return out


def _unravelled(term: Expr, coef: object) -> _Unravelled | None:
    """``term`` (times ``coef``) as ``(base // d) % m`` over a non-negative base, or None."""
    if not isinstance(coef, int):
        return None
    extent = None
    if term.op is Op.MOD:
        if not positive_divisor(term):
            return None
        extent, term = term.src[1].arg, term.src[0]
    divisor = 1
    if term.op is Op.FLOORDIV:
        if not positive_divisor(term):
            return None
        divisor, term = term.src[1].arg, term.src[0]
    if extent is None and divisor == 1:
        return None  # a plain term: nothing to merge
    if not nonnegative(term):
        return None
    return _Unravelled(term, divisor, extent, coef)


def _merge(parts: list[_Unravelled]) -> tuple[list[_Unravelled], bool]:
    """Neighbouring dims of one base merged while any two nest; whether any did."""
    merged = False
    again = True
    while again:
        again = False
        for i, outer in enumerate(parts):
            for j, inner in enumerate(parts):
                if (i != j and inner.base == outer.base and inner.extent is not None
                        and outer.divisor == inner.divisor * inner.extent and outer.coef == inner.coef * inner.extent):
                    extent = None if outer.extent is None else outer.extent * inner.extent
                    parts = [p for k, p in enumerate(parts) if k not in (i, j)]
                    parts.append(_Unravelled(inner.base, inner.divisor, extent, inner.coef))
                    merged = again = True
                    break
            if again:
                break
    return parts, merged


def simplify_index(index: Expr) -> Expr:
    """``index`` with its unravelled terms merged where they nest (module docstring); ``index``
    itself where nothing merges. The result is in ``ir.from_affine``'s form."""
    terms = ir.to_affine(index, opaque=True)
    parts, rest = [], {}
    for term, coef in terms.items():
        part = _unravelled(term, coef) if term is not None else None
        if part is None:
            rest[term] = rest.get(term, 0) + coef
        else:
            parts.append(part)
    ones = [p for p in parts if p.extent == 1]  # x % 1: always 0 (a size-1 dim)
    parts = [p for p in parts if p.extent != 1]
    if len(parts) < 2 and not ones:
        return index
    parts, merged = _merge(parts)
    merged = merged or bool(ones)
    if not merged:
        return index
    for part in parts:
        if part.divisor == 1 and part.extent is None:  # the whole position: affine in its own terms
            inner = ir.to_affine(part.base, opaque=True)
            for k, v in inner.items():
                rest[k] = rest.get(k, 0) + v * part.coef
        else:
            key = part.expr()
            rest[key] = rest.get(key, 0) + part.coef
    return ir.from_affine(rest)


def simplify_loads(body: Expr) -> Expr:
    """``body`` with every load's index through ``simplify_index``."""
    mapping = {}
    for load in ir.loads(body):
        index = simplify_index(load.src[0])
        if index is not load.src[0]:
            mapping[load] = ir.load(load.arg, index, load.dtype)
    return ir.substitute(body, mapping) if mapping else body
