"""Decompositions applied after capture, once per distinct call: the pipeline's first pass.

AOTAutograd decomposes while it traces: every op a rule emits goes through functionalization, the
proxy tracer and fake-tensor propagation. Crucible's overflow-safe norm rules emit about 30 ops a
call, so a model's layer norms were a large share of its capture (H200, cold compiles: convnext_tiny's
23 and GPT-2's 25 layer norms cost ~0.4 s of AOTAutograd on a 2-core CPU, more on the H200's host,
where the cold compile is compared with Inductor's). The ops of ``LATE_OPS`` are left whole through
capture (``decompositions.capture_decomposition_table``) and expanded here instead: each distinct
call (op, rule, argument layouts, constants) is traced once per process with ``make_fx`` and the
same decomposition table, and every call like it gets a copy of those nodes, its values' metadata
recomputed on the graph's own fake tensors. The graph that reaches lowering is the one AOTAutograd
produced before (same ops, arguments and order: ``tests/compiler/test_late_decompositions.py``
compares them), so the generated kernels do not change.

Only pure rules whose outputs the capture reads through ``getitem`` belong in ``LATE_OPS``: a
rule traced here is not functionalized.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from compiler.decompositions import LATE_OPS, decomposition_table_for_compiler
from compiler.folding import _real_tensors, graph_module

# (op, rule, argument structure, each leaf's layout or value) -> the rule's traced graph
_TRACED: dict[tuple, torch.fx.GraphModule] = {}


@functools.cache
def _trace_mode() -> Any:
    """The fake mode the rules are traced in, made once (~10 ms each)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


@dataclass
class Expanded:
    """What ``expand_late_decompositions`` made of a graph: a rewritten copy, or the graph itself."""

    gm: torch.fx.GraphModule
    calls: int  # calls of ``LATE_OPS`` ops replaced by their rules' ops

    def __str__(self) -> str:
        return f"# {self.calls} calls decomposed after capture\n{self.gm.code}"


def expand_late_decompositions(gm: torch.fx.GraphModule) -> Expanded:
    """A copy of ``gm`` with every call of a ``LATE_OPS`` op replaced by its rule's ops (``gm`` itself
    when there is none: a graph that falls back to eager runs the one it was given, as after the
    weight passes). A call whose outputs are used other than through ``getitem``, or whose
    arguments have no fake values (nothing to trace them on), is left as it is (it becomes an
    extern call)."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor

    if not any(n.op == "call_function" and n.target in LATE_OPS for n in gm.graph.nodes):
        return Expanded(gm, 0)
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    table = decomposition_table_for_compiler()
    expanded = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in LATE_OPS:
            continue
        if any(u.op != "call_function" or u.target is not operator.getitem for u in node.users):
            continue
        rule = table.get(node.target)
        if rule is None:
            continue
        leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
        values = [leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else leaf for leaf in leaves]
        if any(isinstance(leaf, torch.fx.Node) and not isinstance(v, FakeTensor) for leaf, v in zip(leaves, values)):
            continue
        traced = _traced(node.target, rule, table, spec, values)
        mode = detect_fake_mode([v for v in values if isinstance(v, FakeTensor)])
        _splice(graph, node, traced, [leaf for leaf in leaves if isinstance(leaf, torch.fx.Node)], mode)
        expanded += 1
    return Expanded(graph_module(gm, graph), expanded) if expanded else Expanded(gm, 0)


def _layout_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype,
                value.device)
    return ("value", type(value).__name__, repr(value))


def _traced(op: Any, rule: Callable, table: dict, spec: Any, values: list[Any]) -> torch.fx.GraphModule:
    """The rule's graph for a call on arguments laid out like ``values`` (tensors become placeholders,
    in order; everything else is a constant of the trace)."""
    key = (op, rule, str(spec), tuple(_layout_key(v) for v in values))
    hit = _TRACED.get(key)
    if hit is not None:
        return hit
    from torch.fx.experimental.proxy_tensor import make_fx

    positions = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]

    def call(*tensors: torch.Tensor) -> Any:
        leaves = list(values)
        for i, t in zip(positions, tensors):
            leaves[i] = t
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return rule(*args, **kwargs)

    with _trace_mode():
        fakes = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
                 for v in (values[i] for i in positions)]
        traced = make_fx(call, decomposition_table=table, tracing_mode="real")(*fakes)
    _TRACED[key] = traced
    return traced


def _splice(graph: torch.fx.Graph, node: torch.fx.Node, traced: torch.fx.GraphModule,
            inputs: list[torch.fx.Node], mode: Any) -> None:
    """Copy ``traced``'s ops in place of ``node``, its placeholders bound to ``inputs``. Each copy's
    value is a fake tensor of the graph's fake ``mode`` laid out as the traced value (the trace's
    inputs had this call's layouts, so its values are this call's), made without dispatching the op."""
    env: dict[torch.fx.Node, Any] = {}
    placeholders = iter(inputs)
    copies: list[torch.fx.Node] = []
    outputs: Any = None
    with graph.inserting_before(node):
        for sub in traced.graph.nodes:
            if sub.op == "placeholder":
                env[sub] = next(placeholders)
            elif sub.op == "output":
                outputs = torch.fx.map_arg(sub.args[0], lambda n: env[n])
            elif sub.target is torch.ops.aten.alias.default:
                # the trace is not functionalized: a view the rule reads again (the norms' bit cast,
                # ``x.view(torch.int32) >> 23``) leaves an alias that capture's graph does not have
                env[sub] = env[sub.args[0]]
            else:
                copy = graph.node_copy(sub, lambda n: env[n])
                copy.meta = {"val": _fake_like(sub.meta["val"], mode)}
                env[sub] = copy
                copies.append(copy)
    for user in list(node.users):
        user.replace_all_uses_with(outputs[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)
    for copy in reversed(copies):  # what only unused outputs read (a norm's mean and rstd)
        if not copy.users:
            graph.erase_node(copy)


def _fake_like(value: Any, mode: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    from torch._subclasses.fake_tensor import FakeTensor

    with _real_tensors():  # a plain meta tensor (the compile may run under a fake mode)
        meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return FakeTensor(mode, meta, value.device)
