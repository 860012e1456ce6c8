"""The compile-time benchmark splits a first call into passes (it asserts no times)."""

from __future__ import annotations

import pytest

from compiler.bench import compile_time


def test_first_call_is_split_into_aot_capture_passes_and_the_rest() -> None:
    seconds = compile_time.first_call("zoo/conv_bn_relu", "crucible-interpret")
    assert {"first call", "lower", "schedule", "render", "rest"} <= set(seconds)
    assert all(s >= 0 for k, s in seconds.items() if k != "rest")
    parts = sum(s for k, s in seconds.items() if k != "first call")
    assert parts == pytest.approx(seconds["first call"])  # the rest is what the named parts leave


def test_unknown_entries_and_targets_are_usage_errors() -> None:
    with pytest.raises(SystemExit, match="no corpus entry 'zoo/nope'"):
        compile_time.first_call("zoo/nope", "crucible-interpret")
    with pytest.raises(SystemExit):
        compile_time.main(["--target", "inductor"])
