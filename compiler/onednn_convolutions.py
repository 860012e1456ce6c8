"""Convolutions of channels-last CPU inference graphs as oneDNN's fused, prepacked convolution.

    onednn_convolutions   convolution (+ bias) [+ add of a residual] [+ relu | hardswish]
                          -> mkldnn._convolution_pointwise (.binary) over a prepacked weight

Runs after ``compiler.layout.convert_weight_layout`` on inference graphs whose layout is
channels-last (the CPU rule of ``compiler.layout``), where every convolution weight is a constant of
the compiled graph (a static input converted to channels-last, or a batch-norm fold's weight).
ATen's ``convolution`` hands NHWC input to oneDNN too, but reorders the weight into oneDNN's blocked
format on every call and leaves the relu and the residual add to kernels of their own (a pass over
the result each, and an OpenMP fork/join). Here the weight is reordered once, at compile time
(``mkldnn_reorder_conv2d_weight`` for the graph's input shape: Inductor's freezing path does the
same), and the relu and the add join the convolution as oneDNN post-ops. Measured on the loaded
2-core CPU, batch 2, a resnet 3x3 convolution of 64 channels at 56x56 + relu: ATen 55.9 ms, fused
36.6 ms, fused over the prepacked weight 19.6 ms; + residual add + relu: ATen 75.6 ms, 19.5 ms.

The packed weight is a constant of the graph (``get_attr``; an opaque oneDNN tensor the lowering
passes to the library call as it is) repacked in place by the ``FoldedWeights`` guard whenever the
weight it was packed from is refilled (a parameter changed after compiling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from compiler.folding import FoldedGraph, _real_tensors, _single_user, graph_module
from compiler.lowerings.rules import Unsupported, register
from compiler.report import ExternReason, WeightFold

aten = torch.ops.aten


def available() -> bool:
    """Whether this torch build has oneDNN's fused convolution and its weight reorder."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")
            and hasattr(torch._C._nn, "mkldnn_reorder_conv2d_weight"))


def fused_ops() -> tuple:
    """The ops this pass writes; empty where torch has no oneDNN."""
    if not hasattr(torch.ops.mkldnn, "_convolution_pointwise"):
        return ()
    return (torch.ops.mkldnn._convolution_pointwise.default, torch.ops.mkldnn._convolution_pointwise.binary)


def nhwc_operands(target: Any) -> int:
    """How many leading operands of a call of ``target`` the lowering of a channels-last graph gives
    NHWC strides, as it gives a convolution's input: the fused convolution's input, and the residual
    of its ``.binary`` form; 0 for any other op."""
    ops = fused_ops()
    return 0 if target not in ops else 1 + ops.index(target)


@dataclass
class PackedWeight:
    """A convolution weight in oneDNN's blocked format, packed from ``weight`` (a constant of the
    graph that a fold or a layout conversion refills first: the guard refills in list order)."""

    name: str  # the packed constant's attribute in the graph module
    weight: torch.Tensor  # the channels-last weight it is packed from
    packed: torch.Tensor  # oneDNN tensor the fused call reads
    padding: list[int]
    stride: list[int]
    dilation: list[int]
    groups: int
    input_size: list[int]

    @property
    def sources(self) -> list[int]:
        return []  # its weight's fold or conversion names the graph inputs

    def refill(self, args: Sequence[Any]) -> None:
        self.packed.copy_(pack(self.weight, self.padding, self.stride, self.dilation, self.groups,
                               self.input_size))


def pack(weight: torch.Tensor, padding: list[int], stride: list[int], dilation: list[int], groups: int,
         input_size: list[int]) -> torch.Tensor:
    """``weight`` reordered into the blocked format oneDNN picks for this convolution and input shape."""
    return torch._C._nn.mkldnn_reorder_conv2d_weight(weight.contiguous().to_mkldnn(), padding, stride, dilation,
                                                     groups, input_size)


def _conv_parts(node: torch.fx.Node, gm: torch.fx.GraphModule) -> tuple | None:
    """(x, weight constant, bias, padding, stride, dilation, groups) of a float32 2-d convolution
    without output padding whose weight is a tensor constant of the graph; else None."""
    if node.op != "call_function" or node.target is not aten.convolution.default or node.kwargs:
        return None
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
    if transposed or any(output_padding) or getattr(w, "op", None) != "get_attr":
        return None
    vals = [getattr(a, "meta", {}).get("val") for a in (x, w, node)]
    if not all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 and v.dim() == 4 for v in vals):
        return None
    if not all(isinstance(n, int) and n > 0 for v in vals for n in v.shape):  # symbolic: packed for one shape
        return None
    weight = getattr(gm, w.target, None)
    if not isinstance(weight, torch.Tensor) or weight.layout != torch.strided:
        return None
    if bias is not None:
        b_val = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
        if not isinstance(b_val, torch.Tensor) or b_val.dtype != torch.float32 or b_val.dim() != 1:
            return None
    return x, weight, bias, list(padding), list(stride), list(dilation), groups


def _residual(conv: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """(the add, its other operand) where the conv's one user adds a tensor of the conv's shape and
    dtype (a residual connection; no broadcast, no alpha)."""
    add = _single_user(conv)
    if add is None or add.target is not aten.add.Tensor or add.kwargs or len(add.args) != 2:
        return None
    a, b = add.args
    other = b if a is conv else a
    if other is conv or not isinstance(other, torch.fx.Node):
        return None
    val, mine = other.meta.get("val"), conv.meta["val"]
    if not isinstance(val, torch.Tensor) or val.shape != mine.shape or val.dtype != mine.dtype:
        return None
    return add, other


def _relu_of(node: torch.fx.Node) -> torch.fx.Node | None:
    user = _single_user(node)
    return user if user is not None and user.target is aten.relu.default else None


def _call(node: Any, target: Any, *args: Any) -> bool:
    """``node`` is ``target(*args)`` (a None in ``args`` matches anything) without keyword arguments."""
    return (isinstance(node, torch.fx.Node) and node.target is target and not node.kwargs
            and len(node.args) == len(args) and all(a is None or b == a for a, b in zip(args, node.args)))


def _hardswish_of(node: torch.fx.Node) -> torch.fx.Node | None:
    """The last node of ``hardswish(node)`` as the decomposition writes it, ``node * clamp(clamp(node + 3,
    0), None, 6) / 6`` (or one ``clamp(node + 3, 0, 6)``), where nothing else reads ``node`` or the steps."""
    users = list(node.users)
    add = next((u for u in users if _call(u, aten.add.Tensor, node, 3)), None)
    if len(users) != 2 or add is None:
        return None
    low = _single_user(add)
    if _call(low, aten.clamp.default, add, 0, 6):
        top = low
    elif _call(low, aten.clamp.default, add, 0):
        top = _single_user(low)
        if not _call(top, aten.clamp.default, low, None, 6):
            return None
    else:
        return None
    mul = _single_user(top)
    if mul is None or mul.target is not aten.mul.Tensor or mul.kwargs or set(mul.args) != {node, top} \
            or not all(u is mul or u is add for u in users):
        return None
    div = _single_user(mul)
    return div if _call(div, aten.div.Tensor, mul, 6) else None


@dataclass
class ConvolutionRewrite:
    """What the pass returns: the graph, its refills (the guard's), and one line per rewrite."""

    folded: FoldedGraph
    rewrites: list[WeightFold]


def onednn_convolutions(folded: FoldedGraph) -> ConvolutionRewrite:
    """``folded`` (a channels-last CPU inference graph) with each float32 2-d convolution over a
    constant weight as ``mkldnn._convolution_pointwise`` over that weight prepacked, its bias, and
    the residual add and relu that alone read it fused (a copy; the input graph untouched)."""
    if not available():
        return ConvolutionRewrite(folded, [])
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(folded.gm.graph, {}))
    gm = graph_module(folded.gm, graph)
    packed: list[PackedWeight] = []
    by_key: dict[tuple, str] = {}
    done: list[WeightFold] = []
    for node in list(graph.nodes):
        parts = _conv_parts(node, gm)
        if parts is None:
            continue
        x, weight, bias, padding, stride, dilation, groups = parts
        input_size = list(x.meta["val"].shape)
        residual = _residual(node)
        relu = _relu_of(residual[0] if residual is not None else node)
        hardswish = _hardswish_of(node) if residual is None and relu is None else None
        last = relu or hardswish or (residual[0] if residual is not None else node)
        key = (id(weight), *padding, *stride, *dilation, groups, *input_size)
        if key not in by_key:  # a weight shared by convolutions of one shape is packed once
            try:
                with _real_tensors():
                    blocked = pack(weight, padding, stride, dilation, groups, input_size)
            except RuntimeError:  # a configuration oneDNN refuses: ATen's convolution stays
                continue
            name = f"_onednn{len(packed)}_weight"
            gm.register_buffer(name, blocked)
            packed.append(PackedWeight(name, weight, blocked, padding, stride, dilation, groups, input_size))
            by_key[key] = name
        with graph.inserting_before(last):
            w_node = graph.get_attr(by_key[key])
            w_node.meta["val"] = getattr(gm, by_key[key])
            common = (w_node, bias, padding, stride, dilation, groups)
            if residual is not None:
                op = torch.ops.mkldnn._convolution_pointwise.binary
                fused = graph.call_function(op, (x, residual[1], *common, "add", None,
                                                 "relu" if relu is not None else None, [], None))
                attr = "add" + ("+relu" if relu is not None else "")
            else:
                op = torch.ops.mkldnn._convolution_pointwise.default
                attr = "relu" if relu is not None else ("hardswish" if hardswish is not None else "none")
                fused = graph.call_function(op, (x, *common, attr, [], ""))
        fused.meta["val"] = last.meta["val"]
        last.replace_all_uses_with(fused)
        done.append(WeightFold("onednn_convolutions", f"convolution_pointwise({attr})", fused.name))
    if not done:
        return ConvolutionRewrite(folded, [])
    graph.eliminate_dead_code()
    gm.recompile()
    return ConvolutionRewrite(FoldedGraph(gm, folded.folds, [*folded.conversions, *packed]), done)


def _library_call(ctx: Any, node: Any, *args: Any, **kwargs: Any) -> Any:
    raise Unsupported(ExternReason.LIBRARY_KERNEL, "oneDNN fused convolution")


# the fused ops are library calls (an extern of reason LIBRARY_KERNEL), like oneDNN's fused linear
register(*fused_ops())(_library_call)
