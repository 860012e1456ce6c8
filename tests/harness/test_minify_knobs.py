"""The knob triage (harness.minify.knobs): each knob sets what it names and restores it afterwards."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config

from harness.minify.knobs import KNOBS, knob, main, measure_ops


def test_knobs_set_and_restore_what_they_name() -> None:
    with knob("layout_optimization=False"):
        assert inductor_config.layout_optimization is False
    assert inductor_config.layout_optimization is True
    before = torch.backends.cudnn.allow_tf32
    with knob("cudnn.allow_tf32=False"):
        assert torch.backends.cudnn.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is before
    with knob("matmul_precision=highest"):
        assert torch.get_float32_matmul_precision() == "highest"
    for name in KNOBS:  # every listed knob is understood
        if name != "no_sdpa_rewrite":  # that one patches this process's pattern table for good
            with knob(name):
                pass


def test_unknown_knob_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["transformers/deit", "--knobs", "default,no_such_knob"])
    assert "unknown knob(s) ['no_such_knob']" in capsys.readouterr().err


def test_kernels_alone_against_float64_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with torch.backends' flags frozen, as torch's OpInfo utilities leave them once imported
    (it raised 'not allowed to set torch.backends.cudnn flags' when an earlier test had imported them)."""
    monkeypatch.setitem(torch.backends.flags_frozen.__globals__, "__allow_nonbracketed_mutation_flag", False)
    rows = {r["op"]: r for r in measure_ops("cpu")}
    assert rows["sdpa MATH"]["rel_rmse"] < 1e-6
    assert all(r["rel_rmse"] < 1e-6 for op, r in rows.items() if op.startswith("conv2d"))
