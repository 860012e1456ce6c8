"""Loads that only one side of a select reads: the conditions under which their value is used.

A concatenation is a chain of selects, each position taking its value from one input
(``where(i < n0, a[i], where(i < n1, b[i - n0], c[i - n1]))``, with every index clamped into its
input), and a constant pad is a select between a load and the pad value. Rendered as written, every
position loads from every input: a three-way ``cat`` of attention's q, k and v gradients read three
times the bytes it writes (swin_tiny's training step ran six such kernels at 0.33 ms each on an
H100). A load used only under a select's condition can carry that condition in its mask: the memory
system skips what the select throws away, and the masked value (``other=0``) is never picked.

``load_guards`` finds, for each load of a kernel, the conditions that hold on every path from the
kernel's stored values to it: a load reached through a select's true side and through nothing
else is guarded by the condition, one reached through both sides (or outside any select) by
nothing. The renderer then adds a guard to a load's mask only where it is already computed where
the load is (``TritonRenderer``)."""

from __future__ import annotations

from collections.abc import Iterable

from compiler.ir import Expr, Op

Guard = tuple[Expr, bool]  # (condition, the value it has wherever the load's value is used)


def load_guards(roots: Iterable[Expr]) -> dict[Expr, frozenset[Guard]]:
    """Every load under ``roots`` (the stored values and store indices of a kernel) with the
    non-empty set of select conditions that hold wherever its value is used."""
    roots = tuple(roots)
    order: list[Expr] = []  # operands before users, over every root at once
    seen: set[Expr] = set()
    for root in roots:
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
            elif node not in seen:
                seen.add(node)
                stack.append((node, True))
                stack.extend((s, False) for s in reversed(node.src) if s not in seen)
    guards: dict[Expr, frozenset[Guard]] = {}
    for root in roots:
        guards[root] = frozenset()  # a stored value (or address) is used unconditionally
    for node in reversed(order):  # every user of a node comes before it
        held = guards[node]
        for i, operand in enumerate(node.src):
            edge = held
            if node.op is Op.WHERE and i > 0:
                edge = held | {(node.src[0], i == 1)}
            guards[operand] = edge if operand not in guards else guards[operand] & edge
    return {e: g for e, g in guards.items() if e.op is Op.LOAD and g}
