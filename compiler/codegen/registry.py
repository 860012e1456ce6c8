"""The renderer registry: every codegen, chosen before lowering, with its capabilities.

Lowering and scheduling consult the chosen renderer's ``Capabilities``: its op table
(IR ops it can emit; lowering rewrites others through ``compiler.ir_rewrites`` or runs
the ATen op as an extern call with reason ``renderer_op``), its reduction limit (rows up to
``max_persistent_rnumel`` elements stay in one block, which decides fusion) and whether its
kernels are interpreted. A new codegen registers itself here, explicitly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from compiler.capabilities import Capabilities
from compiler.codegen.base import Renderer


@dataclass(frozen=True)
class RendererEntry:
    codegen: str
    devices: frozenset[str]  # device types whose tensors its kernels run on
    make: Callable[[torch.device], Renderer]


_RENDERERS: dict[str, RendererEntry] = {}


def register_renderer(codegen: str, devices: set[str] | frozenset[str],
                      make: Callable[[torch.device], Renderer]) -> None:
    if codegen in _RENDERERS:
        raise ValueError(f"a renderer for codegen {codegen!r} is already registered")
    _RENDERERS[codegen] = RendererEntry(codegen, frozenset(devices), make)


def registered_codegens() -> tuple[str, ...]:
    return tuple(_RENDERERS)


def renderer_for(codegen: str, device: torch.device) -> Renderer:
    """The renderer for ``codegen`` on ``device``; a clear error when there is none."""
    entry = _RENDERERS.get(codegen)
    if entry is None:
        raise ValueError(f"unknown codegen {codegen!r}; registered: {', '.join(_RENDERERS)}")
    if device.type not in entry.devices:
        raise ValueError(f"codegen {codegen!r} runs on {'/'.join(sorted(entry.devices))} tensors; "
                         f"this graph's tensors are on {device}")
    return entry.make(device)


def capabilities_for(codegen: str, device: torch.device) -> Capabilities:
    return renderer_for(codegen, device).capabilities


def _triton(device: torch.device) -> Renderer:
    from compiler.codegen.triton import TritonRenderer

    return TritonRenderer(interpret=device.type != "cuda")


def _cpp(device: torch.device) -> Renderer:
    from compiler.codegen.cpp import CppRenderer

    return CppRenderer()


register_renderer("triton", {"cuda", "cpu"}, _triton)
register_renderer("cpp", {"cpu"}, _cpp)
