"""What the template lowering rules share: the template-or-ATen decision and the node they emit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from compiler import ir
from compiler.graph import Buffer, contiguous_strides
from compiler.lowerings.rules import Strided, Unsupported
from compiler.report import ExternReason
from compiler.templates.policy import choose
from compiler.templates.spec import Template, TemplateNode

if TYPE_CHECKING:
    from collections.abc import Callable

    from compiler.lowering import GraphLowering

aten = torch.ops.aten
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})


def read_by(node: Any, test: Callable[[Any], bool]) -> bool:
    """Whether a user of ``node``'s result (directly or through views) passes ``test``."""
    users = list(node.users)
    while users:
        u = users.pop()
        if getattr(u, "target", None) in _VIEWS:
            users.extend(u.users)
        elif test(u):
            return True
    return False


def pointwise(user: Any) -> bool:
    """Whether an FX node is a pointwise ATen op (the graph's output node is not)."""
    return torch.Tag.pointwise in getattr(getattr(user, "target", None), "tags", ())


def feeds_pointwise(node: Any) -> bool:
    """A pointwise ATen op reads ``node``'s result (directly or through a view): it would fuse."""
    return read_by(node, pointwise)


def decide(ctx: GraphLowering, family: str, unsupported: str | None, shape: tuple[int, ...],
            dtype: torch.dtype, node: Any = None, masked: bool = False) -> None:
    mode = getattr(ctx, "extern_mode", "default")
    epilogue = node is not None and feeds_pointwise(node)
    choice = choose(family, mode, ctx.capabilities, unsupported, shape, dtype, epilogue, masked)
    if choice.template:
        return
    reason = ExternReason.LIBRARY_KERNEL
    if unsupported is not None and mode == "none" and family in ctx.capabilities.templates:
        reason = ExternReason.TEMPLATE_UNSUPPORTED
    raise Unsupported(reason, choice.message)


def emit(ctx: GraphLowering, template: Template, body: ir.Expr, dtype: torch.dtype,
          stride: tuple[int, ...] | None = None) -> Strided:
    shape = template.out_shape
    buf = Buffer(ctx.new_name(), dtype, shape, stride or contiguous_strides(shape), "computed")
    ctx.graph.nodes.append(TemplateNode(buf, (), body, ctx.origins_of(body), template=template))
    return Strided(buf.name, shape, buf.stride, 0, dtype)
