"""Zero padding for library GEMMs whose sizes leave cuBLAS without its aligned kernels (GPU).

cuBLAS runs a matrix whose leading dimension is not a multiple of 16 bytes with ``align1`` kernels:
GPT-2's LM head (N = 50257) trained in bf16 on an H100 spent 3.36 ms of a 27 ms step in the forward
GEMM and 4.6 ms in the two backward ones (``python -m harness.bench.profile --train --model gpt2
--dtype bf16``), against 0.45 and 0.36 ms for the two Inductor pads (its ``pad_mm`` pass). The
inference pass ``compiler.extern_passes.merge_matmuls`` pads static weights once at compile time; this
one pads inside the graph, where the operands are computed or are inputs (training graphs, graphs
compiled without weight folding), so every call pays for the copies.

Rule: an ``mm`` or ``addmm`` of floating dtype, at least ``MIN_DIM`` in every dim and ``MIN_WORK``
multiply-adds, with a leading dimension that is not a multiple of 16 bytes' elements: N (the result's),
K (a row-major A's, a column-major B's) or M (a column-major A's). Each such dim gets zero rows or
columns up to the next multiple (K's zeros add nothing to the sums), the result is sliced back; a
dim that leads no matrix stays (an unaligned M of a row-major A costs cuBLAS nothing). An operand
that is a transpose of a 2-d value is padded before the transpose, so the backward's ``grad @ W``
(K padded) and ``grad.T @ x`` (M padded) share one padded copy of ``grad``.
The copies cost a pass over each padded operand, which the thresholds keep well under what an
``align1`` kernel loses (about 7x the aligned GEMM's time). The nodes downstream keep their metadata:
a graph output read through the slice is still returned in eager's dense layout (a copy), as
``compiler.lowering`` returns every output. Static shapes only; ``bmm`` is not padded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx

from compiler.extern_passes import RewrittenGraph, aligned, fake_mode_of
from compiler.folding import FoldedGraph, graph_module
from compiler.report import WeightFold

aten = torch.ops.aten
DEVICES = ("cuda",)  # where the pipeline pads: cuBLAS's kernels (tests add "cpu" to run the rewrite there)
MIN_DIM = 64  # below this in any dim the GEMM is small enough that the extra kernels cost more
MIN_WORK = 1 << 27  # multiply-adds: about 0.1 ms of an align1 kernel on an H100
_TRANSPOSES = (aten.t.default, aten.permute.default, aten.transpose.int)


def _shape(node: Any) -> tuple[int, ...] | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or any(not isinstance(d, int) for d in val.shape):
        return None
    return tuple(val.shape)


def _column_major(x: torch.fx.Node) -> bool:
    """Whether a 2-d operand is laid out column by column (a transpose): its leading dim is its rows."""
    stride = x.meta["val"].stride()
    return stride[0] == 1 and stride[1] != 1


def _padding(node: torch.fx.Node) -> tuple[int, int, int, int, int] | None:
    """(M, N, and the zeros to add to M, N, K) for a GEMM worth padding, else None. Only the dims that
    are a leading dimension pad: N (the result is row-major), K where A is row-major or B column-major,
    M where A is column-major (the backward's ``grad.T @ x``)."""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default):
        return None
    a, b = node.args[-2:] if node.target is aten.mm.default else node.args[1:3]
    sa, sb, out = _shape(a), _shape(b), node.meta.get("val")
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2 or not isinstance(out, torch.Tensor) \
            or not out.dtype.is_floating_point:
        return None
    (m, k), n = sa, sb[1]
    if min(m, n, k) < MIN_DIM or m * n * k < MIN_WORK:
        return None
    dtype, a_columns = out.dtype, _column_major(a)
    dm = aligned(m, dtype) - m if a_columns else 0
    dk = aligned(k, dtype) - k if not a_columns or _column_major(b) else 0
    dn = aligned(n, dtype) - n
    return (m, n, dm, dn, dk) if dm or dn or dk else None


class _Padder:
    """Builds padded operands once each (keyed by the value and the padding)."""

    def __init__(self, graph: torch.fx.Graph, mode: Any) -> None:
        self.graph, self.mode = graph, mode
        self.done: dict[tuple[torch.fx.Node, int, int], torch.fx.Node] = {}

    def node(self, target: Any, args: tuple, before: torch.fx.Node, kwargs: dict | None = None) -> torch.fx.Node:
        """A new node computing ``target(*args)`` before ``before``, with its fake value."""
        with self.graph.inserting_before(before):
            new = self.graph.call_function(target, args, kwargs or {})
        fake = torch.fx.node.map_arg(args, lambda n: n.meta["val"])
        with self.mode:
            new.meta["val"] = target(*fake, **(kwargs or {}))
        return new

    def pad(self, x: torch.fx.Node, rows: int, cols: int, before: torch.fx.Node) -> torch.fx.Node:
        """``x`` (2-d) with ``rows`` zero rows and ``cols`` zero columns after its own."""
        if not rows and not cols:
            return x
        key = (x, rows, cols)
        if key not in self.done:
            base = _transposed(x)
            if base is not None:  # pad the transpose's input: its padded copy serves both orientations
                self.done[key] = self.node(aten.permute.default, (self.pad(base, cols, rows, before), [1, 0]), before)
            else:  # made before the first GEMM that reads it; later ones come after that
                self.done[key] = self.node(aten.constant_pad_nd.default, (x, [0, cols, 0, rows], 0.0), before)
        return self.done[key]


def _transposed(x: torch.fx.Node) -> torch.fx.Node | None:
    """The 2-d input of a transpose ``x`` is, if it is one."""
    if x.op != "call_function" or x.target not in _TRANSPOSES or not isinstance(x.args[0], torch.fx.Node):
        return None
    if x.target is aten.permute.default and list(x.args[1]) not in ([1, 0], [-1, -2], [1, -2], [-1, 0]):
        return None
    base = x.args[0]
    return base if _shape(base) is not None and len(_shape(base)) == 2 else None


def pad_gemms(folded: FoldedGraph) -> RewrittenGraph:
    """The graph with its unaligned GEMMs padded (see the module's rule; the caller decides that the
    graph's GEMMs are cuBLAS's), a copy where any is; a line per padded GEMM."""
    gm = folded.gm
    mode = fake_mode_of(gm.graph)
    if mode is None or not any(_padding(n) for n in gm.graph.nodes):
        return RewrittenGraph(folded, [])
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    padder, rewrites = _Padder(graph, mode), []
    for node in list(graph.nodes):
        padding = _padding(node)
        if padding is None:
            continue
        m, n, dm, dn, dk = padding
        if node.target is aten.addmm.default:
            bias = _padded_bias(padder, node.args[0], dm, dn, node)
            if bias is None:
                continue
            head: tuple = (bias,)
        else:
            head = ()
        a, b = node.args[len(head):len(head) + 2]
        new = padder.node(node.target, (*head, padder.pad(a, dm, dk, node), padder.pad(b, dk, dn, node)), node,
                          dict(node.kwargs))
        out = new
        for dim, size, extra in ((1, n, dn), (0, m, dm)):
            if extra:
                out = padder.node(aten.slice.Tensor, (out, dim, 0, size), node)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        rewrites.append(WeightFold("pad_gemms", str(new.target.overloadpacket.__name__), new.name))
    graph.lint()
    return RewrittenGraph(dataclasses.replace(folded, gm=graph_module(gm, graph)), rewrites)


def _padded_bias(padder: _Padder, bias: Any, dm: int, dn: int, before: torch.fx.Node) -> Any:
    """addmm's bias broadcast over the padded result: a 1-d bias (or one row) gets ``dn`` zeros, a
    full [M, N] one ``dm`` rows too. None: a bias this pass does not read (a scalar, a column)."""
    shape = _shape(bias)
    if shape is None:
        return None
    if len(shape) == 1 or (len(shape) == 2 and shape[0] == 1):
        if not dn or shape[-1] == 1:
            return bias
        if len(shape) == 1:
            return padder.node(aten.constant_pad_nd.default, (bias, [0, dn], 0.0), before)
        return padder.pad(bias, 0, dn, before)
    if len(shape) == 2 and shape[1] != 1:
        return padder.pad(bias, dm, dn, before)
    return None
