"""The values lowering rules take and return, and the registry of rules.

During lowering every FX value is a ``TensorValue``:

* ``Lazy``: an unrealized pointwise expression over its own XVARs. Consumers inline
  it, which is how pointwise chains fuse and how producers fuse into reductions.
* ``Strided``: a strided window onto a buffer. Views of buffers stay ``Strided``
  (new sizes/strides/offset), so views never materialize.

A rule is registered for ATen ops with ``register`` and raises ``Unsupported`` to have
the op run as an extern call instead. This module imports no rule and no lowering pass,
so rule modules and ``compiler.lowering`` both depend on it and not on each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from compiler import ir
from compiler.graph import View
from compiler.ir import Expr
from compiler.report import ExternReason
from compiler.sizes import at_least


class Unsupported(Exception):
    """A lowering rule declines this call; the op becomes an extern call."""

    def __init__(self, reason: ExternReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Lazy:
    shape: tuple[int, ...]
    dtype: torch.dtype
    expr: Expr  # over XVAR(0..len(shape)-1)


# A strided window onto a buffer is exactly what the wrapper sees as a View.
Strided = View


TensorValue = Lazy | Strided
LoweringRule = Callable[..., Any]
LOWERINGS: dict[Any, LoweringRule] = {}


def register(*ops: Any) -> Callable[[LoweringRule], LoweringRule]:
    """Register a rule for OpOverloads or whole OpOverloadPackets."""

    def wrap(fn: LoweringRule) -> LoweringRule:
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return wrap


def find_rule(target: Any) -> LoweringRule | None:
    if target in LOWERINGS:
        return LOWERINGS[target]
    packet = getattr(target, "overloadpacket", None)
    return LOWERINGS.get(packet)


def read(value: TensorValue, index: list[Expr]) -> Expr:
    """The element of ``value`` at ``index`` (one int64 expression per dim)."""
    if isinstance(value, Lazy):
        if not value.shape:
            return value.expr
        mapping = {var: idx for var, idx in ((ir.xvar(d), idx) for d, idx in enumerate(index)) if idx != var}
        return ir.substitute(value.expr, mapping) if mapping else value.expr
    flat = ir.linear_index(index, value.stride, value.offset)
    return ir.load(value.buffer, flat, value.dtype)


def identity_index(shape: tuple[int, ...]) -> list[Expr]:
    return [ir.xvar(d) if n != 1 else ir.const(0, ir.INDEX_DTYPE) for d, n in enumerate(shape)]


def as_expr(value: TensorValue) -> Expr:
    return read(value, identity_index(value.shape))


def broadcast_read(value: TensorValue, out_shape: tuple[int, ...]) -> Expr:
    """Read ``value`` broadcast to ``out_shape``, indexed by the output's XVARs."""
    lead = len(out_shape) - len(value.shape)
    index = []
    for d, n in enumerate(value.shape):
        index.append(ir.const(0, ir.INDEX_DTYPE) if n == 1 else ir.xvar(lead + d))
    return read(value, index)


def count_ops(expr: Expr) -> int:
    return sum(1 for e in expr.walk() if e.src)


# A lazy value a node reads broadcast, BROADCAST_RATIO times smaller than the node's result or more, is
# realized first when it costs BROADCAST_MIN_OPS floating-point operations or more: inlined, a kernel over
# the large result recomputes it for every element. (A training batch norm's normalize kernel rebuilt
# each channel's scale and shift from the statistics, 7 IEEE divisions and 2 rsqrt an element: 152 us
# on an H100 where Inductor's, reading the two values, took 76; 32x256x56x56 float32.) Realized, the
# value is a small node that joins the kernel computing what it reads (the statistics' last stage).
BROADCAST_RATIO = 32
BROADCAST_MIN_OPS = 8


def float_ops(expr: Expr) -> int:
    """Floating-point operations in ``expr`` (loads, constants and index or integer arithmetic not counted)."""
    return sum(1 for e in expr.walk() if e.src and e.op is not ir.Op.LOAD and e.dtype.is_floating_point)


def costly_broadcast(value: Any, result: Any) -> bool:
    """Whether ``value``, an operand of a node whose result (a fake tensor) is ``result``, is a lazy value
    to realize before the node reads it broadcast (``BROADCAST_RATIO``)."""
    if not isinstance(value, Lazy) or not isinstance(result, torch.Tensor):
        return False
    small, big = math.prod(value.shape), result.numel()
    return (isinstance(small, int) and isinstance(big, int) and small * BROADCAST_RATIO <= big
            and float_ops(value.expr) >= BROADCAST_MIN_OPS)


def whole_reads(value: Lazy) -> int:
    """Buffers ``value`` reads at an index that varies along all its dims (broadcast reads excluded)."""
    dims = {ir.xvar(d) for d, n in enumerate(value.shape) if at_least(n, 2)}
    names = set()
    for load in ir.loads(value.expr):
        if {e for e in load.src[0].walk() if e.op is ir.Op.XVAR} >= dims:
            names.add(load.arg)
    return len(names)


_aten = torch.ops.aten
LIBRARY_READERS = frozenset({_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default,
                             _aten.convolution.default})
_VIEWS = frozenset({_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default, _aten.permute.default,
                    _aten.t.default, _aten.transpose.int})


def library_reads(node: Any) -> int:
    """How many GEMMs and convolutions read an FX node's value, directly or through views of it."""
    count, frontier, seen = 0, list(node.users), set()
    while frontier:
        user = frontier.pop()
        if user in seen:
            continue
        seen.add(user)
        if user.target in _VIEWS:
            frontier.extend(user.users)
        elif user.target in LIBRARY_READERS:
            count += 1
    return count
