"""The IR-level reference evaluator (simulator/reference.py): hand-built kernels against torch,
kernels of real graphs against eager, and fault localization (lowering vs renderer)."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler import ir
from compiler.ir import Op, ReduceOp
from compiler.scheduler import Kernel, Store
from simulator.reference import ReferenceFault, evaluate_expr, evaluate_kernel, localize, reference_graph

F32, I64 = torch.float32, torch.int64
x0, x1, r0 = ir.xvar(0), ir.xvar(1), ir.rvar(0)


def c(v: int) -> ir.Expr:
    return ir.const(v, I64)


def idx(*terms: tuple[ir.Expr, int], offset: int = 0) -> ir.Expr:
    return ir.from_affine({**{v: k for v, k in terms}, None: offset})


def kernel(name: str, ranges: tuple, rranges: tuple, *stores: Store) -> Kernel:
    return Kernel(name, ranges, rranges, list(stores), kept={s.buffer for s in stores})


def test_pointwise_kernel_with_transposed_and_broadcast_loads() -> None:
    a, b = torch.randn(4, 3), torch.randn(4)
    out = torch.empty(3, 4)
    value = ir.binary(Op.ADD, ir.unary(Op.EXP, ir.load("a", idx((x1, 3), (x0, 1)), F32)),
                      ir.load("b", x1, F32))
    evaluate_kernel(kernel("k", (3, 4), (), Store("out", idx((x0, 4), (x1, 1)), value, "x")),
                    {"a": a, "b": b, "out": out})
    torch.testing.assert_close(out, a.t().exp() + b, rtol=0, atol=0)


def test_reductions_propagate_nan_and_pick_the_first_extreme() -> None:
    a = torch.tensor([[1.0, 5.0, 5.0, 2.0], [3.0, float("nan"), 9.0, float("nan")], [-1.0, -1.0, -4.0, -4.0]])
    element = ir.load("a", idx((x0, 4), (r0, 1)), F32)
    outs = {name: torch.empty(3, dtype=F32 if op in (ReduceOp.MAX, ReduceOp.SUM) else I64)
            for name, op in (("mx", ReduceOp.MAX), ("am", ReduceOp.ARGMAX), ("an", ReduceOp.ARGMIN),
                             ("s", ReduceOp.SUM))}
    stores = [Store(name, x0, ir.reduce(op, element, outs[name].dtype), "x") for name, op in
              (("mx", ReduceOp.MAX), ("am", ReduceOp.ARGMAX), ("an", ReduceOp.ARGMIN), ("s", ReduceOp.SUM))]
    evaluate_kernel(kernel("k", (3,), (4,), *stores), {"a": a, **outs})
    torch.testing.assert_close(outs["mx"], torch.tensor([5.0, float("nan"), -1.0]), equal_nan=True)
    assert outs["am"].tolist() == [1, 1, 0] and outs["an"].tolist() == [0, 1, 2]
    torch.testing.assert_close(outs["s"][[0, 2]], a[[0, 2]].sum(1))


def test_xr_level_store_of_a_fused_softmax() -> None:
    a = torch.randn(5, 7)
    out = torch.empty(5, 7)
    element = ir.load("a", idx((x0, 7), (r0, 1)), F32)
    shifted = ir.unary(Op.EXP, ir.binary(Op.SUB, element, ir.reduce(ReduceOp.MAX, element, F32)))
    value = ir.binary(Op.DIV, shifted, ir.reduce(ReduceOp.SUM, shifted, F32))
    evaluate_kernel(kernel("k", (5,), (7,), Store("out", idx((x0, 7), (r0, 1)), value, "xr")),
                    {"a": a, "out": out})
    torch.testing.assert_close(out, torch.softmax(a, 1))


def test_integer_division_semantics_and_16_bit_rounding() -> None:
    a, b = torch.tensor([7, -7, 7, -7]), torch.tensor([2, 2, -2, -2])
    la, lb = ir.load("a", x0, I64), ir.load("b", x0, I64)
    got = {op: evaluate_expr(ir.binary(op, la, lb), (4,), tensors={"a": a, "b": b}).tolist()
           for op in (Op.DIV, Op.FLOORDIV, Op.MOD)}
    assert got == {Op.DIV: [3, -3, -3, 3], Op.FLOORDIV: [3, -4, -4, 3], Op.MOD: [1, -1, 1, -1]}
    h = torch.tensor([1.0, 2.0 ** -11, 3.0], dtype=torch.float16)
    lh = ir.load("h", x0, torch.float16)
    unrounded = ir.binary(Op.ADD, lh, ir.const(2.0 ** -11, torch.float16))  # computed in fp32
    assert evaluate_expr(unrounded, (3,), tensors={"h": h})[0] == 1.0 + 2.0 ** -11
    rounded = ir.cast(ir.cast(unrounded, F32), torch.float16)  # how lowering rounds a 16-bit result
    assert evaluate_expr(rounded, (3,), tensors={"h": h})[0] == 1.0  # a tie, to even


def test_out_of_bounds_load_is_a_fault_naming_kernel_and_buffer() -> None:
    a, out = torch.randn(4), torch.empty(4)
    bad = kernel("kernel7", (4,), (), Store("out", x0, ir.load("a", idx((x0, 1), offset=1), F32), "x"))
    with pytest.raises(ReferenceFault, match=r"kernel7: load of a at index 1\.\.4, outside its 4 elements"):
        evaluate_kernel(bad, {"a": a, "out": out})


def test_a_view_is_addressed_from_its_first_element_within_its_span() -> None:
    base = torch.arange(12.0)
    view = base[2:8]  # storage offset 2, six elements
    out = torch.empty(6)
    evaluate_kernel(kernel("k", (6,), (), Store("out", x0, ir.load("v", x0, F32), "x")), {"v": view, "out": out})
    torch.testing.assert_close(out, base[2:8])
    with pytest.raises(ReferenceFault, match="outside its 6 elements"):
        evaluate_kernel(kernel("k", (7,), (), Store("out", c(0), ir.load("v", x0, F32), "x")),
                        {"v": view, "out": out})


def test_outer_point_store_that_varies_along_the_reduction_is_a_fault() -> None:
    a, out = torch.randn(2, 3), torch.empty(2)
    bad = kernel("k", (2,), (3,), Store("out", x0, ir.load("a", idx((x0, 3), (r0, 1)), F32), "x"))
    with pytest.raises(ReferenceFault, match="varies along the reduced dims"):
        evaluate_kernel(bad, {"a": a, "out": out})


GRAPHS = {
    "softmax": (lambda a: torch.softmax(a, -1), (6, 8)),
    "layer_norm": (lambda a: torch.nn.functional.layer_norm(a, (8,)), (6, 8)),
    "transpose_sum": (lambda a: (a.t() + 1).sum(0), (6, 8)),
    "cat_argmax": (lambda a: torch.cat([a, a * 2], 1).argmax(1), (6, 8)),
    "pad": (lambda a: torch.nn.functional.pad(a, (1, 2)) * 3, (6, 8)),
    "reduce_then_broadcast": (lambda a: a - a.sum(0), (6, 8)),
    "max_pool": (lambda a: torch.nn.functional.max_pool2d(a, 3, 2, 1), (2, 3, 9, 9)),
    "mm_epilogue": (lambda a: torch.relu(a @ a.t()) + a.mean(), (6, 8)),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_reference_of_real_graphs_matches_eager(name: str) -> None:
    fn, shape = GRAPHS[name]
    x = torch.randn(*shape)
    got = reference_graph(compiler.trace_aten(fn, x), [x])
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, fn(x))


def test_localize_finds_nothing_in_a_healthy_graph(codegen: str, device: str) -> None:
    x = torch.randn(6, 8, device=device)
    found = localize(compiler.trace_aten(lambda a: torch.softmax(a, -1) * 2 + a.sum(0), x), [x], codegen)
    assert found.stage == "none", found


def test_localize_blames_the_renderer_and_names_the_kernel(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    from compiler.codegen.triton import TritonRenderer

    render = TritonRenderer.render

    def planted(self, k):  # a renderer bug: every subtraction emitted as an addition
        rendered = render(self, k)
        return type(rendered)(**{**rendered.__dict__, "source": rendered.source.replace(" - ", " + ")})

    monkeypatch.setattr(TritonRenderer, "render", planted)
    x = torch.randn(6, 8, device=device)
    found = localize(compiler.trace_aten(lambda a: (a * 2).sum(1, keepdim=True) - a.exp(), x), [x], "triton")
    assert (found.stage, found.kernel) == ("renderer", "kernel0"), found
    assert "differs from the IR's" in found.message


def test_localize_blames_lowering_when_the_ir_is_wrong(monkeypatch: pytest.MonkeyPatch, codegen: str,
                                                       device: str) -> None:
    import compiler.lowerings  # noqa: F401  (register every rule before patching one)
    from compiler.lowering import LOWERINGS

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin, LOWERINGS[torch.ops.aten.cos])  # a lowering bug
    x = torch.randn(6, 8, device=device)
    found = localize(compiler.trace_aten(lambda a: a.sin() + 1, x), [x], codegen)
    assert found.stage == "lowering" and "the IR differs from eager" in found.message, found


def test_localize_names_a_kernel_that_does_not_build(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    from compiler.codegen.triton import TritonRenderer

    render = TritonRenderer.render

    def planted(self, k):  # a renderer bug that produces invalid Python in the second kernel
        rendered = render(self, k)
        if k.name != "kernel1":
            return rendered
        return type(rendered)(**{**rendered.__dict__, "source": rendered.source.replace("tl.store(", "tl.store((")})

    monkeypatch.setattr(TritonRenderer, "render", planted)
    x = torch.randn(6, 9, device=device)
    found = localize(compiler.trace_aten(lambda a: a - a.sum(0), x), [x], "triton")
    assert (found.stage, found.kernel) == ("renderer", "kernel1"), found
    assert "does not build: SyntaxError" in found.message


def test_localize_reports_a_lowering_that_raises(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    import compiler.lowerings  # noqa: F401
    from compiler.lowering import LOWERINGS

    def explode(*args, **kwargs):
        raise RuntimeError("planted bug in the sin lowering")

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin, explode)
    x = torch.randn(4, device=device)
    found = localize(compiler.trace_aten(lambda a: a.sin() + 1, x), [x])
    assert found.stage == "lowering" and found.kernel is None
    assert found.message == "lowering or scheduling failed: RuntimeError: planted bug in the sin lowering"
