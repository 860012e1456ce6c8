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

    def missing(self, expr: Expr) -> set[Op]:
        """The ops of ``expr`` this renderer cannot emit."""
        return {e.op for e in expr.walk() if e.op not in self.ops}


# What lowering and scheduling assume when no renderer is named (every op, the common limit).
ANY_RENDERER = Capabilities("any", frozenset(Op))
