"""The Triton renderer with templates: template kernels get their loop from ``gemm``/``attention``;
operand prologues and the fused epilogue are rendered by the pointwise kernels' expression renderer
(``compiler.codegen.triton``), with the template's tile variables standing for the index variables
(``writer.ExprWriter``)."""

from __future__ import annotations

import dataclasses

from compiler.capabilities import Capabilities
from compiler.codegen.base import RenderedKernel
from compiler.codegen.triton import TritonRenderer
from compiler.scheduler import Kernel
from compiler.templates.attention import write_attention
from compiler.templates.gemm import write_gemm
from compiler.templates.spec import TemplateKernel

FAMILIES = frozenset({"gemm", "attention", "conv"})  # conv: implicit GEMM on the GEMM template


class TemplateTritonRenderer(TritonRenderer):
    """``TritonRenderer`` that also renders template kernels (the "triton" codegen's renderer)."""

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities, templates=FAMILIES)

    def render(self, k: Kernel) -> RenderedKernel:
        if not isinstance(k, TemplateKernel):
            return super().render(k)
        self.check_ops(k)
        return write_gemm(self, k) if k.family == "gemm" else write_attention(self, k)
