"""Creation and indexing lowerings: full/arange, cat, constant_pad_nd, gather, index, and index_put
with accumulate into a small table.

Reads that select between inputs (cat, pad) clamp the index they pass to each
input into its bounds, so a lane whose value is not selected never touches
memory outside the input; the select itself is a ``where``.
Data-dependent indices (gather, index) are clamped too: an out-of-range index
reads a valid element instead of faulting (ATen would raise; we document it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import sympy
import torch

from compiler import ir
from compiler.graph import numel
from compiler.ir import Expr, Op, ReduceOp
from compiler.lowerings.pointwise import out_meta
from compiler.lowerings.rules import Lazy, Strided, TensorValue, Unsupported, read, register
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten
prims = torch.ops.prims
I64 = ir.INDEX_DTYPE


def c64(v: int) -> Expr:
    return ir.size(v)  # an int64 constant, or a symbolic size (``compiler.sizes``)


def clamp_index(idx: Expr, size: int) -> Expr:
    last = max(size - 1, 0) if isinstance(size, int) else size - 1  # a symbolic size is at least 1
    return ir.binary(Op.MIN, ir.binary(Op.MAX, idx, c64(0)), c64(last))


def _filled(node: Any, value: Any) -> Lazy:
    shape, dtype = out_meta(node)
    if dtype.is_complex:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "complex fill")
    if isinstance(value, sympy.Expr):  # a size as a value (``compiler.sizes``)
        return Lazy(shape, dtype, ir.cast(ir.size(value), dtype))
    return Lazy(shape, dtype, ir.const(value, dtype))


@register(aten.full.default)
def lower_full(ctx: GraphLowering, node: Any, size: Any, value: Any, **kwargs: Any) -> Lazy:
    return _filled(node, value)


@register(aten.full_like)
def lower_full_like(ctx: GraphLowering, node: Any, x: Any, value: Any, **kwargs: Any) -> Lazy:
    return _filled(node, value)


@register(aten.zeros.default, aten.zeros_like, aten.empty.memory_format, aten.empty_like, aten.empty_strided,
          aten.new_empty, aten.new_zeros, aten.new_empty_strided)
def lower_zeros(ctx: GraphLowering, node: Any, *args: Any, **kwargs: Any) -> Lazy:
    # empty* has undefined contents; zeros are a valid choice and cost nothing until used.
    return _filled(node, 0)


@register(aten.ones.default, aten.ones_like, aten.new_ones)
def lower_ones(ctx: GraphLowering, node: Any, *args: Any, **kwargs: Any) -> Lazy:
    return _filled(node, 1)


@register(aten.scalar_tensor)
def lower_scalar_tensor(ctx: GraphLowering, node: Any, value: Any, **kwargs: Any) -> Lazy:
    return _filled(node, value)


@register(aten.fill.Scalar)
def lower_fill(ctx: GraphLowering, node: Any, x: Any, value: Any) -> Lazy:
    return _filled(node, value)


@register(aten.arange.start_step, aten.arange.start, aten.arange.default)
def lower_arange(ctx: GraphLowering, node: Any, *args: Any, **kwargs: Any) -> Lazy:
    shape, dtype = out_meta(node)
    # (a symbolic bound is a size expression: counted, or arange(-1, s0 + 1) lost its start and
    # read a reflection pad's source one element off; ``compiler.sizes``)
    nums = [a for a in args if isinstance(a, (int, float, sympy.Expr))]
    start, step = 0, 1
    if len(nums) >= 2:
        start = nums[0]
    if len(nums) == 3:
        step = nums[2]
    if dtype.is_floating_point:
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        value = ir.binary(Op.ADD, ir.binary(Op.MUL, ir.cast(ir.xvar(0), acc), _number(step, acc)),
                          _number(start, acc))
        return Lazy(shape, dtype, ir.cast(value, dtype))
    start, step = (v if isinstance(v, sympy.Expr) else int(v) for v in (start, step))
    return Lazy(shape, dtype, ir.cast(ir.from_affine({ir.xvar(0): step, None: start}), dtype))


def _number(value: Any, dtype: torch.dtype) -> Expr:
    """A Python number, or a symbolic size converted, as a ``dtype`` value."""
    return ir.cast(ir.size(value), dtype) if isinstance(value, sympy.Expr) else ir.const(value, dtype)


@register(prims.iota)
def lower_iota(ctx: GraphLowering, node: Any, length: int, *, start: int, step: int, **kwargs: Any) -> Lazy:
    shape, dtype = out_meta(node)
    return Lazy(shape, dtype, ir.cast(ir.from_affine({ir.xvar(0): step, None: start}), dtype))


@register(aten.cat)
def lower_cat(ctx: GraphLowering, node: Any, tensors: list[TensorValue], dim: int = 0) -> Lazy:
    shape, dtype = out_meta(node)
    dim = dim % len(shape)
    # Empty parts add nothing, and reading one (even at a clamped index) touches no valid
    # memory: drop them (legacy 1-d empties and parts of size 0 along the cat dim alike).
    parts = [t for t in tensors if numel(t.shape) > 0]
    if not parts:
        return Lazy(shape, dtype, ir.const(0, dtype))
    index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    value: Expr | None = None
    offsets, start = [], 0
    for t in parts:
        offsets.append(start)
        start += t.shape[dim]
    for t, off in reversed(list(zip(parts, offsets))):
        local = list(index)
        local[dim] = clamp_index(ir.from_affine({index[dim]: 1, None: -off}) if index[dim].op is Op.XVAR
                                 else c64(-off), t.shape[dim])
        here = ir.cast(read(t, local), dtype)
        if value is None:
            value = here
        else:
            upper = ir.binary(Op.LT, index[dim], c64(off + t.shape[dim]))
            value = ir.where(upper, here, value)
    assert value is not None
    return Lazy(shape, dtype, value)


@register(aten.constant_pad_nd)
def lower_constant_pad(ctx: GraphLowering, node: Any, x: TensorValue, pad: list[int], value: Any = 0) -> Lazy:
    shape, dtype = out_meta(node)
    if numel(x.shape) == 0:  # all padding: never read the input, it has no storage
        return Lazy(shape, dtype, ir.const(value, dtype))
    nd = len(shape)
    index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    valid: Expr | None = None
    local = list(index)
    for i in range(len(pad) // 2):
        d = nd - 1 - i
        before = pad[2 * i]
        if before == 0 and pad[2 * i + 1] == 0:
            # an unpadded dim reads its input as is: a clamped index hides the identity from the
            # scheduler, which then cannot fuse the read with the reduction that produced the input
            # (swin pads each window partition by zero rows, one layer norm per block)
            continue
        src = ir.from_affine({index[d]: 1, None: -before}) if index[d].op is Op.XVAR else c64(-before)
        inside = ir.binary(Op.AND, ir.binary(Op.GE, src, c64(0)), ir.binary(Op.LT, src, c64(x.shape[d])))
        valid = inside if valid is None else ir.binary(Op.AND, valid, inside)
        local[d] = clamp_index(src, x.shape[d])
    body = ir.cast(read(x, local), dtype)
    if valid is None:
        return Lazy(shape, dtype, body)
    return Lazy(shape, dtype, ir.where(valid, body, ir.const(value, dtype)))


def _wrap_index(idx: Expr, size: int) -> Expr:
    idx = ir.cast(idx, I64)
    neg = ir.binary(Op.LT, idx, c64(0))
    wrapped = ir.where(neg, ir.binary(Op.ADD, idx, c64(size)), idx)
    return clamp_index(wrapped, size)


@register(aten.gather)
def lower_gather(ctx: GraphLowering, node: Any, x: TensorValue, dim: int, index: TensorValue,
                 sparse_grad: bool = False) -> Lazy:
    shape, dtype = out_meta(node)
    dim = dim % max(len(x.shape), 1)
    out_index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    picked = _wrap_index(read(index, out_index), x.shape[dim])
    local = list(out_index)
    local[dim] = picked
    return Lazy(shape, dtype, read(x, local))


@register(aten.index_select)
def lower_index_select(ctx: GraphLowering, node: Any, x: TensorValue, dim: int, index: TensorValue) -> Lazy:
    shape, dtype = out_meta(node)
    if not x.shape:  # a 0-d tensor: its one element (index 0 is the only valid index)
        return Lazy(shape, dtype, read(x, []))
    dim = dim % len(x.shape)
    out_index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    idx_shape_index = [out_index[dim]] if index.shape else []
    local = list(out_index)
    local[dim] = _wrap_index(read(index, idx_shape_index), x.shape[dim])
    return Lazy(shape, dtype, read(x, local))


@register(aten.embedding)
def lower_embedding(ctx: GraphLowering, node: Any, weight: TensorValue, indices: TensorValue, *rest: Any) -> Lazy:
    shape, dtype = out_meta(node)
    nidx = len(indices.shape)
    out_index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    row = _wrap_index(read(indices, out_index[:nidx]), weight.shape[0])
    return Lazy(shape, dtype, read(weight, [row, out_index[nidx]]))


def _broadcast(shapes: list[tuple]) -> tuple:
    """The broadcast of ``shapes``; with symbolic sizes, each dim's one size other than 1 (sizes not
    known equal are refused: a typed extern call)."""
    if all(isinstance(n, int) for s in shapes for n in s):
        return tuple(torch.broadcast_shapes(*shapes))
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        sizes = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(sizes) > 1:
            raise Unsupported(ExternReason.SYMBOLIC_SIZE, f"index shapes {shapes} broadcast sizes not known equal")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


@register(aten.index.Tensor)
def lower_index(ctx: GraphLowering, node: Any, x: TensorValue, indices: list[Any]) -> Lazy:
    shape, dtype = out_meta(node)
    if any(isinstance(i, (Lazy, Strided)) and i.dtype == torch.bool for i in indices):
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, "boolean mask indexing has a data-dependent shape")
    indices = list(indices) + [None] * (len(x.shape) - len(indices))
    used = [d for d, i in enumerate(indices) if i is not None]
    bshape = _broadcast([tuple(indices[d].shape) for d in used])
    adjacent = used == list(range(used[0], used[-1] + 1))
    first = used[0] if adjacent else 0
    out_index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    bidx = out_index[first:first + len(bshape)]
    rest = out_index[:first] + out_index[first + len(bshape):]
    local: list[Expr] = []
    it = iter(rest)
    for d, i in enumerate(indices):
        if i is None:
            local.append(next(it))
        else:
            lead = len(bshape) - len(i.shape)
            sub = [c64(0) if n == 1 else bidx[lead + j] for j, n in enumerate(i.shape)]
            local.append(_wrap_index(read(i, sub), x.shape[d]))
    return Lazy(shape, dtype, read(x, local))


# index_put with accumulate into a destination of at most this many rows (an embedding gradient of a
# token-type table, 2 rows) is a reduction: row t adds every value whose index is t. ATen's CUDA
# kernel sorts the indices and walks each run of equal ones serially: bert_base's [2, 768] token-type
# gradient from 4,096 tokens took 2.71 ms a training step on the H200. The reduction reads the values
# once per row, so larger tables stay with ATen. On a GPU the reduction is taken while it reads at
# most GPU_TABLE_READS values in all: swin's relative-position bias gradients ([169, heads] tables
# from 2,401 x heads values, twelve a step) went through ATen's sort, whose host side (85 us and a
# device-to-host copy each) swin's host-bound training step waited on.
SMALL_TABLE_ROWS = 16
GPU_TABLE_READS = 1 << 24


@register(aten.index_put.default)
def lower_index_put(ctx: GraphLowering, node: Any, x: TensorValue, indices: list[Any], values: TensorValue,
                    accumulate: bool = False) -> Lazy:
    """``x`` with ``values`` summed into the rows ``indices[0]`` names, for a small table (above); any
    other index_put is ATen's. A negative index counts from the end; an index out of range adds
    nothing (ATen raises)."""
    idx = indices[0] if len(indices) == 1 else None
    rows = x.shape[0] if x.shape else 0
    if (not accumulate or not isinstance(idx, (Lazy, Strided)) or idx.dtype == torch.bool or x.dtype.is_complex
            or not all(isinstance(n, int) for n in (*x.shape, *idx.shape, *values.shape))
            or not 0 < rows <= _table_rows(ctx, math.prod(idx.shape) * math.prod(x.shape[1:]))):
        raise Unsupported(ExternReason.LIBRARY_KERNEL, "vendor library kernel")
    from compiler.lowerings.reductions import acc_dtype_for, reduce_to

    shape, dtype = out_meta(node)
    acc = acc_dtype_for(dtype)
    # the summed tensor's dims: the destination's (row t, then the rest), then the index's
    rank, rest = len(shape), shape[1:]
    var = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate((*shape, *idx.shape))]
    full = (*idx.shape, *rest)  # what values broadcast to, and the dims of it in ``var``
    full_vars = var[rank:] + var[1:rank]
    lead = len(full) - len(values.shape)
    value = read(values, [c64(0) if n == 1 else full_vars[lead + k] for k, n in enumerate(values.shape)])
    picked = ir.cast(read(idx, var[rank:]), I64)
    picked = ir.where(ir.binary(Op.LT, picked, c64(0)), ir.binary(Op.ADD, picked, c64(rows)), picked)
    hit = ir.binary(Op.EQ, picked, var[0])
    terms = Lazy((*shape, *idx.shape), acc, ir.where(hit, ir.cast(value, acc), ir.const(0, acc)))
    summed = reduce_to(ctx, node, terms, list(range(rank, rank + len(idx.shape))), False, ReduceOp.SUM, acc, acc)
    out_index = var[:rank]
    total = ir.binary(Op.ADD, ir.cast(read(x, out_index), acc), read(summed, out_index))
    return Lazy(shape, dtype, ir.cast(total, dtype))


def _table_rows(ctx: GraphLowering, values: int) -> int:
    """The most rows a reduction index_put takes for ``values`` summed values (above)."""
    gpu = ctx.graph.device.type == "cuda" and not ctx.capabilities.interpreted
    return max(SMALL_TABLE_ROWS, GPU_TABLE_READS // max(values, 1)) if gpu else SMALL_TABLE_ROWS
