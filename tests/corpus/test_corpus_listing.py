"""Listing the corpus sources: fast, unique and stable names, valid metadata."""

from __future__ import annotations

import importlib
import time

import pytest

from corpus import tiers
from corpus.entry import TIERS

OUR_SOURCES = {
    "torchvision": "corpus.torchvision_models",
    "timm": "corpus.timm_models",
    "transformers": "corpus.transformers_models",
    "opinfo": "corpus.opinfo_ops",
}
# Names that must keep existing: results are keyed by name across runs.
PINNED_NAMES = {
    "torchvision": ["torchvision/resnet18", "torchvision/fasterrcnn_resnet50_fpn", "torchvision/raft_small"],
    "timm": ["timm/resnet50", "timm/vit_base_patch16_224", "timm/test_vit"],
    "transformers": ["transformers/bert", "transformers/gpt2", "transformers/t5", "transformers/whisper"],
    "opinfo": ["opinfo/add-float32-0", "opinfo/nn.functional.conv2d-float32-0", "opinfo/sum-float32-0"],
}
MINIMUM_COUNT = {"torchvision": 100, "timm": 1000, "transformers": 300, "opinfo": 500}


def _fresh_entries(source: str) -> tuple[list, float]:
    module = importlib.import_module(OUR_SOURCES[source])
    if module.unavailable():
        pytest.skip(module.unavailable())
    cached = getattr(module, "_entries", None)
    if cached is not None:
        cached.cache_clear()  # time the real work, not the cache
    start = time.perf_counter()
    entries = module.entries()
    return entries, time.perf_counter() - start


@pytest.mark.parametrize("source", sorted(OUR_SOURCES))
def test_entries_are_fast_unique_and_well_formed(source: str) -> None:
    entries, seconds = _fresh_entries(source)
    assert seconds < 4.0, f"{source}: entries() took {seconds:.1f} s (the catalog in corpus/data is missing?)"
    names = [e.name for e in entries]
    assert len(names) == len(set(names))
    assert len(entries) >= MINIMUM_COUNT[source]
    for entry in entries:
        assert entry.name.startswith(f"{source}/") and entry.source == source
        assert entry.tier in TIERS
        assert entry.family and entry.tags
        assert entry.params is None or entry.params >= 0
        assert entry.eager_ms is None or entry.eager_ms >= 0


@pytest.mark.parametrize("source", sorted(OUR_SOURCES))
def test_names_are_stable(source: str) -> None:
    first, _ = _fresh_entries(source)
    second, _ = _fresh_entries(source)
    assert [e.name for e in first] == [e.name for e in second]
    names = {e.name for e in first}
    assert not [n for n in PINNED_NAMES[source] if n not in names]


def test_listing_builds_no_model_and_imports_no_model_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, corpus.timm_models as t, corpus.transformers_models as h, corpus.opinfo_ops as o, "
        "corpus.torchvision_models as v\n"
        "n = sum(len(m.entries()) for m in (t, h, o, v))\n"
        "heavy = [m for m in ('timm', 'transformers', 'torchvision') if m in sys.modules]\n"
        "print(n, heavy)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr[-2000:]


def test_tiers_cover_smoke_across_sources() -> None:
    by_source = {s: _fresh_entries(s)[0] for s in OUR_SOURCES}
    smoke = [e for entries in by_source.values() for e in entries if e.tier == "smoke"]
    assert len({e.source for e in smoke}) == len(OUR_SOURCES)
    assert len({(e.source, e.family) for e in smoke}) >= 20
    # Every smoke entry was measured fast in eager: tiers come from data.
    assert all(e.eager_ms is not None and e.eager_ms <= tiers.SMOKE_MAX_EAGER_MS for e in smoke)
    assert len(smoke) >= 40
