"""The mutation zoo (``corpus.mutation``) as a corpus source: listed as the suite ``mutation`` and in
smoke, and every entry passing through the harness in-process on crucible-cpp with its state compared
(each entry returns copies of its parameters, buffers and inputs after the call) and the graph and
break counts it pins."""

from __future__ import annotations

import torch

from corpus import SOURCES, mutation, zoo
from corpus.registry import catalog, select
from harness.entry_subject import run_entry
from harness.targets import parse_target


def test_mutation_source_is_a_suite_of_smoke_entries() -> None:
    assert SOURCES["mutation"] == "corpus.mutation"
    entries = select(catalog(sources=["mutation"]).entries, "mutation")
    assert [e.name for e in entries] == [f"mutation/{name}" for name in mutation.PATTERNS]
    assert all(e.tier == "smoke" and "mutation" in e.tags for e in entries)


def test_every_entry_passes_on_crucible_cpp_with_its_state() -> None:
    failed = {}
    for entry in mutation.entries():
        result = run_entry(entry, parse_target("crucible-cpp"), reference="none")
        counts = (result.graphs, result.graph_breaks)
        if result.status != "pass" or counts != zoo.expected_counts(entry, torch.__version__):
            failed[entry.name] = (result.status, result.error, counts)
    assert not failed, failed
