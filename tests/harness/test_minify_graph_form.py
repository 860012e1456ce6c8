"""The minimizer's own graph form: a case travels to its check worker (and to a case file) as node
records, never as a pickled GraphModule.

Regression: on torch 2.11 (the H200 machine) pickling a make_fx GraphModule for the check worker
failed inside torch.package, so test_minify_accuracy_bug_to_the_cat and
test_gpu_checks_run_without_a_fork failed there while torch 2.14 pickled the same graphs fine. The
tests below make every GraphModule unpicklable, as it was there."""

from __future__ import annotations

import operator
import pickle
from pathlib import Path

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

import compiler
from harness.minify import GraphCase, load_case, save_case
from harness.minify.graph_form import pack_graph, unpack_graph


@pytest.fixture
def no_graph_module_pickling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: torch.fx.GraphModule, *args: object) -> None:
        raise RuntimeError("GraphModule pickled (torch.package's importer failed here on torch 2.11)")

    monkeypatch.setattr(torch.fx.GraphModule, "__reduce__", refuse)
    monkeypatch.setattr(torch.fx.GraphModule, "__reduce_ex__", refuse, raising=False)


def _graph(x: torch.Tensor, w: torch.Tensor) -> tuple:
    a = torch.relu(x @ w) + torch.tensor([1.0, -2.0, 3.0])  # a tensor constant: a get_attr node
    b = torch.cat([a, x[1:, None, :3].squeeze(1).repeat(1, 1)], 0)
    mean, var = torch.var_mean(b, 1)  # a tuple output and its getitem projections
    return b.to(torch.float64).sum(0, keepdim=True), mean * var, b.new_zeros(2, dtype=torch.int64)


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 5, generator=g), torch.randn(5, 3, generator=g)]


def _same_graph(a: torch.fx.GraphModule, b: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> None:
    assert [(n.op, n.name, n.target) for n in a.graph.nodes] == [(n.op, n.name, n.target) for n in b.graph.nodes]
    for got, want in zip(b(*inputs), a(*inputs)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_case_pickles_without_pickling_a_graph_module(no_graph_module_pickling: None) -> None:
    inputs = _inputs()
    gm = compiler.trace_aten(_graph, *inputs)
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    assert operator.getitem in {n.target for n in gm.graph.nodes}
    with pytest.raises(RuntimeError, match="GraphModule pickled"):
        pickle.dumps(gm)
    case = GraphCase(gm, inputs, "crucible-cpp", origin="a make_fx graph")
    back = pickle.loads(pickle.dumps(case))  # what the check worker receives
    assert (back.target, back.origin, len(back.inputs)) == (case.target, case.origin, 2)
    _same_graph(gm, back.gm, inputs)


def test_case_file_stores_the_graph_form(no_graph_module_pickling: None, tmp_path: Path) -> None:
    inputs = _inputs()
    gm = make_fx(_graph)(*inputs)  # without Crucible's decompositions: var_mean stays one op
    case = load_case(save_case(tmp_path / "case.pt", GraphCase(gm, inputs, "inductor", notes={"seed": 3})))
    assert case.notes == {"seed": 3}
    _same_graph(gm, case.gm, inputs)


def test_graph_form_keeps_submodules_and_kwargs() -> None:
    """Graphs from outside make_fx: a call_module node, keyword arguments and slices."""

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(3, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.softmax(self.inner(x[:, 1:4]), dim=-1)

    gm = torch.fx.symbolic_trace(M())
    back = unpack_graph(pickle.loads(pickle.dumps(pack_graph(gm))))
    x = torch.randn(2, 5)
    torch.testing.assert_close(back(x), gm(x), rtol=0, atol=0)


def test_graph_form_errors_name_the_problem() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(lambda t: t + 1, (x,)))
    with pytest.raises(ValueError, match="no importable name"):
        pack_graph(torch.fx.GraphModule(torch.nn.Module(), graph))
    with pytest.raises(ValueError, match="not a graph in the minimizer's form"):
        unpack_graph({"nodes": []})
