"""Which matmuls and attentions become template kernels: the ``extern`` option and, in the
default mode, a rule measured on an H200 (``harness/bench/RESULTS_llm.md``).

``"all"``: none (every one is an ATen call, the compiler before templates). ``"none"``: every
one a template covers. ``"default"``: the ATen kernel unless the measurements below say the
template wins; interpreted kernels (CPU tensors under codegen="triton") always take ATen, whose
CPU kernels are orders of magnitude faster than a template run program by program in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compiler.capabilities import Capabilities
from compiler.sizes import within


@dataclass(frozen=True)
class Choice:
    template: bool
    message: str  # what the report says about the choice (the extern call's message)


LIBRARY = "vendor library kernel"


def choose(family: str, mode: str, capabilities: Capabilities, unsupported: str | None,
           shape: tuple[int, ...], dtype: torch.dtype, epilogue: bool = False, masked: bool = False) -> Choice:
    """Template or ATen for one op of ``family`` ("gemm" | "attention" | "conv"); ``unsupported`` is why no
    template covers it (None when one does). ``shape``: (B, M, N, K) for a GEMM, (B, H, L, S, D) for
    attention; ``epilogue``: a pointwise op consumes the result (it would fuse into the template);
    ``masked``: an attention with a mask."""
    if family not in capabilities.templates:
        return Choice(False, LIBRARY)  # this renderer has no templates (C++): as before templates
    if mode == "all":
        return Choice(False, f"{LIBRARY} (extern='all')")
    if unsupported is not None:
        return Choice(False, unsupported if mode == "none" else f"{LIBRARY} (no template: {unsupported})")
    if mode == "none":
        return Choice(True, "")
    if capabilities.interpreted:
        return Choice(False, f"{LIBRARY} (default rule: interpreted templates are slower than ATen on CPU)")
    return _measured_rule(family, shape, dtype, epilogue, masked)


# Measured on an H200 (harness/bench/RESULTS_llm.md), bf16: the GEMM template is 0.78-0.98x cuBLAS
# on decode shapes (M <= 32) and 0.7-0.96x on prefill shapes, per op; but a decode GEMM takes 2-10 us,
# about what the launch of the separate pointwise kernel after it costs, so a decode GEMM whose result
# a pointwise op consumes is a template (that op joins its epilogue). Decode attention (one query
# token) is 0.92-0.99x SDPA per op and saves the extern call's layout copies: a template. Everything
# else, and every float32 op (not measured), keeps the library kernel. With this rule a 2-layer
# Llama-shaped decoder decodes at 1095 (1B) / 1302 (8B) tok/s against 737 / 917 with ATen everywhere.
# Attention with a mask is a template too: BERT-base bf16 (batch 8 x 512, a boolean padding mask)
# ran 9.83 ms per call with SDPA choosing its masked kernel at run time (cuDNN) and 5.03 ms with the
# math decomposition (harness/bench/RESULTS.md), where flash attention takes no mask at all.
DECODE_ROWS = 32


MEASURED_DTYPES = (torch.bfloat16, torch.float16)  # float32 templates were not measured against ATen


def _measured_rule(family: str, shape: tuple[int, ...], dtype: torch.dtype, epilogue: bool,
                   masked: bool = False) -> Choice:
    if dtype not in MEASURED_DTYPES:
        return Choice(False, f"{LIBRARY} (default rule: {dtype} templates are not measured faster)")
    # symbolic sizes (``compiler.sizes``): rows not known to be at most DECODE_ROWS are not decode rows,
    # and a symbolic query length is not 1 (sizes compare by structure; no guard is added)
    decode = family == "gemm" and within(shape[0] * shape[1], DECODE_ROWS)
    if decode and epilogue:
        return Choice(True, "")
    if family == "attention" and (shape[2] == 1 or masked):
        return Choice(True, "")
    if family == "conv":  # not measured yet: cuDNN keeps every convolution
        return Choice(False, f"{LIBRARY} (default rule: convolutions keep cuDNN until the template is measured)")
    what = "a decode GEMM without a pointwise consumer" if decode else f"{family} of this shape"
    if family == "gemm" and not isinstance(shape[0] * shape[1], int):
        what = "a GEMM with symbolic rows (not known to be decode rows: the size-independent choice)"
    return Choice(False, f"{LIBRARY} (default rule: ATen measured faster for {what})")
