"""Iteration spaces that are reshapes of each other (``compiler.reshapes``), and the fusions they
allow: a swin block's residual add over (N, H, W, C) with the layer norm over its (N, H * W, C)
view, and consumers over a split view of a reduction's rows."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import ir
from compiler.reshapes import fold_divmod, reshape_vars, view_mapping
from tests.compiler.parity import check_parity


def _points(dims):
    return list(itertools.product(*[range(n) for n in dims]))


def _eval(e: ir.Expr, env: dict) -> int:
    if e.op is ir.Op.CONST:
        return int(e.arg)
    if e.op in (ir.Op.XVAR, ir.Op.RVAR):
        return env[e]
    a, b = (_eval(s, env) for s in e.src)
    ops = {ir.Op.ADD: int.__add__, ir.Op.SUB: int.__sub__, ir.Op.MUL: int.__mul__, ir.Op.FLOORDIV: int.__floordiv__,
           ir.Op.MOD: int.__mod__}
    return ops[e.op](a, b)


@pytest.mark.parametrize("src, dst", [((56, 56, 96), (3136, 96)), ((3136, 96), (56, 56, 96)),
                                      ((2, 3, 4, 5), (24, 5)), ((6, 20), (2, 3, 4, 5)), ((4, 6, 5), (24, 5))])
def test_reshape_vars_walk_the_source_in_the_destinations_row_major_order(src, dst) -> None:
    dst_vars = [ir.xvar(i) for i in range(len(dst))]
    exprs = reshape_vars(src, dst, dst_vars)
    assert exprs is not None
    seen = [tuple(_eval(e, dict(zip(dst_vars, p))) for e in exprs) for p in _points(dst)]
    assert seen == _points(src)  # every source point once, in row-major order
    flat = ir.linear_index(exprs, tuple(int(torch.tensor(src[i + 1:]).prod()) for i in range(len(src))))
    folded = fold_divmod(flat)  # the source's linear index is the destination's, affine again
    assert ir.to_affine(folded) is not None
    assert [_eval(folded, dict(zip(dst_vars, p))) for p in _points(dst)] == list(range(len(_points(dst))))


@pytest.mark.parametrize("src, dst", [((8, 8, 7, 7), (56, 56)), ((6, 4), (4, 6)), ((3, 49, 32), (96, 49)),
                                      ((5, 7), (36,)), ((4, 5), (4, 5))])
def test_permutations_and_refactorizations_are_not_reshapes(src, dst) -> None:
    assert reshape_vars(src, dst, [ir.xvar(i) for i in range(len(dst))]) is None


def test_fold_divmod_leaves_unpaired_divisions() -> None:
    x = ir.xvar(0)
    i64 = ir.INDEX_DTYPE
    half = ir.binary(ir.Op.FLOORDIV, x, ir.const(4, i64))
    index = ir.binary(ir.Op.ADD, ir.binary(ir.Op.MUL, half, ir.const(3, i64)), ir.binary(ir.Op.MOD, x, ir.const(4, i64)))
    assert fold_divmod(index) == fold_divmod(fold_divmod(index))
    assert any(e.op is ir.Op.FLOORDIV for e in fold_divmod(index).walk())  # 3 * (x // 4) + x % 4 stays
    assert fold_divmod(x) is x


def test_a_residual_add_over_nhwc_fuses_into_the_layer_norm_over_its_token_view(codegen: str, device: str) -> None:
    """swin's block tail: ``x = shortcut + attn.view(N, H, W, C)`` then ``norm2(x.reshape(N, H * W, C))``.
    The add's kernel over (N, H, W, C) and the norm's rows over (N * H * W,)|(C,) are one kernel."""
    w, b = torch.randn(16, device=device), torch.randn(16, device=device)

    def fn(shortcut, attn):
        x = (shortcut + attn.view(2, 6, 5, 16)).reshape(2, 30, 16)
        return x, x + F.layer_norm(x, (16,), w, b)

    inputs = (torch.randn(2, 6, 5, 16, device=device), torch.randn(60, 16, device=device))
    report = check_parity(fn, inputs, codegen=codegen)
    assert len(report.kernels) == 1 and report.kernels[0].kind == "reduction", [k.ops for k in report.kernels]


def test_a_consumer_over_a_split_view_of_normed_rows_fuses_into_the_norm(codegen: str, device: str) -> None:
    """The other direction: the norm's rows over (N * L,)|(C,), a consumer over its (N, H, W, C)
    view (split dims: the consumer's vars are divisions of the kernel's)."""
    w = torch.randn(12, device=device)

    def fn(a, s):
        y = F.layer_norm(a, (12,), w)
        return torch.sigmoid(y.view(3, 4, 5, 12) + s)

    inputs = (torch.randn(60, 12, device=device), torch.randn(5, 12, device=device))
    report = check_parity(fn, inputs, codegen=codegen)
    assert len(report.kernels) == 1 and report.kernels[0].kind == "reduction", [k.ops for k in report.kernels]


def test_view_mapping_inverts_a_window_partition() -> None:
    x = [ir.xvar(i) for i in range(5)]
    kernel = [ir.xvar(0), ir.xvar(1), ir.rvar(0)]
    read = ir.linear_index(x, (37632, 672, 5376, 96, 1))  # windows (8, 8, 7, 7, 96) of a (56, 56, 96) map
    produced = ir.linear_index(kernel, (5376, 96, 1))
    mapping = view_mapping(read, produced, dict(zip(x, (8, 8, 7, 7, 96))), dict(zip(kernel, (56, 56, 96))))
    assert mapping is not None
    assert fold_divmod(ir.substitute(read, mapping)) == produced  # each point reads what it produced
    points = [tuple(_eval(mapping[v], dict(zip(kernel, p))) for v in x) for p in _points((56, 56, 96))]
    assert sorted(points) == _points((8, 8, 7, 7, 96))  # a bijection onto the windows
    assert view_mapping(ir.linear_index(x[:2], (2, 1)), ir.linear_index(kernel[:2], (3, 1)),
                        dict(zip(x, (3, 2))), dict(zip(kernel, (2, 3)))) is None  # not dense


@pytest.mark.parametrize("shift", [0, 2], ids=["windows", "shifted_windows"])
def test_a_window_partition_of_normed_rows_fuses_into_the_norm(shift: int, codegen: str, device: str) -> None:
    """swin's block head: ``norm1`` over (N, H, W, C), then the window partition, a permuted copy
    of the normed map. The partition is computed where each normed element is produced and stored
    at its window's place (one kernel, Inductor's fusion too). Shifted windows read rolled rows,
    whose statistics another program computes: that stays two kernels, and right."""
    w, proj = torch.randn(8, device=device), torch.randn(8, 5, device=device)

    def fn(a):
        y = torch.roll(F.layer_norm(a, (8,), w), (-shift, -shift), (1, 2)) if shift else F.layer_norm(a, (8,), w)
        windows = y.view(2, 3, 4, 3, 4, 8).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, 16, 8)
        return windows.view(-1, 8) @ proj  # the qkv projection reads the windows: they are stored

    report = check_parity(fn, (torch.randn(2, 12, 12, 8, device=device),), codegen=codegen, max_externs=1)
    assert len(report.kernels) == (2 if shift else 1), [k.ops for k in report.kernels]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.integers(2, 5), min_size=2, max_size=5), st.data())
def test_view_mapping_inverts_every_permuted_split_of_a_dense_space(factors, data) -> None:
    """Any dense block viewed through a permutation of a split of its dims (a window partition is
    one): every kernel point maps to the node point that reads what it produced, inside the node's
    space, and the node's read folds back to the producer's index."""
    cuts = sorted(data.draw(st.sets(st.integers(1, len(factors) - 1))))
    groups = [factors[a:b] for a, b in zip([0, *cuts], [*cuts, len(factors)])]
    kdims = [math.prod(g) for g in groups]
    order = data.draw(st.permutations(range(len(factors))))
    ndims = [factors[i] for i in order]
    nstrides = [math.prod(factors[i + 1:]) for i in order]
    outer = data.draw(st.integers(0, len(kdims)))  # kernel dims that are outer (x); the rest reduced (r)
    kvars = [ir.xvar(i) if i < outer else ir.rvar(i - outer) for i in range(len(kdims))]
    nvars = [ir.xvar(i) for i in range(len(ndims))]
    read = ir.linear_index(nvars, tuple(nstrides))
    produced = ir.linear_index(kvars, tuple(math.prod(kdims[i + 1:]) for i in range(len(kdims))))
    mapping = view_mapping(read, produced, dict(zip(nvars, ndims)), dict(zip(kvars, kdims)))
    assert mapping is not None
    for point in _points(kdims)[:300]:
        env = dict(zip(kvars, point))
        at = [_eval(mapping[v], env) for v in nvars]
        assert all(0 <= a < n for a, n in zip(at, ndims))
        assert sum(a * s for a, s in zip(at, nstrides)) == _eval(produced, env)
    assert ir.to_affine(fold_divmod(ir.substitute(read, mapping))) == ir.to_affine(produced)
