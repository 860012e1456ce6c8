"""Max-pool indices saved for the backward as int8 window offsets (a training joint-graph rewrite).

``max_pool2d_with_indices`` returns each pooled element's argmax as an int64 flat position in the
input plane, and its backward reads them: the min-cut partitioner saved them at 8 bytes an element,
resnet50's stem pool at batch 32 51 MB (its bf16 training step saved 43 MB more than Inductor's, which
keeps an int8 offset within the window). Where a pool's indices feed nothing but its backward, this
pass computes from them the offset ``(ih - oh * sh + ph) // dh * kw + (iw - ow * sw + pw) // dw`` (in
``[0, kh * kw)``: ATen's argmax is always a position of the window inside the input) as int8, and in
front of each backward the flat position again from that offset. Both are pointwise ATen ops over
the indices and two ``arange``s, so the forward's kernel writes the int8 offsets and the partitioner
finds them the smallest cut. Static sizes and windows of at most 127 positions only.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

aten = torch.ops.aten


def compact_pool_indices(graph: torch.fx.Graph) -> int:
    """Rewrite every eligible ``max_pool2d_with_indices`` of ``graph`` (see the module docstring);
    how many were rewritten."""
    rewritten = 0
    for pool in [n for n in graph.nodes if n.target is aten.max_pool2d_with_indices.default]:
        indices = [u for u in pool.users if u.target is operator.getitem and u.args[1] == 1]
        if len(indices) != 1:
            continue
        (index,) = indices
        readers = list(index.users)
        if not readers or any(r.target is not aten.max_pool2d_with_indices_backward.default
                              or r.args[7] is not index for r in readers):
            continue
        window = _window(pool)
        if window is None:
            continue
        with graph.inserting_before(index.next):
            offsets = _Builder(graph, index).offsets(index, window)
        for reader in readers:
            with graph.inserting_before(reader):
                flat = _Builder(graph, index).positions(offsets, window)
            reader.update_arg(7, flat)
        rewritten += 1
    return rewritten


def _window(pool: torch.fx.Node) -> tuple | None:
    """(kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, W) of a static pool whose window fits int8, else None."""
    from compiler.lowerings.pooling import pair

    x, kernel_size, *rest = pool.args
    stride, padding, dilation = (rest + [None, None, None])[:3]
    kernel = pair(kernel_size, (1, 1))
    sizes = [*kernel, *pair(stride, kernel), *pair(padding, (0, 0)), *pair(dilation, (1, 1))]
    val, out = x.meta.get("val"), pool.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(out, (tuple, list)):
        return None
    sizes += [*out[1].shape[-2:], val.shape[-1]]
    if not all(isinstance(s, int) for s in sizes) or kernel[0] * kernel[1] > 127:
        return None
    return tuple(sizes)


class _Builder:
    """Nodes after the insertion point, each with the meta value its op computes on fake tensors."""

    def __init__(self, graph: torch.fx.Graph, like: torch.fx.Node) -> None:
        self.graph, self.fake = graph, like.meta["val"]

    def call(self, op: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = self.graph.call_function(op, args, kwargs)
        values = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
        with self.fake.fake_mode:
            node.meta["val"] = op(*values, **kwargs)
        return node

    def _starts(self, window: tuple) -> tuple[torch.fx.Node, torch.fx.Node]:
        """Each output row's and column's first window position, oh * sh - ph (as (OH, 1)) and
        ow * sw - pw."""
        _, _, sh, sw, ph, pw, _, _, oh, ow, _ = window
        device = self.fake.device
        rows = self.call(aten.arange.start_step, -ph, oh * sh - ph, sh, dtype=torch.int64, device=device)
        cols = self.call(aten.arange.start_step, -pw, ow * sw - pw, sw, dtype=torch.int64, device=device)
        return self.call(aten.unsqueeze.default, rows, 1), cols

    def offsets(self, index: torch.fx.Node, window: tuple) -> torch.fx.Node:
        _, kw, _, _, _, _, dh, dw, _, _, width = window
        rows, cols = self._starts(window)
        ih = self.call(aten.div.Scalar_mode, index, width, rounding_mode="floor")
        iw = self.call(aten.remainder.Scalar, index, width)
        dy = self.call(aten.div.Scalar_mode, self.call(aten.sub.Tensor, ih, rows), dh, rounding_mode="floor")
        dx = self.call(aten.div.Scalar_mode, self.call(aten.sub.Tensor, iw, cols), dw, rounding_mode="floor")
        offset = self.call(aten.add.Tensor, self.call(aten.mul.Scalar, dy, kw), dx)
        return self.call(torch.ops.prims.convert_element_type.default, offset, torch.int8)

    def positions(self, offsets: torch.fx.Node, window: tuple) -> torch.fx.Node:
        _, kw, _, _, _, _, dh, dw, _, _, width = window
        rows, cols = self._starts(window)
        offset = self.call(torch.ops.prims.convert_element_type.default, offsets, torch.int64)
        dy = self.call(aten.div.Scalar_mode, offset, kw, rounding_mode="floor")
        dx = self.call(aten.remainder.Scalar, offset, kw)
        ih = self.call(aten.add.Tensor, rows, self.call(aten.mul.Scalar, dy, dh))
        iw = self.call(aten.add.Tensor, cols, self.call(aten.mul.Scalar, dx, dw))
        return self.call(aten.add.Tensor, self.call(aten.mul.Scalar, ih, width), iw)
