"""The minimizer's own serialized form of an ATen graph: node records, not a pickled GraphModule.

Pickling a ``torch.fx.GraphModule`` regenerates its Python code and resolves every global of
that code through ``torch.package``'s importer, which differs between torch versions: on torch
2.11 pickling a ``make_fx`` graph for the check worker failed inside ``torch.package`` while 2.14
pickled it fine. A graph here travels as plain data instead: one record per node (its kind, name,
target and arguments, with references to other nodes by name), ops named by their qualified
overload name (``aten::add.Tensor``), Python callables by module and qualified name, and the
graph's constants and submodules as values. ``unpack_graph`` rebuilds the same graph with
``torch.fx.Graph.create_node``; node metadata (``meta["val"]``) stays behind, as it does when a
GraphModule is pickled, and the compilers recompute it.
"""

from __future__ import annotations

import builtins
import importlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

FORMAT = "crucible-graph/1"


@dataclass(frozen=True)
class _NodeRef:
    name: str


def _target_ref(target: Any) -> tuple[str, str, str]:
    if isinstance(target, str):  # placeholder name, output, get_attr / call_module path, method name
        return ("str", target, "")
    if isinstance(target, torch._ops.OpOverload):
        return ("op", target.name(), "")  # e.g. "aten::add.Tensor" (overload "default" left out)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return ("packet", target._qualified_op_name, "")
    if isinstance(target, torch._ops.HigherOrderOperator):  # wrap_with_set_grad_enabled, cond, ...
        return ("hop", target.name(), "")
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module is None and getattr(target, "__name__", None) in vars(builtins):
        module, qualname = "builtins", target.__name__
    if not module or not qualname or "<" in qualname:
        raise ValueError(f"graph node target {target!r} has no importable name: the minimizer can only "
                         "send graphs of ATen ops and importable Python functions to its check worker")
    return ("py", module, qualname)


def _resolve_op(qualified: str) -> Any:
    namespace, _, rest = qualified.partition("::")
    packet_name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), packet_name)
    return getattr(packet, overload or "default")


def _resolve_target(ref: tuple[str, str, str]) -> Any:
    kind, first, second = ref
    if kind == "str":
        return first
    if kind == "op":
        return _resolve_op(first)
    if kind == "hop":
        return getattr(torch.ops.higher_order, first)
    if kind == "packet":
        namespace, _, name = first.partition("::")
        return getattr(getattr(torch.ops, namespace), name)
    value: Any = importlib.import_module(first)
    for part in second.split("."):
        value = getattr(value, part)
    return value


def _pack_arg(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return _NodeRef(value.name)
    if isinstance(value, (list, tuple)):  # fx's immutable_list / tuples; a named tuple keeps its type
        packed = [_pack_arg(v) for v in value]
        return tuple(packed) if isinstance(value, tuple) else packed
    if isinstance(value, dict):
        return {k: _pack_arg(v) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_pack_arg(value.start), _pack_arg(value.stop), _pack_arg(value.step))
    if isinstance(value, torch._ops.OpOverload):  # an op passed as an argument (higher-order ops)
        return ("__op__", value.name())
    return value  # numbers, strings, None, dtypes, devices, layouts, memory formats: all picklable


def _unpack_arg(value: Any, env: dict[str, torch.fx.Node]) -> Any:
    if isinstance(value, _NodeRef):
        return env[value.name]
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__op__":
        return _resolve_op(value[1])
    if isinstance(value, list):
        return [_unpack_arg(v, env) for v in value]
    if isinstance(value, tuple):
        return tuple(_unpack_arg(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _unpack_arg(v, env) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_unpack_arg(value.start, env), _unpack_arg(value.stop, env), _unpack_arg(value.step, env))
    return value


def pack_graph(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """``gm`` as plain picklable data (see the module docstring); ``unpack_graph`` inverts it."""
    nodes, attrs = [], {}
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module") and node.target not in attrs:
            owner, _, leaf = node.target.rpartition(".")
            value = getattr(gm.get_submodule(owner) if owner else gm, leaf)
            # a subgraph (the body of a higher-order op) travels in this form too, never pickled whole
            attrs[node.target] = ("__graph__", pack_graph(value)) if isinstance(value, torch.fx.GraphModule) else value
        nodes.append((node.op, node.name, _target_ref(node.target), _pack_arg(node.args), _pack_arg(node.kwargs)))
    codegen = gm.graph._codegen  # the pytree calling convention of a make_fx graph, if any
    return {"format": FORMAT, "nodes": nodes, "attrs": attrs,
            "codegen": None if type(codegen) is torch.fx.graph.CodeGen else codegen}


def _install(root: torch.nn.Module, path: str, value: Any) -> None:
    *owners, leaf = path.split(".")
    module = root
    for name in owners:
        if not hasattr(module, name):
            module.add_module(name, torch.nn.Module())
        module = getattr(module, name)
    if isinstance(value, torch.nn.Module):
        module.add_module(leaf, value)
    else:
        setattr(module, leaf, value)


def unpack_graph(doc: dict[str, Any]) -> torch.fx.GraphModule:
    """The GraphModule ``pack_graph`` serialized; a clear error for anything else."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a graph in the minimizer's form {FORMAT!r}")
    graph, env = torch.fx.Graph(), {}
    for op, name, target, args, kwargs in doc["nodes"]:
        node = graph.create_node(op, _resolve_target(target), _unpack_arg(args, env), _unpack_arg(kwargs, env),
                                 name=name)
        env[name] = node
    if doc["codegen"] is not None:
        graph._codegen = doc["codegen"]
    root = torch.nn.Module()
    for path, value in doc["attrs"].items():
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "__graph__":
            value = unpack_graph(value[1])
        _install(root, path, value)
    return torch.fx.GraphModule(root, graph)
