"""Crucible's corpus: models and op graphs the harness runs.

Each source is a module listed in ``SOURCES``. A source module provides
``entries() -> list[Entry]`` (cheap: no model is built) and may provide
``unavailable() -> str | None``, a reason when an optional dependency is missing.
"""

from corpus.entry import TIERS, Built, Entry, ExpectedFailure, SizedInputs, ToleranceOverride

# One explicit registry of sources (no import-order magic): name -> module.
SOURCES: dict[str, str] = {
    "zoo": "corpus.zoo",
    "mutation": "corpus.mutation",
    "torchvision": "corpus.torchvision_models",
    "timm": "corpus.timm_models",
    "transformers": "corpus.transformers_models",
    "opinfo": "corpus.opinfo_ops",
    "dynamic": "corpus.dynamic_models",
}

__all__ = ["SOURCES", "TIERS", "Built", "Entry", "ExpectedFailure", "SizedInputs", "ToleranceOverride"]
