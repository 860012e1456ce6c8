"""Channels-last layout: the whole-graph decision, and the weights converted once at compile time.

``choose_layout`` decides per graph, from the ``layout`` option: ``"contiguous"`` (every buffer the
compiler allocates is row-major, the compiler before this pass), ``"channels_last"``, or ``"auto"``
(the default), which applies ``COST_RULE`` below. In a channels-last graph the lowering
(``compiler.lowering``) gives 2-d convolutions NHWC inputs, weights and outputs, and every 4-d value
it realizes from an NHWC buffer (batch norm, activations, pooling, residual adds, and the kernels
they fuse into) is NHWC too, walked (N, H, W, C) so a kernel's fastest loop is the stride-1 channel
dim. Values go back to the layout eager gives only where that layout is observable: graph outputs
(Inductor's keep_output_stride) and layout-sensitive consumers (a view that needs contiguity, an
extern call other than a convolution), each of which already realizes its input in eager's strides.

``convert_weight_layout`` (inference graphs) replaces each convolution weight that is a parameter
(a static input) by a channels-last copy held by the compiled graph, so no call converts it again.
The copies are refilled through the batch-norm folds' guard (``compiler.folding.FoldedWeights``):
after an in-place update, a reassignment or a ``.data`` swap of the source, the next call copies
it again. A weight the batch-norm fold already replaced is made channels-last in place of a copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from compiler import ir, onednn_convolutions
from compiler.folding import BatchNormFold, FoldedGraph, _real_tensors, graph_module
from compiler.graph import contiguous_strides, same_layout
from compiler.sizes import is_static

aten = torch.ops.aten


def channels_last_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """NHWC strides of an (N, C, H, W) shape (size-0/1 dims counted as 1, like ``contiguous_strides``).
    A symbolic size (``compiler.sizes``) is never 0 or 1 (Dynamo specializes those) and stays as is."""
    n, c, h, w = (max(s, 1) if is_static(s) else s for s in shape)
    return (h * w * c, 1, w * c, c)


def strides_like_reads(shape: Sequence[int], indices: Sequence[Any]) -> tuple[int, ...]:
    """Strides of a new 4-d value laid out as the NHWC buffer it reads: its dims sorted by their
    coefficients in the first of ``indices`` that covers every dim of size > 1, largest first, as
    eager's TensorIterator lays out a result like its input. A value in (N, C, H, W) order gets NHWC
    strides; one over a permuted view of the buffer (a layer norm's row statistics over (N, H, W, C))
    is row-major in its own order: NHWC strides on that shape transposed H and W, and the statistics'
    consumer could not fuse with their reduction (convnext_tiny on an H200). Where no index is affine
    and covers every dim (broadcast reads only): NHWC strides."""
    for index in indices:
        aff = ir.to_affine(index)
        if aff is None:
            continue
        coef = [aff.get(ir.xvar(d), 0) for d in range(len(shape))]
        if any(c <= 0 for c, n in zip(coef, shape) if n > 1):
            continue
        order = sorted(range(len(shape)), key=lambda d: -coef[d] if shape[d] > 1 else 0)
        strides = [0] * len(shape)
        step = 1
        for d in reversed(order):
            strides[d] = step
            step *= max(int(shape[d]), 1)
        return tuple(strides)
    return channels_last_strides(shape)


def is_channels_last(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """A dense NHWC 4-d layout that differs from the row-major one (dims of size 1 do not count)."""
    return (len(shape) == 4 and all(isinstance(s, int) for s in shape)  # symbolic: never (stage 1)
            and same_layout(shape, stride, channels_last_strides(shape))
            and not same_layout(shape, stride, contiguous_strides(tuple(shape))))


# --- the decision ------------------------------------------------------------------

# The cost rule of ``layout="auto"``. A convolution's time in each layout is estimated as its
# roofline time in NCHW (``max(flops / PEAK_FLOPS, bytes / PEAK_BYTES)``, only the relative size
# of convolutions matters) times the measured channels-last / NCHW time ratio of its family and
# dtype. The graph runs channels-last when the estimated total is at most ``MAX_ESTIMATE`` of the
# NCHW total, convolutions are not too rare in the graph (Inductor's rule: fewer than one in
# ``MAX_NODES_PER_CONV`` FX nodes means layout conversions around a few convolutions in a mostly
# non-convolution graph, like a ViT's patch embedding), and it is an inference graph on a GPU.
# Training graphs stay contiguous by measurement (``cost_rule``); forced channels-last, a forward returns
# its saved activations NHWC and reports their strides (``compiler.backend.report_output_strides``),
# and its backward follows it (``backward_rule``). CPU graphs have their own rule (``cpu_rule``).
#
# CL_RATIO: median channels-last / NCHW time of ATen's convolution per family, measured on the H200
# (``python -m harness.bench.layout --convs``, batch 32, 29 shapes from resnet50, mobilenetv3,
# efficientnet_b0 and convnext_tiny; cuDNN heuristics, TF32 allowed as torch's default for float32;
# harness/bench/RESULTS.md). Depthwise: 0.27-0.83 (ATen's NCHW depthwise kernel); grouped 0.61-0.68
# (unlike Inductor's A100 numbers, where grouped convs were slower channels-last); 1x1 0.61-1.08;
# the 3-channel stems 0.67-1.14.
#
# MAX_ESTIMATE: a whole graph pays for more than its convolutions, and how much depends on what is
# around them. Whole-model measurements on the H200 (``python -m harness.bench.layout --models``,
# Crucible, batch 32, harness/bench/RESULTS.md), channels-last speed over contiguous at the rule's
# estimate: resnet50 fp32 1.20x (0.86), bf16 1.59x (0.87); convnext_tiny fp32 1.13x (0.65), bf16
# 1.06x (0.49); mobilenetv3_large_100 fp32 0.74x (0.78: slower). The graphs with depthwise or grouped
# convolutions (their squeeze-excite and pointwise kernels around small convolutions) go
# channels-last only well below that, at most MAX_ESTIMATE (convnext, mobilenetv3 and
# efficientnet_b0 in bf16: 0.49-0.73); graphs of dense and 1x1 convolutions at most
# MAX_ESTIMATE_DENSE (resnet50). (An earlier tree measured resnet50 bf16 0.92x channels-last: its
# NHWC kernels walked the channel dim slowest.)
#
# MAX_ESTIMATE_CUDAGRAPHS: under CUDA graphs a graph pays GPU time only. cuDNN's NHWC depthwise
# convolutions cost the host about 6 us each more than ATen's NCHW kernel, which decides host-bound
# graphs, but not graphs replayed from a CUDA graph. H200, ``python -m harness.bench.layout
# --cudagraphs`` (thirteenth session, estimate 0.78 for both): efficientnet_b0 fp32 channels-last
# 1.28x under CUDA graphs (2.642 -> 2.062 ms) and 0.88x without (3.976 -> 4.496 ms);
# mobilenetv3_large_100 fp32 1.28x (1.599 -> 1.247 ms) and 0.95x (3.085 -> 3.233 ms).
CL_RATIO = {
    torch.float32: {"depthwise": 0.603, "grouped": 0.619, "stem": 0.823, "pointwise": 0.920, "dense": 0.754},
    torch.bfloat16: {"depthwise": 0.387, "grouped": 0.652, "stem": 1.010, "pointwise": 0.968, "dense": 0.667},
}
CL_RATIO[torch.float16] = CL_RATIO[torch.bfloat16]
PEAK_FLOPS = {torch.float32: 494e12, torch.bfloat16: 989e12, torch.float16: 989e12}  # H200 TF32 / bf16 dense
PEAK_BYTES = 4.8e12  # H200 HBM3e bytes/s
MAX_NODES_PER_CONV = 300
MAX_ESTIMATE = 0.75
MAX_ESTIMATE_DENSE = 0.9
MAX_ESTIMATE_CUDAGRAPHS = 0.8
SMALL_FAMILIES = ("depthwise", "grouped")
COST_RULE = (f"estimated convolution time channels-last <= {MAX_ESTIMATE} x NCHW with depthwise or grouped "
             f"convolutions ({MAX_ESTIMATE_CUDAGRAPHS} x under CUDA graphs), <= {MAX_ESTIMATE_DENSE} x without "
             f"them (per family and dtype, measured on the H200)")


@dataclass(frozen=True)
class LayoutDecision:
    layout: str  # "channels_last" | "contiguous"
    reason: str
    convs: int = 0  # 2-d convolutions in the graph
    forced: bool = False  # the option chose, not the rule

    def __str__(self) -> str:
        return f"{self.layout} ({self.reason})"


def conv_family(weight: Any, groups: int) -> str:
    """``weight``'s convolution family in ``CL_RATIO``: [C_out, C_in / groups, kH, kW]."""
    c_out, c_in_group, kh, kw = weight.shape
    if groups > 1 and c_in_group == 1:
        return "depthwise"
    if groups > 1:
        return "grouped"
    if c_in_group <= 4:
        return "stem"  # an image's first convolution: 3 input channels
    return "pointwise" if kh == kw == 1 else "dense"


def conv_seconds(x: Any, weight: Any, out: Any) -> float:
    """Roofline time of one convolution in NCHW (only the ratio between convolutions matters). From
    shapes only: a folded weight is a real tensor, and no op may run on it inside the fake mode the
    graph is compiled under."""
    flops = 2 * math.prod(out.shape) * math.prod(weight.shape[1:])
    moved = (math.prod(x.shape) + math.prod(weight.shape) + math.prod(out.shape)) * x.dtype.itemsize
    return max(flops / PEAK_FLOPS.get(x.dtype, PEAK_FLOPS[torch.float32]), moved / PEAK_BYTES)


def conv2d_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The graph's 2-d, non-transposed convolutions with tensor metadata."""
    found = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not aten.convolution.default:
            continue
        vals = [getattr(a, "meta", {}).get("val") for a in n.args[:2]] + [n.meta.get("val")]
        if all(isinstance(v, torch.Tensor) and v.dim() == 4 for v in vals) and not n.args[6]:
            found.append(n)
    return found


def cpu_rule(gm: torch.fx.GraphModule, kind: str, convs: list[torch.fx.Node], codegen: str) -> LayoutDecision:
    """CPU graphs of the C++ codegen: channels-last for inference graphs with convolutions enough.
    ATen hands NCHW convolutions to oneDNN, which reorders the activations to its NHWC-like format
    and back on every call; NHWC ones it runs as they are. Measured side by side on the 2-core
    AVX-512 machine (loaded; CPU benchmark, issue 38): resnet18 at batch 2 1.6x faster channels-last
    than contiguous, single 3x3 convolutions + relu of resnet's shapes 1.6-1.8x. The Triton
    interpreter's CPU graphs stay contiguous (their speed is not the goal; their kernels unchanged)."""
    if codegen != "cpp":
        return LayoutDecision("contiguous", "CPU graph: channels-last is chosen for the C++ codegen only", len(convs))
    if kind != "inference":
        # eager's own resnet18 training step (batch 8 of 64x64, 1 thread, 2-core AMD EPYC): NHWC 94 ms,
        # NCHW 71 ms (oneDNN's NHWC convolution backward); Crucible's 98 against 64 ms
        return LayoutDecision("contiguous", f"CPU {kind} graph: oneDNN's NHWC convolution backward is slower "
                              f"(measured)", len(convs))
    nodes = sum(1 for _ in gm.graph.nodes)
    if nodes >= MAX_NODES_PER_CONV * len(convs):
        return LayoutDecision("contiguous", f"{len(convs)} convolutions in {nodes} FX nodes: too few to pay "
                              f"for the conversions", len(convs))
    return LayoutDecision("channels_last", "CPU graph: oneDNN runs NHWC convolutions without reorders", len(convs))


def conv2d_backward_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """A backward graph's gradients of 2-d, non-transposed convolutions."""
    found = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is aten.convolution_backward.default and not n.args[7]:
            x = getattr(n.args[1], "meta", {}).get("val")
            if isinstance(x, torch.Tensor) and x.dim() == 4:
                found.append(n)
    return found


def backward_rule(gm: torch.fx.GraphModule, convs: list[torch.fx.Node]) -> LayoutDecision:
    """A backward graph follows its forward: channels-last where a saved activation arrives NHWC (the
    forward ran channels-last and reported its outputs' strides to AOTAutograd, ``compiler.backend``),
    so its gradients flow NHWC into the convolutions' backward as the activations did forward."""
    nhwc = [n for n in gm.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
            and is_channels_last(n.meta["val"].shape, n.meta["val"].stride())]
    if nhwc:
        return LayoutDecision("channels_last", f"backward of a channels-last forward: {len(nhwc)} saved "
                              f"activations arrive NHWC", len(convs))
    return LayoutDecision("contiguous", "backward of a contiguous forward: no saved activation is NHWC", len(convs))


def choose_layout(gm: torch.fx.GraphModule, device: torch.device, option: str, kind: str,
                  cudagraphs: bool = False, codegen: str = "", dynamic: bool = False) -> LayoutDecision:
    """The graph's layout under the ``layout`` option (see the module docstring; ``cudagraphs``: the
    graph is to be replayed from a CUDA graph; ``codegen``: the renderer's name; ``dynamic``: the
    graph has symbolic sizes). A forced layout's reason also says what the rule would have chosen."""
    convs = conv2d_backward_nodes(gm) if kind == "backward" else conv2d_nodes(gm)
    if dynamic and convs:
        # the cost rule weighs static shapes and NHWC strides are built from int sizes: a graph with
        # symbolic sizes stays contiguous, whatever the option asks (docs/compiler.md, dynamic shapes)
        return LayoutDecision("contiguous", f"symbolic sizes: convolutions stay contiguous (layout={option!r})",
                              len(convs), forced=option != "auto")
    rule = cost_rule(gm, device, kind, convs, cudagraphs, codegen)
    if option == "auto":
        return rule
    return LayoutDecision(option, f"layout={option!r}; the rule would choose {rule}", len(convs), forced=True)


def cost_rule(gm: torch.fx.GraphModule, device: torch.device, kind: str,
              convs: list[torch.fx.Node], cudagraphs: bool = False, codegen: str = "") -> LayoutDecision:
    """``layout="auto"``'s decision (``COST_RULE``)."""
    if not convs:
        return LayoutDecision("contiguous", "no 2-d convolutions")
    if kind == "backward":
        return backward_rule(gm, convs)
    if device.type != "cuda":
        return cpu_rule(gm, kind, convs, codegen)
    if kind != "inference":
        # H100, resnet50 training step at batch 32 (harness.bench.training): channels-last forward and
        # backward 24.4 ms fp32 and 20.1 ms bf16 against 22.3 and 17.2 contiguous (26th session: batch
        # norm's NHWC statistics and gradients, reductions over (N, H, W) with the channels contiguous,
        # ran 3-5x Inductor's time). Again after the column splits of compiler.split_reductions (36th
        # session, H100, the layouts forced in one process, steps interleaved, as ``python -m
        # harness.bench.layout --models resnet50:fp32 resnet50:bf16 --train`` runs them): 19.41 ms fp32
        # and 18.79 bf16 against 19.68 and 16.96 contiguous, 1.01x and 0.90x: no gain worth the switch
        return LayoutDecision("contiguous", f"GPU {kind} graph: channels-last measured no faster (NHWC "
                              f"batch-norm reductions lose what the convolutions gain)", len(convs))
    nodes = sum(1 for _ in gm.graph.nodes)
    if nodes >= MAX_NODES_PER_CONV * len(convs):
        return LayoutDecision("contiguous", f"{len(convs)} convolutions in {nodes} FX nodes: too few to pay "
                              f"for the conversions", len(convs))
    nchw = nhwc = 0.0
    families: dict[str, int] = {}
    for n in convs:
        x, w, out = n.args[0].meta["val"], n.args[1].meta["val"], n.meta["val"]
        ratios = CL_RATIO.get(x.dtype, CL_RATIO[torch.float32])
        family = conv_family(w, int(n.args[8]))
        families[family] = families.get(family, 0) + 1
        t = conv_seconds(x, w, out)
        nchw += t
        nhwc += t * ratios[family]
    counts = ", ".join(f"{k} {families[k]}" for k in sorted(families))
    ratio = nhwc / nchw
    small = any(f in families for f in SMALL_FAMILIES)
    limit = (MAX_ESTIMATE_CUDAGRAPHS if cudagraphs else MAX_ESTIMATE) if small else MAX_ESTIMATE_DENSE
    graphs = ", CUDA graphs" if cudagraphs and small else ""
    estimate = f"estimated conv time channels-last/NCHW {ratio:.2f} (channels-last at most {limit}{graphs}): {counts}"
    return LayoutDecision("channels_last" if ratio <= limit else "contiguous", estimate, len(convs))


def feeds_nhwc_permutes(node: torch.fx.Node) -> bool:
    """Whether every user of convolution ``node`` permutes it to (N, H, W, C): swin's patch embedding,
    whose layer norm then normalizes the channels of each pixel. In a contiguous GPU graph such a
    convolution still produces NHWC (input and weight copied NHWC for it), so the permuted view is
    contiguous and the norm's rows are contiguous reads; an NCHW result made its reads 3136 elements
    apart (swin_tiny bf16 on the H200: that one kernel took 0.2 ms, Inductor's 0.04 ms). The
    lowering applies it to 16-bit convolutions only: float32 ones run under TF32
    (cuDNN's default), whose NHWC kernels round unlike eager's NCHW one (swin_tiny fp32's logits
    moved from 5.8e-7 to 1.2e-4 of eager's on the H200)."""
    users = list(node.users)
    return bool(users) and all(u.op == "call_function" and u.target is aten.permute.default
                               and list(u.args[1]) == [0, 2, 3, 1] for u in users)


# feeds_nhwc_permutes applies to these dtypes: not float32 (its convolutions round as TF32)
PERMUTED_NHWC_DTYPES = (torch.float16, torch.bfloat16)
# Gradients whose ATen kernels take NHWC tensors as they are (the result laid out like the input): the
# arguments a channels-last graph hands them NHWC. The weight of a convolution's gradient stays as
# eager has it (a parameter's layout).
NHWC_GRADIENTS = {aten.convolution_backward.default: (0, 1), aten.max_pool2d_with_indices_backward.default: (0, 1, 7),
                  aten.avg_pool2d_backward.default: (0, 1)}


def nhwc_arguments(node: torch.fx.Node, target: Any, val: Any, args: tuple, channels_last: bool,
                   device: torch.device) -> tuple[int, ...]:
    """Positions of an extern call's arguments (lowering values) the lowering lays out NHWC, and then
    its 4-d results: in a channels-last graph oneDNN's fused convolution's input (and residual); a
    convolution's input and weight (cuDNN's and oneDNN's fast path) in a channels-last graph, and for
    a 16-bit GPU convolution whose users permute it to NHWC (``feeds_nhwc_permutes``); in a
    channels-last graph the 4-d tensors of ``NHWC_GRADIENTS``, as the forward ran them."""
    fused = onednn_convolutions.nhwc_operands(target) if channels_last else 0
    if fused:
        return tuple(range(fused))
    if target is aten.convolution.default and _conv2d(val, args) and (channels_last or (
            device.type == "cuda" and val.dtype in PERMUTED_NHWC_DTYPES and feeds_nhwc_permutes(node))):
        return (0, 1)
    positions = NHWC_GRADIENTS.get(target, ()) if channels_last else ()
    if target is aten.convolution_backward.default and args[7]:  # transposed
        return ()
    return positions if all(len(getattr(args[i], "shape", ())) == 4 for i in positions) else ()


def _conv2d(val: Any, args: tuple) -> bool:
    """A 2-d convolution (4-d input, weight and result) that is not transposed."""
    return (isinstance(val, torch.Tensor) and val.dim() == 4 and len(args) > 6 and not args[6]
            and all(len(getattr(a, "shape", ())) == 4 for a in args[:2]))


# --- weights converted at compile time --------------------------------------------

@dataclass
class WeightConversion:
    """A convolution weight held channels-last by the compiled graph: a copy of graph input ``source``,
    or (``source`` None) a batch-norm fold's weight, which its fold refills in the new layout."""

    source: int | None
    node: str  # the constant's node in the converted graph
    converted: torch.Tensor

    @property
    def sources(self) -> list[int]:
        return [] if self.source is None else [self.source]

    def refill(self, args: Sequence[Any]) -> None:
        if self.source is not None:
            self.converted.copy_(args[self.source])


def _channels_last_like(val: torch.Tensor) -> torch.Tensor:
    with _real_tensors():
        return torch.empty_strided(tuple(val.shape), channels_last_strides(val.shape), dtype=val.dtype,
                                   device=val.device)


def convert_weight_layout(folded: FoldedGraph, static_inputs: Sequence[int]) -> FoldedGraph:
    """``folded`` with every convolution weight that is a static input (or a folded weight) held
    channels-last (a copy of its graph; a graph that falls back to eager runs the one it was given)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(folded.gm.graph, {}))
    gm = graph_module(folded.gm, graph)
    static = set(static_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    by_source: dict[int, torch.fx.Node] = {}
    conversions = list(folded.conversions)
    # one lookup a convolution (deep stacks have thousands); batch norm folds only: the GEMM passes'
    # stacked weights (compiler.extern_passes.StackedWeight) are refilled by the same guard, and have none
    folds = {id(f.folded_weight): f for f in folded.folds if isinstance(f, BatchNormFold)}
    for conv in conv2d_nodes(gm):
        weight = conv.args[1]
        val = weight.meta["val"]
        if is_channels_last(val.shape, val.stride()):
            continue
        if weight.op == "get_attr":
            fold = folds.pop(id(getattr(gm, weight.target)), None)
            if fold is None:
                continue
            fold.folded_weight = _channels_last_like(val)
            setattr(gm, weight.target, fold.folded_weight)
            weight.meta["val"] = fold.folded_weight
            conversions.append(WeightConversion(None, weight.name, fold.folded_weight))
            continue
        source = index.get(weight)
        if source not in static:
            continue  # an activation or a trained weight: the lowering converts it each call
        if source not in by_source:
            converted = _channels_last_like(val)
            name = f"_channels_last{len(by_source)}_weight"
            gm.register_buffer(name, converted)
            with gm.graph.inserting_before(conv):  # the first conv of this weight, in graph order
                node = gm.graph.get_attr(name)
            node.meta["val"] = converted
            by_source[source] = node
            conversions.append(WeightConversion(source, node.name, converted))
        conv.replace_input_with(weight, by_source[source])
    gm.recompile()
    return FoldedGraph(gm, folded.folds, conversions)

