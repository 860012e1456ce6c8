"""The renderer registry: renderers chosen before lowering, their op tables obeyed by lowering."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

import compiler
from compiler import config, ir
from compiler.codegen import registry
from compiler.codegen.cpp import CppRenderer
from compiler.graph import ComputedNode, ExternNode
from compiler.ir import Op
from compiler.lowering import lower
from compiler.pipeline import GraphCompilation
from compiler.report import ExternReason
from compiler.scheduler import Level, Store, make_kernel

CPU = torch.device("cpu")


class NarrowCppRenderer(CppRenderer):
    """The C++ renderer without some ops: what a smaller backend would publish."""

    codegen = "cpp-narrow"
    OPS: ClassVar[frozenset[Op]] = CppRenderer.OPS - {Op.SIN, Op.RSQRT, Op.CEIL, Op.SUB, Op.NE, Op.ISNAN}


@pytest.fixture
def narrow_codegen():
    registry.register_renderer("cpp-narrow", {"cpu"}, lambda device: NarrowCppRenderer())
    yield "cpp-narrow"
    registry._RENDERERS.pop("cpp-narrow")


def body_ops(lowered) -> set[Op]:
    return {e.op for n in lowered.nodes if isinstance(n, ComputedNode) for e in n.body.walk()}


def test_registry_knows_every_codegen_option() -> None:
    assert set(registry.registered_codegens()) == set(config.CODEGENS)


def test_unknown_or_misplaced_codegen_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown codegen 'ptx'; registered: triton, cpp"):
        registry.renderer_for("ptx", CPU)
    with pytest.raises(ValueError, match="'cpp' runs on cpu tensors; this graph's tensors are on cuda"):
        registry.renderer_for("cpp", torch.device("cuda"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register_renderer("cpp", {"cpu"}, lambda device: CppRenderer())


def test_capabilities_say_whether_kernels_are_interpreted() -> None:
    assert registry.capabilities_for("triton", CPU).interpreted
    assert not registry.capabilities_for("triton", torch.device("cuda")).interpreted
    assert not registry.capabilities_for("cpp", CPU).interpreted


def test_lowering_rewrites_ops_the_renderer_lacks(narrow_codegen: str) -> None:
    gm = compiler.trace_aten(lambda a, b: (a.rsqrt() + a.ceil() - b, (a != b) | a.isnan()),
                             torch.randn(4, 5), torch.randn(4, 5))
    caps = registry.capabilities_for(narrow_codegen, CPU)
    lowered = lower(gm, CPU, caps)
    assert not [n for n in lowered.nodes if isinstance(n, ExternNode)]
    ops = body_ops(lowered)
    assert not ops - caps.ops, ops - caps.ops
    assert {Op.SQRT, Op.DIV, Op.FLOOR, Op.NEG, Op.NOT, Op.EQ} <= ops
    assert {Op.RSQRT, Op.CEIL, Op.SUB, Op.NE} <= body_ops(lower(gm, CPU))  # unchanged for full tables


def test_op_without_a_rewrite_becomes_an_extern_call(narrow_codegen: str) -> None:
    gm = compiler.trace_aten(lambda a: (a * 2).sin() + 1, torch.randn(4, 5))
    lowered = lower(gm, CPU, registry.capabilities_for(narrow_codegen, CPU))
    (extern,) = [n for n in lowered.nodes if isinstance(n, ExternNode)]
    assert extern.op is torch.ops.aten.sin.default and extern.reason is ExternReason.RENDERER_OP
    assert extern.message == "the cpp-narrow renderer cannot emit sin"
    assert Op.SIN not in body_ops(lowered) and Op.MUL in body_ops(lowered)


def test_narrow_renderer_compiles_and_matches_eager(narrow_codegen: str) -> None:
    def fn(a, b):
        return a.abs().rsqrt() + a.ceil() - b.sin(), (a != b) | a.isnan()

    a, b = torch.randn(4, 5), torch.randn(4, 5)
    a[0, 0] = float("nan")
    b[1, 1] = a[1, 1]
    comp = GraphCompilation(compiler.trace_aten(fn, a, b), narrow_codegen, "inference")
    got = comp.compile().call([a, b])
    want = fn(a, b)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    assert torch.equal(got[1], want[1])
    assert [(e.op, e.reason) for e in comp.report.externs] == [("aten.sin.default", ExternReason.RENDERER_OP)]


def test_check_ops_refuses_a_kernel_outside_the_table() -> None:
    value = ir.unary(Op.SIN, ir.load("a", ir.xvar(0), torch.float32))
    k = make_kernel("k", (3,), [Store("o", ir.xvar(0), value, Level.X)], kept={"o"})
    CppRenderer().check_ops(k)
    with pytest.raises(ValueError, match="cpp-narrow renderer cannot emit Op.SIN"):
        NarrowCppRenderer().check_ops(k)


def test_default_codegen_and_source_suffix_come_from_the_registry(narrow_codegen: str) -> None:
    """Nothing outside the registry branches on a codegen's name: the default per device and the
    suffix of dumped sources are registered facts (a codegen registered without them has none)."""
    assert registry.default_codegen("cuda") == "triton" and registry.default_codegen("cpu") == "cpp"
    assert [registry.source_suffix(c) for c in ("triton", "cpp", narrow_codegen, "unknown")] == [
        "py", "cpp", "txt", "txt"]
    with pytest.raises(ValueError, match="no codegen is the default for mps tensors; name one of: "
                                         r"\(none registered\)"):
        registry.default_codegen("mps")


def test_a_default_is_on_a_device_the_codegen_runs_on_and_has_one_owner() -> None:
    with pytest.raises(ValueError, match=r"'cpp-gpu' cannot be the default on \['cuda'\]: it runs on \['cpu'\]"):
        registry.register_renderer("cpp-gpu", {"cpu"}, lambda device: CppRenderer(), default_on={"cuda"})
    with pytest.raises(ValueError, match=r"'cpp' is already the default on \['cpu'\]"):
        registry.register_renderer("cpp-2", {"cpu"}, lambda device: CppRenderer(), default_on={"cpu"})
    assert set(registry.registered_codegens()) == set(config.CODEGENS)  # neither was registered


def test_debug_dump_names_sources_by_the_registry_suffix(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_DUMP_DIR", str(tmp_path))
    gm = compiler.trace_aten(lambda a: (a * 2).exp().sum(-1), torch.randn(3, 4))
    for codegen in ("cpp", "triton"):
        GraphCompilation(gm, codegen, "inference").compile()
    suffixes = sorted(p.suffix for p in tmp_path.rglob("kernel*.*"))
    assert suffixes == [".cpp", ".py"], suffixes


def test_runtime_loads_kernels_by_source_language_and_names_a_missing_loader() -> None:
    """The runtime's loaders are keyed by the language a renderer writes, not by codegen names."""
    from compiler.codegen.base import RenderedKernel
    from compiler.runtime import LOADERS, launcher_for

    assert set(LOADERS) == {"triton", "cpp"}
    kernel = RenderedKernel(name="k0", codegen="ptx", source="", args=(), grid=(1,))
    with pytest.raises(ValueError, match=r"kernel k0: no loader for source language 'ptx' "
                                         r"\(the runtime loads triton, cpp"):
        launcher_for(kernel, CPU)
