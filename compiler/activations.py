"""Activations that alone read a GEMM's result (relu, and GELU in its erf and tanh forms as they
reach the weight passes decomposed), for the passes that fuse them into a library GEMM
(``compiler.extern_passes``: ``_addmm_activation`` on the GPU, oneDNN's linear on the CPU)."""

from __future__ import annotations

import functools
import math

import torch
import torch.fx

aten = torch.ops.aten

VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
# activation kinds ``activations`` finds, and the decomposed op whose presence makes a pattern worth matching
_GELU_MARKERS = {"gelu_tanh": (aten.tanh.default, "tanh"), "gelu_erf": (aten.erf.default, "none")}


@functools.cache
def _gelu_patterns(dtype: torch.dtype, approximate: str) -> list[torch.fx.Graph]:
    """The decomposed graphs of GELU (``approximate`` "tanh" or "none", the erf form) as they reach
    these passes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.decompositions import decomposition_table_for_compiler

    def torch_form(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate=approximate)

    def gpt2_form(x: torch.Tensor) -> torch.Tensor:  # transformers' NewGELUActivation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    example = torch.empty(2, 2, dtype=dtype)
    forms = (torch_form, gpt2_form) if approximate == "tanh" else (torch_form,)
    return [make_fx(f, decomposition_table=decomposition_table_for_compiler(), tracing_mode="fake")(example).graph
            for f in forms]




def activations(graph: torch.fx.Graph, kinds: tuple[str, ...] = ("relu", "gelu_tanh"),
                 gemms: tuple = (aten.addmm.default,)) -> list[tuple[torch.fx.Node, torch.fx.Node | None, torch.fx.Node, str]]:
    """(GEMM, the view between it and its activation or None, the node computing the activation,
    kind) for activation consumers (``kinds`` of "relu", "gelu_tanh", "gelu_erf") that alone read a
    GEMM of ``gemms``."""

    def producer(x: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node | None] | None:
        view = x if x.target in VIEWS and len(x.args[0].users) == 1 else None
        gemm = view.args[0] if view is not None else x
        return (gemm, view) if gemm.target in gemms else None

    found: dict[torch.fx.Node, tuple] = {}
    for node in graph.nodes:
        if "relu" in kinds and node.target is aten.relu.default and isinstance(node.args[0], torch.fx.Node):
            p = producer(node.args[0])
            if p is not None and len(node.args[0].users) == 1:
                found[p[0]] = (*p, node, "relu")
    targets = {n.target for n in graph.nodes}
    gelus = [(kind, marker) for kind in kinds if (marker := _GELU_MARKERS.get(kind)) and marker[0] in targets]
    for gemm in [n for n in graph.nodes if n.target in gemms] if gelus else []:
        # the GELU's input: the GEMM, or the one view that alone reads it
        (only,) = gemm.users if len(gemm.users) == 1 else (None,)
        for x in (gemm, *((only,) if only is not None and only.target in VIEWS else ())):
            for kind, marker in gelus:
                for pattern in _gelu_patterns(gemm.meta["val"].dtype, marker[1]):
                    last = _computes(pattern, x)
                    if last is not None:
                        found.setdefault(gemm, (*producer(x), last, kind))
    return list(found.values())


def _computes(pattern: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node | None:
    """The node computing ``pattern`` (one placeholder, one result) from ``x`` where x's uses compute
    exactly it and nothing else reads x or the pattern's intermediate values; else None. Matched
    forward from x, op by op, literals included: the work is the pattern's size, where torch's
    ``SubgraphMatcher`` searched the whole graph and checked each match for cycles with a walk over
    the graph (a 20,000-node MLP: 6 s of 7.8 in ``onednn_linears``)."""
    mapped: dict[torch.fx.Node, torch.fx.Node] = {}
    for pn in pattern.nodes:
        if pn.op == "placeholder":
            mapped[pn] = x
            continue
        if pn.op == "output":
            result = pn.args[0][0] if isinstance(pn.args[0], (list, tuple)) else pn.args[0]
            last = mapped[result]
            inside = set(mapped.values())
            reads = [n for p, n in mapped.items() if n is not last]
            return last if all(u in inside for n in reads for u in n.users) else None
        if not pn.all_input_nodes:
            return None
        args = torch.fx.node.map_arg((pn.args, pn.kwargs), lambda a: mapped[a])
        source = mapped[pn.all_input_nodes[0]]
        match = next((u for u in source.users if u.op == "call_function" and u.target == pn.target
                      and (u.args, u.kwargs) == args and u not in mapped.values()), None)
        if match is None:
            return None
        mapped[pn] = match
    return None
