"""Attribution across the stack (``harness.engine``): a failure of the target is re-run on Dynamo's
``eager`` and ``aot_eager`` backends, and the first layer failing the same way is its layer."""

from __future__ import annotations

import pytest
import torch

from harness.engine import execute
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.subject import GraphSubject
from harness.status import Layer, Status
from harness.targets import parse_target
from tests.harness.fuzz_plants import aot_exp_as_expm1

aten = torch.ops.aten
EXP = FuzzGraph([{"shape": [4, 5], "dtype": "float32", "profile": "normal", "seed": 3}],
                [Node("aten.exp.default", "aten.exp.default(x0)", ["v0"], [([4, 5], "f32")])], ["v0"])


class Unattributed(GraphSubject):
    """The same subject with attribution off (no layers below the target): the B side."""

    def layers(self, target):  # noqa: ANN001, ANN201
        return ()


def _run(subject_type: type, capture: str = "dynamo"):  # noqa: ANN202
    return execute(subject_type(EXP, capture), parse_target("crucible-interpret"))


@pytest.fixture
def aot_plant(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._dynamo.backends.common as common
    import torch._functorch.aot_autograd as aot

    planted = aot_exp_as_expm1(aot.aot_module_simplified)
    monkeypatch.setattr(aot, "aot_module_simplified", planted)
    monkeypatch.setattr(common, "aot_module_simplified", planted)


def test_a_planted_aot_autograd_bug_is_charged_to_aot_autograd_not_the_target(aot_plant: None) -> None:
    """A/B: AOTAutograd hands the compiler exp as expm1. With attribution the failure is found in
    aot_autograd (Dynamo's eager passes, aot_eager fails the same way) and not charged to the
    compiler; without it, it is a fail_accuracy of the target."""
    on = _run(GraphSubject)
    assert on.status == Status.FAIL_UPSTREAM and on.failing_layer == Layer.AOT_AUTOGRAD, on
    assert on.error.startswith("fail_accuracy on aot_eager too:") and not on.against_compiler
    assert on.attribution_s is not None and 0 < on.attribution_s < 60
    off = _run(Unattributed)
    assert off.status == Status.FAIL_ACCURACY and off.failing_layer is None and off.against_compiler


def test_a_planted_compiler_bug_is_charged_to_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exp lowering raises: eager and aot_eager both pass, so the layer is the target's own and
    the verdict stands (an fx-captured graph skips Dynamo: only aot_eager is re-run)."""
    import compiler.lowerings  # noqa: F401  (register every rule before patching)
    from compiler.lowering import LOWERINGS

    def broken(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        raise KeyError("planted: exp has no lowering")

    monkeypatch.setitem(LOWERINGS, aten.exp.default, broken)
    for capture in ("dynamo", "fx"):
        result = _run(GraphSubject, capture)
        assert result.status == Status.FAIL_COMPILE and result.failing_layer == Layer.TARGET, result
        assert result.against_compiler and result.attribution_s is not None


def test_passing_subjects_and_plain_eager_are_not_attributed() -> None:
    result = _run(GraphSubject)
    assert result.status == Status.PASS and result.failing_layer is None and result.attribution_s is None


def test_a_target_bug_does_not_hide_behind_an_unrelated_layer_failure(aot_plant: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """AOTAutograd hands over expm1 for exp (aot_eager fails), and the compiler computes that expm1
    wrongly on top (as a sine): both differ from eager, each its own way, so the failure stays the
    target's. Matching on the status alone charged it to aot_autograd."""
    import compiler.lowerings  # noqa: F401  (register every rule before patching)
    from compiler.lowering import LOWERINGS

    monkeypatch.setitem(LOWERINGS, aten.expm1, LOWERINGS[aten.sin])  # registered per overload packet
    result = _run(GraphSubject)
    assert result.status == Status.FAIL_ACCURACY and result.failing_layer == Layer.TARGET, result
    assert result.against_compiler
