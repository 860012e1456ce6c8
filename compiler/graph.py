"""The lowered graph: buffers, computed loop nodes and extern calls, in order.

Lowering produces it from an ATen FX graph; the scheduler groups its computed
nodes into kernels; the wrapper turns the whole into a Python call function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler.ir import Expr, linear_index, loads, render_definition, xvar
from compiler.report import ExternReason


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        # a symbolic size as it is: an empty tensor's strides address nothing (``compiler.sizes``)
        acc *= max(size, 1) if isinstance(size, int) else size
    return tuple(reversed(strides))


def same_layout(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Strides ``a`` and ``b`` address a tensor of ``shape`` alike (dims of size 1 do not count)."""
    return all(x == y for n, x, y in zip(shape, a, b) if n != 1)


def numel(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


@dataclass
class Buffer:
    """A named allocation. Inputs keep the caller's strides; ours are contiguous, except the
    arguments of extern calls, which get the strides eager gave them (see ``GraphLowering.extern``)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    kind: str  # "input" | "constant" | "computed" | "extern"

    @property
    def numel(self) -> int:
        return numel(self.shape)

    @property
    def nbytes(self) -> int | None:
        """Bytes of its elements; None when its size is symbolic."""
        n = self.numel
        return n * self.dtype.itemsize if isinstance(n, int) else None

    @property
    def is_contiguous(self) -> bool:
        return same_layout(self.shape, self.stride, contiguous_strides(self.shape))

    @property
    def storage_size(self) -> int:
        """Elements spanned from offset 0 (what a kernel may touch)."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum((n - 1) * st for n, st in zip(self.shape, self.stride))


@dataclass(frozen=True)
class View:
    """A strided window onto a buffer (offset relative to the buffer's first element).

    Lowering calls it ``Strided``: views of buffers stay views; the wrapper turns the
    ones that reach outputs and extern calls into ``torch.as_strided``."""

    buffer: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype


def view_buffers(obj: Any) -> set[str]:
    """The buffers of the ``View``s in ``obj`` (nested lists, tuples and dict values)."""
    if isinstance(obj, View):
        return {obj.buffer}
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return set().union(*[view_buffers(o) for o in obj])
    return set()


@dataclass
class ComputedNode:
    """A realized loop: one value per output element, optionally reducing over rranges."""

    buffer: Buffer
    rranges: tuple[int, ...]  # reduction sizes; () for a pointwise node
    body: Expr  # the element value over XVAR(d) (and RVAR(j) under a REDUCE)
    origins: tuple[str, ...] = ()  # ATen ops whose computation this node holds
    # loop order: the node's XVAR(j) walks the buffer's dim order[j] (() walks them in order). A
    # channels-last buffer is walked (N, H, W, C), so a kernel's fastest dim is the one with stride 1
    # (``compiler.layout``); ``body`` is written over the node's own XVARs.
    order: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def ranges(self) -> tuple[int, ...]:
        if self.order:
            return tuple(self.buffer.shape[d] for d in self.order)
        return self.buffer.shape

    @property
    def is_reduction(self) -> bool:
        return bool(self.rranges)

    def store_index(self) -> Expr:
        stride = tuple(self.buffer.stride[d] for d in self.order) if self.order else self.buffer.stride
        return linear_index([xvar(d) for d in range(len(self.ranges))], stride)

    def __str__(self) -> str:
        kind = f"reduction over {list(self.rranges)}" if self.rranges else "pointwise"
        return render_definition(f"{self.name}: {str(self.buffer.dtype).replace('torch.', '')}{list(self.ranges)} "
                                 f"{kind}", " = ", self.body)


@dataclass
class ExternNode:
    """An ATen call the compiler does not generate code for."""

    name: str
    op: Any  # torch._ops.OpOverload
    args: tuple  # View / python values / nested lists of them
    kwargs: dict
    outputs: list[Buffer | None]  # one per tensor in the flattened result (None: not a tensor)
    result_is_sequence: bool
    reason: ExternReason
    message: str = ""

    def __str__(self) -> str:
        outs = ", ".join(b.name for b in self.outputs if b is not None)
        return f"{outs} = extern {self.op} ({self.reason.value}: {self.message})"


@dataclass
class LoweredGraph:
    inputs: list[Buffer | None]  # one per placeholder; None for non-tensor inputs
    nodes: list[ComputedNode | ExternNode] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)  # View | python value, per graph output
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    constants: dict[str, torch.Tensor] = field(default_factory=dict)  # tensors the graph module holds
    single_output: bool = False  # the FX graph returns one value, not a tuple
    moved_inputs: list[str] = field(default_factory=list)  # inputs on another device, copied first
    size_inputs: dict[int, str] = field(default_factory=dict)  # placeholder position -> the size symbol it passes

    def buffers(self) -> dict[str, Buffer]:
        out = {b.name: b for b in self.inputs if b is not None}
        for name, t in self.constants.items():
            out[name] = Buffer(name, t.dtype, tuple(t.shape), tuple(t.stride()), "constant")
        for node in self.nodes:
            if isinstance(node, ComputedNode):
                out[node.name] = node.buffer
            else:
                out.update({b.name: b for b in node.outputs if b is not None})
        return out

    def made_buffers(self) -> dict[str, Buffer]:
        """The buffers the graph's nodes compute (not its inputs or constants): what a step may free."""
        return {name: b for name, b in self.buffers().items() if b.kind in ("computed", "extern")}

    def last_readers(self) -> dict[str, ComputedNode | ExternNode | None]:
        """Buffer name -> the last node that reads it; None for what the graph returns (read after
        every node)."""
        last: dict[str, ComputedNode | ExternNode | None] = {}
        for node in self.nodes:
            reads = view_buffers((node.args, node.kwargs)) if isinstance(node, ExternNode) else \
                {e.arg for e in loads(node.body)}
            last.update(dict.fromkeys(reads, node))
        last.update(dict.fromkeys(view_buffers(self.outputs), None))
        return last

    def __str__(self) -> str:
        lines = [f"inputs: {', '.join(b.name for b in self.inputs if b is not None)}"]
        lines += [str(n) for n in self.nodes]
        lines.append(f"outputs: {self.outputs}")
        return "\n".join(lines)
