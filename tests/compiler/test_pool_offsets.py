"""Max-pool indices saved as int8 window offsets in training (``compiler.pool_offsets``): the
backward's gradients are eager's for every window shape, padding, dilation, ceil mode, layout and
special values, and the forward saves one byte an element for them, not eight."""

from __future__ import annotations

import math

import pytest
import torch

import compiler.partition as partition

POOLS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
         dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)),
         dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=(1, 4), stride=(3, 1))]


class Net(torch.nn.Module):
    def __init__(self, pool: dict) -> None:
        super().__init__()
        self.conv, self.pool = torch.nn.Conv2d(3, 4, 3), torch.nn.MaxPool2d(**pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)) - 0.5).square()


def _grads(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    out = model(x)
    return list(torch.autograd.grad(out.sum(), [x, *model.parameters()]))


@pytest.mark.parametrize("pool", POOLS)
def test_gradients_through_the_offsets_are_eagers(pool: dict) -> None:
    torch.manual_seed(0)
    model = Net(pool)
    x = torch.randn(2, 3, 13, 11, requires_grad=True)
    compiled = torch.compile(model, backend="crucible", options={"strict": True})
    for got, want in zip(_grads(compiled, x), _grads(model, x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_special_values_channels_last_and_unbatched_inputs() -> None:
    """Windows of NaN, of -inf only and of ties pick ATen's positions; a channels-last input and an
    unbatched (C, H, W) one take the same rewrite."""
    pool = torch.nn.MaxPool2d(3, stride=2, padding=1)

    def f(x: torch.Tensor) -> torch.Tensor:
        return pool(x * 2).square()

    x = torch.randn(2, 3, 9, 8)
    x[0, 0, :3, :3] = math.nan
    x[0, 1] = -math.inf
    x[1, 2, :4, :4] = 1.5
    compiled = torch.compile(f, backend="crucible", options={"strict": True})
    for value in (x, x.to(memory_format=torch.channels_last), x[0]):
        value = value.detach().requires_grad_()
        (got,) = torch.autograd.grad(compiled(value).nan_to_num().sum(), value)
        (want,) = torch.autograd.grad(f(value).nan_to_num().sum(), value)
        torch.testing.assert_close(got, want, equal_nan=True)


def test_the_forward_saves_int8_offsets_not_int64_indices(monkeypatch) -> None:
    def saved(model: torch.nn.Module, x: torch.Tensor) -> dict[torch.dtype, int]:
        found: dict[int, tuple[torch.dtype, int]] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            found[t.untyped_storage().data_ptr()] = (t.dtype, t.untyped_storage().nbytes())
            return t

        compiled = torch.compile(model, backend="crucible", options={"strict": True})
        compiled(x)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            compiled(x)
        totals: dict[torch.dtype, int] = {}
        for dtype, size in found.values():
            totals[dtype] = totals.get(dtype, 0) + size
        return totals

    torch.manual_seed(0)
    model, x = Net(POOLS[0]), torch.randn(4, 3, 34, 34)
    compact = saved(model, x)
    assert torch.int64 not in compact and compact[torch.int8] == 4 * 4 * 16 * 16, compact
    torch._dynamo.reset()
    monkeypatch.setattr(partition, "compact_pool_indices", lambda graph: 0)
    plain = saved(model, x)
    assert plain[torch.int64] == 8 * 4 * 4 * 16 * 16, plain
