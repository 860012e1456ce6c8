"""The renderer registry: every codegen, chosen before lowering, with its capabilities.

Lowering and scheduling consult the chosen renderer's ``Capabilities``: its op table
(IR ops it can emit; lowering rewrites others through ``compiler.ir_rewrites`` or runs
the ATen op as an extern call with reason ``renderer_op``), its reduction limit (rows up to
``max_persistent_rnumel`` elements stay in one block, which decides fusion) and whether its
kernels are interpreted. A new codegen registers itself here, explicitly, with the device
types it runs on, those it is the default codegen for, and the file suffix of its sources (debug
dumps); nothing else in the compiler branches on a codegen's name.
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
    default_on: frozenset[str] = frozenset()  # device types it is chosen for when no codegen is named
    source_suffix: str = "txt"  # of its kernels' source files in debug dumps


_RENDERERS: dict[str, RendererEntry] = {}


def register_renderer(codegen: str, devices: set[str] | frozenset[str], make: Callable[[torch.device], Renderer],
                      *, default_on: set[str] | frozenset[str] = frozenset(), source_suffix: str = "txt") -> None:
    if codegen in _RENDERERS:
        raise ValueError(f"a renderer for codegen {codegen!r} is already registered")
    devices, default_on = frozenset(devices), frozenset(default_on)
    if not default_on <= devices:
        raise ValueError(f"codegen {codegen!r} cannot be the default on {sorted(default_on - devices)}: "
                         f"it runs on {sorted(devices)} only")
    for other in _RENDERERS.values():
        if other.default_on & default_on:
            raise ValueError(f"codegen {other.codegen!r} is already the default on "
                             f"{sorted(other.default_on & default_on)}")
    _RENDERERS[codegen] = RendererEntry(codegen, devices, make, default_on, source_suffix)


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


def default_codegen(device_type: str) -> str:
    """The codegen chosen for a graph whose tensors are on ``device_type`` when none is named."""
    for entry in _RENDERERS.values():
        if device_type in entry.default_on:
            return entry.codegen
    runs_there = [e.codegen for e in _RENDERERS.values() if device_type in e.devices]
    raise ValueError(f"no codegen is the default for {device_type} tensors; name one of: "
                     f"{', '.join(runs_there) or '(none registered)'}")


def source_suffix(codegen: str) -> str:
    """The file suffix of ``codegen``'s kernel sources (``txt`` for a codegen it does not know)."""
    entry = _RENDERERS.get(codegen)
    return entry.source_suffix if entry is not None else "txt"


def capabilities_for(codegen: str, device: torch.device) -> Capabilities:
    return renderer_for(codegen, device).capabilities


def _triton(device: torch.device) -> Renderer:
    from compiler.templates.render import TemplateTritonRenderer  # TritonRenderer + matmul/attention templates

    return TemplateTritonRenderer(interpret=device.type != "cuda")


def _cpp(device: torch.device) -> Renderer:
    from compiler.codegen.cpp import CppRenderer

    return CppRenderer()


register_renderer("triton", {"cuda", "cpu"}, _triton, default_on={"cuda"}, source_suffix="py")
register_renderer("cpp", {"cpu"}, _cpp, default_on={"cpu"}, source_suffix="cpp")
