"""Which matmuls and attentions become template kernels: the ``extern`` option and, in the
default mode, a rule measured on an H200 (``compiler/bench/RESULTS_llm.md``).

``"all"``: none (every one is an ATen call, the compiler before templates). ``"none"``: every
one a template covers. ``"default"``: the ATen kernel unless the measurements below say the
template wins; interpreted kernels (CPU tensors under codegen="triton") always take ATen, whose
CPU kernels are orders of magnitude faster than a template run program by program in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compiler.capabilities import Capabilities


@dataclass(frozen=True)
class Choice:
    template: bool
    message: str  # what the report says about the choice (the extern call's message)


LIBRARY = "vendor library kernel"


def choose(family: str, mode: str, capabilities: Capabilities, unsupported: str | None,
           shape: tuple[int, ...], dtype: torch.dtype) -> Choice:
    """Template or ATen for one op of ``family`` ("gemm" | "attention"); ``unsupported`` is why no
    template covers it (None when one does). ``shape``: (B, M, N, K) for a GEMM, (B, H, L, S, D) for
    attention."""
    if family not in capabilities.templates:
        return Choice(False, LIBRARY)  # this renderer has no templates (C++): as before templates
    if mode == "all":
        return Choice(False, f"{LIBRARY} (extern='all')")
    if unsupported is not None:
        return Choice(False, unsupported)
    if mode == "none":
        return Choice(True, "")
    if capabilities.interpreted:
        return Choice(False, f"{LIBRARY} (default rule: interpreted templates are slower than ATen on CPU)")
    return _measured_rule(family, shape, dtype)


def _measured_rule(family: str, shape: tuple[int, ...], dtype: torch.dtype) -> Choice:
    # Until a shape class is measured faster as a template on the GPU, ATen keeps it.
    return Choice(False, f"{LIBRARY} (default rule: ATen measured faster for {family} of this shape)")
