"""How a training graph is split into forward and backward (the ``partition`` option).

AOTAutograd traces one joint graph and a partition function decides which forward values the
backward reads as saved tensors and which it recomputes. ``min_cut`` (the default) is AOTAutograd's
min-cut partitioner with Inductor's set of recomputable ops: the forward saves what is expensive to
recompute (matmul and convolution results, reduction statistics) and the backward recomputes cheap
pointwise chains, which fusion turns into work inside its own kernels. ``save_all`` is AOTAutograd's
default split: every forward value the backward reads is saved.

One correction to the min-cut partitioner: a value computed from an input the forward mutates
(``self.buf.add_(1)`` kept in the graph as ``copy_(buf, buf + 1)``) must be saved, not recomputed.
Recomputed in the backward it would read the input after the mutation: with torch 2.14's partitioner
the gradient of ``x * self.buf`` after ``self.buf.add_(1)`` came out off by exactly 1 (Inductor
too; harness/FINDINGS.md). The readers of a mutated input are pinned ``MUST_SAVE`` before the
partitioner runs, except those that only compute the value written back. Before it, no-op copies
are dropped (``drop_aliases``) and max-pool indices become int8 window offsets where only the pool's
backward reads them (``compiler.pool_offsets``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.fx

from compiler.pool_offsets import compact_pool_indices

aten = torch.ops.aten


def partition_fn(partition: str) -> Callable:
    """The ``partition_fn`` AOTAutograd is given for option value ``partition``."""
    from torch._functorch import partitioners

    if partition == "save_all":
        return partitioners.default_partition
    return functools.partial(min_cut, partitioners.min_cut_rematerialization_partition)


def min_cut(partitioner: Callable, joint: torch.fx.GraphModule, joint_inputs: object,
            **kwargs: object) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    drop_aliases(joint.graph)
    compact_pool_indices(joint.graph)
    pin_reads_of_mutated_inputs(joint.graph)
    return partitioner(joint, joint_inputs, compiler="inductor", **kwargs)


def drop_aliases(graph: torch.fx.Graph) -> int:
    """Replace every no-op copy the graph does not return by its input; how many were dropped. No-op
    copies: ``aten.alias``, and an ``aten.clone`` that keeps its input's strides of a value computed in
    the graph (a functional joint never writes to it; a clone of an input may be what a later write to
    that input must not see). Autograd's formulas read a saved result through ``alias`` (softmax's
    backward reads its output's alias), and ``Dropout(0.0)`` in training is a ``clone``; the min-cut
    partitioner weighs such a copy as a value of its own: swin_tiny's fp32 joint on the GPU saved the
    scores and the softmax statistics to recompute a softmax besides its clone (``attn_drop``), and each
    MLP's clone of its GELU besides the GELU (273 MB more than Inductor's, whose joint-graph passes
    remove no-op copies before partitioning). A returned copy stays (the outputs' aliasing is what
    AOTAutograd planned around)."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    returned = set(output.all_input_nodes)
    dropped = 0
    for node in list(graph.nodes):
        if node.op == "call_function" and node not in returned and isinstance(node.args[0], torch.fx.Node) \
                and (node.target is aten.alias.default or _noop_clone(node)):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            dropped += 1
    return dropped


def _noop_clone(node: torch.fx.Node) -> bool:
    if node.target is not aten.clone.default or len(node.args) != 1:
        return False
    source = node.args[0]
    while _is_view(source) and isinstance(source.args[0], torch.fx.Node):
        source = source.args[0]
    if source.op != "call_function":
        return False
    new, old = node.meta.get("val"), node.args[0].meta.get("val")
    return (isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor)
            and new.stride() == old.stride() and new.dtype == old.dtype)


def pin_reads_of_mutated_inputs(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Tag ``MUST_SAVE`` every op that reads an input the graph mutates in place (through views, up
    to the op that materializes data) unless all it feeds is the written-back value; the tagged
    nodes, in graph order."""
    from torch.utils.checkpoint import CheckpointPolicy

    copies = [n for n in graph.nodes if n.op == "call_function" and n.target is aten.copy_.default
              and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"]
    if not copies:
        return []
    mutated = {c.args[0] for c in copies}
    write_only = _feeding_only(graph, set(copies))
    pinned: list[torch.fx.Node] = []
    frontier = [u for p in mutated for u in p.users if u.op == "call_function"]
    seen: set[torch.fx.Node] = set()
    while frontier:
        node = frontier.pop()
        if node in seen or node.target is aten.copy_.default or node in write_only:
            continue
        seen.add(node)
        if _is_view(node):  # pinning a view would save an alias of the mutated input, not a snapshot
            frontier.extend(u for u in node.users if u.op == "call_function")
            continue
        node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
        pinned.append(node)
    order = {n: i for i, n in enumerate(graph.nodes)}
    return sorted(pinned, key=order.__getitem__)


def _feeding_only(graph: torch.fx.Graph, sinks: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """Nodes whose every use leads only into ``sinks`` (the write-back chain of a mutation)."""
    only: set[torch.fx.Node] = set()
    for node in reversed(graph.nodes):
        if node.op == "call_function" and node.users and all(u in sinks or u in only for u in node.users):
            only.add(node)
    return only


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and bool(target.is_view)
