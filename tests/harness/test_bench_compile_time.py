"""The compile-time benchmark splits a first call into passes (it asserts no times)."""

from __future__ import annotations

import pytest

from harness.bench import compile_time


def test_first_call_is_split_into_aot_capture_passes_and_the_rest() -> None:
    seconds = compile_time.first_call("zoo/conv_bn_relu", "crucible-interpret")
    assert {"first call", "lower", "schedule", "render", "rest"} <= set(seconds)
    assert seconds["lower"] > 0 and seconds["schedule"] > 0  # the compile's passes were reached and timed
    # the passes ran inside the timed first call: what they leave for Dynamo and the first run is >= 0
    assert 0 <= seconds["rest"] < seconds["first call"]


def test_unknown_entries_and_targets_are_usage_errors() -> None:
    with pytest.raises(SystemExit, match="no corpus entry 'zoo/nope'"):
        compile_time.first_call("zoo/nope", "crucible-interpret")
    with pytest.raises(SystemExit):
        compile_time.main(["--target", "inductor"])
