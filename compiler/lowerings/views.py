"""View lowerings: views are index maps, never copies.

A view of a ``Strided`` value gets new sizes/strides/offset; a view of a ``Lazy``
value substitutes its loop variables. Only a reshape that cannot be expressed
either way (a lazy value split across dims, or a non-viewable strided layout)
realizes its input first, like ``torch.reshape`` copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sympy
import torch

from compiler import ir
from compiler.graph import contiguous_strides
from compiler.sizes import all_static, shape_of, size_of
from compiler.ir import Expr
from compiler.lowerings.rules import Lazy, Strided, TensorValue, Unsupported, identity_index, read, register
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten
IndexMap = Callable[[list[Expr]], list[Expr]]


def view_map(ctx: GraphLowering, value: TensorValue, shape: tuple[int, ...], index_fn: IndexMap) -> TensorValue:
    """The value seen through ``index_fn`` (new index -> old index) at ``shape``."""
    new_index = [ir.xvar(d) for d in range(len(shape))]
    old_index = index_fn(new_index)
    if isinstance(value, Lazy):
        expr = read(value, index_fn(identity_index(shape)))
        return Lazy(shape, value.dtype, expr)
    flat = ir.linear_index(old_index, value.stride, value.offset)
    aff = ir.to_affine(flat)
    if aff is None or any(k is not None and k.op is not ir.Op.XVAR for k in aff):
        return view_map(ctx, ctx.realize_contiguous(value), shape, index_fn)
    strides = tuple(aff.get(ir.xvar(d), 0) for d in range(len(shape)))
    return Strided(value.buffer, shape, strides, aff.get(None, 0), value.dtype)


def _wrap(dim: int, ndim: int) -> int:
    return dim % max(ndim, 1)


@register(aten.permute)
def lower_permute(ctx: GraphLowering, node: Any, x: TensorValue, dims: list[int]) -> TensorValue:
    nd = len(x.shape)
    dims = [_wrap(d, nd) for d in dims]
    shape = tuple(x.shape[d] for d in dims)

    def fn(new: list[Expr]) -> list[Expr]:
        old: list[Expr] = [None] * nd  # type: ignore[list-item]
        for i, d in enumerate(dims):
            old[d] = new[i]
        return old

    return view_map(ctx, x, shape, fn)


@register(aten.transpose.int)
def lower_transpose(ctx: GraphLowering, node: Any, x: TensorValue, d0: int, d1: int) -> TensorValue:
    nd = len(x.shape)
    if nd == 0:
        return x
    dims = list(range(nd))
    d0, d1 = _wrap(d0, nd), _wrap(d1, nd)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return lower_permute(ctx, node, x, dims)


@register(aten.t)
def lower_t(ctx: GraphLowering, node: Any, x: TensorValue) -> TensorValue:
    return x if len(x.shape) < 2 else lower_transpose(ctx, node, x, 0, 1)


@register(aten.expand)
def lower_expand(ctx: GraphLowering, node: Any, x: TensorValue, sizes: list[int], implicit: bool = False
                 ) -> TensorValue:
    lead = len(sizes) - len(x.shape)
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))

    def fn(new: list[Expr]) -> list[Expr]:
        return [ir.const(0, ir.INDEX_DTYPE) if n == 1 else new[lead + j] for j, n in enumerate(x.shape)]

    return view_map(ctx, x, shape, fn)


@register(aten.unsqueeze)
def lower_unsqueeze(ctx: GraphLowering, node: Any, x: TensorValue, dim: int) -> TensorValue:
    dim = dim % (len(x.shape) + 1)
    shape = x.shape[:dim] + (1,) + x.shape[dim:]
    return view_map(ctx, x, shape, lambda new: new[:dim] + new[dim + 1:])


@register(aten.squeeze)
def lower_squeeze(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None) -> TensorValue:
    nd = len(x.shape)
    if dims is None:
        drop = {d for d, n in enumerate(x.shape) if n == 1}
    else:
        dims = [dims] if isinstance(dims, int) else dims
        drop = {_wrap(d, nd) for d in dims if nd and x.shape[_wrap(d, nd)] == 1}
    keep = [d for d in range(nd) if d not in drop]
    shape = tuple(x.shape[d] for d in keep)

    def fn(new: list[Expr]) -> list[Expr]:
        it = iter(new)
        return [ir.const(0, ir.INDEX_DTYPE) if d in drop else next(it) for d in range(nd)]

    return view_map(ctx, x, shape, fn)


# ``end`` of a slice to the end of its dim (Python's sys.maxsize, as FX graphs write it)
SLICE_TO_END = 2**62


@register(aten.slice.Tensor)
def lower_slice(ctx: GraphLowering, node: Any, x: TensorValue, dim: int = 0, start: Any = None,
                end: Any = None, step: int = 1) -> TensorValue:
    dim = _wrap(dim, len(x.shape))
    n = x.shape[dim]
    if isinstance(n, int) and isinstance(start, (int, type(None))) and isinstance(end, (int, type(None))):
        begin, stop, _ = slice(start, end, 1).indices(n)  # clamps like Python slicing
        length = max(0, (stop - begin + step - 1) // step)
    else:  # symbolic sizes: the start torch chose, else as given (from the end when negative); the length torch derived
        val = node.meta.get("val")
        begin = _start_torch_chose(val, getattr(node.args[0], "meta", {}).get("val"), dim)
        if begin is None:
            begin = start or 0
            begin = n + begin if isinstance(begin, int) and begin < 0 else begin
        if isinstance(val, torch.Tensor):
            length = shape_of(val.shape)[dim]
        elif step == 1:  # a part of split: [start, end) inside the dim
            stop = n if end is None or (isinstance(end, int) and end >= SLICE_TO_END) else end
            length = (n + stop if isinstance(stop, int) and stop < 0 else stop) - begin
        else:
            raise Unsupported(ExternReason.SYMBOLIC_SIZE, f"a strided slice (step {step}) of a symbolic size")
    shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]

    def fn(new: list[Expr]) -> list[Expr]:
        old = list(new)
        old[dim] = ir.from_affine({new[dim]: step, None: begin} if new[dim].op is not ir.Op.CONST
                                  else {None: begin + step * new[dim].arg})
        return old

    return view_map(ctx, x, shape, fn)


def _start_torch_chose(view: Any, source: Any, dim: int) -> Any:
    """A slice's start as torch computed it, clamps included: the view's storage offset past its
    source's, in the source's steps along ``dim``. A start from the end past a symbolic size (``x[-100:]``
    of s0 rows) is 0 under the guard torch added (s0 < 100), where ``s0 - 100`` read before the rows
    (fuzzer, crucible-cpp:extern=all --dynamic, seed 213: values of 1e31). None where it cannot be read."""
    if not (isinstance(view, torch.Tensor) and isinstance(source, torch.Tensor)):
        return None
    stride = size_of(source.stride()[dim])
    if stride == 0:
        return None
    delta = size_of(view.storage_offset()) - size_of(source.storage_offset())
    begin = sympy.cancel(sympy.sympify(delta) / stride)
    if not begin.is_integer:
        return None
    return int(begin) if begin.is_Integer else begin


@register(aten.select.int)
def lower_select(ctx: GraphLowering, node: Any, x: TensorValue, dim: int, index: int) -> TensorValue:
    dim = _wrap(dim, len(x.shape))
    n = x.shape[dim]
    if isinstance(n, int) and isinstance(index, int):
        index = index % n
    elif isinstance(index, int) and index < 0:  # from the end of a symbolic size (C's % keeps the sign)
        index = n + index
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return view_map(ctx, x, shape, lambda new: new[:dim] + [ir.size(index)] + new[dim:])


def _over_library_results(ctx: GraphLowering, x: Lazy) -> bool:
    """Whether ``x`` reads a library call's result and no reduction's: the bias a GPU GEMM left to its
    consumer (``compiler.lowerings.library``), which the consumer reads through a view of the GEMM's
    2-d result. Other lazy values are realized before such a view, as before: a normalization's
    epilogue fuses into its reduction's kernel only in the reduction's own shape."""
    from compiler.graph import ComputedNode, ExternNode

    reads = {load.arg for load in ir.loads(x.expr)}
    library = False
    for node in ctx.graph.nodes:
        if isinstance(node, ExternNode):
            library |= any(b is not None and b.name in reads for b in node.outputs)
        elif isinstance(node, ComputedNode) and node.is_reduction and node.name in reads:
            return False
    return library


def _split_groups(old: tuple[int, ...], new: tuple[int, ...]) -> list[list[int]] | None:
    """For a reshape that only splits dims (each old dim becomes consecutive new dims, in order): the
    new dims of each old dim; None for any other reshape (merging dims, or empty tensors)."""
    if 0 in old or 0 in new:
        return None
    groups, j = [], 0
    for n in old:
        group, product = [], 1
        while product < n and j < len(new):
            group.append(j)
            product *= new[j]
            j += 1
        if product != n:
            return None
        groups.append(group)
    if any(new[k] != 1 for k in range(j, len(new))):
        return None
    if groups:
        groups[-1].extend(range(j, len(new)))  # trailing size-1 dims: index 0 whatever their weight
    elif j < len(new):
        return None
    return groups


def _only_unit_dims_change(old: tuple[int, ...], new: tuple[int, ...]) -> bool:
    return [n for n in old if n != 1] == [n for n in new if n != 1]


def reshape(ctx: GraphLowering, x: TensorValue, shape: tuple[int, ...]) -> TensorValue:
    if shape == x.shape:
        return x
    if _only_unit_dims_change(x.shape, shape):
        old_dims = [d for d, n in enumerate(x.shape) if n != 1]
        new_dims = [d for d, n in enumerate(shape) if n != 1]

        def fn(new: list[Expr]) -> list[Expr]:
            old = [ir.const(0, ir.INDEX_DTYPE)] * len(x.shape)
            for o, nd in zip(old_dims, new_dims):
                old[o] = new[nd]
            return old

        return view_map(ctx, x, shape, fn)
    # (the shape test first: it is cheap, and the other walks the graph's nodes)
    static = all_static(x.shape) and all_static(shape)
    groups = _split_groups(x.shape, shape) if isinstance(x, Lazy) and static else None
    if groups is not None and _over_library_results(ctx, x):
        # each old dim split into consecutive new dims (a GEMM's [B*L, N] result viewed as [B, L, N]):
        # an affine index map, so the lazy value stays lazy and fuses into its consumer
        def split(new: list[Expr]) -> list[Expr]:
            old = []
            for group in groups:
                terms: dict[Any, int] = {None: 0}
                weight = 1
                for j in reversed(group):
                    if new[j].op is ir.Op.CONST:
                        terms[None] += new[j].arg * weight
                    else:
                        terms[new[j]] = terms.get(new[j], 0) + weight
                    weight *= shape[j]
                old.append(ir.from_affine(terms))
            return old

        return view_map(ctx, x, shape, split)
    if isinstance(x, Lazy):
        x = ctx.realize_contiguous(x)
    assert isinstance(x, Strided)
    # symbolic sizes: a row-major buffer viewed row-major; so for negative strides (a flip), which a meta
    # tensor silently makes positive (view(flip(x [1, 2, 2]), [4]) read past its buffer's end; fuzzer,
    # crucible-interpret, seed 226)
    if not static or not all_static(x.stride) or any(s < 0 for s in x.stride):
        x = ctx.realize_contiguous(x)
        return Strided(x.buffer, shape, contiguous_strides(shape), x.offset, x.dtype)
    try:
        meta = torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device="meta").view(shape)
    except (RuntimeError, ValueError):  # torch 2.11 raises ValueError for a non-viewable layout
        x = ctx.realize_contiguous(x)
        meta = torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device="meta").view(shape)
    return Strided(x.buffer, tuple(meta.shape), tuple(meta.stride()), x.offset, x.dtype)


@register(aten.view.default, aten._unsafe_view, aten.reshape)
def lower_view(ctx: GraphLowering, node: Any, x: TensorValue, sizes: list[int]) -> TensorValue:
    return reshape(ctx, x, shape_of(node.meta["val"].shape))


@register(aten.as_strided)
def lower_as_strided(ctx: GraphLowering, node: Any, x: TensorValue, size: list[int], stride: list[int],
                     storage_offset: int | None = None) -> TensorValue:
    base = ctx.realize_contiguous(x) if isinstance(x, Lazy) else x
    # ATen's storage_offset counts from the storage's start, a Strided offset from the buffer's
    # first element: an input sliced off a larger tensor read elements that far past the right ones
    offset = base.offset if storage_offset is None else storage_offset - ctx.storage_offsets.get(base.buffer, 0)
    return Strided(base.buffer, tuple(size), tuple(stride), offset, base.dtype)


@register(aten.split_with_sizes)
def lower_split_with_sizes(ctx: GraphLowering, node: Any, x: TensorValue, sizes: list[int], dim: int = 0
                           ) -> list[TensorValue]:
    out, start = [], 0
    for size in sizes:
        out.append(lower_slice(ctx, node, x, dim, start, start + size, 1))
        start += size
    return out


@register(aten.split.Tensor)
def lower_split(ctx: GraphLowering, node: Any, x: TensorValue, size: int, dim: int = 0) -> list[TensorValue]:
    n = x.shape[_wrap(dim, len(x.shape))]
    sizes = [min(size, n - s) for s in range(0, n, size)] or [0]
    return lower_split_with_sizes(ctx, node, x, sizes, dim)


@register(aten.unbind.int)
def lower_unbind(ctx: GraphLowering, node: Any, x: TensorValue, dim: int = 0) -> list[TensorValue]:
    dim = _wrap(dim, len(x.shape))
    return [lower_select(ctx, node, x, dim, i) for i in range(x.shape[dim])]


@register(aten.flip)
def lower_flip(ctx: GraphLowering, node: Any, x: TensorValue, dims: list[int]) -> TensorValue:
    flipped = {_wrap(d, len(x.shape)) for d in dims}

    def fn(new: list[Expr]) -> list[Expr]:
        out = []
        for d, idx in enumerate(new):
            if d in flipped and idx.op is not ir.Op.CONST:
                out.append(ir.from_affine({idx: -1, None: x.shape[d] - 1}))
            elif d in flipped:
                out.append(ir.const(x.shape[d] - 1 - idx.arg, ir.INDEX_DTYPE))
            else:
                out.append(idx)
        return out

    return view_map(ctx, x, x.shape, fn)
