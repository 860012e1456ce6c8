"""The fuzzer on the execution engine: graphs are engine subjects, tasks are picklable callables,
the target's options reach the compiler, and ``crucible-sim`` runs every kernel checked."""

from __future__ import annotations

import pickle

import pytest
import torch

from harness.fuzz.campaign import CampaignRequest, run_campaign
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.repro import write_repro
from harness.fuzz.tasks import GraphTask
from harness.fuzz.workers import InProcessRunner
from harness.pool import run_task
from harness.status import Status
from harness.targets import parse_target
from tests.harness import fuzz_plants

X = {"shape": [5, 7], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 1}
META = [([5, 7], "float32")]


def _exp_add() -> FuzzGraph:
    return FuzzGraph([X, {**X, "seed": 2}], [Node("aten.exp.default", "aten.exp.default(x0)", ["v0"], META),
                                             Node("aten.add.Tensor", "aten.add.Tensor(v0, x1)", ["v1"], META)],
                     ["v1"])


def test_a_graph_task_is_picklable_and_runs_through_the_engine() -> None:
    task = GraphTask.of(_exp_add())
    assert pickle.loads(pickle.dumps(task)) == task
    result = run_task(task, parse_target("crucible-interpret"), lambda phase: None)
    assert result.name == task.name and result.status == Status.PASS, result
    assert result.phase == "compare" and result.compile_s is not None and result.reference == "cpu"
    invalid = FuzzGraph([X], [Node("aten.mm.default", "aten.mm.default(x0, x0)", ["v0"], META)], ["v0"])
    eager_fail = run_task(GraphTask.of(invalid), parse_target("crucible-interpret"), lambda phase: None)
    assert eager_fail.status == Status.EAGER_FAIL and not eager_fail.counts, eager_fail  # 5x7 @ 5x7


def test_a_compile_error_is_a_compile_failure_charged_to_an_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the engine's classifier: the compiler's error is ``fail_compile`` of the pass that
    raised, charged to an op of the graph (the campaign's bisection then finds which one)."""
    import compiler.lowerings  # noqa: F401  (register every rule before patching)
    from compiler.lowering import LOWERINGS

    def broken(ctx, node, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise KeyError("planted: exp has no lowering")

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.exp.default, broken)
    result = run_task(GraphTask.of(_exp_add()), parse_target("crucible-interpret"), lambda phase: None)
    assert result.status == Status.FAIL_COMPILE and result.against_compiler, result
    assert result.failed_pass == "lower" and "planted" in result.error, result
    assert result.op in _exp_add().ops, result


def test_target_options_reach_compile_graph_on_the_fx_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the fuzzer's own compile path passed codegen, strict and extern only, dropping
    crucible-triton's tuning=first_call and every other option of the target."""
    import compiler

    calls: list[dict] = []
    compile_graph = compiler.compile_graph

    def spy(gm, inputs, **options):  # noqa: ANN001, ANN003, ANN202
        calls.append(options)
        return compile_graph(gm, inputs, **options)

    monkeypatch.setattr(compiler, "compile_graph", spy)
    name = "crucible-interpret:tuning=off,layout=contiguous,extern=none"
    result = InProcessRunner(name).run(GraphTask.of(_exp_add(), capture="fx"))
    assert result.status == Status.PASS and result.target == name, result
    assert calls and calls[0] == {"codegen": "triton", "strict": True, "poison": True, "tuning": "off",
                                  "layout": "contiguous", "extern": "none"}, calls


def test_a_crucible_sim_campaign_finds_a_kernel_reading_out_of_bounds(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Regression: ``crucible fuzz --target crucible-sim`` ran the kernels without the simulator's
    checks. With every kernel planted to read one element past its inputs (its stores stay in
    bounds, so the numbers are right), crucible-sim's campaign finds it as ``fail_memory``; the
    same seed on crucible-interpret runs the same kernels unchecked and sees nothing of the kind."""
    from compiler.codegen.triton import TritonRenderer

    monkeypatch.setattr(TritonRenderer, "render", fuzz_plants.planted_render(TritonRenderer.render))
    graph = GraphTask.of(_exp_add())  # 35 elements: lane 35 of the block reads past each input
    checked = InProcessRunner("crucible-sim").run(graph)
    assert checked.status == Status.FAIL_MEMORY and "out_of_bounds" in checked.error, checked
    assert InProcessRunner("crucible-interpret").run(graph).status == Status.PASS

    def campaign(target: str):  # noqa: ANN202
        request = CampaignRequest(target=target, examples=10, seed=2, ops="exp.default,add.Tensor", max_nodes=2,
                                  shrink_seconds=3, max_findings=1)
        return run_campaign(request, InProcessRunner(target))

    checked = campaign("crucible-sim")
    (finding,) = checked.new_findings
    assert finding.status == Status.FAIL_MEMORY and finding.signature.endswith("| SimulatorMemoryError"), finding
    assert "out_of_bounds" in finding.error and finding.record.memory_kernels, finding.record
    repro = write_repro(finding.graph, "crucible-sim", None, finding.record)  # checked as the campaign ran it
    with pytest.raises(SystemExit) as stop:
        exec(compile(repro, "repro.py", "exec"), {"__name__": "__main__"})  # noqa: S102
    assert stop.value.code == 1 and "SimulatorMemoryError" in capsys.readouterr().out
    unchecked = campaign("crucible-interpret")
    assert Status.FAIL_MEMORY not in unchecked.statuses and unchecked.graphs == 10, unchecked.statuses
    assert not any(f.status == Status.FAIL_MEMORY for f in unchecked.findings.values())
