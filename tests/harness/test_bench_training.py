"""The training benchmark (``harness.bench.training``) on a CPU: its parity measure, and one tiny row
end to end (eager against Crucible: step times, first step, parity within the fp32 limit)."""

from __future__ import annotations

import pytest
import torch

from harness.bench import training


def test_update_err_is_the_share_of_eager_s_update_that_differs() -> None:
    start = [torch.zeros(4)]
    reference = [torch.ones(4)]
    assert training.update_err([torch.ones(4)], reference, start) == 0.0
    assert training.update_err([torch.full((4,), 1.5)], reference, start) == pytest.approx(0.5)
    assert training.update_err([torch.zeros(4)], [torch.zeros(4)], start) == 0.0
    assert training.update_err([torch.ones(4)], [torch.zeros(4)], start) == float("inf")


def test_a_parity_failure_is_listed() -> None:
    rows = [{"model": "m", "dtype": "fp32", "backends": {"eager": {"ms": 1.0},
                                                         "crucible": {"ms": 1.0, "update_err": 0.5, "loss_err": 0.1}}}]
    (line,) = training.problems(rows)
    assert "crucible: parity" in line and "limit 0.05" in line
    # eager's distance from itself (nondeterministic kernels under AdamW) raises the allowance
    rows[0]["backends"]["eager"]["noise_err"] = 0.1
    (line,) = training.problems(rows)
    assert "limit 0.3" in line
    rows[0]["backends"]["eager"]["noise_err"] = 0.2
    assert training.problems(rows) == []


@pytest.mark.nightly
def test_a_tiny_row_on_the_cpu(capsys) -> None:
    assert training.main(["--tiny", "--device", "cpu", "--models", "resnet50", "--dtypes", "fp32",
                          "--backends", "eager", "crucible", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("| resnet50"))  # the step-time table
    assert "FAILED" not in out and "errors and parity failures" not in out, out
    assert float(line.split("|")[3]) > 0 and float(line.split("|")[4]) > 0  # eager and crucible ms


def test_bad_arguments_are_clear_errors(capsys) -> None:
    with pytest.raises(SystemExit):
        training.main(["--steps", "0", "--device", "cpu"])
    assert "--steps 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        training.main(["--backends", "crucible", "eager", "--device", "cpu"])
    assert "put eager first" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        training.main(["--budget", "0", "--device", "cpu"])
    assert "--budget 0" in capsys.readouterr().err


def test_rows_past_the_budget_are_listed_as_not_run(capsys) -> None:
    assert training.main(["--tiny", "--device", "cpu", "--models", "resnet50", "--dtypes", "fp32",
                          "--backends", "eager", "crucible", "--budget", "0.5"]) == 0
    assert "resnet50 fp32: not run: too little of the --budget of 0 s was left" in capsys.readouterr().out


def test_saved_bytes_counts_activations_not_the_model() -> None:
    model = torch.nn.Linear(4, 4, bias=False)
    x = torch.randn(8, 4)

    def step(batch: tuple, target: torch.Tensor) -> None:
        model(*batch).relu().sum().backward()

    # the linear saves its input (for the weight's gradient) and the relu its output: 2 x 8 x 4 floats;
    # the weight, saved too, is the model's own
    assert training.saved_bytes(step, (x,), torch.zeros(()), model) == 2 * 8 * 4 * 4


def test_backends_are_timed_in_interleaved_rounds() -> None:
    """A host that slows down over the timing (here every step takes longer than the one before) falls on
    every backend alike: timed one after the other, the second backend took every slow step. A backend
    that raises is reported and dropped from the rounds; the others are still timed."""
    import contextlib
    import time

    calls = []

    def drifting(*_):
        calls.append(None)
        time.sleep(0.001 * (1 + 0.05 * len(calls)))

    def broken(*_):
        raise RuntimeError("no kernel for this")

    failed: dict[str, str] = {}
    timed = training.interleaved_ms({"a": drifting, "b": drifting, "c": broken}, (), torch.zeros(1), "cpu",
                                    20, lambda _: contextlib.nullcontext(), failed)
    assert set(timed) == {"a", "b"} and set(failed) == {"c"} and "no kernel for this" in failed["c"]
    assert abs(timed["a"] - timed["b"]) < 0.2 * timed["a"], timed  # one step's drift apart, not twenty
    assert len(calls) == 2 * (2 + 20)  # two warm-up steps and one a round each
