"""The corpus entry: one model (or op graph) the harness can build and run.

An entry is plain data plus a factory. Listing entries never builds a model: the
factory runs only when the harness executes the entry, inside a worker process,
under ``torch.manual_seed(entry.seed)`` so weights and inputs are deterministic.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Tiers, smallest first. An entry's tier is the smallest suite it belongs to;
# every suite contains the entries of the tiers before it.
TIERS = ("smoke", "nightly-cpu", "nightly-gpu", "full")

# Input scales a factory is asked for: "small" for CPU and interpreter runs,
# "full" for GPU runs at the model's natural input size.
SCALES = ("small", "full")


@dataclass(frozen=True)
class ToleranceOverride:
    """Loosened parity limits for one entry, always with a written reason.

    ``dtype`` limits the override to one working dtype ("float16", ...); None
    applies it to every dtype. Unset limits keep the oracle's defaults.
    """

    reason: str
    dtype: str | None = None
    rmse_ratio: float | None = None  # max compiled-RMSE / eager-RMSE vs the fp64 reference
    cosine: float | None = None  # min cosine similarity when the cosine fallback applies
    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError("a tolerance override needs a written reason")


@dataclass(frozen=True)
class ExpectedFailure:
    """A known failure of one target (a glob such as ``crucible-*`` is allowed)."""

    target: str
    status: str  # the status the harness is expected to report, e.g. "fail_compile"
    reason: str

    def matches(self, target: str) -> bool:
        return fnmatch.fnmatchcase(target, self.target)


class EntryUnavailable(Exception):
    """Raised by a factory when this installation cannot build the entry at all (the installed
    package version has no such model): the harness records ``skipped`` with the message,
    not an eager failure. The corpus lists entries from the versions it was built with."""


@dataclass(frozen=True)
class SizedInputs:
    """The inputs of one call in an entry's own size schedule (``Built.sizes``): ``batch`` and ``seq``
    are recorded with its result (``seq``: a sequence or KV-cache length), either None where it has
    none; ``label`` names the call in messages where those two do not say what varies."""

    batch: int | None
    seq: int | None
    inputs: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class Built:
    """What a factory returns: the callable under test and its example inputs. ``sizes``: where the
    entry is a variable-length workload, the inputs of every call it makes, in order (a text model at
    several sequence lengths, the steps of a decode loop with a growing cache); the harness's
    ``--dynamic`` runs and grades these instead of resizing ``inputs`` itself. The first of them
    is ``inputs``."""

    model: Any  # torch.nn.Module or any callable
    inputs: tuple = ()
    kwargs: dict = field(default_factory=dict)
    sizes: tuple[SizedInputs, ...] = ()


@dataclass(frozen=True)
class Entry:
    """One corpus entry.

    name: stable and unique, ``<source>/<model>`` (results are keyed by it).
    factory: ``factory(scale) -> Built``; must be deterministic under a fixed seed and
      must not download anything.
    expected_graphs / expected_breaks: for entries that pin Dynamo's behaviour (the
      graph-break zoo); None when unknown.
    params / eager_ms: measured metadata (parameter count, eager time at scale
      "small" on the CPU) used to pick tiers and balance shards; None when unmeasured.
    """

    name: str
    source: str
    family: str
    factory: Callable[[str], Built]
    tier: str = "full"
    tags: frozenset[str] = frozenset()
    seed: int = 0
    dtype: str = "float32"
    devices: tuple[str, ...] = ("cpu", "cuda")
    tolerances: tuple[ToleranceOverride, ...] = ()
    expected_failures: tuple[ExpectedFailure, ...] = ()
    expected_graphs: int | None = None
    expected_breaks: int | None = None
    params: int | None = None
    eager_ms: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"entry {self.name!r}: tier {self.tier!r} is not one of {TIERS}")
        if "/" not in self.name:
            raise ValueError(f"entry {self.name!r}: names are '<source>/<model>'")

    def in_suite(self, suite: str) -> bool:
        """True when this entry belongs to the tier suite ``suite``."""
        if suite not in TIERS:
            return False
        return TIERS.index(self.tier) <= TIERS.index(suite)

    def build(self, scale: str = "small") -> Built:
        """Build model and inputs deterministically (seeded, RNG state restored after)."""
        import torch

        if scale not in SCALES:
            raise ValueError(f"scale {scale!r} is not one of {SCALES}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            built = self.factory(scale)
        if not isinstance(built, Built):
            raise TypeError(f"entry {self.name!r}: factory returned {type(built).__name__}, expected Built")
        return built

    def expected_failure(self, target: str) -> ExpectedFailure | None:
        return next((f for f in self.expected_failures if f.matches(target)), None)

    def tolerance_for(self, dtype: str) -> ToleranceOverride | None:
        exact = [t for t in self.tolerances if t.dtype == dtype]
        generic = [t for t in self.tolerances if t.dtype is None]
        return (exact or generic or [None])[0]
