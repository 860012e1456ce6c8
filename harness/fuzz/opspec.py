"""What an op spec is, and the registry the spec modules fill.

``harness.fuzz.specs`` (pointwise and reductions), ``harness.fuzz.specs_structured`` (movement,
indexing, neural-net, scan) and ``harness.fuzz.specs_attention`` each register their specs here
with ``@spec``; ``harness.fuzz.specs`` imports the other two, so ``harness.fuzz.specs.OP_SPECS`` is
the whole table. The spec modules import this one and never each other's registries, so they form
no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.fuzz.builder import INT_DTYPES, NodeDraw
from harness.fuzz.values import FLOAT_DTYPES

NUMERIC = FLOAT_DTYPES + INT_DTYPES
INTEGRAL = INT_DTYPES + ("bool",)


@dataclass(frozen=True)
class OpSpec:
    name: str  # "aten.<op>.<overload>"
    family: str  # pointwise, reduction, view, indexing, nn, scan
    draw: Callable[[NodeDraw], str]


# filled by the spec modules as they are imported; complete once harness.fuzz.specs is
OP_SPECS: dict[str, OpSpec] = {}


def spec(name: str, family: str) -> Callable[[Callable[[NodeDraw], str]], Callable[[NodeDraw], str]]:
    def register(fn: Callable[[NodeDraw], str]) -> Callable[[NodeDraw], str]:
        if name in OP_SPECS:
            raise ValueError(f"op spec {name} is defined twice")
        OP_SPECS[name] = OpSpec(name, family, fn)
        return fn

    return register
