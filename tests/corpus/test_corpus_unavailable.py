"""A source whose optional package is missing reports itself instead of failing."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

MISSING = {
    "corpus.timm_models": "timm",
    "corpus.transformers_models": "transformers",
    "corpus.torchvision_models": "torchvision",
    "corpus.opinfo_ops": "expecttest",
}


@pytest.mark.parametrize("module_name", sorted(MISSING))
def test_missing_package_makes_source_unavailable(module_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(module_name)
    real_find_spec = importlib.util.find_spec
    package = MISSING[module_name]

    def find_spec(name: str, *args: object, **kwargs: object) -> object:
        return None if name == package else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    reason = module.unavailable()
    assert reason and package in reason
    assert module.entries() == []


@pytest.mark.parametrize("module_name", sorted(MISSING))
def test_installed_package_makes_source_available(module_name: str) -> None:
    module = importlib.import_module(module_name)
    if importlib.util.find_spec(MISSING[module_name]) is None:
        pytest.skip(f"{MISSING[module_name]} is not installed here")
    assert module.unavailable() is None


def test_model_missing_from_the_installed_version_is_entry_unavailable() -> None:
    """A listed model that the installed timm/transformers does not have (an older version than
    the corpus was built from) raises EntryUnavailable, which the harness records as skipped."""
    from corpus.entry import EntryUnavailable

    pytest.importorskip("timm")
    pytest.importorskip("transformers")
    from corpus import timm_models, transformers_models

    with pytest.raises(EntryUnavailable, match="has no model 'no_such_net_v0'"):
        timm_models.build("no_such_net_v0", {"input_size": [3, 8, 8]}, "small")
    with pytest.raises(EntryUnavailable, match="has no model type 'no_such_type'"):
        transformers_models.tiny_config("no_such_type", "small")


def test_op_missing_from_the_installed_torch_is_entry_unavailable() -> None:
    from corpus.entry import EntryUnavailable

    pytest.importorskip("expecttest")
    from corpus import opinfo_ops

    with pytest.raises(EntryUnavailable, match="OpInfo database has no no_such_op"):
        opinfo_ops.build("no_such_op", "", "float32", 0, 0, "small")
    with pytest.raises(EntryUnavailable, match="sample 100000 does not exist"):
        opinfo_ops.build("add", "", "float32", 100000, 0, "small")
