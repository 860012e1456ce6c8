"""Tile configs for the templates: a small table per shape class, timed by the runtime on the first
call (``KernelLauncher.tune``, the fastest config is kept per kernel), plus one config of few, large
programs for the interpreter (it pays per program).

The GPU candidates were measured on an H200 (``harness/bench/tune_gemm.py``, results in
``harness/bench/RESULTS_llm.md``); each list is short because the runtime times every candidate of
every template kernel once (1 + 4 ms each).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def bucket(n: int) -> int:
    """The tuning cache's size bucket: the next power of two (sizes that vary between calls, such as a
    GEMM's rows, share the tuned pick of their bucket)."""
    return next_pow2(n)


def fingerprint(candidates: Sequence[object]) -> str:
    """Names a candidate list, so a cached index means the same config to every reader."""
    return hashlib.sha256(repr(list(candidates)).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class GemmTile:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    warps: int = 4
    stages: int = 3
    persistent: bool = False  # one program per SM walking the tiles
    tma: bool = False  # operands through tensor descriptors (``tma_candidates``)


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
    """Candidate tiles, best guess first (under ``tma_candidates``: each also with tensor descriptors,
    in the interpreter only with them)."""
    if interpret:
        one = GemmTile(min(max(next_pow2(m), 16), 128), min(max(next_pow2(n), 16), 128),
                       min(max(next_pow2(k), 16), 128), 8, 4, 1)
        return [dataclasses.replace(one, tma=True)] if tma_enabled() else [one]
    tiles = _gemm_table(m, n, k, dtype)
    return tiles + [dataclasses.replace(t, tma=True) for t in tiles] if tma_enabled() else tiles


def _gemm_table(m: int, n: int, k: int, dtype: torch.dtype) -> list[GemmTile]:
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


# Split-K for decode GEMMs: a few rows against a deep weight (the down projections, K = 8192 and
# 14336 against N = 2048 and 4096) gives N / BLOCK_N programs, each streaming all of K: about one
# program per SM, each with a long serial loop. Splitting K into S chunks makes S times the programs
# (a batched GEMM writing float32 partials (S, M, N)); a reduction over S then sums them and carries
# the epilogue. Only K divisible by S splits, so both operands stay plain strided loads; each chunk
# keeps at least SPLIT_K_CHUNK of K (a shorter loop no longer hides the reduction's extra launch).
# H200, bf16 (harness/bench/RESULTS_llm.md): 1x2048x8192 into 4 went 0.86x -> 1.15x cuBLAS (8 and 16
# chunks: 0.52x, 0.47x), 1x4096x14336 into 7 0.91x -> 0.99x, 2x4096x14336 into 7 0.97x -> 1.02x.
SPLIT_K_ROWS = 32
SPLIT_K_MIN_DEPTH = 4096
SPLIT_K_CHUNK = 2048
MAX_SPLIT_K = 16
_forced_split: list[int] = []


def gemm_split_k(m: int, n: int, k: int, interpret: bool) -> int:
    """How many K chunks a (M, N, K) GEMM is split into (1: none); see ``SPLIT_K_*`` above."""
    if not all(isinstance(v, int) for v in (m, n, k)):
        return 1  # symbolic sizes: no split (it changes the graph; ``compiler.sizes`` never guards a size)
    if _forced_split:
        s = _forced_split[-1]
        return s if 1 < s <= k and k % s == 0 else 1
    if interpret or m > SPLIT_K_ROWS or k < SPLIT_K_MIN_DEPTH or k < 2 * n:
        return 1
    fits = [s for s in range(2, MAX_SPLIT_K + 1) if k % s == 0 and k // s >= SPLIT_K_CHUNK]
    return max(fits, default=1)


@contextlib.contextmanager
def forced_split_k(splits: int) -> Iterator[None]:
    """Split every template GEMM compiled in the block into ``splits`` K chunks (when ``splits``
    divides its K; 1: never split): what tests and ``harness.bench.tune_gemm --split-k`` compare."""
    _forced_split.append(splits)
    try:
        yield
    finally:
        _forced_split.pop()


# Tensor-descriptor (TMA on Hopper) operand loads: off unless a block asks for them; on the H200
# (``harness.bench.tune_gemm --tma``) they ran at 0.88-0.96x of the same tiles with pointer loads on
# 4096^3 and 8192^3 bf16 (descriptors created per tile in the kernel). Device-side
# descriptors need Triton's scratch allocator (``triton.set_allocator``) on the GPU.
_tma: list[bool] = []


def tma_enabled() -> bool:
    return bool(_tma and _tma[-1])


@contextlib.contextmanager
def tma_candidates(enabled: bool = True) -> Iterator[None]:
    """GEMM templates rendered in the block load strided, 16-byte aligned operands through tensor
    descriptors in extra candidate configs (``TMA=True``; the interpreter: in its only config)."""
    _tma.append(enabled)
    try:
        yield
    finally:
        _tma.pop()


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
