"""The scheduler's rule for writes into graph inputs (``compiler.lowerings.mutation`` defers them to
the end of the graph): a write must not land before a read of the input's old value."""

from __future__ import annotations

from collections.abc import Sequence

from compiler import ir
from compiler.graph import ComputedNode
from compiler.ir import Expr
from compiler.report import FusionReason


def input_write_race(kernel_values: Sequence[Expr], written_inputs: set[str], node: ComputedNode, index: Expr,
                     value: Expr) -> tuple[FusionReason, str] | None:
    """Why ``node`` (its store ``index`` and ``value`` in the kernel's vars) cannot join a kernel storing
    ``kernel_values`` and writing ``written_inputs`` without a write into a graph input landing before a
    read of its old value: ``node`` writes an input that the kernel or its own value reads at another
    element (another program, or a later iteration, may read it after the write), or ``node`` reads
    the old value of an input the kernel has already written (the value of a node placed before the
    write, forwarded)."""
    if node.buffer.kind == "input":
        at = ir.affine_normal(index)
        for e in [e for v in kernel_values for e in ir.loads(v)] + list(ir.loads(value)):
            if e.arg == node.name and ir.affine_normal(e.src[0]) != at:
                return (FusionReason.INPUT_WRITE_RACE, f"writes input {node.name} at {ir.render_expr(index)}, "
                        f"read at {ir.render_expr(e.src[0])}")
    for e in ir.loads(value):
        if e.arg in written_inputs:
            return FusionReason.INPUT_WRITE_RACE, f"reads input {e.arg} after the kernel writes it"
    return None
