"""Compile-time rewrites of the library (extern) matmuls of inference graphs, before lowering.

    merge_matmuls          GEMMs reading one input and static weights -> one GEMM + column slices
                           ("concat_matmuls"; a lone GEMM whose N has no 16-byte aligned leading
                           dimension on the GPU is padded the same way: "pad_matmul_weights")
    fuse_extern_epilogues  mm + bias -> addmm; addmm + relu / tanh-gelu -> _addmm_activation (GPU)
    onednn_linears         large float32 CPU linears (+ bias, relu / GELU) -> oneDNN's _linear_pointwise

All follow ``compiler.folding``: they run on inference graphs (nothing needs gradients) whose
static inputs (parameters, buffers) are known, unless ``options={"fold_weights": False}``.

**Concatenation.** ``addmm(b_i, x, W_i)`` / ``mm(x, W_i)`` for several i, with the same ``x`` (or
views of one tensor to the same shape: each ``nn.Linear`` views a 3-d input itself) and static
weights of one dtype (``nn.Linear``'s ``permute(W, [1, 0])`` or GPT-2's ``Conv1D`` ``[K, N]``
weight, all alike, all with a bias or none), become one GEMM over ``cat(W_i)`` whose result is
sliced per member. Rule: every such group of two or more. Measured on an H200 in bf16
(``python -m harness.bench.extern_gemms``, separate calls over the merged one): at 8 x 512 tokens
BERT's Q/K/V 1.28x, Llama-1B's Q/K/V 1.11x, its gate/up 1.00x; at 8 rows (decode) 2.09x, 3.56x,
1.24x. No shape measured slower, so no threshold. The cost is memory: the concatenated copy of
the weights (the module keeps its own; about 0.9 GB for the ~1B Llama's Q/K/V and gate/up).

**Padding.** cuBLAS picks slow kernels for a 16-bit matrix whose leading dimension is not a
multiple of 8 elements (16 bytes): GPT-2's LM head has N = 50257, and cuBLAS ran it as a
``cutlass_75 ... align1`` kernel, 3.36 ms of GPT-2's 5.6 ms at 8 x 512 tokens on an H200 (bf16),
against 0.90 ms padded to 50264 including the copy of the slice into a dense result (3.72x; 3.07x
at 8 rows). On a CUDA graph, a merged weight (one member or several) whose N is unaligned gets
zero columns up to the next multiple of 16 bytes; the members' slices leave them out.

The concatenated (padded) weight and bias are constants of the compiled graph (``get_attr``)
refilled by ``compiler.folding.FoldedWeights`` whenever a source parameter changes.

**Epilogues.** ``add(mm(x, W), b)`` with a 1-d ``b`` of the result's dtype becomes ``addmm`` (the
bias joins cuBLAS's epilogue; one rounding instead of two) where the sum would otherwise be a
pointwise kernel of its own: only library calls and graph outputs read it. On the GPU, ``relu(addmm(...))`` and
the tanh GELU (``gelu(approximate="tanh")`` or GPT-2's hand-written form) of it become
``_addmm_activation``, cuBLASLt's bias + activation epilogue: no pointwise kernel pass over the
result (GPT-2's MLP GEMM + GELU 1.32x, + relu 1.36x, at 8 x 512 tokens and at 8 rows). Only where nothing else reads the pre-activation, and not for decode-sized GEMMs (at most
``policy.DECODE_ROWS`` rows), which the default ``extern`` rule hands to the GEMM template with
the activation fused. The erf GELU (BERT's) stays: cuBLASLt's epilogue is the tanh form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from compiler.activations import VIEWS as _VIEWS, activations as _activations
from compiler.folding import FoldedGraph, _real_tensors, graph_module
from compiler.report import WeightFold
from compiler.templates.policy import DECODE_ROWS

aten = torch.ops.aten
_ALIGN_BYTES = 16


@dataclass
class StackedWeight:
    """A constant made of static inputs laid side by side along ``dim``, then zeros to its size."""

    parts: list[int]  # graph input indices, in order along ``dim``
    dim: int
    target: torch.Tensor

    @property
    def sources(self) -> list[int]:
        return list(self.parts)

    def refill(self, args: Any) -> None:
        offset = 0
        for i in self.parts:
            n = args[i].shape[self.dim]
            self.target.narrow(self.dim, offset, n).copy_(args[i])
            offset += n
        if offset < self.target.shape[self.dim]:
            self.target.narrow(self.dim, offset, self.target.shape[self.dim] - offset).zero_()


@dataclass
class RewrittenGraph:
    """What each pass returns: the graph with every constant the guard refills, and its rewrites."""

    folded: FoldedGraph
    rewrites: list[WeightFold]

    def __str__(self) -> str:
        lines = "".join(f"# {r.pass_name}: {r.op} {r.node}\n" for r in self.rewrites)
        return f"# {len(self.rewrites)} rewrites\n{lines}{self.folded.gm.code}"


@dataclass
class _Member:
    node: torch.fx.Node  # the addmm / mm
    x: torch.fx.Node  # its activation operand
    weight: int  # graph input index of W
    bias: int | None
    n: int
    linear: bool  # W is [N, K] read through permute (nn.Linear), else [K, N] (GPT-2's Conv1D)


def _symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether an input has a symbolic size (a dynamic-shape graph)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(val, torch.SymInt) or (isinstance(val, torch.Tensor) and
                                             any(isinstance(d, torch.SymInt) for d in val.shape)):
            return True
    return False


def _static_index(gm: torch.fx.GraphModule, static_inputs: Any) -> dict[torch.fx.Node, int]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = set(static_inputs)
    return {n: i for i, n in enumerate(placeholders) if i in static and isinstance(n.meta.get("val"), torch.Tensor)
            and n.meta["val"].is_floating_point()}


def _member(node: torch.fx.Node, params: dict[torch.fx.Node, int]) -> _Member | None:
    if node.kwargs or node.target not in (aten.addmm.default, aten.mm.default):
        return None
    bias, x, w = node.args[:3] if node.target is aten.addmm.default else (None, *node.args[:2])
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(x, torch.fx.Node):
        return None
    n = out.shape[1]
    if bias is not None and (bias not in params or tuple(bias.meta["val"].shape) != (n,)):
        return None
    linear = getattr(w, "target", None) is aten.permute.default and list(w.args[1]) == [1, 0]
    source = w.args[0] if linear else w
    if source not in params or source.meta["val"].dtype != out.dtype:
        return None
    return _Member(node, x, params[source], params[bias] if bias is not None else None, n, linear)


def _input_key(x: torch.fx.Node) -> tuple:
    """Members read the same input: one node, or views of one node to the same shape."""
    if x.target in _VIEWS:
        return (x.args[0], tuple(x.meta["val"].shape))
    return (x, tuple(x.meta["val"].shape))


def aligned(n: int, dtype: torch.dtype) -> int:
    """``n`` rounded up to a whole number of 16 bytes of ``dtype`` (cuBLAS's aligned kernels)."""
    step = max(1, _ALIGN_BYTES // dtype.itemsize)
    return n + (-n) % step


def merge_matmuls(folded: FoldedGraph, static_inputs: Any, device: torch.device,
                  library: bool = True) -> RewrittenGraph:
    """The graph with shared-input GEMMs concatenated and unaligned GPU GEMMs padded (a copy; the
    input graph untouched), its constants (``folded``'s batch-norm folds too), a line per rewrite.
    ``library``: whether the GEMMs may be library calls; padding serves cuBLAS's aligned kernels
    only, and a generated GEMM would pay for it with a copy of the sliced result."""
    gm = folded.gm
    if _symbolic(gm):
        return RewrittenGraph(folded, [])  # written for static shapes (docs/compiler.md, dynamic shapes)
    params = _static_index(gm, static_inputs)
    groups: dict[tuple, list[_Member]] = {}
    for node in gm.graph.nodes:
        m = _member(node, params) if node.op == "call_function" else None
        if m is not None:
            key = (_input_key(m.x), m.linear, m.bias is not None, m.node.meta["val"].dtype)
            groups.setdefault(key, []).append(m)
    pad = device.type == "cuda" and library
    chosen = [g for g in groups.values()
              if len(g) > 1 or (pad and aligned(g[0].n, g[0].node.meta["val"].dtype) != g[0].n)]
    if not chosen:
        return RewrittenGraph(folded, [])
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, env))
    out = graph_module(gm, graph)
    folds, reports = list(folded.folds), []
    for k, group in enumerate(chosen):
        stacks, name = _rewrite_group(out, k, [_Member(env[m.node], env[m.x], m.weight, m.bias, m.n, m.linear)
                                               for m in group], pad)
        folds += stacks
        reports.append(WeightFold("concat_matmuls" if len(group) > 1 else "pad_matmul_weights",
                                  str(group[0].node.target.overloadpacket.__name__), name))
    graph.eliminate_dead_code()
    try:
        _refresh_meta(graph)
    except Exception:  # noqa: BLE001  (a consumer that cannot read a column slice: leave the graph as it was)
        return RewrittenGraph(folded, [])
    out.recompile()
    return RewrittenGraph(FoldedGraph(out, folds), reports)


def _rewrite_group(gm: torch.fx.GraphModule, k: int, group: list[_Member],
                   pad: bool) -> tuple[list[StackedWeight], str]:
    graph = gm.graph
    first = group[0]
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    w_val = placeholders[first.weight].meta["val"]
    dtype = first.node.meta["val"].dtype
    total = sum(m.n for m in group)
    size = aligned(total, dtype) if pad else total
    dim = 0 if first.linear else 1
    shape = (size, w_val.shape[1]) if first.linear else (w_val.shape[0], size)
    with _real_tensors():
        weight = torch.zeros(shape, dtype=dtype, device=w_val.device)
        bias = torch.zeros(size, dtype=dtype, device=w_val.device) if first.bias is not None else None
    stacks = [StackedWeight([m.weight for m in group], dim, weight)]
    gm.register_buffer(f"_merged{k}_weight", weight)
    with graph.inserting_before(first.node):
        w_node = graph.get_attr(f"_merged{k}_weight")
        if first.linear:
            w_node = graph.call_function(aten.permute.default, (w_node, [1, 0]))
        if bias is not None:
            gm.register_buffer(f"_merged{k}_bias", bias)
            stacks.append(StackedWeight([m.bias for m in group], 0, bias))
            new = graph.call_function(aten.addmm.default, (graph.get_attr(f"_merged{k}_bias"), first.x, w_node))
        else:
            new = graph.call_function(aten.mm.default, (first.x, w_node))
        offset = 0
        for m in group:
            piece = graph.call_function(aten.slice.Tensor, (new, 1, offset, offset + m.n))
            if any(user.op == "output" for user in m.node.users):
                # a graph output keeps the strides eager gives it (dense rows), not the slice's
                piece = graph.call_function(aten.clone.default, (piece,), {"memory_format": torch.contiguous_format})
            m.node.replace_all_uses_with(piece)
            offset += m.n
    return stacks, new.name


def fake_mode_of(graph: torch.fx.Graph) -> Any:
    """The fake mode of the graph's inputs' metadata, or None where they carry no fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensor

    return next((n.meta["val"].fake_mode for n in graph.nodes
                 if n.op == "placeholder" and isinstance(n.meta.get("val"), FakeTensor)), None)


def _refresh_meta(graph: torch.fx.Graph) -> None:
    """Fake values for the new nodes and every node downstream of them (strides change: members'
    results are now column slices), computed in the graph's own fake mode."""
    from torch._subclasses.fake_tensor import FakeTensor

    mode = fake_mode_of(graph)
    if mode is None:
        raise ValueError("merge_matmuls needs fake tensor metadata on the graph's inputs")

    def fake(node: torch.fx.Node) -> Any:
        val = node.meta["val"]  # other constants (folded weights) carry real tensors
        return mode.from_tensor(val, static_shapes=True) if isinstance(val, torch.Tensor) and \
            not isinstance(val, FakeTensor) else val

    stale: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op == "get_attr" and "val" not in node.meta:  # ours: the merged weights
            real = graph.owning_module
            for part in str(node.target).split("."):
                real = getattr(real, part)
            node.meta["val"] = mode.from_tensor(real, static_shapes=True)
            stale.add(node)
        elif node.op == "call_function" and ("val" not in node.meta or any(a in stale for a in node.all_input_nodes)):
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), fake)
            old = node.meta.get("val")
            with mode:
                node.meta["val"] = node.target(*args, **kwargs)
            if not _same_layout(old, node.meta["val"]):  # e.g. a kernel's dense result: nothing further changes
                stale.add(node)


def _same_layout(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_layout(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (a.shape, a.stride(), a.dtype, a.storage_offset()) == (b.shape, b.stride(), b.dtype, b.storage_offset())
    return False


# --- epilogues ------------------------------------------------------------------------

_GEMMS = (aten.addmm.default, aten.mm.default)


def fuse_extern_epilogues(folded: FoldedGraph, device: torch.device) -> RewrittenGraph:
    """The graph with bias adds and (on the GPU) activations moved into the matmul extern (a copy;
    the input graph untouched), and a line per rewrite."""
    if _symbolic(folded.gm):
        return RewrittenGraph(folded, [])  # written for static shapes (docs/compiler.md, dynamic shapes)
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(folded.gm.graph, {}))
    gm = graph_module(folded.gm, graph)
    done: list[WeightFold] = []
    for node in list(graph.nodes):
        rewritten = _bias_into_addmm(graph, node) if _read_by_library_only(node, device) else None
        if rewritten is not None:
            done.append(WeightFold("fuse_extern_epilogues", "addmm", rewritten.name))
    if device.type == "cuda":
        for addmm, view, last, kind in _activations(graph):
            if addmm.kwargs or addmm.meta["val"].shape[0] <= DECODE_ROWS:
                continue
            with graph.inserting_before(last):
                fused = graph.call_function(aten._addmm_activation.default, tuple(addmm.args[:3]),
                                            {"use_gelu": kind == "gelu_tanh"})
                fused.meta["val"] = addmm.meta["val"]
                result = fused
                if view is not None:
                    result = graph.call_function(view.target, (fused, *view.args[1:]))
                    result.meta["val"] = view.meta["val"]
            last.replace_all_uses_with(result)
            done.append(WeightFold("fuse_extern_epilogues", "_addmm_activation", fused.name))
    if not done:
        return RewrittenGraph(folded, [])
    graph.eliminate_dead_code()
    gm.recompile()
    return RewrittenGraph(FoldedGraph(gm, folded.folds), done)


def _read_by_library_only(node: torch.fx.Node, device: torch.device) -> bool:
    """Whether ``node``'s result (through views) goes only to library calls, graph outputs or (on the
    GPU) a relu that joins the extern too: then a bias add there is a pointwise kernel of its own,
    which ``addmm`` saves. Where a generated kernel reads the sum anyway, the add fuses into it for
    free, while ``addmm`` may first copy the broadcast bias into its result (ATen's non-cuBLASLt
    path) and then read it back: the GEMM stays ``mm``."""
    from compiler.lowerings import LIBRARY_OPS

    library = {op.default for op in LIBRARY_OPS if hasattr(op, "default")}
    for user in node.users:
        if user.op == "output" or user.target in library or (device.type == "cuda" and user.target is aten.relu.default):
            continue
        if user.target in _VIEWS and _read_by_library_only(user, device):
            continue
        return False
    return True


def _bias_into_addmm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """``add(mm(x, W), b)`` (``mm`` read only here, possibly through one view) as ``addmm(b, x, W)``."""
    if node.target is not aten.add.Tensor or node.kwargs or len(node.args) != 2:
        return None
    a, b = node.args
    for mm, bias in ((a, b), (b, a)):
        if not isinstance(mm, torch.fx.Node) or not isinstance(bias, torch.fx.Node) or len(mm.users) != 1:
            continue
        view = mm if mm.target in _VIEWS else None
        if view is not None:
            mm = view.args[0]
            if not isinstance(mm, torch.fx.Node) or len(mm.users) != 1:
                continue
        out, b_val = mm.meta.get("val"), bias.meta.get("val")
        if mm.target is not aten.mm.default or not isinstance(b_val, torch.Tensor) or out is None:
            continue
        if b_val.dim() != 1 or b_val.shape[0] != out.shape[1] or b_val.dtype != out.dtype or \
                node.meta["val"].dtype != out.dtype:
            continue
        with graph.inserting_before(node):
            fused = graph.call_function(aten.addmm.default, (bias, *mm.args[:2]))
            fused.meta["val"] = out
            result = fused
            if view is not None:
                result = graph.call_function(view.target, (fused, *view.args[1:]))
                result.meta["val"] = view.meta["val"]
        node.replace_all_uses_with(result)
        return fused
    return None


# --- oneDNN linears (CPU) ---------------------------------------------------------------

# float32 GEMMs of at least this many multiply-adds (M * K * N) go to oneDNN on the CPU. Measured
# side by side against addmm (2-core AVX-512 x86, torch 2.14, loaded machine, medians of interleaved
# calls): 1.5-1.8x faster from 256x512x1024 up (1024x768x768, 256x1024x4096, 256x4096x1024; with a
# GELU fused 1.8-2.0x against addmm then ATen's gelu), 1.05x at 32x512x512, 0.68x at 8x256x256 and
# 0.87x at 64x2048x50: below ~16M the call's set-up outweighs the faster kernel.
ONEDNN_MIN_MACS = 1 << 24
# activation kind (``_activations``) -> oneDNN's post-op name and GELU algorithm
_ONEDNN_ATTR = {"relu": ("relu", ""), "gelu_erf": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh")}


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's fused linear (x86 and ARM builds with mkldnn)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linears(folded: FoldedGraph, device: torch.device) -> RewrittenGraph:
    """The graph with large float32 CPU GEMMs of an ``nn.Linear``-shaped weight (``permute(W, [1, 0])``
    of a dense ``[N, K]`` W) as oneDNN's ``_linear_pointwise``, with the bias and a relu or GELU that
    alone reads the result fused into it (a copy; the input graph untouched), and a line per rewrite.
    On this CPU ATen's addmm runs MKL's sgemm, which oneDNN's kernel beats by 1.5x and more at these
    sizes (``ONEDNN_MIN_MACS``); the fused activation saves a pass over the result."""
    if device.type != "cpu" or not onednn_available() or _symbolic(folded.gm) or \
            not any(_linear_operands(n) is not None for n in folded.gm.graph.nodes):
        return RewrittenGraph(folded, [])  # nothing to rewrite: no copy of the graph
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(folded.gm.graph, {}))
    gm = graph_module(folded.gm, graph)
    activation = {gemm: (view, last, kind) for gemm, view, last, kind in _activations(graph, tuple(_ONEDNN_ATTR), _GEMMS)}
    done: list[WeightFold] = []
    for node in list(graph.nodes):
        operands = _linear_operands(node)
        if operands is None:
            continue
        view, last, kind = activation.get(node, (None, None, None))
        attr, algorithm = _ONEDNN_ATTR[kind] if kind is not None else ("none", "")
        with graph.inserting_before(last if last is not None else node):
            fused = graph.call_function(torch.ops.mkldnn._linear_pointwise.default, (*operands, attr, [], algorithm))
            fused.meta["val"] = node.meta["val"]
            result = fused
            if view is not None:
                result = graph.call_function(view.target, (fused, *view.args[1:]))
                result.meta["val"] = view.meta["val"]
        (last if last is not None else node).replace_all_uses_with(result)
        done.append(WeightFold("onednn_linears", f"linear_pointwise({attr})", fused.name))
    if not done:
        return RewrittenGraph(folded, [])
    graph.eliminate_dead_code()
    gm.recompile()
    return RewrittenGraph(FoldedGraph(gm, folded.folds), done)


def _linear_operands(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node | None] | None:
    """(x, W, bias or None) of ``addmm(bias, x, permute(W, [1, 0]))`` / ``mm(x, permute(W, [1, 0]))``
    in float32 with dense x and W, a 1-d bias and at least ``ONEDNN_MIN_MACS`` multiply-adds."""
    if node.op != "call_function" or node.target not in _GEMMS or node.kwargs:
        return None
    bias, x, wt = node.args if node.target is aten.addmm.default else (None, *node.args)
    if getattr(wt, "target", None) is not aten.permute.default or list(wt.args[1]) != [1, 0]:
        return None
    w = wt.args[0]
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in (x, w, node)]
    if not all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 and v.dim() == 2 for v in vals):
        return None
    x_val, w_val, out = vals
    if not (x_val.is_contiguous() and w_val.is_contiguous()):
        return None
    if bias is not None:
        b_val = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
        if not isinstance(b_val, torch.Tensor) or b_val.dtype != torch.float32 or tuple(b_val.shape) != (out.shape[1],) \
                or not b_val.is_contiguous():
            return None
    m, k = x_val.shape
    return (x, w, bias) if m * k * out.shape[1] >= ONEDNN_MIN_MACS else None
