"""The ``huge_pages`` option: the wrapper advises its large CPU buffers to use huge pages before their
first write (``compiler.host_memory``); small ones, GPU buffers and the option off are left alone."""

from __future__ import annotations

import ctypes
import mmap
import re

import pytest
import torch

import compiler
from compiler import host_memory
from compiler.pipeline import GraphCompilation


@pytest.fixture
def advised(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Each madvise call as (address, length, advice), on any machine (the advice's Python steps)."""
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(host_memory, "_advise", lambda: host_memory._advise_python)
    monkeypatch.setattr(host_memory, "_madvise", lambda: lambda *args: calls.append(args) or 0)
    monkeypatch.setattr(host_memory, "_resident", lambda address: False)  # every buffer a fresh mapping
    return calls


def _advised_in_smaps(address: int) -> bool | None:
    """Whether the kernel holds the mapping at ``address`` as advised to use huge pages (``hg`` among
    its VmFlags in /proc/self/smaps); None where that cannot be read."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0]
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head):
            low, high = (int(v, 16) for v in head.split("-"))
            inside = low <= address < high
        elif inside and head == "VmFlags:":
            return "hg" in line.split()[1:]
    return None


def test_the_native_advice_advises_a_fresh_mapping_once() -> None:
    """The one-call advice (built from ``ADVISE_SOURCE``): a fresh mapping is advised, its first huge page
    untouched; once written, the same range is left alone, and a range holding no whole huge page too."""
    if host_memory._madvise() is None:
        pytest.skip("this machine's kernel does not let a process ask for huge pages")
    advise = host_memory._advise()
    if advise is host_memory._advise_python:
        pytest.skip("no C++ compiler: the Python steps stand in (tested below)")
    size = 3 * host_memory.HUGE_PAGE
    fresh = mmap.mmap(-1, size)
    first = ctypes.c_char.from_buffer(fresh)
    start = ctypes.addressof(first)
    low, _ = host_memory.aligned_interior(start, size)
    assert _advised_in_smaps(low) in (False, None)
    assert advise(start, host_memory.HUGE_PAGE - 1) == 0  # no whole huge page inside
    assert advise(start, size) == 1
    assert _advised_in_smaps(low) in (True, None)
    fresh[low - start] = 1  # the first huge page now in memory
    assert advise(start, size) == 0
    del first  # (the mapping closes once nothing points into it)
    fresh.close()


def test_residency_tells_a_fresh_mapping_from_touched_memory() -> None:
    if host_memory._mincore() is None:
        pytest.skip("no mincore here")
    fresh = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    first = ctypes.c_char.from_buffer(fresh)
    assert not host_memory._resident(ctypes.addressof(first))
    fresh[0] = 1
    assert host_memory._resident(ctypes.addressof(first))
    del first  # (the mapping closes once nothing points into it)
    fresh.close()


def test_memory_already_in_use_is_not_advised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reused memory costs the advice's call (40-60 us) and saves no fault: a buffer whose pages are
    in memory is left alone, one that is not is advised."""
    calls: list = []
    monkeypatch.setattr(host_memory, "_advise", lambda: host_memory._advise_python)
    monkeypatch.setattr(host_memory, "_madvise", lambda: lambda *args: calls.append(args) or 0)
    big = torch.ones(2 * host_memory.MIN_BYTES // 4, dtype=torch.float32)  # every page written
    host_memory.huge(big)
    assert calls == []
    monkeypatch.setattr(host_memory, "_resident", lambda address: False)
    host_memory.huge(big)
    assert len(calls) == 1


def test_the_aligned_interior_is_the_whole_huge_pages_inside_a_range() -> None:
    page = host_memory.HUGE_PAGE
    assert host_memory.aligned_interior(0, 3 * page) == (0, 3 * page)
    assert host_memory.aligned_interior(4096, 3 * page) == (page, 2 * page)  # the pages cut at both ends left out
    assert host_memory.aligned_interior(page - 1, page) == (page, 0)
    assert host_memory.aligned_interior(5 * page + 1, 2 * page - 1) == (6 * page, page)
    assert host_memory.aligned_interior(5 * page + 1, 2 * page - 2) == (6 * page, 0)


def test_huge_advises_large_storages_only(advised: list) -> None:
    big = torch.empty(host_memory.MIN_BYTES // 4, dtype=torch.float32)
    assert host_memory.huge(big) is big
    ((address, length, advice),) = advised
    start, end = big.data_ptr(), big.data_ptr() + big.untyped_storage().nbytes()
    assert advice == host_memory.MADV_HUGEPAGE and length > 0
    assert start <= address and address + length <= end and address % host_memory.HUGE_PAGE == 0
    host_memory.huge(torch.empty(host_memory.MIN_BYTES // 4 - 1, dtype=torch.float32))
    assert len(advised) == 1


def _wrapper(fn, *inputs, **options):
    return GraphCompilation(compiler.trace_aten(fn, *inputs), "cpp", "inference", **options).compile()


def test_the_wrapper_advises_its_large_cpu_buffers(advised: list) -> None:
    """A layer norm over 8192x1024 float32 values spent most of its call in the page faults of its
    32 MiB output (2-core CPU: 9.4 ms to allocate and fill it, 1.8 ms with huge pages)."""
    rows = host_memory.MIN_BYTES // (4 * 256)

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.layer_norm(x, (256,), w) * 2, x.sum(1)

    x, w = torch.randn(rows, 256), torch.randn(256)
    wrapper = _wrapper(fn, x, w)
    allocations = re.findall(r"^ *\w+ = (.*empty_strided\(.*)$", wrapper.source, re.M)
    big = [a for a in allocations if f"({rows}, 256)" in a]
    assert big and all(a.startswith("huge(") for a in big), wrapper.source
    assert any(not a.startswith("huge(") for a in allocations), wrapper.source  # the row sums: small
    for got, want in zip(wrapper.call([x, w]), fn(x, w), strict=True):
        torch.testing.assert_close(got, want)
    assert len(advised) == len(big)
    off = _wrapper(fn, x, w, huge_pages=False)
    assert "huge(" not in off.source
    poisoned = _wrapper(fn, x, w, poison=True)  # the advice comes before the fill
    assert re.search(r"uninitialized\(huge\(empty_strided\(", poisoned.source), poisoned.source


def test_the_option_is_checked_and_reaches_torch_compile(advised: list) -> None:
    with pytest.raises(ValueError, match="huge_pages must be True or False"):
        compiler.config.Options.parse({"huge_pages": "yes"})
    x = torch.randn(host_memory.MIN_BYTES // 4)
    for option, calls in ((True, 1), (False, 0)):
        torch._dynamo.reset()
        advised.clear()
        fn = torch.compile(lambda t: t * 2 + 1, backend="crucible", options={"codegen": "cpp", "huge_pages": option})
        torch.testing.assert_close(fn(x), x * 2 + 1)
        assert len(advised) == calls
