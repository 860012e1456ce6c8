"""The IR-level reference evaluator on template kernels (``extern="none"``): GEMM, attention and
convolution templates evaluated from their data description match eager, and localization splits
a planted template-renderer bug from a planted template-lowering bug. Small shapes: the renderer
side runs in Triton's interpreter (one program per kernel here)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.graph import View
from compiler.templates.spec import TemplateKernel
from simulator.reference import (
    ReferenceFault,
    ReferenceUnsupported,
    evaluate_kernel,
    localize,
    lower_and_schedule,
    reference_graph,
)

R = torch.randn
H16 = torch.float16


def _attn_masked(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)


def _attn_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * 2


# name -> (fn, inputs, the schedule's kernels: a template's family, else "pointwise"; one kernel
# means the epilogue (bias, activation, residual, cast) joined the template)
CASES: dict[str, tuple[Callable, Callable[[], tuple], list[str]]] = {
    "mm_bias_relu": (lambda a, b, c: torch.relu(a @ b + c), lambda: (R(8, 12), R(12, 10), R(10)), ["gemm"]),
    "bmm_transposed": (lambda a, b: torch.bmm(a, b.transpose(1, 2)), lambda: (R(3, 7, 9), R(3, 5, 9)), ["gemm"]),
    "addmm_residual_cast": (lambda c, a, b, r: (torch.addmm(c, a, b, beta=0.5) + r).to(H16),
                            lambda: (R(6), R(5, 8), R(8, 6), R(5, 6)), ["gemm"]),
    "square_mm": (lambda a, b: torch.relu(a @ b), lambda: (R(10, 10), R(10, 10)), ["gemm"]),
    "mm_empty_k": (lambda a, b: (a @ b) + 1, lambda: (R(5, 0), R(0, 6)), ["gemm"]),
    "gemm_fp16_prologue": (lambda a, b: (a * 3) @ b.t(), lambda: (R(6, 16, dtype=H16), R(7, 16, dtype=H16)), ["gemm"]),
    "attention_gqa_mask": (_attn_masked, lambda: (R(2, 4, 5, 8), R(2, 2, 7, 8), R(2, 2, 7, 8), R(5, 7)),
                           ["attention"]),
    "attention_gqa_causal": (_attn_causal, lambda: (R(1, 4, 6, 8), R(1, 2, 6, 8), R(1, 2, 6, 8)), ["attention"]),
    "attention_fp16_causal": (_attn_causal, lambda: (R(1, 2, 5, 8, dtype=H16), R(1, 2, 5, 8, dtype=H16),
                                                     R(1, 2, 5, 8, dtype=H16)), ["attention"]),
    "conv_depthwise_silu": (lambda x, w, b: F.silu(F.conv2d(x, w, b, stride=2, padding=1, groups=4)),
                            lambda: (R(2, 4, 9, 9), R(4, 1, 3, 3), R(4)), ["gemm"]),
    "conv_grouped_relu": (lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=2, dilation=2, groups=2)),
                          lambda: (R(1, 6, 8, 8), R(4, 3, 3, 3), R(4)), ["gemm", "pointwise"]),
}


def _case(name: str) -> tuple[Callable, torch.fx.GraphModule, list]:
    fn, make, _ = CASES[name]
    torch.manual_seed(0)
    inputs = list(make())
    return fn, compiler.trace_aten(fn, *inputs), inputs


def _first(out: object) -> torch.Tensor:
    return out[0] if isinstance(out, (list, tuple)) else out  # type: ignore[index,return-value]


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    # 16-bit outputs: the reference and eager may round the same float32 value to neighbouring values
    tol = 2e-3 if want.dtype in (torch.float16, torch.bfloat16) else 1e-4
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", list(CASES))
def test_reference_of_template_kernels_matches_eager(name: str) -> None:
    fn, gm, inputs = _case(name)
    _, _, kernels = lower_and_schedule(gm, inputs, "triton", "none")
    kinds = [k.family if isinstance(k, TemplateKernel) else "pointwise" for k in kernels]
    assert kinds == CASES[name][2], [str(k) for k in kernels]
    got = _first(reference_graph(gm, inputs, "triton", "none"))
    want = fn(*inputs)
    assert got.dtype == want.dtype
    _close(got, want)


@pytest.mark.parametrize("name", ["mm_bias_relu", "attention_gqa_mask", "conv_grouped_relu"])
def test_localize_finds_nothing_in_healthy_templates(name: str) -> None:
    _, gm, inputs = _case(name)
    found = localize(gm, inputs, "triton", rtol=1e-4, atol=1e-4, extern="none")
    assert found.stage == "none", found


def _plant(monkeypatch: pytest.MonkeyPatch, edit: Callable[[str], str]) -> None:
    """A template-renderer bug: ``edit`` applied to every template kernel's source."""
    from compiler.templates.render import TemplateTritonRenderer

    render = TemplateTritonRenderer.render

    def planted(self, k):
        rendered = render(self, k)
        if not isinstance(k, TemplateKernel):
            return rendered
        source = edit(rendered.source)
        assert source != rendered.source, "the planted bug did not apply"
        return dataclasses.replace(rendered, source=source)

    monkeypatch.setattr(TemplateTritonRenderer, "render", planted)


PLANTS: dict[str, tuple[str, Callable[[str], str]]] = {
    # the epilogue (bias, relu) dropped: the raw accumulator is stored
    "epilogue_dropped": ("mm_bias_relu", lambda s: re.sub(r"\((e\d+)\)\.to\(", "(acc).to(", s)),
    # B read with its two strides swapped (B^T; the shape is square, so every read stays in bounds)
    "operand_stride_swapped": ("square_mm", lambda s: re.sub(r"rk\[:, None\] \* (\d+) \+ bn\)",
                                                             r"rk[:, None] + bn * \1)", s)),
    # a convolution's prologue reads the clamped border instead of the zero padding
    "prologue_padding_dropped": ("conv_depthwise_silu", lambda s: re.sub(r"(a_\d+) = tl\.where\(a_\d+, (a_\d+), 0\.0\)",
                                                                         r"\1 = \2", s)),
    # the causal mask dropped
    "causal_mask_dropped": ("attention_gqa_causal", lambda s: s.replace(" & (cols[None, :] <= ql[:, None])", "")),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_template_renderer_bug_is_blamed_on_the_renderer(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, edit = PLANTS[plant]
    fn, gm, inputs = _case(name)
    # the reference is untouched by the renderer: it still matches eager
    _close(_first(reference_graph(gm, inputs, "triton", "none")), fn(*inputs))
    _plant(monkeypatch, edit)
    found = localize(gm, inputs, "triton", rtol=1e-4, atol=1e-4, extern="none")
    assert (found.stage, found.kernel) == ("renderer", "kernel0"), found
    assert "differs from the IR's" in found.message


def _plant_gemm_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lowering bug: every matmul operand doubled."""
    import compiler.templates.rules as rules
    from compiler import ir

    operand = rules._operand

    def planted(ctx, value):
        e = operand(ctx, value)
        return ir.binary(ir.Op.MUL, e, ir.const(2.0, e.dtype))

    monkeypatch.setattr(rules, "_operand", planted)


def _plant_conv_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lowering bug in a convolution's implicit GEMM: the gathered window read from the next input
    element. The reference follows the IR's gather (it does not recompute conv2d from the shapes), so
    this must be lowering's fault, not the renderer's."""
    import compiler.templates.conv as conv
    from compiler import ir
    from compiler.templates.spec import GemmTemplate

    def planted(acc, batch, m, n, k, a, b, *rest):
        shifted = ir.substitute(a, {ir.xvar(2): ir.binary(ir.Op.MIN, ir.binary(ir.Op.ADD, ir.xvar(2),
                                                                               ir.const(1, ir.INDEX_DTYPE)),
                                                          ir.const(k - 1, ir.INDEX_DTYPE))})
        return GemmTemplate(acc, batch, m, n, k, shifted, b, *rest)

    monkeypatch.setattr(conv, "GemmTemplate", planted)


@pytest.mark.parametrize("name, plant", [("mm_bias_relu", _plant_gemm_operand),
                                         ("conv_depthwise_silu", _plant_conv_gather)])
def test_planted_template_lowering_bug_is_blamed_on_lowering(name: str, plant: Callable,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch)
    _, gm, inputs = _case(name)
    found = localize(gm, inputs, "triton", rtol=1e-4, atol=1e-4, extern="none")
    assert found.stage == "lowering" and "the IR differs from eager" in found.message, found


def _template_kernel(name: str) -> tuple[TemplateKernel, dict[str, torch.Tensor]]:
    """The case's template kernel and a flat tensor for each of its parameters (as many elements
    as the kernel addresses)."""
    _, gm, inputs = _case(name)
    _, _, kernels = lower_and_schedule(gm, inputs, "triton", "none")
    (k,) = [k for k in kernels if isinstance(k, TemplateKernel)]
    return k, {p.buffer: torch.randn(p.span).to(p.dtype) for p in k.params}


def test_template_operand_view_outside_its_buffer_is_a_fault() -> None:
    k, tensors = _template_kernel("attention_gqa_mask")
    t = k.template
    moved = View(t.q.buffer, t.q.shape, t.q.stride, t.q.offset + 1, t.q.dtype)  # one element past the end
    bad = dataclasses.replace(k, template=dataclasses.replace(t, q=moved))
    with pytest.raises(ReferenceFault, match=rf"kernel0: load of {t.q.buffer} at index 1\.\.\d+, outside its"):
        evaluate_kernel(bad, tensors)


@dataclasses.dataclass(frozen=True)
class _ScanTemplate:
    """A template family the evaluator has never heard of."""

    acc: str
    family = "scan"

    def operand_loads(self) -> list:
        return []


def test_unknown_template_kind_is_a_clear_error_naming_it() -> None:
    k, tensors = _template_kernel("mm_bias_relu")
    unknown = dataclasses.replace(k, template=_ScanTemplate(k.template.acc))
    with pytest.raises(ReferenceUnsupported, match=r"kernel0: .*no semantics for template 'scan' \(_ScanTemplate\)"):
        evaluate_kernel(unknown, tensors)
