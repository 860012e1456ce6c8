"""Targets and their options (``crucible-interpret:extern=none``, ``inductor:max_autotune=true``):
parsed and validated once, before anything runs; every option reaches the compiler."""

from __future__ import annotations

import pytest
import torch

from corpus.entry import Built, Entry
from harness.cli import main
from harness.entry_subject import run_entry
from harness.targets import TargetError, parse_target, validate_target


def test_options_after_a_colon_reach_the_backend_and_the_name_is_kept() -> None:
    t = parse_target("crucible-interpret:extern=none")
    assert t.name == "crucible-interpret:extern=none" and t.base == "crucible-interpret"
    assert t.device == "cpu" and t.backend == "crucible" and t.is_crucible
    assert t.options == {"codegen": "triton", "strict": True, "poison": True, "extern": "none"}
    t = parse_target("inductor:max_autotune=true,coordinate_descent_tuning=False,triton.max_tiles=2")
    assert t.backend == "inductor"
    assert t.options == {"max_autotune": True, "coordinate_descent_tuning": False, "triton.max_tiles": 2}
    assert parse_target("crucible-triton:cudagraphs=true").device == "cuda"
    assert parse_target("crucible-cpp").options == {"codegen": "cpp", "strict": True, "poison": True}
    assert parse_target("crucible-cpp:poison=false").options["poison"] is False
    assert parse_target("crucible-sim:extern=none").checked and not parse_target("crucible-interpret").checked


@pytest.mark.parametrize(("name", "message"), [
    ("crucible-cpp:", "nothing after ':'"),
    ("crucible-cpp:extern", "option 'extern' is not key=value"),
    ("crucible-cpp:=none", "is not key=value"),
    ("eager:x=1", "eager takes no options"),
    (":x=1", "no name before ':'"),
])
def test_unreadable_options_are_a_clear_error(name: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        parse_target(name)


@pytest.mark.parametrize(("name", "message"), [
    ("crucible-cpp:extern=bogus", "extern must be one of"),
    ("crucible-cpp:nope=1", "unknown crucible option(s) ['nope']"),
    ("nosuch", "unknown target 'nosuch'"),
    ("crucible-cpu", "did you mean crucible-cpp"),
    ("inductor:nosuch=1", "Inductor has no option 'nosuch'"),
    ("inductor:max_autotune=yes", "Unexpected type of attr max_autotune"),
    ("aot_eager:x=1", "the Dynamo backend 'aot_eager' takes no options"),
])
def test_targets_the_compilers_refuse_are_named_before_a_run(name: str, message: str) -> None:
    with pytest.raises(TargetError) as info:
        validate_target(name)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_valid_targets_pass_validation() -> None:
    for name in ("eager", "aot_eager", "crucible-interpret:extern=none", "inductor:max_autotune=true"):
        assert validate_target(name).name == name


def test_a_refused_target_is_a_usage_error_and_nothing_is_stored(tmp_path, capsys) -> None:
    """Regression: `--target nosuch` ran, stored a result for every entry and exited 0;
    `inductor:nosuch=1` only warned."""
    db = tmp_path / "r.sqlite"
    for target in ("nosuch", "inductor:nosuch=1", "crucible-cpp:extern=bogus"):
        assert main(["run", "--source", "zoo", "--target", target, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1
    assert not db.exists()


def test_cuda_free_target_runs_an_entrys_matmuls_as_templates() -> None:
    """The corpus can be run in CUDA-free mode: the same entry, no matmul extern calls."""
    entry = Entry(name="mlp/mlp", source="mlp", family="f", tier="smoke",
                  factory=lambda scale: Built(torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.GELU(),
                                                                  torch.nn.Linear(20, 5)),
                                              (torch.randn(6, 12),)))
    default = run_entry(entry, parse_target("crucible-interpret"))
    free = run_entry(entry, parse_target("crucible-interpret:extern=none"))
    assert default.status == free.status == "pass", (default.error, free.error)
    assert {r["op"] for r in default.extern_ops} & {"aten.addmm.default", "aten.mm.default"}
    assert not {r["op"] for r in free.extern_ops} & {"aten.addmm.default", "aten.mm.default"}
    assert free.target == "crucible-interpret:extern=none"
