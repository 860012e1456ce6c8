"""Small Triton kernels with planted bugs, and correct ones, for the simulator's tests.

Each planted bug is a mistake compiler renderers and kernel authors really make; the
``CASES`` table pairs it with the arguments that trigger it and the finding kind expected.
This module has no side effects at import (the simulator's repro command re-imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

import simulator
from simulator import Kind


# -- bounds ---------------------------------------------------------------------------------
@triton.jit
def add_mask_off_by_one(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n  # planted: <= instead of <
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def copy_missing_tail(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))  # planted: no mask, n is not a multiple of BLOCK


@triton.jit
def copy_store_mask_off_by_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x, mask=offs < n + 1)  # planted: the store's bound is one too far


@triton.jit
def rows_wrong_stride(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * (n_cols + 1) + cols, mask=mask)  # planted: row stride n_cols + 1
    tl.store(out_ptr + row * n_cols + cols, x, mask=mask)


@triton.jit
def transpose_swapped_strides(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)[:, None]
    rn = tl.arange(0, BLOCK_N)[None, :]
    mask = (rm < M) & (rn < N)
    x = tl.load(x_ptr + rm * M + rn, mask=mask)  # planted: row stride M instead of N
    tl.store(out_ptr + rn * M + rm, x, mask=mask)


@triton.jit
def bias_add_broadcast_stride(x_ptr, b_ptr, out_ptr, n_cols, stride_b, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    b = tl.load(b_ptr + row * stride_b + cols, mask=mask)  # planted: the size-1 dim keeps its real stride
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x + b, mask=mask)


@triton.jit
def shift_left_negative_offset(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs - 1, mask=mask), mask=mask)  # planted: offs - 1 at offs == 0


@triton.jit
def read_past_into_neighbour(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs + n, mask=mask)  # planted: + n, i.e. y's elements through x's pointer
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def int32_scaled_index(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    lin = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = lin < n
    idx = (lin * 4194304) // 4194304  # planted: the int32 product wraps once lin >= 512
    tl.store(out_ptr + lin, tl.load(x_ptr + idx, mask=mask), mask=mask)


@triton.jit
def half_read_as_float(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    wide = x_ptr.to(tl.pointer_type(tl.float32))  # planted: an fp16 buffer read as fp32
    tl.store(out_ptr + offs, tl.load(wide + offs, mask=mask), mask=mask)


@triton.jit
def tile_copy_missing_col_mask(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    rn = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    mask = rm < M  # planted: no rn < N
    tl.store(out_ptr + rm * N + rn, tl.load(x_ptr + rm * N + rn, mask=mask), mask=mask)


@triton.jit
def tile_copy(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    rn = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    mask = (rm < M) & (rn < N)
    tl.store(out_ptr + rm * N + rn, tl.load(x_ptr + rm * N + rn, mask=mask), mask=mask)


@triton.jit
def gather_masked_index(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + offs, mask=offs < n)  # masked-off lanes: no `other`
    tl.store(out_ptr + offs, tl.load(x_ptr + idx))  # planted: gathers every lane, masked-off ones too


# -- poison ---------------------------------------------------------------------------------
@triton.jit
def row_sum_no_other(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)  # planted: no other=0
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def row_max_no_other(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)  # planted: no other=-inf
    tl.store(out_ptr + row, tl.max(x, axis=0))


@triton.jit
def row_max_where(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)  # no other, but masked lanes are replaced below
    tl.store(out_ptr + row, tl.max(tl.where(mask, x, float("-inf")), axis=0))


@triton.jit
def scale_store_unmasked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * 2.0, mask=offs < BLOCK)  # planted: store mask wider than the load mask


# -- uninitialized ----------------------------------------------------------------------------
@triton.jit
def accumulate_into_output(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(out_ptr + offs, mask=mask)  # planted: the output was never zeroed
    tl.store(out_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def workspace_half_written(x_ptr, ws_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    half = offs < n // 2
    tl.store(ws_ptr + offs, tl.load(x_ptr + offs, mask=half), mask=half)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(ws_ptr + offs, mask=mask), mask=mask)  # planted: reads the unwritten half


# -- races ----------------------------------------------------------------------------------
@triton.jit
def copy_forgot_pid(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # planted: no program_id offset, every program writes block 0
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def shift_in_place(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs + 1 < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs + 1, mask=mask), mask=mask)  # planted: reads the next block


@triton.jit
def atomic_float_sum(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs), axis=0))  # fp32 atomics: order changes the rounding


@triton.jit
def atomic_count(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum((tl.load(x_ptr + offs) > 0).to(tl.int32), axis=0))


# -- liveness -------------------------------------------------------------------------------
@triton.jit
def wait_for_last_program(flag_ptr, out_ptr):
    pid = tl.program_id(0)
    if pid == tl.num_programs(0) - 1:
        tl.atomic_xchg(flag_ptr, 1)
    else:
        while tl.atomic_add(flag_ptr, 0) == 0:  # planted: waits for a program that runs after it
            pass
    tl.store(out_ptr + pid, pid)


@triton.jit
def loop_forgot_increment(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    start = 0
    while start < n:  # planted: start never advances
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK), mask=start + tl.arange(0, BLOCK) < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


# -- traffic --------------------------------------------------------------------------------
@triton.jit
def three_pass_softmax(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    m = tl.max(tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf")), axis=0)
    s = tl.sum(tl.exp(tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf")) - m), axis=0)
    y = tl.exp(tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0) - m) / s
    tl.store(out_ptr + row * n_cols + cols, y, mask=mask)


@triton.jit
def fma_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y + z, mask=mask)


@dataclass
class Case:
    name: str
    kernel: Any
    make: Callable[[], tuple[tuple, tuple, dict]]  # () -> (grid, args, meta)
    kind: str | None  # the finding kind expected; None: a correct kernel, no findings
    options: dict = field(default_factory=dict)  # check_launch options


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _neighbours(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.randn(2 * n)
    return base[:n], base[n:]  # two arguments side by side in one allocation


def _block_sums(sums: list[float], block: int) -> torch.Tensor:
    x = torch.zeros(len(sums) * block)
    x[::block] = torch.tensor(sums)
    return x


def _spin_args() -> tuple[tuple, tuple, dict]:
    return (4,), (torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)), {}


CASES = [
    Case("mask <= instead of <", add_mask_off_by_one, lambda: ((4,), (_r(100), _r(100), torch.empty(100), 100),
                                                                 {"BLOCK": 32}), Kind.OUT_OF_BOUNDS),
    Case("missing tail mask", copy_missing_tail, lambda: ((4,), (_r(100), torch.empty(100), 100), {"BLOCK": 32}),
         Kind.OUT_OF_BOUNDS),
    Case("store bound one too far", copy_store_mask_off_by_one,
         lambda: ((4,), (_r(100), torch.empty(100), 100), {"BLOCK": 32}), Kind.OUT_OF_BOUNDS),
    Case("wrong row stride", rows_wrong_stride, lambda: ((6,), (_r(6, 10), torch.empty(6, 10), 10), {"BLOCK": 16}),
         Kind.OUT_OF_BOUNDS),
    Case("swapped strides", transpose_swapped_strides,
         lambda: ((1,), (_r(8, 3), torch.empty(3, 8), 8, 3), {"BLOCK_M": 8, "BLOCK_N": 4}), Kind.OUT_OF_BOUNDS),
    Case("size-1 broadcast read with its real stride", bias_add_broadcast_stride,
         lambda: ((4,), (_r(4, 16), _r(1, 16), torch.empty(4, 16), 16, 16), {"BLOCK": 16}), Kind.OUT_OF_BOUNDS),
    Case("negative offset", shift_left_negative_offset, lambda: ((2,), (_r(64), torch.empty(64), 64), {"BLOCK": 32}),
         Kind.OUT_OF_BOUNDS),
    Case("read through another argument's pointer", read_past_into_neighbour,
         lambda: ((2,), (*_neighbours(64), torch.empty(64), 64), {"BLOCK": 32}), Kind.WRONG_BUFFER),
    Case("int32 offset overflow", int32_scaled_index,
         lambda: ((8,), (_r(1024), torch.empty(1024), 1024), {"BLOCK": 128}), Kind.OUT_OF_BOUNDS),
    Case("fp16 buffer read as fp32", half_read_as_float,
         lambda: ((2,), (_r(64).half(), torch.empty(64), 64), {"BLOCK": 32}), Kind.OUT_OF_BOUNDS),
    Case("2-D tile without its column mask", tile_copy_missing_col_mask,
         lambda: ((2, 2), (_r(8, 12), torch.empty(8, 12), 8, 12), {"BM": 4, "BN": 8}), Kind.OUT_OF_BOUNDS),
    Case("gather through masked-off indices", gather_masked_index,
         lambda: ((1,), (_r(64), torch.randint(0, 64, (50,)), torch.empty(64), 50), {"BLOCK": 64}),
         Kind.OUT_OF_BOUNDS),
    Case("sum over masked lanes without other", row_sum_no_other,
         lambda: ((4,), (_r(4, 10), torch.empty(4), 10), {"BLOCK": 16}), Kind.POISON),
    Case("max over masked lanes without other", row_max_no_other,
         lambda: ((4,), (_r(4, 10), torch.empty(4), 10), {"BLOCK": 16}), Kind.POISON),
    Case("store wider than the load mask", scale_store_unmasked,
         lambda: ((1,), (_r(64), torch.empty(64), 40), {"BLOCK": 64}), Kind.POISON),
    Case("accumulate into an unzeroed output", accumulate_into_output,
         lambda: ((2,), (_r(64), simulator.empty(64), 64), {"BLOCK": 32}), Kind.UNINITIALIZED),
    Case("read of a half-written workspace", workspace_half_written,
         lambda: ((1,), (_r(64), simulator.empty(64), torch.empty(64), 64), {"BLOCK": 64}), Kind.UNINITIALIZED),
    Case("every program writes block 0", copy_forgot_pid,
         lambda: ((4,), (_r(128), torch.empty(128), 128), {"BLOCK": 32}), Kind.RACE_WRITE_WRITE),
    Case("in-place shift reads the next program's block", shift_in_place,
         lambda: ((4,), (_r(128), 128), {"BLOCK": 32}), Kind.RACE_READ_WRITE),
    Case("fp32 atomic sum depends on program order", atomic_float_sum,
         lambda: ((8,), (_block_sums([1e8, 1.0, -1e8, 1.0, 3.0, 1e7, -1e7, 0.5], 4), torch.zeros(1)), {"BLOCK": 4}),
         Kind.ORDER_DEPENDENT),
    Case("spin on a flag the last program sets", wait_for_last_program, _spin_args, Kind.LIVENESS),
    Case("loop that never advances", loop_forgot_increment,
         lambda: ((1,), (_r(64), torch.empty(16), 64), {"BLOCK": 16}), Kind.LIVENESS, {"step_budget": 5_000}),
]

CLEAN = [
    Case("add", add, lambda: ((4,), (_r(100), _r(100), torch.empty(100), 100), {"BLOCK": 32}), None),
    Case("tile copy", tile_copy, lambda: ((2, 2), (_r(8, 12), torch.empty(8, 12), 8, 12), {"BM": 4, "BN": 8}), None),
    Case("row sum", row_sum, lambda: ((4,), (_r(4, 10), torch.empty(4), 10), {"BLOCK": 16}), None),
    Case("row max of a where", row_max_where, lambda: ((4,), (_r(4, 10), torch.empty(4), 10), {"BLOCK": 16}), None),
    Case("integer atomic count", atomic_count, lambda: ((8,), (_r(32), torch.zeros(1, dtype=torch.int32)),
                                                        {"BLOCK": 4}), None, {"shuffle": "always"}),
    Case("view inside a larger buffer", add, lambda: ((1,), (_r(80)[8:40], _r(40)[:32], torch.empty(32), 32),
                                                       {"BLOCK": 32}), None),
    Case("softmax", three_pass_softmax, lambda: ((4,), (_r(4, 10), torch.empty(4, 10), 10), {"BLOCK": 16}), None),
]
