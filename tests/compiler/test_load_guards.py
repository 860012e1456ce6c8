"""Loads that one side of a select reads carry its condition in their mask (``load_guards``)."""

from __future__ import annotations

import torch

import compiler
from compiler import ir
from compiler.codegen.load_guards import load_guards
from compiler.ir import Op
from tests.compiler.parity import assert_close


def test_a_load_is_guarded_by_every_select_on_all_of_its_paths_and_only_those() -> None:
    i = ir.xvar(0)
    first = ir.binary(Op.LT, i, ir.const(4, ir.INDEX_DTYPE), torch.bool)
    second = ir.binary(Op.LT, i, ir.const(8, ir.INDEX_DTYPE), torch.bool)
    a, b, c, shared = (ir.load(name, i, torch.float32) for name in ("a", "b", "c", "shared"))
    inner = ir.where(second, b, ir.binary(Op.MUL, c, shared))
    value = ir.where(first, ir.binary(Op.ADD, a, shared), inner)
    guards = load_guards([value])
    assert guards[a] == {(first, True)}
    assert guards[b] == {(first, False), (second, True)}
    assert guards[c] == {(first, False), (second, False)}
    assert shared not in guards  # read on both sides of the first select
    # a load the condition itself reads, or another root reads, is needed everywhere
    picked = ir.load("picked", i, torch.float32)
    by_value = ir.where(ir.binary(Op.GT, picked, ir.const(0.0, torch.float32), torch.bool), picked, a)
    assert load_guards([by_value]) == {a: {(by_value.src[0], False)}}
    assert load_guards([value, a]).get(a) is None


def _interpreted(fn, *inputs):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="crucible", options={"codegen": "triton", "strict": True})
    with compiler.collect_reports() as report:
        out = compiled(*inputs)
    return out, "".join(k.source for g in report.graphs for k in g.kernels)


def test_a_concatenation_loads_each_input_only_where_it_lands() -> None:
    """A three-way cat of a scaled, a transposed and a plain input (attention's q, k and v
    gradients): each input's load is masked by its own range, the values are eager's."""
    def cat3(q, k, v):
        return torch.cat([q * 0.5, k.transpose(1, 2), v], dim=1)

    q, k, v = torch.randn(3, 5, 7), torch.randn(3, 7, 6), torch.randn(3, 4, 7)
    out, source = _interpreted(cat3, q, k, v)
    assert_close(out, cat3(q, k, v))
    masks = [line.split("mask=")[1] for line in source.splitlines() if "tl.load(" in line]
    assert len(masks) == 3 and all(m.startswith("xmask & ") for m in masks), masks
    assert sorted(m.count("== 0)") for m in masks) == [0, 1, 2]  # outside the ranges before its own


def test_a_padded_read_and_a_select_reading_one_load_on_both_sides() -> None:
    def pad_then_pick(x, y):
        padded = torch.nn.functional.pad(x, (2, 3), value=-1.0)
        return torch.where(padded > 0, padded, y) + torch.where(y > 0, y * 2, -y)

    x, y = torch.randn(4, 6), torch.randn(4, 11)
    out, source = _interpreted(pad_then_pick, x, y)
    assert_close(out, pad_then_pick(x, y))
    loads = [line for line in source.splitlines() if "tl.load(" in line]
    assert any("p0" in line and "mask=xmask & t" in line for line in loads)  # x: inside the pad only
    assert all("mask=xmask," in line for line in loads if "p0" not in line)  # y: read by every position
