"""Fusion decisions and loop merging (compiler/scheduler.py) on hand-built lowered graphs: no
Dynamo, no renderer. Every schedule is also run by the IR reference evaluator against torch, so
a decision that changes results fails here, not only one that changes the kernel count."""

from __future__ import annotations

import copy

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import ir
from compiler.graph import Buffer, ComputedNode, LoweredGraph, View, contiguous_strides
from compiler.ir import Op, ReduceOp
from compiler.scheduler import MAX_FUSED_DEPTH, MAX_PERSISTENT_RNUMEL, Kernel, Store, _KernelBuilder, merge_loops, schedule
from simulator.reference import evaluate_kernel, run_schedule

F32 = torch.float32
x0, x1, r0 = ir.xvar(0), ir.xvar(1), ir.rvar(0)


def buffer(name: str, shape: tuple, kind: str = "computed", stride: tuple | None = None) -> Buffer:
    return Buffer(name, F32, shape, stride or contiguous_strides(shape), kind)


def load(buf: Buffer, *index: ir.Expr) -> ir.Expr:
    return ir.load(buf.name, ir.linear_index(list(index), buf.stride), F32)


def node(name: str, shape: tuple, body: ir.Expr, rranges: tuple = ()) -> ComputedNode:
    return ComputedNode(buffer(name, shape), rranges, body, (name,))


def graph(inputs: list[Buffer], nodes: list[ComputedNode], outputs: list[str]) -> LoweredGraph:
    by_name = {n.name: n.buffer for n in nodes}
    views = [View(o, by_name[o].shape, by_name[o].stride, 0, F32) for o in outputs]
    return LoweredGraph(inputs, list(nodes), views)


def kernels_of(sched) -> list[Kernel]:
    return [s for s in sched.steps if isinstance(s, Kernel)]


def exp_(e: ir.Expr) -> ir.Expr:
    return ir.unary(Op.EXP, e)


def test_pointwise_chain_is_one_kernel_storing_only_the_output() -> None:
    a = buffer("a", (4, 6), "input")
    b = node("b", (4, 6), exp_(load(a, x0, x1)))
    c = node("c", (4, 6), ir.binary(Op.ADD, load(b.buffer, x0, x1), ir.const(1.0, F32)))
    lowered = graph([a], [b, c], ["c"])
    sched = schedule(lowered)
    (k,) = kernels_of(sched)
    assert k.kept == {"c"} and [s.buffer for s in k.stores] == ["b", "c"]
    assert k.ranges == (24,)  # both dims walk memory contiguously: merged into one loop
    assert not sched.refusals
    x = torch.randn(4, 6)
    torch.testing.assert_close(run_schedule(lowered, sched, [x])[0], x.exp() + 1)


def test_softmax_fuses_into_one_persistent_kernel_with_a_row_level_store() -> None:
    a = buffer("a", (5, 7), "input")
    mx = node("mx", (5,), ir.reduce(ReduceOp.MAX, load(a, x0, r0), F32), (7,))
    e = node("e", (5, 7), exp_(ir.binary(Op.SUB, load(a, x0, x1), load(mx.buffer, x0))))
    sm = node("sm", (5,), ir.reduce(ReduceOp.SUM, load(e.buffer, x0, r0), F32), (7,))
    out = node("out", (5, 7), ir.binary(Op.DIV, load(e.buffer, x0, x1), load(sm.buffer, x0)))
    lowered = graph([a], [mx, e, sm, out], ["out"])
    sched = schedule(lowered)
    (k,) = kernels_of(sched)
    assert (k.ranges, k.rranges, k.kept) == ((5,), (7,), {"out"})
    assert {s.buffer: s.level for s in k.stores} == {"mx": "x", "e": "xr", "sm": "x", "out": "xr"}
    x = torch.randn(5, 7)
    torch.testing.assert_close(run_schedule(lowered, sched, [x])[0], torch.softmax(x, 1))


def test_consumer_reading_a_reduction_across_programs_is_refused() -> None:
    a = buffer("a", (6, 9), "input")
    col = node("col", (9,), ir.reduce(ReduceOp.SUM, load(a, r0, x0), F32), (6,))  # a.sum(0)
    out = node("out", (6, 9), ir.binary(Op.SUB, load(a, x0, x1), load(col.buffer, x1)))
    lowered = graph([a], [col, out], ["out"])
    sched = schedule(lowered)
    first, second = kernels_of(sched)
    assert first.kept == {"col"} and second.kept == {"out"}
    assert [(r.producer, r.consumer) for r in sched.refusals] == [("col", "out")]
    x = torch.randn(6, 9)
    torch.testing.assert_close(run_schedule(lowered, sched, [x])[0], x - x.sum(0))


def test_reading_a_kernel_local_buffer_elsewhere_than_it_is_produced_splits_the_kernel() -> None:
    a = buffer("a", (8,), "input")
    b = node("b", (8,), exp_(load(a, x0)))
    flipped = ir.from_affine({x0: -1, None: 7})
    c = node("c", (8,), ir.binary(Op.MUL, load(b.buffer, flipped), load(b.buffer, x0)))
    lowered = graph([a], [b, c], ["c"])
    sched = schedule(lowered)
    assert [k.kept for k in kernels_of(sched)] == [{"b"}, {"c"}]
    assert [(r.producer, r.consumer) for r in sched.refusals] == [("b", "c")]
    x = torch.randn(8)
    torch.testing.assert_close(run_schedule(lowered, sched, [x])[0], x.exp().flip(0) * x.exp())


def test_a_row_too_large_for_one_block_keeps_its_producer_apart() -> None:
    n = MAX_PERSISTENT_RNUMEL * 2
    a = buffer("a", (2, n), "input")
    sq = node("sq", (2, n), ir.binary(Op.MUL, load(a, x0, x1), load(a, x0, x1)))
    total = node("total", (2,), ir.reduce(ReduceOp.SUM, load(sq.buffer, x0, r0), F32), (n,))
    lowered = graph([a], [sq, total], ["total"])
    sched = schedule(lowered)
    assert [(k.rranges, k.kept) for k in kernels_of(sched)] == [((), {"sq"}), ((n,), {"total"})]
    assert [(r.producer, r.consumer) for r in sched.refusals] == [("sq", "total")]
    x = torch.randn(2, n)
    torch.testing.assert_close(run_schedule(lowered, sched, [x])[0], (x * x).sum(1))


def test_fused_expressions_stop_at_the_depth_limit() -> None:
    a = buffer("a", (16,), "input")
    nodes, prev = [], a
    for i in range(MAX_FUSED_DEPTH + 8):
        nodes.append(node(f"n{i}", (16,), ir.binary(Op.ADD, load(prev, x0), ir.const(1.0, F32))))
        prev = nodes[-1].buffer
    lowered = graph([a], nodes, [prev.name])
    sched = schedule(lowered)
    kernels = kernels_of(sched)
    assert len(kernels) == 2 and all(s.value.depth <= MAX_FUSED_DEPTH for k in kernels for s in k.stores)
    x = torch.randn(16)
    torch.testing.assert_close(run_schedule(lowered, sched, [x])[0], x + len(nodes))


def test_unread_work_is_not_generated() -> None:
    a = buffer("a", (4,), "input")
    dead = node("dead", (4,), exp_(load(a, x0)))
    live = node("live", (4,), ir.unary(Op.NEG, load(a, x0)))
    sched = schedule(graph([a], [dead, live], ["live"]))
    (k,) = kernels_of(sched)
    assert k.kept == {"live"}


def _kernel(ranges: tuple, value: ir.Expr, store_strides: tuple) -> _KernelBuilder:
    # loop merging is a step of the scheduler's private builder, before the kernel is frozen
    index = ir.linear_index([ir.xvar(d) for d in range(len(ranges))], store_strides)
    return _KernelBuilder("k", ranges, (), [Store("out", index, value, "x")], kept={"out"})


def _merged(k: _KernelBuilder) -> Kernel:
    """``k`` after loop merging, frozen as the scheduler freezes it."""
    merge_loops(k)
    return k.freeze({})


def test_transposed_access_blocks_loop_merging() -> None:
    a = buffer("a", (6, 4), "input")
    k = _merged(_kernel((4, 6), load(a, x1, x0), (6, 1)))  # out[i, j] = a[j, i]
    assert k.ranges == (4, 6)


def test_index_used_as_a_value_blocks_loop_merging() -> None:
    k = _merged(_kernel((4, 6), ir.cast(x1, F32), (6, 1)))  # out[i, j] = j (an iota)
    assert k.ranges == (4, 6)
    out = torch.empty(4, 6)
    evaluate_kernel(k, {"out": out})
    torch.testing.assert_close(out, torch.arange(6.0).expand(4, 6))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_loop_merging_never_changes_what_a_kernel_stores(shape: list[int], rng) -> None:
    """out = a.permute(p) + b for a random shape and permutation: merged or not, same result."""
    shape = tuple(shape)
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    src_shape = tuple(shape[perm.index(d)] for d in range(len(shape)))  # a.permute(perm) has `shape`
    a = buffer("a", src_shape, "input")
    b = buffer("b", shape, "input")
    a_index = [None] * len(shape)
    for d, p in enumerate(perm):
        a_index[p] = ir.xvar(d)
    value = ir.binary(Op.ADD, load(a, *a_index), load(b, *[ir.xvar(d) for d in range(len(shape))]))
    original = _kernel(shape, value, contiguous_strides(shape))
    merged = _merged(copy.deepcopy(original))
    assert len(merged.ranges) <= len(shape)
    tensors = {"a": torch.randn(src_shape), "b": torch.randn(shape)}
    want, got = torch.empty(shape), torch.empty(shape)
    evaluate_kernel(original.freeze({}), {**tensors, "out": want})
    evaluate_kernel(merged, {**tensors, "out": got})
    assert torch.equal(got, want)
    torch.testing.assert_close(want, tensors["a"].permute(perm) + tensors["b"], rtol=0, atol=0)
