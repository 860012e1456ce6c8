"""Tile configs for the templates: a small table per shape class, timed by the runtime on the first
call (``KernelLauncher.tune``, the fastest config is kept per kernel), plus one config of few, large
programs for the interpreter (it pays per program).

The GPU candidates were measured on an H200 (``compiler/bench/tune_gemm.py``, results in
``compiler/bench/RESULTS_llm.md``); each list is short because the runtime times every candidate of
every template kernel once (1 + 4 ms each).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


@dataclass(frozen=True)
class GemmTile:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    warps: int = 4
    stages: int = 3
    persistent: bool = False  # one program per SM walking the tiles


# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
_LARGE_16BIT = [(128, 256, 64, 8, 8, 3), (128, 128, 64, 8, 4, 4), (256, 128, 64, 8, 8, 3),
                (128, 256, 64, 8, 8, 3, True), (128, 128, 64, 8, 8, 4, True)]
_MEDIUM_16BIT = [(64, 128, 64, 8, 4, 4), (128, 64, 64, 8, 4, 4), (64, 64, 64, 8, 4, 4), (128, 128, 64, 8, 4, 4),
                 (64, 128, 128, 8, 4, 3), (128, 128, 64, 8, 4, 4, True)]
# decode: a few rows against a whole weight matrix is a stream over the weights; narrow N tiles
# give enough programs to cover every SM, deep K tiles keep many loads in flight
_SKINNY = [(16, 32, 256, 1, 4, 4), (16, 64, 256, 1, 4, 3), (16, 16, 512, 1, 4, 3), (16, 64, 128, 1, 4, 5),
           (32, 64, 128, 1, 4, 4)]
# few output columns (a convolution's channels): narrow N tiles, tall M tiles
_NARROW = [(128, 64, 64, 8, 4, 4), (256, 64, 64, 8, 8, 3), (64, 64, 64, 8, 4, 4), (128, 32, 64, 8, 4, 4)]
_FP32 = [(128, 128, 32, 8, 8, 3), (64, 128, 32, 8, 4, 3), (64, 64, 32, 8, 4, 4)]


def gemm_tiles(m: int, n: int, k: int, dtype: torch.dtype, interpret: bool) -> list[GemmTile]:
    """Candidate tiles, best guess first."""
    if interpret:
        return [GemmTile(min(max(next_pow2(m), 16), 128), min(max(next_pow2(n), 16), 128),
                         min(max(next_pow2(k), 16), 128), 8, 4, 1)]
    if m <= 32:
        table = _SKINNY
    elif dtype == torch.float32:
        table = _FP32
    elif n <= 128:
        table = _NARROW
    elif m * n >= 2048 * 2048:
        table = _LARGE_16BIT
    else:
        table = _MEDIUM_16BIT
    return [GemmTile(*row) for row in table]


@dataclass(frozen=True)
class AttentionTile:
    block_m: int
    block_n: int
    warps: int = 4
    stages: int = 2


def attention_tiles(rows: int, keys: int, head_dim: int, interpret: bool) -> list[AttentionTile]:
    """Candidate (BLOCK_M query rows, BLOCK_N keys) tiles; ``rows`` counts query rows per kv head."""
    if interpret:
        return [AttentionTile(min(max(next_pow2(rows), 16), 64), min(max(next_pow2(keys), 16), 64), 4, 1)]
    if rows <= 64:  # decode / short prefill: one block of rows, wide key blocks
        return [AttentionTile(16, 128, 4, 3), AttentionTile(16, 64, 4, 3), AttentionTile(32, 64, 4, 3)]
    if head_dim <= 64:
        return [AttentionTile(128, 64, 4, 3), AttentionTile(128, 128, 8, 3), AttentionTile(64, 64, 4, 3)]
    return [AttentionTile(128, 64, 8, 3), AttentionTile(128, 128, 8, 2), AttentionTile(64, 64, 4, 3)]
