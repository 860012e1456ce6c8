"""Split reductions (``compiler.split_reductions``): few outputs over many elements, in two stages."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import compiler
from compiler.codegen.registry import renderer_for
from compiler.codegen.triton import TritonRenderer
from compiler.graph import ComputedNode
from compiler.lowering import lower
from compiler.ir import ReduceOp
from compiler.split_reductions import SPLIT_OPS, split_count
from tests.compiler.parity import assert_close

aten = torch.ops.aten


def test_split_count_aims_at_a_thousand_programs_of_whole_chunks() -> None:
    assert split_count(64, 32 * 112 * 112) == 16  # resnet50's first batch norm at batch 32
    assert split_count(1, 1 << 20) == 512  # chunks of 2048 at least
    assert split_count(256, 1 << 20) == 1  # outputs enough
    assert split_count(8, 8192) == 1  # rows short enough
    assert split_count(8, 3 * 3 * 4099) == 1  # no power of two divides the row
    assert split_count(3, 2 * 9999) == 2  # only 2 divides it


def _reductions(fn, *args, capabilities) -> list[ComputedNode]:
    gm = compiler.trace_aten(fn, *args)
    lowered = lower(gm, torch.device("cuda"), capabilities)
    return [n for n in lowered.nodes if isinstance(n, ComputedNode) and n.rranges]


def test_gpu_triton_splits_a_channel_reduction_and_the_others_do_not() -> None:
    """A batch norm's per-channel sum over (N, H, W) on GPU Triton: 16 chunks per channel of 2048,
    then the 16 partial sums; the interpreter and C++ keep one reduction, as do arg-reductions,
    reductions with outputs enough and symbolic ones."""
    x = torch.randn(4, 8, 64, 64)
    gpu = renderer_for("triton", torch.device("cuda")).capabilities
    assert gpu.split_reductions
    first, second = _reductions(lambda t: t.sum((0, 2, 3)), x, capabilities=gpu)
    assert first.rranges == (2048,) and first.buffer.shape == (8, 8)  # 8 channels x 8 chunks
    assert second.rranges == (8,) and second.buffer.shape == (8,)
    for codegen, device in (("triton", "cpu"), ("cpp", "cpu")):
        caps = renderer_for(codegen, torch.device(device)).capabilities
        assert not caps.split_reductions and len(_reductions(lambda t: t.sum((0, 2, 3)), x, capabilities=caps)) == 1
    assert ReduceOp.ARGMAX not in SPLIT_OPS  # the first index of a tie: kept in one pass
    assert len(_reductions(lambda t: t.sum((0, 2)), torch.randn(16, 512, 4096), capabilities=gpu)) == 1


@pytest.fixture
def interpreter_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter with split reductions, to check their values on the CPU."""
    plain = TritonRenderer.capabilities

    monkeypatch.setattr(TritonRenderer, "capabilities",
                        property(lambda self: dataclasses.replace(plain.fget(self), split_reductions=True)))


@pytest.mark.parametrize("op", ["sum", "amax", "amin", "prod", "var_mean", "mean"])
def test_split_reductions_compute_what_eager_does(op: str, interpreter_splits: None) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, 64, 128) * (0.001 if op == "prod" else 1.0) + (1.0 if op == "prod" else 0.0)
    x[1, 2, 7, 9] = float("nan") if op in ("amax", "amin") else x[1, 2, 7, 9]
    fns = {"sum": lambda t: t.sum((0, 2, 3)), "amax": lambda t: t.amax((0, 2, 3)), "amin": lambda t: t.amin((0, 2, 3)),
           "prod": lambda t: t.permute(1, 0, 2, 3).reshape(5, -1).prod(1), "var_mean": lambda t: torch.var_mean(t, (0, 2, 3)),
           "mean": lambda t: t.mean()}
    fn = fns[op]
    gm = compiler.trace_aten(fn, x)
    caps = renderer_for("triton", torch.device("cpu")).capabilities
    nodes = [n for n in lower(gm, torch.device("cpu"), caps).nodes if isinstance(n, ComputedNode) and n.rranges]
    assert any(n.rranges != nodes[-1].rranges for n in nodes), "not split"
    got = compiler.compile_graph(gm, [x], codegen="triton")(x)
    want = fn(x)
    for g, w in zip(got if isinstance(got, (tuple, list)) else [got], want if isinstance(want, tuple) else [want]):
        assert_close(g, w)


def test_split_reductions_over_dims_apart_of_a_permuted_input(interpreter_splits: None) -> None:
    """Reduced dims that are not adjacent, of a transposed input: the flattened position unravels over
    the reduced dims in their order, whatever their strides."""
    x = torch.randn(256, 4, 128, 2).permute(3, 2, 1, 0)  # (2, 128, 4, 256), strides reversed
    fn = lambda t: (t.sum((1, 3)), t.amax((0, 1, 3)))  # noqa: E731
    gm = compiler.trace_aten(fn, x)
    caps = renderer_for("triton", torch.device("cpu")).capabilities
    split = [n for n in lower(gm, torch.device("cpu"), caps).nodes if isinstance(n, ComputedNode) and n.rranges]
    assert len(split) == 4, [n.rranges for n in split]
    for got, want in zip(compiler.compile_graph(gm, [x], codegen="triton")(x), fn(x)):
        assert_close(got, want)


def test_a_training_batch_norm_with_split_reductions_matches_eager(interpreter_splits: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Its statistics (the variance's three sums) and its gradients' sums over (N, H, W), split."""
    import compiler.lowering

    splits: list = []
    plain = compiler.lowering.split_reduction
    monkeypatch.setattr(compiler.lowering, "split_reduction", lambda *a: splits.append(plain(*a)) or splits[-1])
    torch.manual_seed(0)
    m, ref = torch.nn.BatchNorm2d(4).train(), torch.nn.BatchNorm2d(4).train()
    x = torch.randn(4, 4, 64, 64, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    weights = torch.randn(4, 4, 64, 64)  # a loss the normalization does not cancel
    compiled = torch.compile(m, backend="crucible", options={"strict": True, "codegen": "triton"})
    (compiled(x) * weights).sum().backward()
    (ref(xr) * weights).sum().backward()
    assert sum(s is not None for s in splits) >= 5, splits  # 3 forward sums, 2 backward ones at least
    for got, want in ((x.grad, xr.grad), (m.weight.grad, ref.weight.grad), (m.bias.grad, ref.bias.grad),
                      (m.running_var, ref.running_var), (m.running_mean, ref.running_mean)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
