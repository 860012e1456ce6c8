"""``crucible fuzz --dynamic``: further calls drawn from a graph's structure (harness.fuzz.dynamic), run
on one compile with symbolic sizes (harness.fuzz.dynamic_run), and the A/B test: a bug planted in the
symbolic path (tests/harness/fuzz_plants.py) found with --dynamic and missed without it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from harness.fuzz.campaign import CampaignRequest, run_campaign
from harness.fuzz.dynamic import MAX_CALL_NUMEL, candidate_sizes, further_calls, symbolic_dims
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.sizes import target_blocks
from harness.fuzz.subject import run_graph
from harness.fuzz.workers import InProcessRunner
from harness.status import Status
from harness.targets import parse_target
from tests.harness import fuzz_plants


def _input(shape: list[int], seed: int, **extra: Any) -> dict[str, Any]:
    return {"shape": shape, "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": seed, **extra}


def _graph(*nodes: tuple[str, str, list[int]], inputs: list[dict[str, Any]]) -> FuzzGraph:
    made = [Node(op, expr, [f"v{i}"], [(shape, "float32")]) for i, (op, expr, shape) in enumerate(nodes)]
    return FuzzGraph(inputs, made, [f"v{len(made) - 1}"])


# x0 [5, 33] + x1 [33] broadcast, then a sum over the shared dim: one symbol ties x0's dim 1 to x1's dim 0
BROADCAST_SUM = _graph(("aten.add.Tensor", "aten.add.Tensor(x0, x1)", [5, 33]),
                       ("aten.sum.dim_IntList", "aten.sum.dim_IntList(v0, [1])", [5]),
                       inputs=[_input([5, 33], 1), _input([33], 2)])


def test_symbols_follow_the_graphs_ties() -> None:
    """A broadcast unifies two inputs' dims; a cat compared with another input makes that input's dim a
    sum; a view to literal sizes leaves a guard that keeps its input's sizes; a size-1 dim is fixed."""
    dims = symbolic_dims(BROADCAST_SUM)
    assert dims is not None and len(dims.symbols) == 2 and dims.dims[0][1] == dims.dims[1][0]
    # one trace per graph: hypothesis's replay of an example must draw for the same symbols
    assert symbolic_dims(FuzzGraph.from_json(BROADCAST_SUM.to_json())) is dims
    cat = _graph(("aten.cat.default", "aten.cat.default([x0, x1], 1)", [4, 10]),
                 ("aten.add.Tensor", "aten.add.Tensor(v0, x2)", [4, 10]),
                 inputs=[_input([4, 7], 1), _input([4, 3], 2), _input([1, 10], 3)])
    dims = symbolic_dims(cat)
    assert dims is not None and dims.dims[2][0] == 1
    assert dims.dims[2][1] == dims.dims[0][1] + dims.dims[1][1]
    view = _graph(("aten.view.default", "aten.view.default(x0, [45])", [45]), inputs=[_input([5, 9], 1)])
    dims = symbolic_dims(view)
    assert dims is not None and dims.guards
    assert dims.shapes({sym: 7 for sym in dims.symbols}) is None  # 7 x 7 is not 45: a guard fails


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@hypothesis_seed(3)
@given(st.data())
def test_further_calls_keep_ties_and_budget(data: Any) -> None:
    """Every further call of the broadcast graph runs in eager, changes a size, never draws 0 or 1 for a
    symbolic dim, and stays within the element budget."""
    calls = further_calls(data.draw, BROADCAST_SUM, target_blocks("crucible-cpp"))
    for shapes in calls:
        assert shapes != [[5, 33], [33]] and shapes[0][1] == shapes[1][0]
        assert min(shapes[0]) >= 2 and all(s[0] * s[1] <= MAX_CALL_NUMEL for s in shapes[:1])
        sized = FuzzGraph(BROADCAST_SUM.inputs, BROADCAST_SUM.nodes, BROADCAST_SUM.outputs, calls).at_call(
            calls.index(shapes))
        sized.function()(*sized.make_inputs())


def test_candidate_sizes_avoid_what_torch_specializes() -> None:
    sizes = candidate_sizes(33, target_blocks("crucible-cpp"))
    assert sizes[0] == 33 and 2 in sizes and 0 not in sizes and 1 not in sizes
    assert min(candidate_sizes(33, target_blocks("crucible-cpp"), floor=17)[1:]) >= 17  # indices stay valid


def test_calls_travel_with_the_graph() -> None:
    """A static graph's JSON (its name, its stored signature) is unchanged; further calls round-trip and
    survive pruning to the inputs a failure needs."""
    assert "calls" not in json.loads(BROADCAST_SUM.to_json())
    graph = FuzzGraph(BROADCAST_SUM.inputs, BROADCAST_SUM.nodes, BROADCAST_SUM.outputs, [[[7, 65], [65]]])
    again = FuzzGraph.from_json(graph.to_json())
    assert again.calls == [[[7, 65], [65]]] and again.dynamic
    assert [d["shape"] for d in again.at_call(0).inputs] == [[7, 65], [65]]
    assert graph.pruned(["v0"]).calls == [[[7, 65], [65]]] and graph.prefix(1).calls == graph.calls
    expanded = FuzzGraph([_input([4, 6], 1, layout="expanded", expand_from=[1, 6])], [], ["x0"], [[[3, 9]]])
    assert expanded.at_call(0).inputs[0]["expand_from"] == [1, 9]


def _dynamic(plant: str) -> Any:
    graph = FuzzGraph(BROADCAST_SUM.inputs, BROADCAST_SUM.nodes, BROADCAST_SUM.outputs,
                      [[[7, 1025], [1025]], [[130, 2], [2]]])
    getattr(fuzz_plants, plant)()
    return run_graph(graph, parse_target("crucible-interpret"))


@pytest.mark.parametrize(("plant", "status", "error"), [
    ("placeholders_specialize_sizes", Status.FAIL_COMPILE, "UnexpectedRecompile"),
    ("add_fails_on_symbolic_sizes", Status.FAIL_COMPILE, "DynamicFallback: compiler_error"),
    ("add_refuses_symbolic_sizes", Status.PASS, ""),
])
def test_dynamic_only_failures_have_their_kind(monkeypatch, plant: str, status: Status, error: str) -> None:
    """A compiler that specializes a size recompiles where Dynamo's eager backend does not; a plain
    error only with symbolic sizes is a finding; the typed refusal is counted in the result, not failed."""
    from compiler.lowering import LOWERINGS, GraphLowering

    monkeypatch.setattr(GraphLowering, "lower_placeholder", GraphLowering.lower_placeholder)
    monkeypatch.setitem(LOWERINGS, fuzz_plants.aten.add, LOWERINGS[fuzz_plants.aten.add])
    result = _dynamic(plant)
    assert result.status == status, result.error
    assert (result.error or "").startswith(error)
    if status == Status.PASS:
        assert [f["reason"] for f in result.fallbacks] == ["dynamic_unsupported"]
        assert result.dynamic == 1 and len(result.sizes) == 3


def test_planted_symbolic_bug_is_found_with_dynamic_and_missed_without(monkeypatch) -> None:
    """A launch config kept from a size-generic kernel's first call is right at the generated size and
    wrong at a larger one: a --dynamic campaign finds it at its third graph (the first with a dim that can
    vary), the same static campaign (same seed and graph count) never compiles a size-generic kernel.
    A change to the generator changes the draws: then choose the seed again."""
    from compiler.codegen import triton_tiles

    monkeypatch.setattr(triton_tiles.SizeLaunch, "candidates", triton_tiles.SizeLaunch.candidates)
    fuzz_plants.launch_config_kept_from_first_call()

    def findings(dynamic: bool) -> list[str]:
        request = CampaignRequest(target="crucible-interpret", examples=3, seed=3, ops="add.Tensor", max_nodes=1,
                                  shrink_seconds=0, max_findings=1, dynamic=dynamic)
        return list(run_campaign(request, InProcessRunner("crucible-interpret")).findings)

    assert findings(True) == ["fail_accuracy | aten.add.Tensor | integer_values"]
    assert findings(False) == []


def test_localization_runs_the_further_sizes(monkeypatch) -> None:
    """A failure only a further size shows is charged to the first value diverging there (with every
    intermediate an output), not passed as "needs the original fusion"."""
    from compiler import wrapper
    from compiler.codegen import triton_tiles
    from harness.fuzz.localize import localize

    monkeypatch.setattr(triton_tiles.SizeLaunch, "candidates", triton_tiles.SizeLaunch.candidates)
    fuzz_plants.launch_config_kept_from_first_call()
    # the plant leaves part of an output unwritten: NaN there, whatever memory the allocator hands back
    # (CI once charged the sum, not the add, when the add's unwritten part held the right values)
    allocate = wrapper.allocator

    def poisoned(device: Any) -> Any:
        empty = allocate(device)
        return lambda size, stride, dtype: empty(size, stride, dtype).fill_(
            math.nan if dtype.is_floating_point else -7)

    monkeypatch.setattr(wrapper, "allocator", poisoned)
    graph = FuzzGraph(BROADCAST_SUM.inputs, BROADCAST_SUM.nodes, BROADCAST_SUM.outputs, [[[7, 1025], [1025]]])
    result = localize(graph, parse_target("crucible-interpret"))
    assert result.status == Status.FAIL_ACCURACY and result.op == "aten.add.Tensor", result.error
    assert "call 2 at 7x1025" in result.diverged


def test_dynamos_own_recompiles_are_not_findings() -> None:
    """A sliced input whose last dim equals its stride (2) is duck-sized by Dynamo with a stride guard
    that a new size breaks: Dynamo recompiles on any backend, so it is counted, not a finding. (The
    engine grades the first and the second call: the further sizes ran twice and the second count
    included the eager baseline's own compiles, which made every such graph an UnexpectedRecompile.)"""
    graph = FuzzGraph([_input([3, 2], 1, layout="sliced")],
                      [Node("aten.abs.default", "aten.abs.default(x0)", ["v0"], [([3, 2], "float32")])],
                      ["v0"], [[[3, 5]], [[7, 5]]])
    result = run_graph(graph, parse_target("aot_eager"))  # the count is the harness's, whatever the backend
    assert result.status == Status.PASS, result.error
    assert result.recompiles == 1 and [row["graphs"] for row in result.sizes] == [0, 1, 0]


def test_repro_runs_every_size(monkeypatch, capsys) -> None:
    """A --dynamic finding's repro compiles once with dynamic shapes and checks every size: it exits 1
    with the launch config kept from the first call, which only the further size shows."""
    from compiler.codegen import triton_tiles
    from harness.fuzz.repro import write_repro
    from harness.result import Result

    graph = FuzzGraph(BROADCAST_SUM.inputs, BROADCAST_SUM.nodes, BROADCAST_SUM.outputs, [[[7, 1025], [1025]]])
    text = write_repro(graph, "crucible-interpret", None, Result("fuzz/x", "crucible-interpret", Status.FAIL_ACCURACY))

    def run() -> int:
        namespace: dict[str, Any] = {"__name__": "repro"}
        exec(compile(text, "repro.py", "exec"), namespace)  # noqa: S102 -- the script under test
        return namespace["main"]()

    monkeypatch.setattr(triton_tiles.SizeLaunch, "candidates", triton_tiles.SizeLaunch.candidates)
    fuzz_plants.launch_config_kept_from_first_call()
    assert run() == 1
    out = capsys.readouterr().out
    assert "v1: max abs err" in out and "(inputs [[7, 1025], [1025]])" in out, out


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@hypothesis_seed(5)
@given(st.data())
def test_further_calls_budget_the_values_a_graph_computes(data: Any) -> None:
    """An outer product of two inputs within the budget is the product of their sizes: every value the
    graph computes stays within the budget too (fuzzer, crucible-interpret --dynamic, seed 196: a
    [24583, 1] @ [1, 24583] float64 product took the worker past the machine's memory)."""
    outer = _graph(("aten.matmul.default", "aten.matmul.default(x0, x1)", [3, 4]),
                   inputs=[_input([3, 1], 1), _input([1, 4], 2)])
    dims = symbolic_dims(outer)
    assert dims is not None and dims.numels
    calls = further_calls(data.draw, outer, target_blocks("crucible-interpret"))
    for shapes in calls:
        assert shapes[0][0] * shapes[1][1] <= MAX_CALL_NUMEL


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@hypothesis_seed(7)
@given(st.data())
def test_further_calls_budget_an_empty_tensors_other_dims(data: Any) -> None:
    """A 0 dim counts as 1 against the budget, as the graph builder counts it: ATen's CPU sort over the
    empty last dim of [65535, 65537, 3, 0] walked its 12.9e9 rows for 21 s an eager call, and the
    graph's eager, reference and noise runs timed a worker out (fuzzer, crucible-interpret:extern=none
    --dynamic, seed 249)."""
    empty = FuzzGraph([_input([8, 2, 3, 0], 1)],
                      [Node("aten.sort.stable", "aten.sort.stable(x0, stable=True, dim=-1)", ["v0_0", "v0_1"],
                            [([8, 2, 3, 0], "float32"), ([8, 2, 3, 0], "int64")], returns_tuple=True)],
                      ["v0_0", "v0_1"])
    dims = symbolic_dims(empty)
    assert dims is not None and dims.symbols
    calls = further_calls(data.draw, empty, target_blocks("crucible-interpret:extern=none"))
    for (shape,) in calls:
        assert shape[-1] == 0 and math.prod(shape[:-1]) <= MAX_CALL_NUMEL
