"""The renderer interface shared by every codegen.

A renderer turns one scheduled ``Kernel`` into source text plus the launch facts
the runtime needs (argument buffers, grid). Building, caching and launching live
in ``compiler.runtime``. ``OPS`` is the renderer's op table: the IR ops it can
emit; lowering never produces others, and ``check_ops`` guards the contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from compiler.ir import Op
from compiler.scheduler import Kernel


@dataclass(frozen=True)
class RenderedKernel:
    name: str
    codegen: str
    source: str
    args: tuple[str, ...]  # buffer names, in parameter order
    grid: tuple[int, ...]
    meta: dict = field(default_factory=dict)  # constexprs / launch options (num_warps, ...)
    alternatives: tuple = ()  # further (grid, meta) launch configs the runtime may time and pick from


class Renderer:
    codegen: ClassVar[str] = ""
    OPS: ClassVar[frozenset[Op]] = frozenset()

    def render(self, kernel: Kernel) -> RenderedKernel:
        raise NotImplementedError

    def check_ops(self, kernel: Kernel) -> None:
        for store in kernel.stores:
            for e in store.value.walk():
                if e.op not in self.OPS:
                    raise ValueError(f"{self.codegen} renderer cannot emit {e.op} (kernel {kernel.name})")
