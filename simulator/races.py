"""The access log of one launch: which program id read and wrote which element addresses.

The interpreter runs programs one at a time, so two programs touching one address never
collide there; on a GPU they run concurrently, in no defined order. From the log: a byte
written by two program ids is a write/write race; a byte one program id reads and another
writes is a read/write race. Atomics are excluded (ordering them is their job). Overlaps are
found at element granularity: accesses are compared by their first byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class AccessLog:
    # (element addresses, linear program id, itemsize, argument index, source line) per access
    reads: list[tuple[np.ndarray, int, int, int | None, int | None]] = field(default_factory=list)
    writes: list[tuple[np.ndarray, int, int, int | None, int | None]] = field(default_factory=list)
    atomics: list[tuple[np.ndarray, int, int, int | None, int | None]] = field(default_factory=list)

    def read(self, addrs: np.ndarray, pid: int, itemsize: int, arg: int | None, line: int | None = None) -> None:
        if addrs.size:
            self.reads.append((addrs.reshape(-1), pid, itemsize, arg, line))

    def write(self, addrs: np.ndarray, pid: int, itemsize: int, arg: int | None, line: int | None = None) -> None:
        if addrs.size:
            self.writes.append((addrs.reshape(-1), pid, itemsize, arg, line))

    def atomic(self, addrs: np.ndarray, pid: int, itemsize: int, arg: int | None, line: int | None = None) -> None:
        if addrs.size:
            self.atomics.append((addrs.reshape(-1), pid, itemsize, arg, line))


def _flatten(entries: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(addresses, program ids, entry index) over all entries."""
    if not entries:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    addrs = np.concatenate([e[0] for e in entries]).astype(np.uint64)
    pids = np.concatenate([np.full(e[0].size, e[1], dtype=np.int64) for e in entries])
    which = np.concatenate([np.full(e[0].size, i, dtype=np.int64) for i, e in enumerate(entries)])
    return addrs, pids, which


def logical_bytes(entries: list) -> int:
    return int(sum(e[0].size * e[2] for e in entries))


def unique_bytes(entries: list) -> int:
    addrs, _, which = _flatten(entries)
    if not addrs.size:
        return 0
    sizes = np.array([e[2] for e in entries], dtype=np.int64)[which]
    _, first = np.unique(addrs, return_index=True)
    return int(sizes[first].sum())


def bytes_per_arg(entries: list) -> dict[int | None, int]:
    """Distinct bytes touched per argument index."""
    out: dict[int | None, int] = {}
    by_arg: dict[int | None, list] = {}
    for e in entries:
        by_arg.setdefault(e[3], []).append(e)
    for arg, items in by_arg.items():
        out[arg] = unique_bytes(items)
    return out


@dataclass
class Race:
    kind: str  # "write_write" | "read_write"
    address: int
    pids: tuple[int, int]  # (first writer, the other program: second writer or reader)
    count: int  # racing addresses
    lines: tuple[int | None, int | None]  # source lines of the two accesses


def find_races(log: AccessLog) -> list[Race]:
    w_addr, w_pid, w_which = _flatten(log.writes)
    if not w_addr.size:
        return []
    races = []
    order = np.lexsort((w_pid, w_addr))
    w_addr, w_pid, w_which = w_addr[order], w_pid[order], w_which[order]
    # one entry per (address, pid): a program rewriting its own element is not a race
    keep = np.ones(w_addr.size, dtype=bool)
    keep[1:] = (w_addr[1:] != w_addr[:-1]) | (w_pid[1:] != w_pid[:-1])
    w_addr, w_pid, w_which = w_addr[keep], w_pid[keep], w_which[keep]
    shared = np.flatnonzero(w_addr[1:] == w_addr[:-1])
    if shared.size:
        i = int(shared[0])
        races.append(Race("write_write", int(w_addr[i]), (int(w_pid[i]), int(w_pid[i + 1])),
                          int(np.unique(w_addr[shared]).size),
                          (log.writes[w_which[i]][4], log.writes[w_which[i + 1]][4])))
    r_addr, r_pid, r_which = _flatten(log.reads)
    if r_addr.size:
        # the first writer of each address (enough: an address with two writers is already a race)
        first = np.ones(w_addr.size, dtype=bool)
        first[1:] = w_addr[1:] != w_addr[:-1]
        u_addr, u_pid = w_addr[first], w_pid[first]
        pos = np.searchsorted(u_addr, r_addr)
        pos_c = np.minimum(pos, u_addr.size - 1)
        hit = (pos < u_addr.size) & (u_addr[pos_c] == r_addr) & (u_pid[pos_c] != r_pid)
        if hit.any():
            i = int(np.flatnonzero(hit)[0])
            u_which = w_which[first]
            races.append(Race("read_write", int(r_addr[i]), (int(u_pid[pos_c[i]]), int(r_pid[i])),
                              int(np.unique(r_addr[hit]).size),
                              (log.writes[u_which[pos_c[i]]][4], log.reads[r_which[i]][4])))
    return races
