"""Listing entries: built-in sources, external corpora, unavailable sources, suites."""

from __future__ import annotations

from pathlib import Path

import pytest

import corpus
from corpus.entry import Entry
from corpus.registry import Origin, catalog, find_entry, load_external, load_sources, select

GOOD = """
    import torch
    from corpus.entry import Built, Entry

    def entries():
        return [Entry(name="ext/double", source="ext", family="toy", tier="smoke",
                      factory=lambda scale: Built(lambda x: x * 2, (torch.ones(3),)))]
"""
CONSTANT = """
    from corpus.entry import Built, Entry

    ENTRIES = [Entry(name="ext/const", source="ext", family="toy", tier="nightly-cpu", tags=frozenset({"t"}),
                     factory=lambda scale: Built(lambda: 1))]
"""


def test_external_corpus_with_a_broken_file(tmp_path: Path, make_corpus) -> None:
    root = make_corpus(tmp_path / "c", {"good.py": GOOD, "const.py": CONSTANT,
                                         "broken.py": "import no_such_module_xyz\n",
                                         "empty.py": "X = 1\n", "_private.py": "raise SystemExit\n"})
    loads = {load.name.split("/")[-1]: load for load in load_external(root)}
    assert set(loads) == {"good.py", "const.py", "broken.py", "empty.py"}
    assert [e.name for e in loads["good.py"].entries] == ["ext/double"]
    assert [e.name for e in loads["const.py"].entries] == ["ext/const"]
    assert "no_such_module_xyz" in loads["broken.py"].unavailable
    assert "neither entries(), ENTRIES nor TESTCASES" in loads["empty.py"].unavailable
    entry = find_entry("ext/double", loads["good.py"].origin)
    assert isinstance(entry, Entry) and entry.build().model(2) == 4
    assert "does not exist" in load_external(tmp_path / "missing")[0].unavailable


def test_missing_or_failing_source_is_unavailable_not_a_crash(monkeypatch, tmp_path: Path, make_corpus) -> None:
    make_corpus(tmp_path, {"raising_source.py": "def entries():\n    raise RuntimeError('boom')\n",
                            "optional_source.py": "def unavailable():\n    return 'needs foo'\n"
                                                  "def entries():\n    return []\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(corpus.SOURCES, "missing", "corpus.no_such_source")
    monkeypatch.setitem(corpus.SOURCES, "raising", "raising_source")
    monkeypatch.setitem(corpus.SOURCES, "optional", "optional_source")
    loads = {load.name: load for load in load_sources(["zoo", "missing", "raising", "optional"])}
    assert len(loads["zoo"].entries) >= 40 and loads["zoo"].unavailable is None
    assert "not importable" in loads["missing"].unavailable
    assert "boom" in loads["raising"].unavailable
    assert loads["optional"].unavailable == "needs foo"


def test_suites_are_cumulative_tiers_or_sources(tmp_path: Path, make_corpus) -> None:
    cat = catalog([str(make_corpus(tmp_path, {"good.py": GOOD, "const.py": CONSTANT}))], sources=["zoo"])
    names = lambda es: {e.name for e in es}
    smoke = select(cat.entries, "smoke")
    assert "ext/double" in names(smoke) and "ext/const" not in names(smoke)
    assert {"ext/double", "ext/const"} <= names(select(cat.entries, "nightly-cpu"))
    assert names(select(cat.entries, "ext")) == {"ext/double", "ext/const"}
    assert names(select(cat.entries, "all", tag="t")) == {"ext/const"}
    assert names(select(cat.entries, None, names=["double"])) == {"ext/double"}
    assert all(e.source == "zoo" for e in select(cat.entries, "zoo"))
    with pytest.raises(KeyError):
        select(cat.entries, "no-such-suite")
    assert cat.origin_of("ext/double").external and cat.origin_of("zoo/mlp") == Origin("corpus.zoo")


CRAWLED = """
    import torch
    from _shared_blocks import Scale  # a sibling helper of the crawled corpus

    class Block(torch.nn.Module):
        def __init__(self, width, gain=1.0):
            super().__init__()
            self.lin, self.scale = torch.nn.Linear(width, width), Scale(gain)

        def forward(self, x, shift=0.0):
            return self.scale(self.lin(x).relu()) + shift

    TESTCASES = [
        # (nn.Module, init_args, forward_args, jit_compiles)
        (Block, lambda: ([4], {}), lambda: ([torch.rand([2, 4])], {}), True),
        (Scale, lambda: ([], {'gain': 3.0}), lambda: ([torch.rand([4, 4, 4, 4])], {}), False),
        (Block, lambda: ([], {'width': 8, 'gain': 0.5}), lambda: ([torch.rand([3, 8])], {'shift': 1.0}), False),
    ]
"""
SHARED = """
    import torch

    class Scale(torch.nn.Module):
        def __init__(self, gain=2.0):
            super().__init__()
            self.gain = gain

        def forward(self, x):
            return x * self.gain
"""


def test_a_crawled_file_with_testcases_lists_one_entry_per_case(tmp_path: Path, make_corpus) -> None:
    """The test-case format of crawled-module parity suites: ``TESTCASES`` of (class, init_args,
    forward_args, ...); sibling helpers import by module name; a malformed case makes the file
    unavailable with the case's index."""
    root = make_corpus(tmp_path / "crawled", {"test_repo.py": CRAWLED, "_shared_blocks.py": SHARED,
                                              "test_bad.py": "TESTCASES = [(1, 2)]\n"})
    loads = {load.name.split("/")[-1]: load for load in load_external(root)}
    assert [e.name for e in loads["test_repo.py"].entries] == ["test_repo/Block", "test_repo/Scale",
                                                              "test_repo/Block_2"]
    assert "TESTCASES[0] is not" in loads["test_bad.py"].unavailable
    built = find_entry("test_repo/Block_2", loads["test_repo.py"].origin).build()
    assert built.kwargs == {"shift": 1.0} and built.inputs[0].shape == (3, 8)
    assert built.model(*built.inputs, **built.kwargs).shape == (3, 8) and not built.model.training
