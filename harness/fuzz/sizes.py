"""Size classes around the block sizes of the target under test.

A reduction whose looped form loses its last partial block passes every graph whose rows fit in one
block; a vectorized loop that drops its tail passes every row that is a whole number of lanes. So
the fuzzer draws the length of one dim (the "row") of an op's input from classes around the
target's own blocks: 1, block-1, block, block+1, several blocks plus an odd tail, and long rows up
to ``MAX_ROW`` elements, with the other dims cut so the tensor stays within
``GraphLimits.max_rows_numel`` elements (a longer row comes alone).

The blocks come from the compiler under test, not from guesses: for Crucible's C++ renderer the
reduction planner's constants (lanes per accumulator, long-row lanes, cascade flushes, the window
layout's limit, split chunks, the persistent-reduction limit) and its pointwise tiling; for its
Triton renderer the tiles it chooses (asked of ``TritonRenderer.tiles`` for a looped reduction and
for a long pointwise kernel, interpreted or not) and the persistent limit; and where the target
splits reductions in two stages (compiled GPU Triton, or the ``split_reductions=true`` option on any
renderer), the row lengths from which ``compiler.split_reductions`` splits. Other compilers get
``GENERIC_BLOCKS``: common power-of-two tiles, since their tiling is not ours to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

MAX_ROW = 100_000  # the longest row drawn (~10^5 elements along one dim)
ODD_TAIL = 7  # "several blocks plus an odd tail": k * block + 7


@dataclass(frozen=True)
class TargetBlocks:
    """Block sizes a target's kernels are cut by, per kind of kernel."""

    source: str  # where they were read from (shown by tests and docs)
    reduction: tuple[int, ...]  # lengths along a reduced (or scanned, normalized) dim
    pointwise: tuple[int, ...]  # element counts of an elementwise kernel
    # reduced lengths a row takes one draw in two, where a target's code path starts at them and the
    # size classes alone reach it rarely (split reductions: 0 column splits in 150 reduction graphs)
    favoured: tuple[int, ...] = ()

    def classes(self, kind: str) -> tuple[int, ...]:
        """Row lengths for ``kind`` ("reduction" or "pointwise"): 1 and, per block b, b-1, b, b+1,
        2b+7 and 3b+7, plus the longest row; all within 1..MAX_ROW, sorted (shrinking goes left)."""
        blocks = self.reduction if kind == "reduction" else self.pointwise
        sizes = {1, MAX_ROW - 9}  # 99991: a prime, no block divides it
        for b in blocks:
            sizes.update({b - 1, b, b + 1, 2 * b + ODD_TAIL, 3 * b + ODD_TAIL})
        return tuple(sorted(s for s in sizes if 1 <= s <= MAX_ROW))


# Dynamo backends other than Crucible: power-of-two tiles common to vectorizing and GPU compilers.
GENERIC_BLOCKS = TargetBlocks("generic", reduction=(8, 16, 32, 64, 256, 1024, 2048, 4096),
                              pointwise=(8, 16, 1024))


def _cpp_blocks() -> TargetBlocks:
    from compiler.capabilities import MAX_PERSISTENT_RNUMEL
    from compiler.codegen import cpp_plan as plan

    lanes = {plan.LANE_BYTES // width for width in (4, 8)} | {plan.LONG_ROW_LANE_BYTES // width for width in (4, 8)}
    cascades = {plan.CASCADE_BLOCK * n for n in lanes}  # a lane flushes into its cascade past this
    reduction = {plan.WINDOW_MAX_RNUMEL, plan.LONG_ROW, plan.SPLIT_MIN_RNUMEL // 4, plan.SPLIT_MIN_RNUMEL,
                 MAX_PERSISTENT_RNUMEL, *lanes, *cascades}
    pointwise = {plan.INNER_TILE, plan.PARALLEL_MIN_WORK, *lanes}
    return TargetBlocks("compiler.codegen.cpp_plan", tuple(sorted(reduction)), tuple(sorted(pointwise)))


def _triton_blocks(interpret: bool) -> TargetBlocks:
    from compiler.capabilities import MAX_PERSISTENT_RNUMEL
    from compiler.codegen.triton import TritonRenderer

    renderer = TritonRenderer(interpret=interpret)

    def kernel(reduction: bool, xnumel: int, rnumel: int) -> SimpleNamespace:  # what ``tiles`` reads
        return SimpleNamespace(is_reduction=reduction, persistent=False, xnumel=xnumel, rnumel=rnumel)

    looped = {r for _, r, _ in renderer.tiles(kernel(True, 1, 1 << 20))}
    flat = {x for x, _, _ in renderer.tiles(kernel(False, 1 << 24, 1))}
    return TargetBlocks(f"TritonRenderer(interpret={interpret}).tiles", tuple(sorted(looped | {MAX_PERSISTENT_RNUMEL})),
                        tuple(sorted(flat)))


@lru_cache(maxsize=16)
def target_blocks(target: str) -> TargetBlocks:
    """The blocks of ``target`` (a target string as ``crucible fuzz --target`` takes it)."""
    from harness.targets import parse_target

    parsed = parse_target(target)
    if not parsed.is_crucible:
        return GENERIC_BLOCKS
    blocks = _cpp_blocks() if parsed.options.get("codegen") == "cpp" else _triton_blocks(interpret=parsed.device == "cpu")
    split = parsed.options.get("split_reductions")
    if split or (split is None and parsed.options.get("codegen") != "cpp" and parsed.device == "cuda"):
        return _with_splits(blocks)
    return blocks


def _with_splits(blocks: TargetBlocks) -> TargetBlocks:
    """``blocks`` and the row lengths from which reductions split: each threshold (a power of two, so
    the chunks divide the row; the odd classes around it stay one reduction) and one chunk past it (a
    row of 17 column chunks, of 9 few-output chunks: a second stage of odd length)."""
    from compiler import split_reductions as split

    rows = {split.COLUMN_MIN_RNUMEL, 2 * split.COLUMN_MIN_RNUMEL, split.COLUMN_MIN_RNUMEL + split.COLUMN_CHUNK,
            split.MIN_RNUMEL, split.MIN_RNUMEL + split.MIN_CHUNK}
    return TargetBlocks(f"{blocks.source} + compiler.split_reductions", tuple(sorted({*blocks.reduction, *rows})),
                        blocks.pointwise, favoured=tuple(sorted(rows)))
