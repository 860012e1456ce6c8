"""Compiled optimizer steps: foreach ops taken apart per tensor (compiler/foreach.py), and a step
function compiled whole (its backward compiled inside ``loss.backward()`` with Dynamo's hook set)."""

from __future__ import annotations

import copy

import pytest
import torch


from compiler.decompositions import RULES
from compiler.foreach import foreach_ops, per_tensor_rule
from compiler.report import collect_reports

aten = torch.ops.aten


def _lists(dtype: torch.dtype = torch.float32) -> tuple[list[torch.Tensor], ...]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 4), (5,), (), (2, 0, 3)]

    def draw(low: float = -2.0) -> list[torch.Tensor]:
        return [(torch.rand(s, generator=gen) * 4 + low).to(dtype) for s in shapes]

    return draw(), draw(), draw(0.5)  # the third list positive: a divisor, a base of pow


@pytest.mark.parametrize("op", [aten._foreach_add.Tensor, aten._foreach_add.List, aten._foreach_addcdiv.ScalarList,
                                aten._foreach_addcmul.Scalar, aten._foreach_pow.ScalarAndTensor,
                                aten._foreach_maximum.Scalar, aten._foreach_minimum.ScalarList,
                                aten._foreach_lerp.List, aten._foreach_norm.Scalar, aten._foreach_max.default,
                                aten._foreach_copy.default, aten._foreach_zero.default, aten._foreach_sqrt.default],
                         ids=str)
def test_per_tensor_rule_matches_the_foreach_op(op: torch._ops.OpOverload) -> None:
    a, b, c = _lists()
    nonempty = [t for t in a if t.numel()]
    scalars = [0.5, -1.0, 2.0, 3.0]
    args = {
        aten._foreach_add.Tensor: ((a, torch.tensor(1.5)), {"alpha": 2}),
        aten._foreach_add.List: ((a, b), {"alpha": -0.5}),
        aten._foreach_addcdiv.ScalarList: ((a, b, c, scalars), {}),
        aten._foreach_addcmul.Scalar: ((a, b, c, 0.25), {}),
        aten._foreach_pow.ScalarAndTensor: ((0.9, a), {}),
        aten._foreach_maximum.Scalar: ((a, 0.1), {}),
        aten._foreach_minimum.ScalarList: ((a, scalars), {}),
        aten._foreach_lerp.List: ((a, b, c), {}),
        aten._foreach_norm.Scalar: ((a, 3), {"dtype": torch.float64}),
        aten._foreach_max.default: ((nonempty,), {}),
        aten._foreach_copy.default: ((a, b), {}),
        aten._foreach_zero.default: ((a,), {}),
        aten._foreach_sqrt.default: ((c,), {}),
    }[op]
    want = op(*args[0], **args[1])
    got = per_tensor_rule(op)(*args[0], **args[1])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_every_functional_foreach_op_has_a_rule() -> None:
    ops = set(foreach_ops())
    assert aten._foreach_addcdiv.Scalar in ops and aten._foreach_lerp.Scalar in ops
    assert not any(op.name().endswith("_") or "out" in op._overloadname for op in ops)
    assert aten._foreach_addcmul.Tensor not in ops  # its scalars are a tensor of values: left to ATen
    named = {r.op for r in RULES.values()}
    assert ops <= named


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                        torch.nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _step_fn(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    def step(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def test_compiled_training_step_matches_eager_with_every_graph_compiled() -> None:
    """The whole step compiled: Dynamo splits it at ``backward()``, and AOTAutograd compiles the
    backward there, with Dynamo's frame hook set on this (CPU) thread. Before the backward compiler
    ran under ``torch._dynamo.disable``, Dynamo traced Crucible's own lowering (RecursionError:
    the backward fell back to eager) and compiled graphs of its frames. The optimizer graph's foreach
    ops are per-tensor kernels, not ATen calls."""
    base = _Net()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    eager_model = copy.deepcopy(base)
    eager_step = _step_fn(eager_model, torch.optim.AdamW(eager_model.parameters(), lr=1e-2, foreach=True))
    model = copy.deepcopy(base)
    step = torch.compile(_step_fn(model, torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)),
                         backend="crucible", options={"strict": True})
    with collect_reports() as report:
        for _ in range(3):
            torch.testing.assert_close(step(x, target), eager_step(x, target), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    kinds = sorted(g.kind for g in report.graphs if g.fx_nodes)
    assert kinds.count("forward") == 1 and kinds.count("backward") == 1, kinds
    assert all(g.fallback is None for g in report.graphs)
    assert not any(g.fx_nodes == 0 for g in report.graphs)  # no graph of a frame of the compiler's
    optimizer_graph = max((g for g in report.graphs if g.kind == "inference"), key=lambda g: g.fx_nodes)
    assert not [e.op for e in optimizer_graph.externs if "_foreach_" in e.op]
    assert optimizer_graph.kernels
