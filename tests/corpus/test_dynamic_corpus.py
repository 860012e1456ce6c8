"""The variable-length workloads (``corpus.dynamic_models``): each entry's size schedule is valid
and eager runs every call of it; the decode loop's steps hand the model the caches its own
prefill built."""

from __future__ import annotations

import pytest
import torch

from corpus import SOURCES, dynamic_models


def test_the_source_is_registered_and_entries_are_well_formed() -> None:
    assert SOURCES["dynamic"] == "corpus.dynamic_models"
    names = [e.name for e in dynamic_models.entries()]
    assert names == ["dynamic/bert_encoder_lengths", "dynamic/causal_lm_prefill", "dynamic/llm_decode_kv_cache",
                     "dynamic/detection_filter"]
    assert all(e.tier == "nightly-cpu" and "dynamic" in e.tags for e in dynamic_models.entries())


@pytest.mark.parametrize("entry", dynamic_models.entries(), ids=lambda e: e.name)
def test_every_call_of_the_schedule_runs_in_eager(entry) -> None:
    built = entry.build("small")
    assert len(built.sizes) >= 4 and built.sizes[0].inputs is built.inputs
    # sizes above 1 (Dynamo specializes 0 and 1) and each call a new size
    labels = [(s.batch, s.seq, s.label) for s in built.sizes]
    assert len(set(labels)) == len(labels) and all(s.seq is None or s.seq >= 2 for s in built.sizes)
    with torch.no_grad():
        for call in built.sizes:
            out = built.model(*call.inputs, **call.kwargs)
            first = out[0] if isinstance(out, tuple) else out
            assert torch.isfinite(first).all()


def test_decode_steps_continue_each_other() -> None:
    """Each step's cache is the previous step's cache plus the previous token's keys and values, as
    the decode loop itself would hold them: the schedule is the loop's own."""
    built = dynamic_models.llm_decode_kv_cache("small")
    steps = built.sizes
    assert len(steps) == dynamic_models.DECODE_STEPS and steps[0].seq == dynamic_models.PREFILL
    with torch.no_grad():
        for now, after in zip(steps[:3], steps[1:4]):
            _, k, v = built.model(*now.inputs)
            assert after.seq == now.seq + 1 and int(after.inputs[1]) == now.seq + 1
            torch.testing.assert_close(k, after.inputs[2], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(v, after.inputs[3], rtol=1e-5, atol=1e-5)
