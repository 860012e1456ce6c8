"""Backend options in a target's name: ``crucible-interpret:extern=none``, ``inductor:max_autotune=true``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from corpus.entry import Built, Entry
from harness.execute import execute_entry
from harness.targets import TargetSyntaxError, base_name, parse_target, target_options_problem


def test_options_after_a_colon_reach_the_backend_and_the_name_is_kept() -> None:
    t = parse_target("crucible-interpret:extern=none")
    assert t.name == "crucible-interpret:extern=none" and base_name(t) == "crucible-interpret"
    assert t.device == "cpu" and t.backend == "crucible" and t.is_crucible
    assert t.options == {"codegen": "triton", "strict": True, "extern": "none"}
    t = parse_target("inductor:max_autotune=true,coordinate_descent_tuning=False")
    assert t.backend == "inductor" and t.options == {"max_autotune": True, "coordinate_descent_tuning": False}
    assert parse_target("crucible-triton:cudagraphs=true").device == "cuda"
    assert parse_target("crucible-cpp").options == {"codegen": "cpp", "strict": True}


@pytest.mark.parametrize(("name", "message"), [
    ("crucible-cpp:", "nothing after ':'"),
    ("crucible-cpp:extern", "option 'extern' is not key=value"),
    ("crucible-cpp:=none", "is not key=value"),
    ("eager:x=1", "eager takes no options"),
])
def test_unreadable_options_are_a_clear_error(name: str, message: str) -> None:
    with pytest.raises(TargetSyntaxError, match=message):
        parse_target(name)
    assert message in target_options_problem(name)


def test_options_the_compiler_refuses_are_named_before_a_run() -> None:
    assert "extern must be one of" in target_options_problem("crucible-cpp:extern=bogus")
    assert "unknown crucible option(s) ['nope']" in target_options_problem("crucible-cpp:nope=1")
    assert target_options_problem("crucible-interpret:extern=none") is None
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--source", "zoo",
                           "--target", "crucible-cpp:extern=bogus"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "extern must be one of" in proc.stderr


def test_cuda_free_target_runs_an_entrys_matmuls_as_templates() -> None:
    """The corpus can be run in CUDA-free mode: the same entry, no matmul extern calls."""
    entry = Entry(name="mlp/mlp", source="mlp", family="f", tier="smoke",
                  factory=lambda scale: Built(torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.GELU(),
                                                                  torch.nn.Linear(20, 5)),
                                              (torch.randn(6, 12),)))
    default = execute_entry(entry, parse_target("crucible-interpret"))
    free = execute_entry(entry, parse_target("crucible-interpret:extern=none"))
    assert default["status"] == free["status"] == "pass", (default.get("error"), free.get("error"))
    assert {r["op"] for r in default["extern_ops"]} & {"aten.addmm.default", "aten.mm.default"}
    assert not {r["op"] for r in free["extern_ops"]} & {"aten.addmm.default", "aten.mm.default"}
    assert free["target"] == "crucible-interpret:extern=none"
