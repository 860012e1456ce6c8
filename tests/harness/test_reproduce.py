"""The reproduce command every output prints: complete (corpus paths, target options, device, mode,
dynamic shapes) and quoted for a shell, so that pasting it reruns exactly the entry that failed."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from harness.reproduce import reproduce_argv, reproduce_command
from harness.result import Result
from harness.status import Status

NASTY_NAMES = ["zoo/mlp", "my corpus/a model", "q/it's \"quoted\"", "x/$(touch pwned)", "x/a;rm -rf ~",
               "x/`id`", "x/tab\there", "x/new\nline", "x/'''\"\"\"", "x/*glob?[1]", "x/ünïcode"]


def _result(name: str, **fields) -> Result:
    return Result(name=name, target="crucible-cpp:extern=none", status=Status.FAIL_RUN, **fields)


@pytest.mark.parametrize("name", NASTY_NAMES)
def test_the_command_splits_back_into_its_argv(name: str) -> None:
    run = {"target": "crucible-cpp:extern=none",
           "metadata": {"corpus": ["/data/my corpus", "/tmp/it's here"], "device": "cpu", "mode": "train",
                        "dynamic": True}}
    argv = reproduce_argv(run, _result(name, mode="train", dynamic=1))
    assert argv == ["crucible", "run", "--entry", name, "--target", "crucible-cpp:extern=none",
                    "--corpus", "/data/my corpus", "--corpus", "/tmp/it's here", "--device", "cpu",
                    "--mode", "train", "--dynamic"]
    assert shlex.split(reproduce_command(run, _result(name, mode="train", dynamic=1))) == argv


def test_a_shell_runs_nothing_that_an_entry_name_holds(tmp_path) -> None:
    """Pasted into a shell, the command is one command with the name as one argument: ``$(...)``,
    backquotes and ``;`` in a name run nothing."""
    run = {"target": "eager", "metadata": {}}
    for name in NASTY_NAMES:
        line = reproduce_command(run, _result(name)).replace("crucible run", "printf '%s\\n'", 1)
        out = subprocess.run(["sh", "-c", line], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
        assert out == "\n".join(["--entry", name, "--target", "crucible-cpp:extern=none"]) + "\n"
    assert not list(tmp_path.iterdir())  # `touch pwned` never ran


def test_runs_without_the_newer_metadata_and_the_results_own_settings() -> None:
    # a run stored before corpus and device were recorded: the command has neither
    old = {"target": "inductor", "metadata": {"mode": "inference"}}
    assert reproduce_command(old, Result(name="zoo/mlp", target="inductor", status=Status.FAIL_COMPILE)) == \
        "crucible run --entry zoo/mlp --target inductor"
    # a result's own mode and dynamic flag win over the run's (merged runs)
    run = {"target": "crucible-cpp", "metadata": {"mode": "inference", "dynamic": False}}
    result = Result(name="zoo/mlp", target="crucible-cpp", status=Status.FAIL_ACCURACY, mode="train", dynamic=1)
    assert reproduce_command(run, result) == "crucible run --entry zoo/mlp --target crucible-cpp --mode train --dynamic"
    # a result that does not say where it ran takes the run's target
    assert reproduce_argv({"target": "aot_eager", "metadata": {}}, Result(name="a", target="", status="crash"))[5] == \
        "aot_eager"
    # the oracle's reference and the capture analysis, where a run recorded how it ran them
    ran = {"target": "eager", "metadata": {"reference": "none", "capture": False}}
    assert reproduce_argv(ran, Result(name="a", target="eager", status="fail_run"))[-3:] == \
        ["--reference", "none", "--no-capture"]
