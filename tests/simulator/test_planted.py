"""The planted-bug suite: every planted bug is found with the right kind, correct kernels give none."""

from __future__ import annotations

import pytest

from simulator import SimulatorMemoryError, check_launch
from tests.simulator.kernels import CASES, CLEAN, Case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planted_bug_is_found(case: Case) -> None:
    grid, args, meta = case.make()
    with pytest.raises(SimulatorMemoryError) as info:
        check_launch(case.kernel, grid, args, meta, **case.options)
    assert case.kind in info.value.kinds, str(info.value)
    finding = next(f for f in info.value.findings if f.kind == case.kind)
    assert finding.kernel == case.kernel.fn.__name__
    if case.kind not in ("race_write_write", "race_read_write", "order_dependent"):
        assert finding.line is not None and finding.source.strip(), str(info.value)
        assert finding.program_id is not None


@pytest.mark.parametrize("case", CLEAN, ids=[c.name for c in CLEAN])
def test_correct_kernel_has_no_findings(case: Case) -> None:
    grid, args, meta = case.make()
    report = check_launch(case.kernel, grid, args, meta, **case.options)
    assert report.ok, [f.describe() for f in report.findings]
