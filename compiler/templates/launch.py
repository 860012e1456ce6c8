"""Launching a template kernel over symbolic sizes: the grid and the tile are chosen at each call
from the actual sizes, as ``compiler.codegen.triton_tiles.SizeLaunch`` does for pointwise and
reduction kernels (the runtime calls ``numels()`` once, then ``candidates(*numels(*size_args))`` per
launch, tuned per size bucket by ``compiler.bucket_tuning``).

What a static template decides at render time from its sizes is decided here per launch, on the
same rules: the tile (``tiles.gemm_tiles``/``attention_tiles``' candidates, timed per size bucket),
whether a dim is a multiple of its block (``EVEN_M/N/K``: a dim that is not gets
masked loads and stores), the grid, and attention's head-dim blocks and softmax scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from compiler.templates.tiles import attention_tiles, gemm_tiles, next_pow2

LOG2E = 1.4426950408889634
# What a size-generic template decides per launch and what it fixed without the sizes (the compile
# report's ``KernelReport.size_decisions``; docs/compiler.md, "Decisions that depend on sizes")
GEMM_DECISIONS = ("per launch: tile (tuned per size bucket), grid, EVEN_M/N/K masks",
                  "size-independent: one tile per program (no persistent or TMA variants), no split-K, int64 indices")
ATTENTION_DECISIONS = ("per launch: tile (tuned per size bucket), grid, head-dim blocks, default softmax scale",
                       "size-independent: int64 indices")


def _lambda(sizes: tuple[str, ...], values: tuple[str, ...]) -> Any:
    """A function of the size arguments returning ``values`` (Python code over them)."""
    return eval(f"lambda {', '.join(sizes)}: ({', '.join(values)},)")  # noqa: S307  (our own generated code)


@dataclass(frozen=True)
class GemmSizeLaunch:
    """A GEMM template's launch over symbolic sizes: ``batch``, ``m``, ``n``, ``k`` are Python code
    over the size arguments ``sizes``."""

    sizes: tuple[str, ...]
    batch: str
    m: str
    n: str
    k: str
    dtype: torch.dtype
    batched: bool
    interpret: bool

    decisions = GEMM_DECISIONS

    def numels(self) -> Any:
        return _lambda(self.sizes, (self.batch, self.m, self.n, self.k))

    def config(self, batch: int, m: int, n: int, k: int) -> tuple[tuple[int, ...], dict]:
        return self.candidates(batch, m, n, k)[0]

    def candidates(self, batch: int, m: int, n: int, k: int) -> list[tuple[tuple[int, ...], dict]]:
        return [self._launch(tile, batch, m, n, k) for tile in gemm_tiles(m, n, k, self.dtype, self.interpret)]

    def _launch(self, tile: Any, batch: int, m: int, n: int, k: int) -> tuple[tuple[int, ...], dict]:
        meta = {"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": tile.block_k,
                "GROUP_M": tile.group_m, "EVEN_M": m % tile.block_m == 0, "EVEN_N": n % tile.block_n == 0,
                "EVEN_K": k % tile.block_k == 0}
        if not self.interpret:
            meta.update(num_warps=tile.warps, num_stages=tile.stages)
        programs = max(1, math.ceil(m / tile.block_m) * math.ceil(n / tile.block_n))
        return (programs,) + ((max(1, batch),) if self.batched else ()), meta


@dataclass(frozen=True)
class AttentionSizeLaunch:
    """An attention template's launch over symbolic sizes: the query rows per kv head (``rows``, the
    group's heads times the query length), the programs along the batch and kv heads (``bh``), the
    keys and the head dims are Python code over ``sizes``; ``scale`` is the softmax scale when it
    is a number, None for SDPA's default ``1 / sqrt(head dim)`` (computed per launch as eager does)."""

    sizes: tuple[str, ...]
    rows: str
    bh: str
    keys: str
    dim: str
    dim_v: str
    scale: float | None
    interpret: bool

    decisions = ATTENTION_DECISIONS

    def numels(self) -> Any:
        return _lambda(self.sizes, (self.rows, self.bh, self.keys, self.dim, self.dim_v))

    def config(self, rows: int, bh: int, keys: int, dim: int, dim_v: int) -> tuple[tuple[int, ...], dict]:
        return self.candidates(rows, bh, keys, dim, dim_v)[0]

    def candidates(self, rows: int, bh: int, keys: int, dim: int, dim_v: int) -> list[tuple[tuple[int, ...], dict]]:
        return [self._launch(tile, rows, bh, dim, dim_v) for tile in attention_tiles(rows, keys, dim, self.interpret)]

    def _launch(self, tile: Any, rows: int, bh: int, dim: int, dim_v: int) -> tuple[tuple[int, ...], dict]:
        scale = self.scale if self.scale is not None else 1 / math.sqrt(dim)
        meta = {"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_D": max(16, next_pow2(dim)),
                "BLOCK_DV": max(16, next_pow2(dim_v)), "QK_SCALE": scale * LOG2E}
        if not self.interpret:
            meta.update(num_warps=tile.warps, num_stages=tile.stages)
        return (max(1, math.ceil(rows / tile.block_m)), max(1, bh)), meta
