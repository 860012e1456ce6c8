"""The renderer interface shared by every codegen.

A renderer turns one scheduled ``Kernel`` into source text plus the launch facts
the runtime needs (argument buffers, grid). Building, caching and launching live
in ``compiler.runtime``. ``OPS`` is the renderer's op table: the IR ops it can
emit; lowering never produces others, and ``check_ops`` guards the contract. What the
renderers read from a kernel the same way lives in ``compiler.codegen.shared``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from compiler.capabilities import MAX_PERSISTENT_RNUMEL, Capabilities
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
    symbol: str = ""  # the function's name in ``source`` when it is not ``name`` (sanitized, or by content)
    tuning_key: str = ""  # kernels that share it share their tuned config across processes (tuning_cache)
    # a size-generic kernel's size symbols (``compiler.sizes``): int64 arguments after the buffers
    sizes: tuple[str, ...] = ()
    # Triton over symbolic sizes: the launch config is chosen per call from the sizes (``triton_tiles``)
    size_launch: object = None
    # a generated kernel over static sizes: (xnumel, rnumel), its iteration space (tuning reports it)
    work: tuple[int, ...] = ()


class Renderer:
    """Turns a scheduled ``Kernel`` into source text; publishes what it can emit."""

    codegen: ClassVar[str] = ""
    OPS: ClassVar[frozenset[Op]] = frozenset()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(self.codegen, self.OPS, MAX_PERSISTENT_RNUMEL, interpreted=False)

    def render(self, kernel: Kernel) -> RenderedKernel:
        raise NotImplementedError

    def check_ops(self, kernel: Kernel) -> None:
        """The contract lowering keeps: a kernel holds only ops of this renderer's table."""
        for store in kernel.stores:
            for e in store.value.walk():
                if e.op not in self.OPS:
                    raise ValueError(f"{self.codegen} renderer cannot emit {e.op} (kernel {kernel.name})")
