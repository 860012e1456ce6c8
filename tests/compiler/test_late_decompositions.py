"""Decompositions applied after capture (``compiler.late_decompositions``): the graph that reaches
lowering must be the one AOTAutograd produced when it applied the same rules itself."""

from __future__ import annotations

import operator

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import compiler
from compiler import late_decompositions
from compiler.decompositions import capture_decomposition_table, decomposition_table_for_compiler
from compiler.decompositions import LATE_OPS
from compiler.late_decompositions import expand_late_decompositions


def captured(model: torch.nn.Module, x: torch.Tensor, table: dict) -> torch.fx.GraphModule:
    """The inference graph AOTAutograd hands a backend for ``model(x)``, decomposed with ``table``."""
    graphs = []

    def keep(gm: torch.fx.GraphModule, inputs: list) -> object:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def backend(gm: torch.fx.GraphModule, inputs: list) -> object:
        return aot_module_simplified(gm, inputs, fw_compiler=keep, inference_compiler=keep, decompositions=table)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(x)
    (gm,) = graphs
    return gm


def structure(gm: torch.fx.GraphModule) -> list[tuple]:
    """Each node's op, target, arguments (by position) and value layout, in graph order."""
    position: dict[torch.fx.Node, int] = {}
    rows = []
    for node in gm.graph.nodes:
        position[node] = len(position)
        args = torch.fx.map_arg((node.args, node.kwargs), lambda n: f"%{position[n]}")
        val = node.meta.get("val")
        layout = (tuple(val.shape), val.stride(), val.dtype, val.device) if isinstance(val, torch.Tensor) else None
        rows.append((node.op, str(node.target), repr(args), layout))
    return rows


class PermutedNorm(torch.nn.Module):
    """A layer norm over a permuted (non-contiguous) input, as convnets' channels-last norms are."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2) + 1


CASES = {
    "layer_norm": (lambda: torch.nn.LayerNorm(16), lambda: torch.randn(4, 16)),
    "layer_norm_no_affine": (lambda: torch.nn.LayerNorm(16, elementwise_affine=False), lambda: torch.randn(3, 5, 16)),
    "layer_norm_permuted": (PermutedNorm, lambda: torch.randn(2, 6, 3, 4)),
    "group_norm": (lambda: torch.nn.GroupNorm(2, 8), lambda: torch.randn(2, 8, 5, 5)),
    "bf16_stack": (lambda: torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                               torch.nn.LayerNorm(16)).to(torch.bfloat16),
                   lambda: torch.randn(3, 16, dtype=torch.bfloat16)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_expanded_graph_is_the_one_capture_made_with_the_rules(case: str) -> None:
    make_model, make_input = CASES[case]
    model, x = make_model().eval(), make_input()
    before = captured(model, x, decomposition_table_for_compiler())
    late = captured(model, x, capture_decomposition_table())
    assert any(n.target in LATE_OPS for n in late.graph.nodes)  # left whole by capture
    captured_structure = structure(late)
    expanded = expand_late_decompositions(late)
    assert expanded.calls >= 1
    assert structure(expanded.gm) == structure(before)
    assert structure(late) == captured_structure  # a copy: a fallback to eager runs the captured graph


def test_cuda_calls_expand_like_capture_on_fake_tensors() -> None:
    """The norm rules branch on the device (mean and rstd dtypes); fake CUDA tensors need no GPU."""
    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x.transpose(0, 1), (16,), w, None) * 2

    with FakeTensorMode():
        x = torch.empty(4, 8, 16, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(16, device="cuda", dtype=torch.bfloat16)
        before = make_fx(norm, decomposition_table=decomposition_table_for_compiler())(x, w)
        late = make_fx(norm, decomposition_table=capture_decomposition_table())(x, w)
    expanded = expand_late_decompositions(late)
    assert expanded.calls == 1
    assert structure(expanded.gm) == structure(before)


def test_identical_calls_are_traced_once() -> None:
    model = torch.nn.Sequential(torch.nn.LayerNorm(12), torch.nn.ReLU(), torch.nn.LayerNorm(12),
                                torch.nn.Linear(12, 10), torch.nn.LayerNorm(10)).eval()
    gm = captured(model, torch.randn(3, 12), capture_decomposition_table())
    late_decompositions._TRACED.clear()
    expanded = expand_late_decompositions(gm)
    assert expanded.calls == 3
    assert len(late_decompositions._TRACED) == 2  # two layouts: (3, 12) twice, (3, 10) once
    assert not any(n.target in LATE_OPS or n.target is operator.getitem for n in expanded.gm.graph.nodes)


def test_a_planted_rule_is_traced_not_the_cached_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """RULES is read at each compile (decompositions' docstring): the trace cache is keyed by the rule."""
    from compiler.decompositions import RULES, DecompRule

    model, x = torch.nn.LayerNorm(8).eval(), torch.randn(2, 8)
    expand_late_decompositions(captured(model, x, capture_decomposition_table()))
    name = "crucible:layer_norm_overflow_safe"

    def planted(x: torch.Tensor, shape: list, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> tuple:
        mean = x.mean(-1, keepdim=True)
        return torch.neg(x), mean, mean

    monkeypatch.setitem(RULES, name, DecompRule(name, RULES[name].op, planted, "crucible"))
    gm = expand_late_decompositions(captured(model, x, capture_decomposition_table())).gm
    assert [str(n.target) for n in gm.graph.nodes if n.op == "call_function"] == ["aten.neg.default"]


def test_the_backend_compiles_norms_after_capture_to_the_same_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the C++ codegen: the pass is reported, results match eager, and the kernels are
    those of a capture that applied the rules itself."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                torch.nn.LayerNorm(16)).eval()
    x = torch.randn(5, 8)
    with torch.no_grad():
        report = compiler.inspect(model, x, codegen="cpp")
        (graph,) = report.graphs
        assert graph.kind == "inference" and "late_decompositions" in graph.passes
        monkeypatch.setattr("compiler.backend.capture_decomposition_table", decomposition_table_for_compiler)
        before = compiler.inspect(model, x, codegen="cpp")
        assert "late_decompositions" not in before.graphs[0].passes
        assert [k.source for k in report.kernels] == [k.source for k in before.kernels]
        compiled = torch.compile(model, backend="crucible", options={"codegen": "cpp"})
        torch.testing.assert_close(compiled(x), model(x))


def test_graphs_that_need_gradients_decompose_norms_in_capture() -> None:
    """A training graph's backward is the derivative of the decomposed forward, as before the pass."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    report = compiler.inspect(model, torch.randn(5, 8), codegen="cpp")
    assert {g.kind for g in report.graphs} == {"forward"}  # the backward compiles at the first backward
    assert all("late_decompositions" not in g.passes for g in report.graphs)
