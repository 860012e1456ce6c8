"""Sharding is deterministic, covers every entry exactly once and balances by eager time."""

from __future__ import annotations

import random

import pytest

from corpus import zoo
from corpus.entry import Built, Entry
from harness.runner import parse_shard, shard_entries


def _entries() -> list[Entry]:
    rng = random.Random(0)
    timed = [Entry(name=f"t/m{i}", source="t", family="f", factory=lambda s: Built(None),
                   eager_ms=rng.choice([None, 1.0, 50.0, 400.0, 3000.0])) for i in range(60)]
    return timed + zoo.entries()


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_partition_the_entries(count: int) -> None:
    entries = _entries()
    shards = [shard_entries(entries, i, count) for i in range(1, count + 1)]
    names = [e.name for shard in shards for e in shard]
    assert sorted(names) == sorted(e.name for e in entries)  # each exactly once
    # Deterministic whatever the listing order.
    shuffled = list(entries)
    random.Random(1).shuffle(shuffled)
    assert [{e.name for e in shard_entries(shuffled, i, count)} for i in range(1, count + 1)] == \
        [{e.name for e in shard} for shard in shards]
    if count > 1:
        cost = [sum(e.eager_ms or 100.0 for e in shard) for shard in shards]
        assert max(cost) - min(cost) <= 3000.0  # within the largest single entry


def test_parse_shard() -> None:
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "x", "1/"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_run_metadata_marks_a_dirty_tree(monkeypatch) -> None:
    """Results from a tree that differs from HEAD say so (a synced copy on a GPU box recorded an
    old commit id for new code)."""
    import subprocess

    from harness import versions

    def fake_run(cmd, **kwargs):
        out = "abc123\n" if cmd[1] == "rev-parse" else dirty
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(versions.subprocess, "run", fake_run)
    dirty = " M compiler/lowering.py\n"
    assert versions.git_commit() == "abc123-dirty"
    dirty = ""
    assert versions.git_commit() == "abc123"
