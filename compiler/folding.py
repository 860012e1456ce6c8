"""Weights at compile time: batch norm folded into the convolution or linear before it.

Inference graphs only (``kind == "inference"``: nothing asks for gradients). The parameters and
buffers of the module reach an AOTAutograd graph as inputs; Dynamo and AOTAutograd mark them static
(``compiler.cudagraphs.static_input_indices``). Where an inference batch norm (as our decomposition
``crucible:batch_norm_inference`` leaves it, folded per channel like ATen's CPU kernel:
``y * alpha + beta`` with ``alpha = rsqrt(var + eps) * gamma``, ``beta = beta_bn - mean * alpha``, each
viewed to broadcast over dim 1) reads the result of a convolution or a
matmul whose weight, bias and every batch-norm tensor are such static inputs, the pass rewrites

    conv(x, W, b) -> bn  into  conv(x, W', b'),  W' = W * s (per output channel), b' = (b - mean) * s + beta,
    s = gamma / sqrt(var + eps)

and the same for ``addmm``/``mm`` (``nn.Linear`` followed by ``BatchNorm1d``). ``W'`` and ``b'`` are
constants of the compiled graph (``get_attr`` nodes), filled by a ``FoldedWeights`` guard around the
compiled call: on the first call, and again whenever a source tensor is not the one folded from (an
identity, storage or ``_version`` change: ``bn.running_var.fill_(2)``, an optimizer step, a
reassigned parameter). Inductor's freezing instead treats parameters as constants and never looks
at them again; here a mutation after compiling is honoured. The folded tensors are refilled in
place, so a CUDA graph that captured their addresses reads the new values.

Low-precision graphs (the decomposition converts to float32 around the batch norm) do not match
the pattern and stay unfolded: folding would round ``W'`` to bf16/fp16, which eager never does.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from compiler.report import GraphReport

aten = torch.ops.aten
_FOLDABLE = (aten.convolution.default, aten.addmm.default, aten.mm.default)
_FLOATS = (torch.float32, torch.float64)


@dataclass
class BatchNormFold:
    """One folded pair: where its sources are among the graph's inputs and the constants it fills."""

    op: str  # "convolution" | "addmm" | "mm": the node that now computes the batch norm too
    node: str  # that node's name in the folded graph
    weight: int  # graph input indices of the sources; None where the module has none
    bias: int | None
    mean: int
    var: int
    gamma: int | None
    beta: int | None
    eps: float
    channel_dim: int  # the weight's dim indexing output channels (1 for a linear's [K, N] weight)
    folded_weight: torch.Tensor
    folded_bias: torch.Tensor

    @property
    def sources(self) -> list[int]:
        return [i for i in (self.weight, self.bias, self.mean, self.var, self.gamma, self.beta) if i is not None]

    def refill(self, args: Sequence[Any]) -> None:
        # In float64, then rounded once. Measured on Conv2d(16, 32, 3) + BatchNorm2d with random
        # statistics, an 8x16x16x16 float32 input, against the model in float64: max |err| 4.8e-6
        # (rms 2.08e-7) folded in float64, 5.3e-6 (2.17e-7) folded in float32, 6.1e-6 (2.19e-7) for
        # eager's conv then batch norm. The cost is a per-channel computation once per refill.
        w = args[self.weight].double()
        var = args[self.var].double()
        scale = torch.rsqrt(var + self.eps)
        if self.gamma is not None:
            scale = scale * args[self.gamma].double()
        shape = [1] * w.dim()
        shape[self.channel_dim] = -1
        bias = args[self.bias].double() if self.bias is not None else torch.zeros_like(var)
        shifted = (bias - args[self.mean].double()) * scale
        if self.beta is not None:
            shifted = shifted + args[self.beta].double()
        self.folded_weight.copy_(w * scale.reshape(shape))
        self.folded_bias.copy_(shifted)


@dataclass
class FoldedGraph:
    """What ``fold_batch_norm`` returns: the graph to lower (``gm`` itself when nothing matched)."""

    gm: torch.fx.GraphModule
    folds: list[BatchNormFold] = field(default_factory=list)
    # weights held in another layout (``compiler.layout.WeightConversion``): refilled by the same guard
    conversions: list = field(default_factory=list)

    def __str__(self) -> str:
        return (f"# {len(self.folds)} batch norms folded, {len(self.conversions)} weights converted\n"
                f"{self.gm.code}")

    def guard(self, call: Callable[[list], Any], report: GraphReport) -> Callable[[list], Any]:
        """``call`` behind the check that keeps the folded constants current (``call`` if none).
        Folds refill before conversions: a conversion never reads a fold's output."""
        refills = [*self.folds, *self.conversions]
        return FoldedWeights(call, refills, report) if refills else call


class FoldedWeights:
    """The compiled call behind a check of the folded weights' sources (see the module docstring).

    Each call compares every source tensor with the one folded from: identity (a reassigned
    parameter), ``_version`` (an in-place update) and data pointer (``param.data = ...`` keeps both
    of the others). Measured on a loaded 2-core CPU for 318 sources (a ResNet-50's 53 batch norms):
    ~390 ns a source (120 us a call) with one Python loop over the three checks, ~300 ns (95 us a
    call) as written: identities through ``map``, versions in one comprehension, data pointers
    through torch's C helper (the CUDA-graph runner's). A GPU model should measure it against what
    folding saves before relying on it; ``fold_weights=False`` removes the check."""

    def __init__(self, call: Callable[[list], Any], folds: list, report: GraphReport) -> None:
        # ``folds``: anything with ``sources`` (graph input indices) and ``refill(args)``: batch-norm
        # folds, and the weights ``compiler.layout`` holds channels-last
        self.call = call
        self.folds = folds
        self.report = report
        self.sources = sorted({i for f in folds for i in f.sources})
        self.pick = operator.itemgetter(*self.sources, *self.sources[:1])  # always a tuple (1 source too)
        self.held: tuple[torch.Tensor, ...] = ()
        self.versions: list[int] = []
        self.ptrs: list[int | None] = []

    def __call__(self, args: list) -> Any:
        if not self.current(args):
            with torch.no_grad():
                for f in self.folds:
                    f.refill(args)
            self.held = self.pick(args)[:len(self.sources)]
            self.versions = [t._version for t in self.held]
            self.ptrs = [None] * len(args)
            for i in self.sources:
                self.ptrs[i] = args[i].data_ptr()
            self.report.weight_refills += 1
        return self.call(args)

    def current(self, args: list) -> bool:
        if not self.held or not all(map(operator.is_, self.pick(args), self.held)):
            return False
        if [t._version for t in self.held] != self.versions:
            return False
        if _data_ptrs_equal is not None:
            return _data_ptrs_equal(args, self.ptrs, self.sources)
        return all(args[i].data_ptr() == self.ptrs[i] for i in self.sources)


_data_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _real_tensors() -> Any:
    from torch._subclasses import fake_tensor

    unset = getattr(fake_tensor, "unset_fake_temporarily", None)  # torch 2.1 and later
    return unset() if unset is not None else contextlib.nullcontext()


# --- the pattern ------------------------------------------------------------------

def _single_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _channel_view(node: Any, out_dim: int) -> torch.fx.Node | None:
    """The tensor under ``view(t, [1, -1, 1, ...])`` (broadcasting over dim 1 of an ``out_dim``-d value)."""
    if not (isinstance(node, torch.fx.Node) and node.target in (aten.view.default, aten.reshape.default)):
        return None
    shape = list(node.args[1])
    if len(shape) != out_dim or shape[1] != -1 or any(s != 1 for i, s in enumerate(shape) if i != 1):
        return None
    return node.args[0]


def _operand(node: torch.fx.Node, chain: torch.fx.Node, ops: tuple) -> Any:
    """The other operand of a binary ``node`` applied to ``chain`` (either side for commutative ops)."""
    if node.target not in ops or node.kwargs:
        return None
    a, b = node.args[:2]
    if a is chain:
        return b
    return a if b is chain and node.target is not aten.sub.Tensor else None


class _Matcher:
    def __init__(self, gm: torch.fx.GraphModule, static_inputs: Sequence[int]) -> None:
        self.index = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
        self.static = set(static_inputs)

    def param(self, node: Any) -> int | None:
        """The input index of a static float tensor input, else None."""
        if node not in self.index or self.index[node] not in self.static:
            return None
        val = node.meta.get("val")
        return self.index[node] if isinstance(val, torch.Tensor) and val.dtype in _FLOATS else None

    def batch_norm(self, producer: torch.fx.Node) -> dict | None:
        """The batch norm over ``producer``'s dim 1: its sources, eps and last node; None if absent.

        The decomposition's form: ``y * view(alpha) + view(beta)`` with ``alpha = rsqrt(var + eps)
        [* gamma]`` and ``beta = [beta_bn +] -mean * alpha``."""
        out_dim = producer.meta["val"].dim()
        scale = _single_user(producer)
        if scale is None:
            return None
        alpha = _channel_view(_operand(scale, producer, (aten.mul.Tensor,)), out_dim)
        shift = _single_user(scale)
        beta = _channel_view(_operand(shift, scale, (aten.add.Tensor,)), out_dim) if shift is not None else None
        if not isinstance(alpha, torch.fx.Node) or not isinstance(beta, torch.fx.Node):
            return None
        found = self._alpha(alpha)
        if found is None:
            return None
        shifted = self._shift(beta, alpha)
        if shifted is None:
            return None
        found.update(shifted, last=shift)
        return found

    def _peel(self, node: torch.fx.Node, op: Any, inner_op: Any) -> tuple[Any, int | None] | None:
        """(inner, parameter) of an optional ``op(inner, parameter)`` (either order; ``inner`` is the
        ``inner_op`` node); (node, None) when ``node`` is no ``op``; None when the other operand is no parameter."""
        if node.target is not op or node.kwargs:
            return node, None
        a, b = node.args[:2]
        inner, other = (a, b) if getattr(a, "target", None) is inner_op else (b, a)
        source = self.param(other)
        return (inner, source) if source is not None else None

    def _alpha(self, alpha: torch.fx.Node) -> dict | None:
        """{var, eps, gamma} of ``rsqrt(var + eps) [* gamma]``."""
        peeled = self._peel(alpha, aten.mul.Tensor, aten.rsqrt.default)
        if peeled is None:
            return None
        alpha, gamma = peeled
        if getattr(alpha, "target", None) is not aten.rsqrt.default:
            return None
        add = alpha.args[0]
        if add.target is not aten.add.Tensor or not isinstance(add.args[1], float) or add.kwargs:
            return None
        var = self.param(add.args[0])
        return {"var": var, "eps": add.args[1], "gamma": gamma} if var is not None else None

    def _shift(self, beta: torch.fx.Node, alpha: torch.fx.Node) -> dict | None:
        """{mean, beta} of ``[beta_bn +] neg(mean) * alpha``."""
        peeled = self._peel(beta, aten.add.Tensor, aten.mul.Tensor)
        if peeled is None:
            return None
        beta, source = peeled
        neg = _operand(beta, alpha, (aten.mul.Tensor,)) if isinstance(beta, torch.fx.Node) else None
        if getattr(neg, "target", None) is not aten.neg.default:
            return None
        mean = self.param(neg.args[0])
        return {"mean": mean, "beta": source} if mean is not None else None

    def weights(self, node: torch.fx.Node) -> tuple[int, int | None, int, torch.fx.Node | None] | None:
        """(weight, bias, channel dim, permute node) of a foldable conv/addmm/mm, else None."""
        if node.target is aten.convolution.default:
            transposed = node.args[6]
            bias = node.args[2]
            w, b = self.param(node.args[1]), self.param(bias) if bias is not None else None
            ok = w is not None and not transposed and (bias is None or b is not None)
            return (w, b, 0, None) if ok else None
        if node.kwargs:  # addmm's beta/alpha
            return None
        bias, weight = (node.args[0], node.args[2]) if node.target is aten.addmm.default else (None, node.args[1])
        b = self.param(bias) if bias is not None else None
        if bias is not None and (b is None or bias.meta["val"].dim() != 1):
            return None
        if weight.target is aten.permute.default and list(weight.args[1]) == [1, 0]:
            w = self.param(weight.args[0])
            return (w, b, 0, weight) if w is not None else None
        w = self.param(weight)
        return (w, b, 1, None) if w is not None else None


def fold_batch_norm(gm: torch.fx.GraphModule, static_inputs: Sequence[int]) -> FoldedGraph:
    """The graph with every foldable batch norm folded into its conv/linear (a copy; ``gm`` untouched)."""
    matcher = _Matcher(gm, static_inputs)
    found = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _FOLDABLE:
            weights = matcher.weights(node)
            bn = matcher.batch_norm(node) if weights is not None else None
            if bn is not None and node.meta["val"].dtype in _FLOATS:
                found.append((node, weights, bn))
    if not found:
        return FoldedGraph(gm)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, env))
    folded = graph_module(gm, graph)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    folds = [_rewrite(folded, k, env[node], env, placeholders, weights, bn)
             for k, (node, weights, bn) in enumerate(found)]
    graph.eliminate_dead_code()
    folded.recompile()
    return FoldedGraph(folded, folds)


def _rewrite(gm: torch.fx.GraphModule, k: int, node: torch.fx.Node, env: dict, placeholders: list,
             weights: tuple, bn: dict) -> BatchNormFold:
    w, b, channel_dim, permute = weights
    w_val = placeholders[w].meta["val"]
    channels = w_val.shape[channel_dim]
    # real tensors, though AOTAutograd calls the compiler inside its fake mode; in the parameter's own
    # layout (a channels-last weight stays channels-last for the extern call)
    with _real_tensors():
        folded_w = torch.empty_strided(w_val.shape, w_val.stride(), dtype=w_val.dtype, device=w_val.device)
        folded_b = torch.empty(channels, dtype=w_val.dtype, device=w_val.device)
    gm.register_buffer(f"_folded{k}_weight", folded_w)
    gm.register_buffer(f"_folded{k}_bias", folded_b)
    graph = gm.graph
    with graph.inserting_before(node):
        w_node, b_node = graph.get_attr(f"_folded{k}_weight"), graph.get_attr(f"_folded{k}_bias")
        w_node.meta["val"], b_node.meta["val"] = folded_w, folded_b
        if node.target is aten.convolution.default:
            new = graph.call_function(node.target, (node.args[0], w_node, b_node, *node.args[3:]))
        else:
            x = node.args[1] if node.target is aten.addmm.default else node.args[0]
            if permute is not None:
                t = graph.call_function(aten.permute.default, (w_node, [1, 0]))
                t.meta["val"] = env[permute].meta["val"]
                w_node = t
            new = graph.call_function(aten.addmm.default, (b_node, x, w_node))
    new.meta["val"] = node.meta["val"]
    env[bn["last"]].replace_all_uses_with(new)
    return BatchNormFold(str(node.target.overloadpacket.__name__), new.name, w, b, bn["mean"], bn["var"],
                         bn["gamma"], bn["beta"], bn["eps"], channel_dim, folded_w, folded_b)


def graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A module over ``graph`` (``root``'s attributes that it reads copied in, as ``GraphModule``
    does) whose Python code is generated when first read or run, not at construction and at every
    ``recompile``: the graphs of the weight and layout passes are lowered, never run, and each code
    generation cost ~90 ms on GPT-2's inference graph (two per pass). Torch's lazy graph module where
    this torch has it."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:  # pragma: no cover  (a torch without it: code generated at once)
        return torch.fx.GraphModule(root, graph)
    return _LazyGraphModule(root, graph)
