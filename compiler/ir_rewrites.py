"""IR rewrites for ops a renderer lacks, as tinygrad decomposes what a backend cannot emit.

Each rule rewrites one node into ops that compute the same values bit for bit or, where
noted, within rounding (NaN and signed-zero behaviour kept). Lowering applies them to the
values of a call whose ops the chosen renderer's table lacks; an op without a rule (or whose
rule needs ops the table lacks too) makes that ATen call an extern call instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from compiler import ir
from compiler.ir import Expr, Op


def _rsqrt(e: Expr) -> Expr:  # within rounding: two roundings instead of one
    (x,) = e.src
    return ir.binary(Op.DIV, ir.const(1.0, e.dtype), ir.unary(Op.SQRT, x))


def _ceil(e: Expr) -> Expr:
    (x,) = e.src
    return ir.unary(Op.NEG, ir.unary(Op.FLOOR, ir.unary(Op.NEG, x)))


def _sub(e: Expr) -> Expr:  # IEEE a - b == a + (-b); integers wrap alike
    a, b = e.src
    return ir.binary(Op.ADD, a, ir.unary(Op.NEG, b), e.dtype)


def _ne(e: Expr) -> Expr:  # NaN != NaN is true, and so is not (NaN == NaN)
    a, b = e.src
    return ir.unary(Op.NOT, ir.binary(Op.EQ, a, b))


def _isnan(e: Expr) -> Expr:
    (x,) = e.src
    return ir.binary(Op.NE, x, x)


def _log10(e: Expr) -> Expr:
    """Within an ulp in float64: log2(x) * log10(2) is exact at 89% of the powers of ten (log(x) *
    (1 / log(10)) at 10%); narrower floats compute it in float64 and round once."""
    (x,) = e.src
    if e.dtype == torch.float64:
        return ir.binary(Op.MUL, ir.unary(Op.LOG2, x), ir.const(0.30102999566398120, torch.float64))
    wide = ir.binary(Op.MUL, ir.unary(Op.LOG2, ir.cast(x, torch.float64)), ir.const(0.30102999566398120, torch.float64))
    return ir.cast(wide, e.dtype)


REWRITES: dict[Op, Callable[[Expr], Expr]] = {
    Op.RSQRT: _rsqrt,
    Op.CEIL: _ceil,
    Op.SUB: _sub,
    Op.NE: _ne,
    Op.ISNAN: _isnan,
    Op.LOG10: _log10,
}


def _applicable(op: Op, e: Expr) -> bool:
    if op is Op.SUB:
        return e.dtype != torch.bool
    if op in (Op.RSQRT, Op.CEIL, Op.LOG10):
        return e.dtype.is_floating_point
    return True


def rewrite_for(expr: Expr, ops: frozenset[Op], max_rounds: int = 4) -> Expr:
    """``expr`` with every op outside ``ops`` that has a rule rewritten (rules may use each other:
    ISNAN -> NE -> NOT(EQ)); ops without a rule are left for the caller to refuse."""
    for _ in range(max_rounds):
        hits = {e for e in expr.walk() if e.op not in ops and e.op in REWRITES and _applicable(e.op, e)}
        if not hits:
            return expr
        expr = _substitute_bottom_up(expr, hits)
    return expr


def _substitute_bottom_up(expr: Expr, hits: set[Expr]) -> Expr:
    """Rebuild ``expr`` with rewritten nodes; operands are rebuilt first so nested hits compose."""
    done: dict[Expr, Expr] = {}
    for e in expr.walk():  # operands before users
        src = tuple(done[s] for s in e.src)
        node = e if src == e.src else Expr(e.op, e.dtype, src, e.arg)
        if e in hits:
            node = REWRITES[e.op](node)
        done[e] = node
    return done[expr]
