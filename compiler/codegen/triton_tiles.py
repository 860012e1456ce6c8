"""The Triton renderer's block shapes: candidates chosen at render time from static sizes
(``tiles``), and for a size-generic kernel the rule that chooses them at each launch from the
actual sizes (``SizeLaunch``).

The interpreter pays per program, so it gets few, large programs; the GPU gets Inductor-like tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A persistent reduction's candidates: (elements per program, elements per warp, fewest warps), most
# wins first. The first three were chosen from the H200 tuning of the 18 benchmark rows
# (``harness.bench.tuning_report`` over ``harness.bench.models --keep-tuning``; harness/bench/RESULTS.md):
# of the six candidates offered before (2048, 4096 and 8192 elements x 256 and 512 per warp, 170
# kernels), these three lose 3.6% of the summed best kernel time; two would lose 6.8%, one 20%. None
# was below 2048 elements: swin's window softmaxes (rows of 49, RBLOCK 64) took 104 us at the best of
# them (32 rows, 4 warps) and 56 us at 8 rows on one warp (H200, bf16, 301056 rows), so small
# programs on one warp are the fourth (built and timed after the first call: ``compiler.tuning``).
PERSISTENT_CANDIDATES = ((2048, 512, 2), (4096, 512, 2), (4096, 256, 2), (512, 512, 1))
# Elements per program in the interpreter (DESIGN.md: a 1M-element pointwise kernel took 1.8 s with
# blocks of 256, 0.056 s with 65536), and a looped reduction's block there.
INTERPRETER_BLOCK = 65536
INTERPRETER_LOOPED_RBLOCK = 8192


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def tiles(k: Any, interpret: bool) -> list[tuple[int, int, int]]:
    """Candidate (XBLOCK, RBLOCK, num_warps) of a kernel over static sizes, best guess first.

    The interpreter gets one config with few, large programs. On the GPU the
    runtime times the candidates once per kernel and keeps the fastest."""
    if not k.is_reduction:
        if interpret:
            return [(min(next_pow2(k.xnumel), INTERPRETER_BLOCK), 1, 4)]
        block = min(next_pow2(k.xnumel), 1024)
        return [(block, 1, 4)] + ([(2048, 1, 8)] if k.xnumel >= 1 << 20 else [])
    if interpret:
        rblock = next_pow2(k.rnumel) if k.persistent else INTERPRETER_LOOPED_RBLOCK
        return [(max(1, min(next_pow2(k.xnumel), INTERPRETER_BLOCK // rblock)), rblock, 4)]
    if not k.persistent:
        return [(1, 2048, 8), (1, 4096, 16), (2, 1024, 8)]
    rblock = next_pow2(k.rnumel)
    out = []
    for budget, per_warp, fewest in PERSISTENT_CANDIDATES:
        xblock = max(1, min(next_pow2(k.xnumel), budget // rblock))
        cfg = (xblock, rblock, max(fewest, min(32, xblock * rblock // per_warp)))
        if cfg not in out:
            out.append(cfg)
    return out


@dataclass(frozen=True)
class SizeLaunch:
    """How a size-generic kernel is launched: its ``xnumel`` and ``rnumel`` as Python code over its
    size arguments ``sizes`` (the trailing launch arguments); ``config`` picks the grid and the block
    sizes per launch from the actual sizes: ``tiles``'s candidates, tuned per size bucket
    (``compiler.bucket_tuning``)."""

    sizes: tuple[str, ...]
    xnumel: str
    rnumel: str  # "" for a pointwise kernel
    persistent: bool
    interpret: bool

    def numels(self) -> Any:
        """A function of the size arguments returning (xnumel, rnumel), compiled once per launcher."""
        body = f"({self.xnumel}, {self.rnumel or 1})"
        return eval(f"lambda {', '.join(self.sizes)}: {body}")  # noqa: S307  (our own generated code)

    def config(self, xnumel: int, rnumel: int) -> tuple[tuple[int, ...], dict[str, int]]:
        """The first candidate at these sizes (the tile rule's best guess)."""
        return self.candidates(xnumel, rnumel)[0]

    def candidates(self, xnumel: int, rnumel: int) -> list[tuple[tuple[int, ...], dict[str, int]]]:
        """Every candidate (grid, meta) at these sizes: ``tiles``'s list, timed per size bucket
        (``compiler.bucket_tuning``)."""
        shape = _Sizes(xnumel, rnumel, bool(self.rnumel), self.persistent)
        out = []
        for xblock, rblock, warps in tiles(shape, self.interpret):
            meta = {"XBLOCK": xblock} if self.interpret else {"XBLOCK": xblock, "num_warps": warps}
            if self.rnumel:
                meta["RBLOCK"] = rblock
            out.append(((max(1, -(-xnumel // xblock)),), meta))
        return out


@dataclass(frozen=True)
class _Sizes:
    """What ``tiles`` reads of a kernel, at one launch's sizes."""

    xnumel: int
    rnumel: int
    is_reduction: bool
    persistent: bool
