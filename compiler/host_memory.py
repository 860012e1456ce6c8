"""Huge pages for the wrapper's large CPU buffers (the ``huge_pages`` option).

A CPU buffer of 32 MiB or more is a fresh ``mmap`` from the C allocator on every call, and the kernel
that first writes it takes one page fault per 4 KiB page: on a 2-core machine, allocating and filling
32 MiB took 9.4 ms where filling it again took 0.3 ms, so a layer norm over 8192x1024 float32 values
spent most of its time in faults, eager's and Crucible's alike. Advising the buffer's 2 MiB-aligned
interior with ``MADV_HUGEPAGE`` before anything touches it makes those faults 2 MiB each: 1.8 ms for
the same allocation and fill (torch's ``THP_MEM_ALLOC_ENABLE=1`` does the same for every allocation
of the process; this advises only the compiled graph's own buffers). The storage stays torch's own
allocation: resizable, freed as usual.

Only where the kernel lets a process ask for huge pages (Linux, transparent huge pages ``always`` or
``madvise``), and only for buffers of at least ``MIN_BYTES`` (smaller ones come from the allocator's
heap, already faulted in, after a first call). Where a machine compacts memory on a huge-page fault
(``defrag`` set to ``madvise`` on a fragmented machine), a first touch can stall; the option turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path
from typing import Any

import torch

HUGE_PAGE = 2 << 20
MIN_BYTES = 4 << 20  # at least one whole aligned huge page inside any allocation this size
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _libc(name: str, argtypes: list) -> Any:
    """The C library's function ``name`` with its signature set (returning int), or None if missing."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


@functools.cache
def _madvise():  # noqa: ANN202  the C function, or None where huge pages cannot be asked for
    if not sys.platform.startswith("linux"):
        return None
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        return None
    if "[always]" not in setting and "[madvise]" not in setting:
        return None
    return _libc("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


@functools.cache
def _mincore():  # noqa: ANN202  the C function, or None where it is missing
    return _libc("mincore", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p])


def _resident(address: int) -> bool:
    """Whether the page at ``address`` (page-aligned) is in memory: a buffer the allocator handed out
    again, already faulted in, rather than a fresh mapping (False where it cannot be told)."""
    mincore = _mincore()
    if mincore is None:
        return False
    vec = ctypes.create_string_buffer(1)
    return mincore(address, 1, vec) == 0 and bool(vec.raw[0] & 1)


def aligned_interior(start: int, nbytes: int) -> tuple[int, int]:
    """The whole 2 MiB pages inside ``[start, start + nbytes)``: (first address, length; 0 if none)."""
    low = (start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    high = (start + nbytes) & ~(HUGE_PAGE - 1)
    return low, max(0, high - low)


# ``_advise_python`` in one native call. After a kernel that streamed tens of MiB the wrapper's Python runs
# from cold caches, and there a large allocation with the Python steps (the interior's arithmetic, mincore
# through ctypes and its result buffer) took 120-145 us against 84-100 us with this function's one ctypes
# call, and 40-50 us alone (2-core EPYC).
ADVISE_SOURCE = r"""
#include <cstddef>
#include <cstdint>
#include <sys/mman.h>

// 1: advised; 0: nothing to advise (no whole huge page inside, or the first one is in memory); -1: refused
extern "C" int crucible_advise_huge(uintptr_t start, size_t nbytes) {
  const uintptr_t page = uintptr_t(2) << 20;
  const uintptr_t low = (start + page - 1) & ~(page - 1);
  const uintptr_t high = (start + nbytes) & ~(page - 1);
  if (high <= low) return 0;
  unsigned char resident = 0;
  if (mincore(reinterpret_cast<void*>(low), 1, &resident) == 0 && (resident & 1)) return 0;
  return madvise(reinterpret_cast<void*>(low), high - low, MADV_HUGEPAGE) == 0 ? 1 : -1;
}
"""


def _advise_python(start: int, nbytes: int) -> int:
    """Advise the whole huge pages inside ``[start, start + nbytes)`` unless the first one is in memory
    (``ADVISE_SOURCE``'s function, in Python: where no C++ compiler builds it)."""
    low, length = aligned_interior(start, nbytes)
    # memory the allocator reuses is faulted in already: the advice would only cost its call (40-60
    # us, the VMA split: a 16-thread layer norm's compiled call 0.645 ms against 0.594 without it)
    if not length or _resident(low):
        return 0
    return 1 if _madvise()(low, length, MADV_HUGEPAGE) == 0 else -1  # a refusal changes only the speed


@functools.cache
def _advise():  # noqa: ANN202  advise(start, nbytes) -> int, or None where huge pages cannot be asked for
    if _madvise() is None:
        return None
    from compiler import cpp_build

    try:
        library = cpp_build.build_library(ADVISE_SOURCE, "crucible_advise_huge")
    except cpp_build.CppBuildError:
        return _advise_python
    return library.function("crucible_advise_huge", [ctypes.c_size_t, ctypes.c_size_t], ctypes.c_int)


def huge(t: torch.Tensor) -> torch.Tensor:
    """``t`` (a fresh CPU buffer), its storage advised to use huge pages when it is large enough; the
    wrapper calls it on its large (or symbolic-size) CPU allocations before any kernel writes them. A
    buffer whose first huge page is already in memory (the allocator's reuse of a freed block) is left
    alone: nothing will fault there."""
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes >= MIN_BYTES:
        advise = _advise()
        if advise is not None:
            advise(storage.data_ptr(), nbytes)
    return t
