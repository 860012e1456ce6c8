"""``python -m harness.bench.simulator``: the simulator's benchmarks, usage errors and one quick row."""

from __future__ import annotations

import pytest
import torch

from harness.bench.simulator import main


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's usage errors
        return int(e.code or 0)


def test_bad_usage_exits_2_with_one_line(capsys: pytest.CaptureFixture) -> None:
    assert _exit_code(["overhead", "--limit", "0"]) == 2
    assert "--limit must be at least 1" in capsys.readouterr().err
    assert _exit_code(["gpu", "--gpu", "V100"]) == 2
    assert "unknown GPU 'V100'" in capsys.readouterr().err
    assert _exit_code(["nonsense"]) == 2
    assert _exit_code(["gpu", "--help"]) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without a GPU")
def test_gpu_bench_without_gpu_fails_clearly(capsys: pytest.CaptureFixture) -> None:
    assert main(["gpu", "--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_overhead_bench_runs_one_entry(capsys: pytest.CaptureFixture) -> None:
    """The overhead benchmark imported a helper that a refactor of harness/execute.py had renamed."""
    assert main(["overhead", "--entry", "zoo/mlp"]) == 0
    out = capsys.readouterr().out
    assert "zoo/mlp" in out and "overhead" in out
