"""Lowering over symbolic sizes (``compiler.sizes``): the typed refusals of a dynamic graph and the
layout facts lowering reads from FX meta values, which hold ``torch.SymInt`` sizes there.

Two levels of "not yet": a rule that needs a static size (it compares, divides or converts a
symbolic one) makes its op an extern call with ``ExternReason.SYMBOLIC_SIZE`` naming the rule and
the failing step; a graph that needs what no extern call can give (a symbolic float or bool input,
a symbolic storage offset, training graphs: stage 4 of the dynamic-shape work) falls back to eager
with ``FallbackReason.DYNAMIC_UNSUPPORTED`` and the feature's name.
"""

from __future__ import annotations

from typing import Any

import torch

from compiler.graph import contiguous_strides
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
    None for negative or otherwise overlapping layouts. With symbolic sizes, only the row-major
    layout is recognized (its strides are products of the sizes, equal by structure)."""
    if not isinstance(val, torch.Tensor) or shape_of(val.shape) != tuple(shape):
        return None
    stride = shape_of(val.stride())
    if not all_static([*stride, *shape]):
        dense = contiguous_strides(tuple(shape))
        return dense if all(st == d or n == 1 for st, d, n in zip(stride, dense, shape)) else None
    dims = sorted((st, n) for st, n in zip(stride, shape) if n > 1 and st != 0)
    span = 1
    for st, n in dims:
        if st < span:
            return None
        span = st * n
    return tuple(st if n > 1 else max(st, 1) for st, n in zip(stride, shape))


def check_dynamic(gm: torch.fx.GraphModule, kind: str) -> dict[str, int]:
    """The size symbols of ``gm``'s inputs with their example values ({} for a static graph); raises
    ``DynamicUnsupported`` for the graphs stage 1 of the dynamic-shape work leaves to eager:
    AOTAutograd's forward and backward graphs (training)."""
    found: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            _symbols_of(n.meta.get("val"), found)
    if found and kind != "inference":
        raise DynamicUnsupported("training", f"a {kind} graph with symbolic sizes (dynamic-shape training "
                                 "graphs are not compiled yet; inference graphs are)")
    return dict(sorted(found.items()))


def _symbols_of(val: Any, found: dict[str, int]) -> None:
    if isinstance(val, torch.Tensor):
        for s in (*val.shape, *val.stride(), val.storage_offset()):
            _symbols_of(s, found)
    elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        env = val.node.shape_env
        hints = getattr(env, "backed_var_to_val", None) or env.var_to_val
        for sym in val.node.expr.free_symbols:
            found[sym.name] = int(hints[sym]) if sym in hints else -1
