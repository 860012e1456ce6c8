"""The C++ writer's reduction plan as data: layout, passes, lanes, cascades, row buffers and
chunks of hand-built kernels (nothing is traced, rendered or built)."""

from __future__ import annotations

import pytest
import torch

from compiler import ir
from compiler.codegen import cpp_plan
from compiler.codegen.cpp_plan import Layout, plan_reduction
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Kernel, Level, Store, make_kernel

F32 = torch.float32


def contiguous(vars_: list[Expr], sizes: tuple[int, ...]) -> Expr:
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    return ir.linear_index(vars_, tuple(strides)) if vars_ else ir.const(0, ir.INDEX_DTYPE)


def xs(n: int) -> list[Expr]:
    return [ir.xvar(i) for i in range(n)]


def rs(n: int) -> list[Expr]:
    return [ir.rvar(j) for j in range(n)]


def row_reduction(ranges: tuple[int, ...], rranges: tuple[int, ...], op: ReduceOp = ReduceOp.SUM,
                  dtype: torch.dtype = F32) -> Kernel:
    """out[x] = reduce over r of a[x, r], ``a`` contiguous with the reduced dims innermost."""
    value = ir.load("a", contiguous(xs(len(ranges)) + rs(len(rranges)), ranges + rranges), dtype)
    out_dtype = torch.int64 if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) else dtype
    store = Store("out", contiguous(xs(len(ranges)), ranges), ir.reduce(op, value, out_dtype), Level.X)
    return make_kernel("k", ranges, [store], kept={"out"}, rranges=rranges)


def softmax(rows: int, cols: int, out_dtype: torch.dtype = F32) -> tuple[Kernel, Expr]:
    """Softmax over rows: max, then sum of exp(x - max), then the xr-level store of exp / sum."""
    index = contiguous(xs(1) + rs(1), (rows, cols))
    x = ir.load("a", index, F32)
    peak = ir.reduce(ReduceOp.MAX, x, F32)
    e = ir.unary(Op.EXP, ir.binary(Op.SUB, x, peak))
    total = ir.reduce(ReduceOp.SUM, e, F32)
    store = Store("out", index, ir.cast(ir.binary(Op.DIV, e, total), out_dtype), Level.XR)
    return make_kernel("k", (rows,), [store], kept={"out"}, rranges=(cols,)), e


def test_softmax_takes_three_passes_and_keeps_exp_in_its_output_row() -> None:
    k, e = softmax(12, 700)
    plan = plan_reduction(k)
    assert plan.layout is Layout.ROWS and plan.x_stores == ()
    assert [[r.arg for r in p.reduces] for p in plan.passes] == [[ReduceOp.MAX], [ReduceOp.SUM], []]
    assert [len(p.stores) for p in plan.passes] == [0, 0, 1]
    # rows of 700 >= LONG_ROW: 256 bytes of float32 lanes (the store pass has no accumulator, so
    # 256 one-byte "lanes": its loop is unrolled by 256); 700 / 64 lanes is too few for a cascade. The
    # exp-and-sum pass keeps one vector (MATH_LANE_BYTES): 16 lanes, 44 values each, so a cascade, one
    # that never leaves its first level (spelled as a second lane array)
    assert [(p.lanes, p.cascade, p.short_cascade) for p in plan.passes] == [
        (64, False, False), (16, True, True), (256, False, False)]
    (buffered,) = plan.row_buffers
    assert buffered.value == e and buffered.home == 2 and buffered.scratch == k.stores[0]


def test_a_16_bit_output_cannot_hold_exp_so_a_stack_row_buffer_does() -> None:
    k, e = softmax(12, 700, torch.float16)
    (buffered,) = plan_reduction(k).row_buffers
    assert (buffered.value, buffered.home, buffered.scratch) == (e, 2, None)


def test_rows_too_long_for_a_row_buffer_recompute_exp() -> None:
    cols = cpp_plan.ROW_BUFFER_BYTES // 2  # float16 output, float32 values: twice the budget
    k, _ = softmax(3, cols, torch.float16)
    assert plan_reduction(k).row_buffers == ()


def test_cheap_values_are_recomputed_not_buffered() -> None:
    """x - max is read by the sum pass and the store pass, but a subtraction is cheaper than a
    row buffer's traffic."""
    index = contiguous(xs(1) + rs(1), (4, 300))
    x = ir.load("a", index, F32)
    centered = ir.binary(Op.SUB, x, ir.reduce(ReduceOp.MAX, x, F32))
    total = ir.reduce(ReduceOp.SUM, centered, F32)
    k = make_kernel("k", (4,), [Store("out", index, ir.binary(Op.MUL, centered, total), Level.XR)],
                    kept={"out"}, rranges=(300,))
    plan = plan_reduction(k)
    assert len(plan.passes) == 3 and plan.row_buffers == ()


@pytest.mark.parametrize(("cols", "dtype", "lanes"), [
    (100, F32, 32),  # LANE_BYTES / 4
    (100, torch.float64, 16),  # LANE_BYTES / 8
    (600, F32, 64),  # a long row: LONG_ROW_LANE_BYTES / 4
    (300, F32, 32),  # below LONG_ROW (512): LANE_BYTES / 4
    (20, F32, 16),  # at most the row, rounded down to a power of two
    (100, torch.float16, 32),  # 16-bit values accumulate in float32
    (100, torch.int64, 16),
])
def test_lanes_follow_the_widest_accumulator_and_the_row(cols: int, dtype: torch.dtype, lanes: int) -> None:
    k = row_reduction((64,), (cols,), ReduceOp.SUM, dtype)
    (p,) = plan_reduction(k).passes
    assert p.lanes == lanes


def test_long_float_sums_cascade_and_integer_max_or_short_ones_do_not() -> None:
    long_sum = plan_reduction(row_reduction((64,), (70000,)))
    assert long_sum.layout is Layout.ROWS and long_sum.passes[0].cascade  # 70000 > 16 blocks x 64 lanes
    assert not plan_reduction(row_reduction((64,), (1000,))).passes[0].cascade  # <= 16 blocks x 64 lanes
    assert not plan_reduction(row_reduction((64,), (70000,), ReduceOp.MAX)).passes[0].cascade
    assert not plan_reduction(row_reduction((64,), (70000,), ReduceOp.SUM, torch.int64)).passes[0].cascade


def test_few_outer_points_and_long_rows_split_into_chunks() -> None:
    plan = plan_reduction(row_reduction((2,), (1 << 17,)))
    assert plan.layout is Layout.SPLIT
    assert plan.split == 8  # 2**17 elements / (SPLIT_MIN_RNUMEL / 4) per chunk
    assert plan.chunk == (1 << 17) // 8 and plan.chunk % plan.passes[0].lanes == 0
    assert plan.passes[0].cascade  # 16384 elements a chunk over 64 lanes: 16 CASCADE_BLOCKs each
    longer = plan_reduction(row_reduction((2,), (1 << 21,)))
    assert longer.split == cpp_plan.SPLIT_MAX_CHUNKS and longer.passes[0].cascade
    assert plan_reduction(row_reduction((8,), (1 << 17,))).layout is Layout.ROWS  # enough outer points


def test_a_chunk_of_the_only_reduced_dim_is_a_whole_number_of_lanes() -> None:
    k = row_reduction((), (100_003,))
    plan = plan_reduction(k)
    assert plan.layout is Layout.SPLIT and plan.split == 4
    assert plan.chunk == 25_024 and plan.chunk % plan.passes[0].lanes == 0 and plan.chunk * 4 >= 100_003


def test_reduction_over_a_leading_dim_is_vectorized_across_outer_points() -> None:
    """sum(a, dim=0) of a (1000, 48) row-major tensor: loads are contiguous along the outer dim."""
    value = ir.load("a", ir.linear_index([ir.rvar(0), ir.xvar(0)], (48, 1)), F32)
    k = make_kernel("k", (48,), [Store("out", ir.xvar(0), ir.reduce(ReduceOp.SUM, value, F32), Level.X)],
                    kept={"out"}, rranges=(1000,))
    plan = plan_reduction(k)
    assert plan.layout is Layout.COLUMN
    (p,) = plan.passes
    assert p.lanes == 32 and p.cascade  # a tile of LANE_BYTES / 4 points; 1000 > CASCADE_BLOCK


def test_a_value_per_row_leaves_a_column_reduction_in_the_column_layout() -> None:
    """A layer norm's weight gradient, sum over rows of g[r, x] * (a[r, x] - mean[r]) * rstd[r]:
    mean and rstd are read along the reduced dim but are one value a row for every point of a tile.
    Counted as reads along the rows, they took the rows layout, whose lanes read g and a 256 floats
    apart (a layer norm backward over 64x256 ran 230 us a kernel against 33 us in columns, CPU)."""
    r, x = ir.rvar(0), ir.xvar(0)
    grid = ir.linear_index([r, x], (256, 1))
    centred = ir.binary(Op.SUB, ir.load("a", grid, F32), ir.load("mean", r, F32))
    value = ir.binary(Op.MUL, ir.binary(Op.MUL, ir.load("g", grid, F32), centred), ir.load("rstd", r, F32))
    k = make_kernel("k", (256,), [Store("out", x, ir.reduce(ReduceOp.SUM, value, F32), Level.X)],
                    kept={"out"}, rranges=(64,))
    assert plan_reduction(k).layout is Layout.COLUMN
    # a transposed read (along the rows, moving with the columns too) still takes the rows layout
    transposed = ir.binary(Op.MUL, value, ir.load("t", ir.linear_index([x, r], (64, 1)), F32))
    k = make_kernel("k", (256,), [Store("out", x, ir.reduce(ReduceOp.SUM, transposed, F32), Level.X)],
                    kept={"out"}, rranges=(64,))
    assert plan_reduction(k).layout is not Layout.COLUMN


@pytest.mark.parametrize("columns,dtype,lanes", [(4096, F32, 256), (1024, F32, 64), (48, F32, 32),
                                                 (4096, torch.float64, 128), (1 << 20, F32, 256)])
def test_column_tiles_widen_while_the_threads_keep_tiles_to_share(columns, dtype, lanes) -> None:
    """A column sum of 4096x4096 floats ran 25-35 ms in tiles of 32 columns and 12-16 ms in tiles of
    256 (CPU benchmark, issue 38): tiles grow to COLUMN_TILE_BYTES while TILE_MAX_OUTER tiles remain."""
    value = ir.load("a", ir.linear_index([ir.rvar(0), ir.xvar(0)], (columns, 1)), dtype)
    k = make_kernel("k", (columns,), [Store("out", ir.xvar(0), ir.reduce(ReduceOp.SUM, value, dtype), Level.X)],
                    kept={"out"}, rranges=(512,))
    plan = plan_reduction(k)
    assert plan.layout is Layout.COLUMN and plan.passes[0].lanes == lanes


def test_short_windows_take_the_window_layout() -> None:
    plan = plan_reduction(row_reduction((8, 9), (3, 3), ReduceOp.MAX))
    assert plan.layout is Layout.WINDOW and [(p.lanes, p.cascade) for p in plan.passes] == [(1, False)]
    past_window = row_reduction((8,), (cpp_plan.WINDOW_MAX_RNUMEL + 1,), ReduceOp.MAX)
    assert plan_reduction(past_window).layout is Layout.ROWS


def test_row_prefetches_go_in_the_pass_computing_math_functions() -> None:
    """The prefetches run in the pass with the most math functions along the row (softmax: its exp
    pass; kernel alone on 2 cores, 0.74-0.92x the time of prefetching in its max pass), else in
    the first (a layer norm ran 1.13-1.44x slower with them in a later pass). A function of a row's
    statistic (the log of its sum) is computed once a row and does not count."""
    assert plan_reduction(softmax(64, 1024)[0]).prefetch_pass == 2
    long_rows, _ = softmax(3, cpp_plan.ROW_BUFFER_BYTES // 2, torch.float16)  # exp in passes 2 and 3
    assert plan_reduction(long_rows).prefetch_pass == 2
    index = contiguous(xs(1) + rs(1), (64, 1024))
    x = ir.load("a", index, F32)
    total = ir.reduce(ReduceOp.SUM, x, F32)
    scaled = Store("out", index, ir.binary(Op.MUL, x, ir.unary(Op.LOG, total)), Level.XR)
    k = make_kernel("k", (64,), [scaled], kept={"out"}, rranges=(1024,))
    plan = plan_reduction(k)
    assert len(plan.passes) == 2 and plan.prefetch and plan.prefetch_pass == 1


def test_the_plan_is_frozen_and_repeatable() -> None:
    k, _ = softmax(12, 700, torch.float16)
    assert plan_reduction(k) == plan_reduction(k)
    with pytest.raises(AttributeError):
        plan_reduction(k).layout = Layout.SPLIT  # type: ignore[misc]


def test_multi_pass_rows_prefetch_their_loads_rows_ahead() -> None:
    """Rows of at least PREFETCH_MIN_ROW_BYTES read in several passes prefetch the row
    PREFETCH_ROWS_AHEAD ahead in the first pass (softmax 16384x512 float32 on 2 threads: 0.62-0.71x
    eager's time without, 1.04-1.07x with); one pass, short rows and loads that do not step along
    the rows prefetch nothing."""
    k, _ = softmax(64, 1024)
    plan = plan_reduction(k)
    assert [ld.arg for ld in plan.prefetch] == ["a"]
    assert plan_reduction(softmax(64, 128)[0]).prefetch == ()  # 512-byte rows: the hardware's
    assert plan_reduction(row_reduction((64,), (1024,))).prefetch == ()  # one pass
    bias = ir.load("b", ir.rvar(0), F32)  # the same for every row: nothing to fetch ahead
    index = contiguous(xs(1) + rs(1), (64, 1024))
    x = ir.binary(Op.ADD, ir.load("a", index, F32), bias)
    total = ir.reduce(ReduceOp.SUM, x, F32)
    store = Store("out", index, ir.binary(Op.DIV, x, total), Level.XR)
    k = make_kernel("k", (64,), [store], kept={"out"}, rranges=(1024,))
    assert [ld.arg for ld in plan_reduction(k).prefetch] == ["a"]
