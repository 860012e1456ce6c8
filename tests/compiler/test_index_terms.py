"""Unravelled positions merged back where dims nest in memory (``compiler.index_terms``), and the
floor divisions renderers write without the sign fix: hand-built IR, evaluated at every point."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from compiler import ir
from compiler.codegen.registry import renderer_for
from compiler.index_terms import nonnegative, simplify_index
from compiler.ir import Op
from compiler.lowering import lower
from compiler.scheduler import Kernel, schedule
from simulator.reference import evaluate_expr

I64 = torch.int64
x0, x1, r0 = ir.xvar(0), ir.xvar(1), ir.rvar(0)


def c(v: int) -> ir.Expr:
    return ir.const(v, I64)


def unravelled_address(flat: ir.Expr, sizes: tuple[int, ...], strides: tuple[int, ...]) -> ir.Expr:
    """The address of flat position ``flat`` unravelled row-major over ``sizes``, as a split
    reduction builds it: one ``(flat // inner) % n`` term a dim (the outermost without remainder)."""
    index, inner = [], math.prod(sizes)
    for j, n in enumerate(sizes):
        inner //= n
        position = ir.binary(Op.FLOORDIV, flat, c(inner)) if inner > 1 else flat
        index.append(position if j == 0 else ir.binary(Op.MOD, position, c(n)))
    return simplify_index(ir.linear_index(index, strides))


def divisions(e: ir.Expr) -> int:
    return sum(1 for s in e.walk() if s.op in (Op.FLOORDIV, Op.MOD))


def test_nhwc_statistics_read_is_affine_again() -> None:
    """A channels-last batch norm's statistics over (N, H, W) (resnet50's first, batch 32): every
    reduced dim nests in the next, so the chunk's position times the channel stride."""
    flat = ir.binary(Op.ADD, ir.binary(Op.MUL, x0, c(256)), r0)
    merged = unravelled_address(flat, (32, 112, 112), (802816, 7168, 64))
    merged = simplify_index(ir.binary(Op.ADD, merged, x1))
    assert divisions(merged) == 0
    assert merged == ir.from_affine({x0: 256 * 64, r0: 64, x1: 1})


def test_nchw_statistics_read_keeps_one_division_and_one_remainder() -> None:
    flat = ir.binary(Op.ADD, ir.binary(Op.MUL, x0, c(256)), r0)
    address = unravelled_address(flat, (32, 112, 112), (802816, 112, 1))
    assert divisions(address) == 2  # f // 12544 and f % 12544 (H and W merged)


def test_positions_that_may_be_negative_are_left_as_they_are() -> None:
    flat = ir.binary(Op.SUB, x0, c(5))  # may be negative: C's remainder is not the floor one there
    address = unravelled_address(flat, (4, 8), (8, 1))
    assert divisions(address) == 2
    assert not nonnegative(flat) and nonnegative(ir.binary(Op.MOD, ir.binary(Op.FLOORDIV, x0, c(3)), c(2)))
    assert not nonnegative(ir.load("idx", x0, I64))  # data: any sign
    assert not nonnegative(ir.binary(Op.MUL, x0, c(-1)))


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Sizes of 1-4 dims and strides: nested (contiguous, a permutation's, padded) or arbitrary."""
    sizes = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    kind = draw(st.sampled_from(["contiguous", "padded", "arbitrary"]))
    if kind == "arbitrary":
        return sizes, tuple(draw(st.lists(st.integers(0, 40), min_size=len(sizes), max_size=len(sizes))))
    strides, step = [], draw(st.integers(1, 3))
    for n in reversed(sizes):
        strides.append(step)
        step *= n + (draw(st.integers(0, 2)) if kind == "padded" else 0)
    return sizes, tuple(reversed(strides))


@settings(max_examples=80, deadline=None)
@given(layouts(), st.integers(1, 6))
def test_merged_addresses_name_the_same_elements(layout: tuple, chunk: int) -> None:
    """Against the address computed term by term, at every (chunk, element) point; split reductions
    read through it (``simplify_loads``)."""
    sizes, strides = layout
    total = math.prod(sizes)
    chunks = -(-total // chunk)
    flat = ir.binary(Op.ADD, ir.binary(Op.MUL, x0, c(chunk)), r0)
    address = unravelled_address(flat, sizes, strides)
    got = evaluate_expr(address, (chunks,), (chunk,))
    f = torch.arange(chunks * chunk).reshape(chunks, chunk)
    want, inner = torch.zeros_like(f), total
    for j, (n, s) in enumerate(zip(sizes, strides)):
        inner //= n
        position = f // inner
        want += (position if j == 0 else position % n) * s
    assert torch.equal(got, want)
    if strides == tuple(math.prod(sizes[j + 1:]) for j in range(len(sizes))):  # contiguous: all merge
        assert divisions(address) == 0


def test_simplify_index_leaves_unmergeable_indices_untouched() -> None:
    index = ir.binary(Op.ADD, ir.binary(Op.MUL, ir.binary(Op.FLOORDIV, x0, c(4)), c(3)), x1)
    assert simplify_index(index) is index


def _kernel_sources(fn, x: torch.Tensor, codegen: str) -> str:
    gm = compiler.trace_aten(fn, x)
    renderer = renderer_for(codegen, torch.device("cuda" if codegen == "triton" else "cpu"))
    lowered = lower(gm, torch.device("cpu"), renderer.capabilities)
    steps = schedule(lowered, renderer.capabilities).steps
    return "\n".join(renderer.render(k).source for k in steps if isinstance(k, Kernel))


def test_channels_last_batch_norm_statistics_have_no_index_divisions_on_the_gpu() -> None:
    x = torch.randn(8, 16, 32, 32).to(memory_format=torch.channels_last)
    src = _kernel_sources(lambda t: torch.var_mean(t, (0, 2, 3)), x, "triton")
    loads = [line for line in src.splitlines() if "tl.load(p0" in line]
    assert loads and all("//" not in line and "%" not in line for line in loads), loads
    assert "tl.where(((" not in src  # no floor division's sign fix anywhere


def test_floor_division_of_data_keeps_its_sign_fix() -> None:
    """``//`` of loaded values may be negative: still the floor in both renderers, and equal to eager."""
    x = torch.arange(-20, 20, dtype=torch.int64)
    for codegen in ("triton", "cpp"):
        src = _kernel_sources(lambda t: torch.floor_divide(t, 3), x, codegen)
        assert ("tl.where(" in src) if codegen == "triton" else ("div_floor" in src), src
        got = compiler.compile_graph(compiler.trace_aten(lambda t: torch.floor_divide(t, 3), x), [x],
                                     codegen=codegen)(x)
        assert torch.equal(got[0] if isinstance(got, (list, tuple)) else got, torch.floor_divide(x, 3))
