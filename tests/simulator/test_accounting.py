"""Byte, FLOP and roofline accounting of checked launches."""

from __future__ import annotations

import pytest
import torch

from simulator import GPUS, check_launch, gpu_spec
from tests.simulator.kernels import add, fma_kernel, three_pass_softmax, tile_copy


def test_pointwise_bytes_are_active_lanes_times_itemsize() -> None:
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    acct = check_launch(add, (4,), (x, y, out, 100), {"BLOCK": 32}).accounting
    assert (acct.loaded_bytes, acct.stored_bytes) == (800, 400)  # 28 masked-off lanes move nothing
    assert (acct.unique_loaded_bytes, acct.unique_stored_bytes) == (800, 400)
    assert acct.traffic_ratio == 1.0 and not acct.wasteful
    assert acct.grid == (4, 1, 1)
    torch.testing.assert_close(out, x + y)


def test_rereading_a_row_is_flagged_as_wasteful() -> None:
    x = torch.randn(4, 10)
    out = torch.empty(4, 10)
    acct = check_launch(three_pass_softmax, (4,), (x, out, 10), {"BLOCK": 16}).accounting
    assert acct.loaded_bytes == 3 * 160 and acct.unique_loaded_bytes == 160
    assert acct.traffic_ratio == pytest.approx((480 + 160) / 320)
    assert acct.wasteful
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_flops_count_every_lane_of_each_float_op() -> None:
    x, y, z, out = torch.randn(50), torch.randn(50), torch.randn(50), torch.empty(50)
    acct = check_launch(fma_kernel, (2,), (x, y, z, out, 50), {"BLOCK": 32}).accounting
    assert acct.flops == 2 * 2 * 32  # one mul and one add over 2 programs of 32 lanes
    assert acct.dot_flops == 0


def test_roofline_estimate_uses_the_named_gpu() -> None:
    x, out = torch.randn(64, 64), torch.empty(64, 64)
    acct = check_launch(tile_copy, (2, 2), (x, out, 64, 64), {"BM": 32, "BN": 32}).accounting
    assert acct.ideal_bytes == 2 * 64 * 64 * 4
    h200 = gpu_spec("h200")
    expected = h200.latency_s + acct.ideal_bytes / (h200.bandwidth * h200.efficiency)
    assert acct.estimate_s("H200") == pytest.approx(expected)
    assert acct.estimate_s("A100") > acct.estimate_s("H100") > acct.estimate_s("H200") > acct.estimate_s("B200")
    measured = gpu_spec("H200", bandwidth=1e12)  # a measured bandwidth replaces the datasheet's
    assert acct.estimate_s(measured) == pytest.approx(h200.latency_s + acct.ideal_bytes / 1e12)
    assert acct.bound("H200") == "memory"
    assert set(GPUS) >= {"A100", "H100", "H200", "B200", "MI300X"}


def test_unknown_gpu_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown GPU 'V100': known are A100"):
        gpu_spec("V100")
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        gpu_spec("H200", bandwidth=0)
