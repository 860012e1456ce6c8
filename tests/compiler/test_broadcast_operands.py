"""Small costly values read broadcast (``compiler.lowerings.rules.costly_broadcast``): realized once, not
recomputed for every element of the larger result that reads them."""

from __future__ import annotations

import pytest
import torch

import compiler
import compiler.lowerings.rules as rules
from compiler.codegen.registry import renderer_for
from compiler.graph import ComputedNode
from compiler.ir import Op
from compiler.lowering import lower
from tests.compiler.parity import check_parity

aten = torch.ops.aten
COSTLY = {Op.DIV, Op.RSQRT, Op.SQRT}


def _batch_norm_relu(x, w, b, rm, rv):
    return aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, True, 0.1, 1e-5)[0].relu()


def _bn_inputs() -> tuple:
    return (torch.randn(8, 16, 8, 8), torch.rand(16) + 0.5, torch.randn(16), torch.zeros(16), torch.ones(16))


def _nodes_over(fn, args, shape) -> list[ComputedNode]:
    gpu = renderer_for("triton", torch.device("cuda")).capabilities
    lowered = lower(compiler.trace_aten(fn, *args), torch.device("cpu"), gpu)
    return [n for n in lowered.nodes if isinstance(n, ComputedNode) and n.buffer.shape == shape and not n.rranges]


def test_a_training_batch_norms_channel_scale_is_computed_once_per_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (GPU training, issue 38): the normalize kernel of a training batch norm rebuilt every
    channel's scale and shift from the statistics for each element, 7 IEEE divisions and 2 rsqrt an
    element (152 us on an H100 over 32x256x56x56 float32, Inductor's kernel 76). The per-channel values
    are now nodes of their own, and the node over the whole tensor reads them."""
    args = _bn_inputs()
    big = _nodes_over(_batch_norm_relu, args, tuple(args[0].shape))
    assert big, "no node over the whole tensor"
    for node in big:
        assert not {e.op for e in node.body.walk()} & COSTLY, node.body
    monkeypatch.setattr(rules, "BROADCAST_MIN_OPS", 10**9)  # as before: inlined into the big node
    before = _nodes_over(_batch_norm_relu, args, tuple(args[0].shape))
    assert any({e.op for e in node.body.walk()} & COSTLY for node in before)


def test_a_cheap_broadcast_value_stays_inlined() -> None:
    """A per-channel value of a few operations is read where it is used (no node, no buffer of its own)."""
    x, s = torch.randn(8, 16, 8, 8), torch.rand(1, 16, 1, 1)
    gpu = renderer_for("triton", torch.device("cuda")).capabilities
    lowered = lower(compiler.trace_aten(lambda x, s: x * (s * 2 + 1), x, s), torch.device("cpu"), gpu)
    assert len([n for n in lowered.nodes if isinstance(n, ComputedNode)]) == 1
    assert rules.costly_broadcast(rules.Lazy((1, 16, 1, 1), torch.float32, _costly_expr()), x)
    assert not rules.costly_broadcast(rules.Lazy((1, 16, 1, 1), torch.float32, _costly_expr()), torch.randn(4, 16, 2))


def _costly_expr():
    from compiler import ir

    e = ir.const(1.0, torch.float32)
    for _ in range(rules.BROADCAST_MIN_OPS):
        e = ir.binary(Op.ADD, e, ir.const(1.0, torch.float32))
    return e


def test_a_training_batch_norm_with_its_scale_realized_matches_eager(codegen: str) -> None:
    x, w, b, rm, rv = _bn_inputs()
    check_parity(lambda x, w, b: torch.nn.functional.batch_norm(x, rm.clone(), rv.clone(), w, b, training=True).relu(),
                 (x, w, b), codegen)
