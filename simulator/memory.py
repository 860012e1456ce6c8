"""The memory a launch may touch: its tensor arguments, and which of their bytes hold data.

Every tensor argument of a launch becomes an ``ArgBuffer``: the byte range its
*view* spans (storage offset, shape and strides included) and the byte range of
its whole storage. A pointer derived from an argument may only touch that
argument's view; an access elsewhere is out of bounds even when it lands inside
a neighbouring buffer (the CPU allocator places small tensors side by side).

Uninitialized memory is tracked per storage across launches: ``empty`` /
``mark_uninitialized`` register bytes as unwritten; checked stores mark them
written; checked loads of unwritten bytes are findings.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class ArgBuffer:
    index: int
    name: str
    dtype: torch.dtype
    itemsize: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int
    base: int  # the view's data pointer
    lo: int  # first byte address of the view's span
    hi: int  # one past its last byte
    storage_lo: int
    storage_hi: int

    @staticmethod
    def of(index: int, name: str, t: torch.Tensor) -> ArgBuffer:
        itemsize = t.element_size()
        base = t.data_ptr()
        if t.numel() == 0:
            lo = hi = base
        else:
            low = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st < 0)
            high = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st > 0)
            lo, hi = base + low * itemsize, base + (high + 1) * itemsize
        storage = t.untyped_storage()
        return ArgBuffer(index, name, t.dtype, itemsize, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
                         base, lo, hi, storage.data_ptr(), storage.data_ptr() + storage.nbytes())

    def describe(self) -> str:
        return (f"{self.name} ({str(self.dtype).replace('torch.', '')}, shape {list(self.shape)}, "
                f"strides {list(self.strides)}, storage offset {self.storage_offset}, {self.hi - self.lo} bytes)")

    def element_offset(self, address: int) -> float:
        """Offset of ``address`` from the view's data pointer, in elements."""
        return (address - self.base) / self.itemsize

    def contains(self, addresses: np.ndarray, itemsize: int) -> np.ndarray:
        return (addresses >= self.lo) & (addresses + itemsize <= self.hi)

    def ideal_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.itemsize if self.shape else self.itemsize


class InitShadow:
    """Which bytes of one storage have been written, since it was marked uninitialized."""

    def __init__(self, lo: int, nbytes: int) -> None:
        self.lo = lo
        self.written = np.ones(nbytes, dtype=bool)

    def mark(self, start: int, stop: int, written: bool) -> None:
        self.written[max(0, start - self.lo):max(0, stop - self.lo)] = written

    def unwritten(self, addresses: np.ndarray, itemsize: int) -> np.ndarray:
        """Per address: True where one of its ``itemsize`` bytes was never written."""
        offsets = addresses.astype(np.int64) - self.lo
        inside = (offsets >= 0) & (offsets + itemsize <= self.written.size)
        bad = np.zeros(addresses.shape, dtype=bool)
        idx = offsets[inside]
        hit = np.zeros(idx.shape, dtype=bool)
        for k in range(itemsize):
            hit |= ~self.written[idx + k]
        bad[inside] = hit
        return bad

    def write(self, addresses: np.ndarray, itemsize: int) -> None:
        offsets = addresses.astype(np.int64) - self.lo
        offsets = offsets[(offsets >= 0) & (offsets + itemsize <= self.written.size)]
        for k in range(itemsize):
            self.written[offsets + k] = True


# storage data pointer -> shadow; an entry lives as long as the tensor that registered it
_SHADOWS: dict[int, InitShadow] = {}


def _forget(key: int, shadow: InitShadow) -> None:
    if _SHADOWS.get(key) is shadow:
        del _SHADOWS[key]


def mark_uninitialized(t: torch.Tensor) -> torch.Tensor:
    """Declare the bytes ``t`` spans as holding no data yet: checked launches report reads of them
    until a checked store writes them. Returns ``t``."""
    if t.device.type != "cpu":
        raise ValueError(f"mark_uninitialized needs a CPU tensor (the simulator runs on the CPU), got {t.device}")
    storage = t.untyped_storage()
    key = storage.data_ptr()
    shadow = _SHADOWS.get(key)
    if shadow is None or shadow.written.size != storage.nbytes():
        shadow = InitShadow(key, storage.nbytes())
        _SHADOWS[key] = shadow
        weakref.finalize(t, _forget, key, shadow)
    buf = ArgBuffer.of(0, "t", t)
    shadow.mark(buf.lo, buf.hi, written=False)
    return t


def empty(*size: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``torch.empty`` on the CPU whose bytes count as uninitialized for checked launches."""
    return mark_uninitialized(torch.empty(*size, dtype=dtype, device="cpu"))


def empty_like(t: torch.Tensor) -> torch.Tensor:
    return mark_uninitialized(torch.empty_like(t, device="cpu"))


def shadow_for(storage_lo: int) -> InitShadow | None:
    return _SHADOWS.get(storage_lo)
