"""The parts both renderers take from one description (``compiler.codegen.shared``): parameters,
leaves, reduction identities, unravelled indices. Hand-built kernels, nothing is built."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch

from compiler import ir
from compiler.codegen.cpp import CppRenderer
from compiler.codegen.cpp_expr import cpp_parameter_name
from compiler.codegen.shared import Parameters, leaf, reduction_identity, unravel, unravel_terms
from compiler.codegen.triton import TritonRenderer
from compiler.ir import Op, ReduceOp
from compiler.scheduler import Level, Store, make_kernel

RENDERERS = [CppRenderer(), TritonRenderer(interpret=True)]


def _colliding_kernel():
    """out = a.b[x] + a_b[x]: two buffers whose names sanitize to one C++ identifier."""
    value = ir.binary(Op.ADD, ir.load("a.b", ir.xvar(0), torch.float32),
                      ir.load("a_b", ir.xvar(0), torch.float32))
    return make_kernel("k", (6,), [Store("out", ir.xvar(0), value, Level.X)], kept={"out"})


def test_parameters_take_positions_in_first_use_order_and_stay_unique() -> None:
    k = _colliding_kernel()
    cpp = Parameters(k, cpp_parameter_name)
    assert [cpp.name(b) for b in ("out", "a.b", "a_b", "a.b")] == ["p_out", "p_a_b", "p_a_b_1", "p_a_b"]
    assert cpp.buffers == ("out", "a.b", "a_b")
    assert [(p.buffer, p.written, name) for p, name in cpp.signature()] == [
        ("out", True, "p_out"), ("a.b", False, "p_a_b"), ("a_b", False, "p_a_b_1")]
    positional = Parameters(k, lambda position, buffer: f"p{position}")
    assert [positional.name(b) for b in ("a_b", "out", "a_b")] == ["p0", "p1", "p0"]


def test_a_buffer_the_kernel_does_not_touch_is_refused() -> None:
    with pytest.raises(KeyError, match="not a parameter"):
        Parameters(_colliding_kernel(), cpp_parameter_name).name("elsewhere")


@pytest.mark.parametrize("renderer", RENDERERS, ids=["cpp", "triton"])
def test_rendered_signature_is_the_kernel_params_in_the_renderers_order(renderer) -> None:
    """Every Param of the kernel appears once in the signature, named as its language spells it
    (C++ with its constness and type), and the launch arguments follow the same order."""
    k = _colliding_kernel()
    rendered = renderer.render(k)
    assert sorted(rendered.args) == sorted(p.buffer for p in k.params)
    head = rendered.source[rendered.source.index(f" {rendered.symbol}("):].split(")")[0]
    if isinstance(renderer, CppRenderer):
        assert rendered.args == ("out", "a.b", "a_b")  # a store names its buffer before its value's loads
        assert head.endswith("(float* __restrict__ p_out, const float* __restrict__ p_a_b, "
                             "const float* __restrict__ p_a_b_1")
    else:
        assert rendered.args == ("a.b", "a_b", "out")  # loads first: the value is rendered before its store
        assert re.search(r"\(p0, p1, p2, XBLOCK", head)


def test_leaves_are_spelled_in_place_and_other_ops_are_not() -> None:
    def spell(value, dtype):
        return f"<{value}:{dtype}>"

    assert leaf(ir.xvar(2), spell) == "x2" and leaf(ir.rvar(0), spell) == "r0"
    assert leaf(ir.const(3, torch.int64), spell) == "<3:torch.int64>"
    assert leaf(ir.load("a", ir.xvar(0), torch.float32), spell) is None


@pytest.mark.parametrize("sizes", [(7,), (3, 4), (2, 1, 5), (4, 3, 2, 6)])
def test_unravel_recovers_every_index(sizes: tuple[int, ...]) -> None:
    codes = unravel("flat", sizes, "//")
    for flat in range(int(np.prod(sizes))):
        got = tuple(eval(code, {"flat": flat}) for code in codes)  # noqa: S307 (our own text)
        assert got == tuple(int(i) for i in np.unravel_index(flat, sizes))
    assert unravel("xi", (3, 4), "/") == ["(xi / 4)", "xi % 4"]  # the C++ spelling of the same terms
    assert unravel_terms((3, 4, 5)) == [(20, None), (5, 4), (1, 5)]


@pytest.mark.parametrize(("op", "dtype"), list(itertools.product(
    list(ReduceOp), [torch.float32, torch.float64, torch.int8, torch.int32, torch.int64, torch.bool])))
def test_reduction_identity_loses_to_every_element(op: ReduceOp, dtype: torch.dtype) -> None:
    """Combining the identity with any element gives the element (for argmax/argmin: never
    beats it), including the dtype's extremes."""
    if dtype.is_floating_point:
        values = torch.tensor([-3.5, 0.0, 7.25, -torch.finfo(dtype).max, torch.finfo(dtype).max], dtype=dtype)
    elif dtype == torch.bool:
        values = torch.tensor([False, True])
    else:
        info = torch.iinfo(dtype)
        values = torch.tensor([info.min, -1, 0, 5, info.max], dtype=dtype)
    ident = reduction_identity(op, dtype)
    wide = values.to(torch.float64 if dtype.is_floating_point else torch.int64)
    for v in wide.tolist():
        if op is ReduceOp.SUM:
            assert ident + v == v
        elif op is ReduceOp.PROD:
            assert ident * v == v
        elif op in (ReduceOp.MAX, ReduceOp.ARGMAX):
            assert ident <= v
        else:
            assert ident >= v
