"""The graph-break zoo: Dynamo's graph and break counts, asserted against the installed torch."""

from __future__ import annotations

import pytest
import torch

from corpus import zoo
from corpus.entry import TIERS
from harness.capture import analyze_capture
from harness.model_runs import DTYPES, ModelCopies, cast

ENTRIES = zoo.entries()
# the deep networks (compile time against graph size) are too large for smoke; their capture takes
# tens of seconds, so their pinned counts are checked by nightly-cpu runs, not here
DEEP = [e for e in ENTRIES if e.family == "deep-network"]
SMOKE = [e for e in ENTRIES if e not in DEEP]


def test_zoo_is_large_unique_and_smoke() -> None:
    assert len(ENTRIES) >= 40
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    assert all(e.tier == TIERS[0] and e.source == "zoo" for e in SMOKE)
    assert {e.name for e in DEEP} == {"zoo/stacked_hourglass", "zoo/r2plus1d_34"}
    assert all(e.tier == "nightly-cpu" for e in DEEP)
    assert all(e.expected_graphs is not None and e.expected_breaks is not None for e in ENTRIES)
    # The zoo exercises breaks, not just full graphs.
    assert sum(e.expected_breaks > 0 for e in ENTRIES) >= 8


@pytest.mark.parametrize("entry", SMOKE, ids=lambda e: e.name.split("/")[1])
def test_expected_graphs_and_breaks(entry) -> None:
    graphs, breaks = zoo.expected_counts(entry, torch.__version__)
    built = entry.build("small")
    dtype = DTYPES[entry.dtype]
    model, args = ModelCopies(entry, "small", built.model).fresh("cpu", dtype), cast(built.inputs, "cpu", dtype)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            capture, _ = analyze_capture(model, args, {})
    finally:
        torch._dynamo.reset()
    assert (capture.graphs, capture.graph_breaks) == (graphs, breaks), [b.reason for b in capture.breaks]
    assert len(capture.breaks) == capture.graph_breaks
    if breaks:
        # Every break carries a reason and a category; breaks that end a graph name the user frame.
        assert all(b.reason and b.category for b in capture.breaks)
    if graphs == 1 and breaks == 0:
        assert capture.captured_ops > 0


def test_deep_networks_have_their_depth() -> None:
    """Built small, run in eager on one thread: 8 hourglasses of 4 levels (13 residual blocks each), and
    R(2+1)D-34's 16 blocks of factored 3-D convolutions."""
    from torch import nn

    shapes = {"zoo/stacked_hourglass": (1, 8, 16, 16, 16), "zoo/r2plus1d_34": (1, 400)}
    models, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # small convolutions: more threads only contend on a loaded 2-core host
    try:
        for entry in DEEP:
            built = entry.build("small")
            with torch.no_grad():
                out = built.model(*built.inputs)
            assert tuple(out.shape) == shapes[entry.name]
            models[entry.name] = built.model
    finally:
        torch.set_num_threads(threads)
    residuals = sum(isinstance(m, zoo._HourglassResidual) for m in models["zoo/stacked_hourglass"].modules())
    assert residuals == 8 * 13 + 8 + 3
    assert sum(isinstance(m, nn.Conv3d) for m in models["zoo/r2plus1d_34"].modules()) == 2 + 16 * 4 + 3


def test_version_override_table_is_consulted() -> None:
    entry = ENTRIES[0]
    zoo.VERSION_OVERRIDES["9.99"] = {entry.name: (7, 3)}
    try:
        assert zoo.expected_counts(entry, "9.99.1+cpu") == (7, 3)
        assert zoo.expected_counts(entry, "9.98.0") == (entry.expected_graphs, entry.expected_breaks)
    finally:
        del zoo.VERSION_OVERRIDES["9.99"]


def test_break_reason_carries_dynamo_type_category_and_user_frame() -> None:
    entry = next(e for e in ENTRIES if e.name == "zoo/item_branch")
    built = entry.build("small")
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            capture, _ = analyze_capture(built.model, built.inputs, {})
    finally:
        torch._dynamo.reset()
    (only,) = capture.breaks
    assert "item()" in only.reason and only.category == "data-dependent"
    assert only.frame.startswith("zoo.py:") and only.frame.endswith("in item_branch")
    if _registry_shipped():
        assert only.reason.startswith("GB")  # Dynamo's stable graph-break id
    assert 0 < capture.captured_ops < 10


def _registry_shipped() -> bool:
    from harness.capture import _gb_registry

    return bool(_gb_registry())
