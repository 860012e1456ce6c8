"""Kernel names carry the fused ops and a content hash (generated code and profiler traces)."""

from __future__ import annotations

import torch

import compiler
from compiler.codegen.triton import TritonRenderer
from compiler.kernel_names import HASH_CHARS, kernel_name_words, kernel_symbol
from compiler.lowering import lower
from compiler.scheduler import schedule


def test_name_lists_telling_ops_in_order_without_overloads() -> None:
    origins = ["view.default", "sub.Tensor", "rsqrt.default", "mul.Tensor", "clamp.default", "mean.dim"]
    assert kernel_name_words(origins) == ["rsqrt", "clamp", "mean"]
    assert kernel_symbol(origins, "3f2a9b1c04de77") == "k_rsqrt_clamp_mean_3f2a9b1c04de"


def test_plain_arithmetic_is_named_when_it_is_all_there_is() -> None:
    assert kernel_name_words(["add.Tensor", "mul.Tensor", "add.Tensor"]) == ["add", "mul"]
    assert kernel_symbol([], "ab" * 10) == "k_" + ("ab" * 10)[:HASH_CHARS]


def test_long_and_private_op_names_are_shortened() -> None:
    assert kernel_name_words(["_softmax.default", "var_mean.correction", "_adaptive_avg_pool2d.default"]) == [
        "softmax", "varmean", "avgpool"]


def test_rendered_triton_kernel_is_named_by_its_ops() -> None:
    """The name is the function's name in the source (what profilers show), hash suffix kept."""
    gm = compiler.trace_aten(lambda a: torch.softmax(a, -1), torch.randn(4, 10))
    renderer = TritonRenderer(interpret=True)
    (kernel,) = schedule(lower(gm, torch.device("cpu"), renderer.capabilities), renderer.capabilities).kernels
    rendered = renderer.render(kernel)
    assert rendered.symbol.startswith("k_amax_exp_sum_") and f"def {rendered.symbol}(" in rendered.source
    assert len(rendered.symbol.rsplit("_", 1)[1]) == HASH_CHARS


def test_template_kernels_are_named_by_family_and_fused_ops() -> None:
    """Template kernels were ``k_<hash>`` alone: the GEMMs and attentions, a profile's largest rows,
    could not be told apart. They carry their family and the ops they fuse, as pointwise kernels do."""
    from compiler.templates.render import TemplateTritonRenderer
    from compiler.templates.scheduling import schedule as schedule_templates

    a, b = torch.randn(16, 8), torch.randn(8, 12)
    gm = compiler.trace_aten(lambda a, b: torch.ops.aten.gelu.default(torch.ops.aten.mm.default(a, b)), a, b)
    renderer = TemplateTritonRenderer(interpret=True)
    lowered = lower(gm, torch.device("cpu"), renderer.capabilities, extern_mode="none")
    (kernel,) = schedule_templates(lowered, renderer.capabilities).kernels
    rendered = renderer.render(kernel)
    assert rendered.symbol.startswith("k_gemm_mm_erf_")  # gelu decomposed and f"def {rendered.symbol}(" in rendered.source
    assert len(rendered.symbol.rsplit("_", 1)[1]) == HASH_CHARS
