"""``python -m simulator``: the repro command a report ends with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from simulator import SimulatorMemoryError, check_launch
from simulator.__main__ import main
from tests.simulator.kernels import accumulate_into_output, add_mask_off_by_one

REPO = Path(__file__).resolve().parents[2]


def _simulator(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "simulator", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _repro_file(error: SimulatorMemoryError) -> str:
    assert error.repro and error.repro.startswith("python -m simulator repro "), error.repro
    return error.repro.split("repro ", 1)[1]


def test_repro_command_replays_the_finding(tmp_path: Path) -> None:
    with pytest.raises(SimulatorMemoryError) as info:
        check_launch(add_mask_off_by_one, (4,), (torch.randn(100), torch.randn(100), torch.empty(100), 100),
                     {"BLOCK": 32}, repro_dir=tmp_path)
    proc = _simulator("repro", _repro_file(info.value))
    assert proc.returncode == 1, proc.stderr
    assert "[out_of_bounds] add_mask_off_by_one:" in proc.stdout and "x_ptr" in proc.stdout


def test_repro_keeps_uninitialized_bytes_unwritten(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import simulator

    with pytest.raises(SimulatorMemoryError) as info:
        check_launch(accumulate_into_output, (2,), (torch.randn(64), simulator.empty(64), 64), {"BLOCK": 32},
                     repro_dir=tmp_path)
    assert main(["repro", _repro_file(info.value)]) == 1  # in process: the subprocess path is tested above
    assert "[uninitialized] accumulate_into_output:" in capsys.readouterr().out


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's usage errors
        return int(e.code or 0)


def test_bad_usage_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _exit_code(["repro", str(tmp_path / "nope.pt")]) == 2
    assert "no repro file" in capsys.readouterr().err
    assert _exit_code(["bench", "overhead"]) == 2  # the benchmarks moved to harness.bench.simulator
