"""The Triton renderer's block shapes: candidates chosen at render time from static sizes
(``tiles``), and for a size-generic kernel the rule that chooses them at each launch from the
actual sizes (``SizeLaunch``).

The interpreter pays per program, so it gets few, large programs; the GPU gets Inductor-like tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A persistent reduction's launch config, as (elements per program, elements per warp, fewest warps);
# one config, not candidates to time. From every candidate's time in the tuning of the 18 benchmark rows
# (H100, batch 32 or 8x512 tokens; ``harness.bench.models --keep-tuning`` with the four candidates offered
# until then: 2048 elements at 512 per warp, 4096 at 512 and at 256, and 512 on one warp; the results
# and the analysis in harness/bench/RESULTS.md, thirtieth session): a small program on one warp was the
# fastest or within a few percent on rows of 49 to 512, where the 2048-element program lost up to 6x
# (convnext's and swin's layer norms over 96 and 192 channels: 132-305 us against 25-47); rows of at
# most 32 (resnet50's 3x3 pools: 1.7-1.9x) and rows of 1024 and more want the 2048-element program
# (within 14% of the best on every such kernel; the small one lost up to 2.2x on efficientnet's
# 784-wide pools). Against timing all four, a model loses at most 1.5% of its time (convnext_tiny
# bf16), and nothing is built after its first call. To revisit: offer several configs here again, run
# the tuning with ``--keep-tuning`` and rank them with ``harness.bench.tuning_report``.
SMALL_PROGRAM = (512, 512, 1)  # rows wider than SHORT_ROWS and narrower than WIDE_ROWS
LARGE_PROGRAM = (2048, 512, 2)  # the others
SHORT_ROWS = 32
WIDE_ROWS = 1024
# Elements per program in the interpreter (DESIGN.md: a 1M-element pointwise kernel took 1.8 s with
# blocks of 256, 0.056 s with 65536), and a looped reduction's block there.
INTERPRETER_BLOCK = 65536
INTERPRETER_LOOPED_RBLOCK = 8192


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def tiles(k: Any, interpret: bool) -> list[tuple[int, int, int]]:
    """Candidate (XBLOCK, RBLOCK, num_warps) of a kernel over static sizes, best guess first.

    The interpreter gets one config with few, large programs. On the GPU a looped reduction offers
    several, which the runtime times once per kernel, keeping the fastest; the others one (above)."""
    if not k.is_reduction:
        if interpret:
            return [(min(next_pow2(k.xnumel), INTERPRETER_BLOCK), 1, 4)]
        # one config: 2048 elements on 8 warps, timed beside it on 250 kernels of the benchmark rows,
        # was worth 0.6% of their summed time, not the build
        return [(min(next_pow2(k.xnumel), 1024), 1, 4)]
    if interpret:
        rblock = next_pow2(k.rnumel) if k.persistent else INTERPRETER_LOOPED_RBLOCK
        return [(max(1, min(next_pow2(k.xnumel), INTERPRETER_BLOCK // rblock)), rblock, 4)]
    if not k.persistent:
        return [(1, 2048, 8), (1, 4096, 16), (2, 1024, 8)]
    rblock = next_pow2(k.rnumel)
    budget, per_warp, fewest = SMALL_PROGRAM if SHORT_ROWS < rblock < WIDE_ROWS else LARGE_PROGRAM
    xblock = max(1, min(next_pow2(k.xnumel), budget // rblock))
    return [(xblock, rblock, max(fewest, min(32, xblock * rblock // per_warp)))]


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
