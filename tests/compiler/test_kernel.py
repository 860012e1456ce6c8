"""The scheduled ``Kernel``: frozen, and describing its own parameters (no kernel is built)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import compiler
from compiler import ir
from compiler.codegen.cpp import CppRenderer
from compiler.codegen.triton import TritonRenderer
from compiler.graph import Buffer
from compiler.lowering import lower
from compiler.scheduler import Kernel, Level, Store, make_kernel, schedule


def kernels_of(fn, *inputs: torch.Tensor) -> list[Kernel]:
    sched = schedule(lower(compiler.trace_aten(fn, *inputs), torch.device("cpu")))
    return [s for s in sched.steps if isinstance(s, Kernel)]


def test_scheduled_kernel_is_frozen() -> None:
    (k,) = kernels_of(lambda a: torch.softmax(a, -1), torch.randn(4, 10))
    assert isinstance(k.stores, tuple) and isinstance(k.kept, frozenset)
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.ranges = (1,)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.stores[0].level = Level.XR  # type: ignore[misc]


def test_params_describe_every_buffer_touched() -> None:
    """Softmax of a transposed bf16 input: one input read (its span is the storage it addresses,
    its dtype the buffer's), one output written; register-only intermediates are no parameters."""
    x = torch.randn(10, 4, dtype=torch.bfloat16).t()
    (k,) = kernels_of(lambda a: torch.softmax(a.float(), -1), x)
    assert len(k.stores) > len(k.kept) == 1
    by_name = {p.buffer: p for p in k.params}
    assert set(by_name) == {"arg0", *k.kept}
    inp, (out,) = by_name["arg0"], [by_name[b] for b in k.kept]
    assert (inp.dtype, inp.span, inp.read, inp.written) == (torch.bfloat16, 40, True, False)
    assert (out.dtype, out.span, out.read, out.written) == (torch.float32, 40, False, True)
    assert max(p.span for p in k.params) == 40


@pytest.mark.parametrize("renderer", [CppRenderer(), TritonRenderer(interpret=True)], ids=["cpp", "triton"])
def test_renderers_take_params_in_their_order(renderer) -> None:
    (k,) = kernels_of(lambda a, b: (a * b).sum(-1), torch.randn(3, 5), torch.randn(5))
    rendered = renderer.render(k)
    assert set(rendered.args) == {p.buffer for p in k.params}


def _copy_kernel(stride: int) -> Kernel:
    value = ir.load("a", ir.linear_index([ir.xvar(0), ir.xvar(1)], (stride, 1)), torch.float32)
    store = Store("out", ir.linear_index([ir.xvar(0), ir.xvar(1)], (4, 1)), value, Level.X)
    buffers = {"a": Buffer("a", torch.float32, (2, 4), (stride, 1), "input"),
               "out": Buffer("out", torch.float32, (2, 4), (4, 1), "computed")}
    return make_kernel("kernel0", (2, 4), [store], kept={"out"}, buffers=buffers)


def test_index_width_comes_from_param_spans() -> None:
    """Eight elements read with a row stride past int32: the Triton kernel computes offsets in int64
    because a parameter's span says so (no graph is consulted)."""
    wide, narrow = _copy_kernel(2**31), _copy_kernel(4)
    assert [max(p.span for p in k.params) for k in (wide, narrow)] == [2**31 + 4, 8]
    render = TritonRenderer(interpret=True).render
    assert "tl.program_id(0).to(tl.int64)" in render(wide).source
    assert "tl.program_id(0).to(tl.int64)" not in render(narrow).source


def test_hand_built_kernel_without_buffers_takes_dtypes_from_its_ir() -> None:
    value = ir.cast(ir.load("a", ir.xvar(0), torch.float16), torch.float32)
    k = make_kernel("k", (3,), [Store("o", ir.xvar(0), value, Level.X)], kept={"o"})
    assert [(p.buffer, p.dtype, p.read, p.written) for p in k.params] == [
        ("a", torch.float16, True, False), ("o", torch.float32, False, True)]
    with pytest.raises(KeyError, match="not a parameter"):
        k.param("b")


def test_wrapper_needs_only_the_schedule() -> None:
    """The wrapper takes the schedule, the rendered kernels and their launchers; the lowered graph
    may be gone (its lists emptied here) and the wrapper still runs the graph, an extern call and a
    held constant included."""
    from compiler.runtime import launcher_for
    from compiler.wrapper import generate_wrapper

    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.decompositions import decomposition_table_for_compiler

    weight = torch.randn(5, 3)  # traced for real, the graph module holds it as a constant
    gm = make_fx(lambda a: (torch.relu(a @ weight) + 1, a.sum()),
                 decomposition_table=decomposition_table_for_compiler())(torch.randn(4, 5))
    lowered = lower(gm, torch.device("cpu"))
    sched = schedule(lowered, CppRenderer().capabilities)
    lowered.inputs.clear(), lowered.outputs.clear(), lowered.nodes.clear(), lowered.constants.clear()
    assert sched.externs and sched.constants and len(sched.inputs) == 1
    rendered = {k.name: CppRenderer().render(k) for k in sched.kernels}
    wrapper = generate_wrapper(sched, rendered, {n: launcher_for(r, sched.device) for n, r in rendered.items()})
    x = torch.randn(4, 5)
    out, total = wrapper.call([x])
    torch.testing.assert_close(out, torch.relu(x @ weight) + 1)
    torch.testing.assert_close(total, x.sum())


def test_looped_reduction_bound_is_a_literal() -> None:
    """Triton 3.6's interpreter cannot loop to a bound assigned in the kernel (``rnumel = N`` becomes a
    shape-(1,) tensor that numpy 2 will not turn into an int; FINDINGS.md): the loop reads the literal."""
    from compiler.capabilities import MAX_PERSISTENT_RNUMEL

    n = MAX_PERSISTENT_RNUMEL + 8
    (k,) = kernels_of(lambda a: a.sum(-1), torch.randn(3, n))
    src = TritonRenderer(interpret=True).render(k).source
    assert f"for roffset in range(0, {n}, RBLOCK):" in src
