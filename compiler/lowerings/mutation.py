"""Input mutations that AOTAutograd keeps in an inference graph, written back into the caller's tensors.

The backend asks AOTAutograd to keep inference input mutations in the graph
(``keep_inference_input_mutations``, as Inductor does): a module that updates a buffer, a parameter
(``self.weight.data *= mask``) or an input in forward hands over a functional graph ending in

    copy_(arg, new_value)                          # the input's data changed
    set_(arg, new_value) / shallow_copy_data_(...)  # the input took another tensor's storage (``.data =``)

Every other use of a placeholder in that graph means the input's value on entry. So these writes are
deferred: lowering records them here and emits them after the outputs are realized, last in the graph
(``write_back``). A ``copy_`` becomes a pointwise node that stores into the input's own buffer (the
scheduler may fuse it with the nodes that compute its value: ``buf.add_(1)`` is one kernel reading and
writing ``buf``, as Inductor generates it); a ``set_`` stays an extern call, as in Inductor. A new value
that reads an input written back here at another element than the one it writes (``buf.flip(0)``, two
buffers swapping values) is first realized into a buffer of its own, so no write lands before a read
of the old value. ``compiler.scheduler`` keeps the write after every step that reads the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from compiler import ir
from compiler.graph import Buffer
from compiler.lowerings.pointwise import lower_copy
from compiler.lowerings.rules import Lazy, Strided, Unsupported, as_expr, identity_index, register
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten


@dataclass
class InputMutation:
    """One deferred write into graph input ``buffer``: its new data (``copy_``), or the FX call that gives
    it another tensor's storage (``set_``; ``value`` is then that tensor)."""

    buffer: str
    value: Any
    storage_call: Any = None  # the set_ / shallow_copy_data_ FX node


def _whole_input(ctx: GraphLowering, value: Any) -> str | None:
    """The name of the graph input ``value`` is all of (same shape, strides and offset), else None."""
    if not isinstance(value, Strided):
        return None
    buf = next((b for b in ctx.graph.inputs if b is not None and b.name == value.buffer), None)
    if buf is None or (value.shape, value.stride, value.offset) != (buf.shape, buf.stride, 0):
        return None
    if buf.name in ctx.graph.moved_inputs:
        # the wrapper copies it to the graph's device first: a write would reach the copy, not the caller's
        # tensor (a CPU scalar buffer of a CUDA model); the graph runs in eager instead
        raise NotImplementedError(f"input {buf.name} on another device than the graph is mutated")
    return buf.name


@register(aten.copy_)
def lower_copy_into_input(ctx: GraphLowering, node: Any, dst: Any, src: Any, non_blocking: bool = False) -> Any:
    name = _whole_input(ctx, dst)
    if name is None:
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, "copy_ into a value that is not a whole graph input")
    value = lower_copy(ctx, node, dst, src)
    ctx.mutations.append(InputMutation(name, value))
    return value  # what later nodes would read from the input: its new value


def existing_overloads(*names: str) -> tuple[Any, ...]:
    """The ATen overloads ``"op.overload"`` this torch has: an op newer than the oldest supported
    torch must not stop the compiler from importing (torch 2.11 has no shallow_copy_data_, which
    ``.data =`` traces to on newer torch; importing the compiler failed on the GPU host)."""
    found = []
    for name in names:
        op, _, overload = name.partition(".")
        packet = getattr(aten, op, None)
        if packet is not None and hasattr(packet, overload):
            found.append(getattr(packet, overload))
    return tuple(found)


@register(*existing_overloads("set_.source_Tensor", "shallow_copy_data_.default"))
def lower_storage_swap(ctx: GraphLowering, node: Any, dst: Any, src: Any) -> Any:
    name = _whole_input(ctx, dst)
    if name is None or not isinstance(src, (Lazy, Strided)):
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"{node.target} of a value that is not a graph input")
    ctx.mutations.append(InputMutation(name, src, node))
    return src


def write_back(ctx: GraphLowering) -> None:
    """The deferred mutations, in program order, after everything else the graph computes."""
    inputs = {b.name: b for b in ctx.graph.inputs if b is not None}
    written = {m.buffer for m in ctx.mutations}
    for m in ctx.mutations:  # every new value that needs a buffer of its own, before any write
        if m.storage_call is not None:
            m.value = ctx.realize_for_extern(m.value, m.storage_call.args[1].meta.get("val"))
        elif _reads_written(m.value, inputs[m.buffer], written):
            m.value = ctx.realize(m.value)
    for m in ctx.mutations:
        dst = inputs[m.buffer]
        if m.storage_call is None:
            ctx.compute_into(dst, as_expr(m.value), "copy_.default")  # the value has the input's shape and dtype
            continue
        ctx.origin = str(m.storage_call.target)
        ctx.extern(m.storage_call, (Strided(dst.name, dst.shape, dst.stride, 0, dst.dtype), m.value), {},
                   ExternReason.INPUT_STORAGE, "the input takes another tensor's storage")


def _reads_written(value: Any, dst: Buffer, written: set[str]) -> bool:
    """Whether ``value``, written into ``dst``, reads an input written back here other than at the element
    it is written to (a pointwise read of the whole ``dst``)."""
    if isinstance(value, Strided):
        return value.buffer in written
    own = ir.linear_index(identity_index(dst.shape), dst.stride, 0)
    return any(e.arg in written and (e.arg != dst.name or e.src[0] != own) for e in ir.loads(value.expr))
