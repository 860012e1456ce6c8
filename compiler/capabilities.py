"""What lowering and scheduling know of the chosen renderer before they run.

Renderers publish ``Capabilities`` (``compiler.codegen.registry``); this module holds the
type alone, so lowering and the scheduler read it without importing any renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import Expr, Op

# Reductions up to this many elements keep a whole row in one block ("persistent"), which lets
# several reductions and their consumers share one kernel. Both renderers take the same fusion
# decisions, so both publish this limit.
MAX_PERSISTENT_RNUMEL = 32768
# Buffers one kernel may read or write: its argument list stays within ctypes' 1024 arguments and
# CUDA's kernel parameter space (a split into 1025 outputs was one kernel of 1026 arguments; fuzzer,
# crucible-cpp, seed 28). Past it a node starts a new kernel.
MAX_KERNEL_BUFFERS = 256


@dataclass(frozen=True)
class Capabilities:
    codegen: str
    ops: frozenset[Op]  # IR ops the renderer can emit
    max_persistent_rnumel: int = MAX_PERSISTENT_RNUMEL  # rows up to this many elements: one block
    interpreted: bool = False  # kernels run in an interpreter (few, large programs pay off)
    templates: frozenset[str] = frozenset()  # template families it renders ("gemm", "attention")
    # rows of symbolic length (``compiler.sizes``) count as held in one block: the C++ renderer loops
    # over any row in passes, the interpreter takes a block as long as the row, chosen at launch; GPU
    # Triton's blocks need a bound (stage 2 of the dynamic-shape work), so there they are looped
    symbolic_persistent: bool = False
    # Op.MAX and Op.MIN of floats order -0.0 below +0.0 (IEEE 754-2019 maximum and minimum: the GPU's
    # instructions, which ATen's CUDA kernels use for clamp, maximum and minimum); the CPU renderers'
    # compare-and-select forms return one of two equal zeros, as ATen's CPU kernels do
    ordered_zeros: bool = False
    # a reduction with few outputs over many elements runs as two (``compiler.split_reductions``): GPU
    # Triton's looped reductions run one program per output
    split_reductions: bool = False

    def persistent(self, rnumel: object) -> bool:
        """Whether rows of ``rnumel`` elements are held in one block (persistent reductions)."""
        return persistent(rnumel, self.max_persistent_rnumel, self.symbolic_persistent)

    def missing(self, expr: Expr) -> set[Op]:
        """The ops of ``expr`` this renderer cannot emit."""
        return {e.op for e in expr.walk() if e.op not in self.ops}


def persistent(rnumel: object, limit: int, symbolic: bool) -> bool:
    """Rows of ``rnumel`` elements in one block: up to ``limit`` when static, ``symbolic`` when not."""
    return rnumel <= limit if isinstance(rnumel, int) else symbolic


# What lowering and scheduling assume when no renderer is named (every op, the common limit).
ANY_RENDERER = Capabilities("any", frozenset(Op))
