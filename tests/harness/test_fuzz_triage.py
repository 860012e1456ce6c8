"""Triage before shrinking: a failure that is known, or already found once localized, is not shrunk."""

from __future__ import annotations

import pytest
import torch

from harness.fuzz import campaign as campaign_module
from harness.fuzz import known as known_module
from harness.fuzz.campaign import CampaignRequest, run_campaign
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.known import KnownFinding, match_known
from harness.fuzz.tasks import GraphTask, LocalizeTask
from harness.result import Result
from harness.status import Status
from harness.targets import Target, parse_target


def _result(status: Status, **fields: object) -> Result:
    return Result(name="fuzz/test", target="fake", status=status, **fields)

OPS = "sign,add.Tensor,mul.Tensor,exp"


class _ChainRunner:
    """Wrong on every graph using aten.sign, as a real target would show it: an unlocalized run
    charges the failure to the op of the graph's last output, a localized one to sign."""

    def __init__(self) -> None:
        self.graph_runs = 0  # runs without localization: examples and shrink candidates
        self.raw_signatures: set[str] = set()

    def run(self, task: GraphTask | LocalizeTask) -> Result:
        graph = FuzzGraph.from_json(task.graph)
        localize = isinstance(task, LocalizeTask)
        if not localize:
            self.graph_runs += 1
        if "aten.sign.default" not in graph.ops:
            return _result(Status.PASS)
        out = graph.outputs[-1]
        record = _result(Status.FAIL_ACCURACY, op=graph.output_ops()[out], error=f"{out}: NaN positions differ from eager")
        if localize:
            sign = next(n for n in graph.nodes if n.op == "aten.sign.default")
            record = record.replace(op="aten.sign.default",
                                    diverged=f"{sign.outputs[0]}: NaN positions differ from eager")
        else:
            self.raw_signatures.add(campaign_module.signature(record))
        return record

    def close(self) -> None:
        return None


def _count_shrinks(monkeypatch: pytest.MonkeyPatch) -> list:
    shrunk: list = []
    conclude = campaign_module._conclude

    def counting(found, *args, **kwargs):  # noqa: ANN001, ANN202
        shrunk.append(found.graph.ops)
        return conclude(found, *args, **kwargs)

    monkeypatch.setattr(campaign_module, "_conclude", counting)
    return shrunk


def test_a_failure_localized_to_a_found_op_is_not_shrunk_again(monkeypatch: pytest.MonkeyPatch) -> None:
    shrunk = _count_shrinks(monkeypatch)
    runner = _ChainRunner()
    summary = run_campaign(CampaignRequest(target="fake", examples=80, seed=4, ops=OPS, shrink_seconds=5), runner)
    assert len(runner.raw_signatures) >= 2, runner.raw_signatures  # several output ops showed the one bug
    assert shrunk == [shrunk[0]]  # shrunk once: every later hit was recognised by its localized op
    (finding,) = summary.findings.values()
    assert finding.signature == "fail_accuracy | aten.sign.default | nan_positions" and finding.known is None
    assert "aten.sign.default" in finding.graph.ops
    assert finding.hits == summary.statuses[Status.FAIL_ACCURACY]


def test_a_known_failure_is_recognised_without_shrinking(monkeypatch: pytest.MonkeyPatch) -> None:
    """The known entry names the op's own output; the unshrunk graphs show it through later ops."""
    planted = KnownFinding("fake", "fail_accuracy", "aten.sign.default", "NaN positions", "planted for a test")
    monkeypatch.setattr(known_module, "KNOWN_FINDINGS", [*known_module.KNOWN_FINDINGS, planted])
    shrunk = _count_shrinks(monkeypatch)
    runner = _ChainRunner()
    summary = run_campaign(CampaignRequest(target="fake", examples=60, seed=4, ops=OPS, shrink_seconds=5), runner)
    failed = summary.statuses[Status.FAIL_ACCURACY]
    assert failed >= 2 and shrunk == []
    assert runner.graph_runs == summary.graphs  # no shrink candidates were run
    assert not summary.new_findings  # the exit status stays 0
    assert [f.known for f in summary.findings.values()] == ["planted for a test"] * len(summary.findings)
    assert sum(f.hits for f in summary.findings.values()) == failed


def test_known_findings_match_the_localized_value_not_the_output() -> None:
    """native_layer_norm's mean (output 1) seen through a later op: known; its output 0: new."""
    record = _result(Status.FAIL_ACCURACY, op="aten.native_layer_norm.default",
                     error="v3: NaN positions differ at [0]: eager nan, target -inf",
                     diverged="v1_1: NaN positions differ at [0]: eager nan, target -inf")
    assert match_known("crucible-cpp", record) is not None
    assert match_known("crucible-cpp", record.replace(diverged=record.diverged.replace("v1_1", "v1_0"))) is None
    assert match_known("crucible-cpp", record.replace(diverged="v1_1: RMSE vs fp64 9 > 2 x eager's")) is None


def _compiling_to(monkeypatch: pytest.MonkeyPatch, make: object) -> None:
    """Every target compiles a graph's function ``fn`` to ``make(fn)`` (a planted wrong compiler)."""
    def compile(self, fn, inputs=(), *, capture="dynamo", dynamic=False, wrap=None):  # noqa: ANN001, ANN202
        return make(fn)

    monkeypatch.setattr(Target, "compile", compile)


def test_the_localize_task_names_the_first_diverging_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A target wrong on sign's output: the task charges sign and names v0, through a later op."""
    import math

    from harness.fuzz.localize import localize
    from harness.pool import run_task

    x = {"shape": [3, 4], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 1}
    graph = FuzzGraph([x], [Node("aten.sign.default", "aten.sign.default(x0)", ["v0"], [([3, 4], "float32")]),
                            Node("aten.add.Tensor", "aten.add.Tensor(v0, x0)", ["v1"], [([3, 4], "float32")])],
                      ["v1"])
    wrong: list[str] = []

    def make(fn):  # noqa: ANN001, ANN202
        def run(*args):  # noqa: ANN002, ANN202
            outs = fn(*args)
            return tuple(o.clone().fill_(math.nan) if name in wrong else o for name, o in zip(("v0", "v1"), outs))
        return run

    _compiling_to(monkeypatch, make)
    target = parse_target("aot_eager")
    assert localize(graph, target, "g").status == Status.PASS
    wrong.append("v0")
    record = run_task(LocalizeTask.of(graph), target, lambda phase: None)
    assert record.status == Status.FAIL_ACCURACY and record.op == "aten.sign.default", record
    assert record.diverged.startswith("v0: NaN positions") and record.phase == "localize", record


class _CompileErrorRunner:
    """Fails to compile every graph using aten.exp, with an error naming no op (as Triton's
    CompilationError names none): the raw record blames the graph's last op."""

    def __init__(self) -> None:
        self.prefix_runs = 0

    def run(self, task: GraphTask) -> Result:
        graph = FuzzGraph.from_json(task.graph)
        if "aten.exp.default" not in graph.ops:
            return _result(Status.PASS)
        return _result(Status.FAIL_COMPILE, op=graph.ops[-1], error="CompilationError: at 12:8: unsupported")

    def close(self) -> None:
        return None


def test_a_compile_error_is_charged_to_the_op_whose_prefix_fails() -> None:
    summary = run_campaign(CampaignRequest(target="fake", examples=60, seed=4, ops=OPS, shrink_seconds=5),
                           _CompileErrorRunner())
    assert summary.statuses[Status.FAIL_COMPILE] >= 2
    # every hit, whatever op came last in its graph, is one finding charged to exp
    assert [f.signature for f in summary.findings.values()] == ["fail_compile | aten.exp.default | CompilationError"]
    (finding,) = summary.findings.values()
    assert finding.hits == summary.statuses[Status.FAIL_COMPILE]
    blamed = finding.record.prefix or len(finding.graph.nodes)  # a one-node graph needs no bisection
    assert finding.graph.nodes[blamed - 1].op == "aten.exp.default"


def test_an_error_no_prefix_shows_keeps_the_raw_blame() -> None:
    """The error needs the whole graph (a later node): no prefix fails alone, the record stands."""

    class Runner(_CompileErrorRunner):
        def run(self, task: GraphTask) -> Result:
            graph = FuzzGraph.from_json(task.graph)
            if len(graph.outputs) > 1:  # a prefix (every value an output) compiles
                return _result(Status.PASS)
            return super().run(task)

    graph = None
    summary = run_campaign(CampaignRequest(target="fake", examples=60, seed=4, ops=OPS, shrink_seconds=5), Runner())
    for finding in summary.findings.values():
        graph = finding.graph
        assert finding.record.prefix is None and finding.op == graph.ops[-1]
    assert graph is not None


def test_localization_charges_an_excused_overflow_that_a_later_op_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzzer, crucible-cpp, seed 5: logit in float16 is inf in eager (a known ATen rounding) and
    13.8 compiled, which the oracle excuses (float64 agrees with the target); addcmul's cancellation
    after it then fails. The divergence from eager starts at logit: the known finding, not addcmul."""
    from harness.fuzz.localize import localize

    x = {"shape": [8], "dtype": "float32", "layout": "contiguous", "profile": "positive", "seed": 1}
    meta = [([8], "float32")]
    graph = FuzzGraph([x], [Node("aten.exp.default", "aten.exp.default(x0)", ["v0"], meta),
                            Node("aten.mul.Tensor", "aten.mul.Tensor(aten.mul.Tensor(x0, 3e38), 0.25)", ["v1"], meta),
                            Node("aten.sub.Tensor", "aten.sub.Tensor(aten.mul.Tensor(v1, 0.0), v0)", ["v2"], meta)],
                      ["v2"])

    def make(fn):  # noqa: ANN001, ANN202
        def run(*args):  # noqa: ANN002, ANN202  v1 = the float64 truth (finite, eager: inf), v2 off by 1
            v0, v1, v2 = fn(*args)
            return v0, (args[0].double() * 0.75e38).float(), v2 + 1
        return run

    _compiling_to(monkeypatch, make)
    record = localize(graph, parse_target("aot_eager"), "g")
    assert record.status == Status.FAIL_ACCURACY and record.op == "aten.mul.Tensor", record
    assert record.diverged.startswith("v1: +Inf positions differ from eager ("), record
    assert "(eager overflowed there, excused" in record.diverged, record
    assert "v2 fails downstream" in record.diverged


def test_known_findings_match_the_oracles_wording_in_any_case() -> None:
    """The oracle says '+Inf positions'; the logit entry says 'inf positions' (never matched before)."""
    record = _result(Status.FAIL_ACCURACY, op="aten.logit.default", error="v1: +Inf positions differ from eager")
    assert match_known("crucible-cpp", record) is not None


def test_atens_vectorized_float64_sinh_overflow_is_known_and_crucibles_value_is_right() -> None:
    """Fuzzer, crucible-cpp, seed 459: sinh of float64 running sums reaching 710.40 was inf in eager
    (ATen's vectorized loop computes e^x first) and 1.665e308 in Crucible, the exact value; a known
    upstream finding (FINDINGS.md), for sinh and cosh only."""
    import compiler

    x = torch.full((16,), 710.4, dtype=torch.float64)
    for op in (torch.ops.aten.sinh.default, torch.ops.aten.cosh.default):
        got = compiler.compile_graph(compiler.trace_aten(op, x), [x], codegen="cpp")(x)
        torch.testing.assert_close(got, op(x[:1]).expand(16), rtol=1e-13, atol=0)  # the scalar loop's
        record = _result(Status.FAIL_ACCURACY, op=str(op), error="v2: +Inf positions differ from eager")
        assert match_known("crucible-cpp", record) is not None
    assert match_known("crucible-cpp", _result(Status.FAIL_ACCURACY, op="aten.sign.default",
                                               error="v2: +Inf positions differ from eager")) is None


def test_a_zero_sign_difference_is_charged_where_it_starts() -> None:
    """Fuzzer, crucible-cpp, seed 24: atan2(softshrink(x), x) is off by 2 pi where ATen's softshrink gave
    +0 (its vectorized loop) and Crucible -0 (x * 0, as its scalar tail and torch's rule): the oracle
    compares the zeros equal, so localization charges softshrink, whose known entry then matches."""
    from harness.fuzz.localize import localize_divergence

    x = {"shape": [16], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0}
    meta = [([16], "float32")]
    graph = FuzzGraph([x], [Node("aten.softshrink.default", "aten.softshrink.default(x0)", ["v1"], meta),
                            Node("aten.atan2.default", "aten.atan2.default(v1, x0)", ["v2"], meta)], ["v2"])
    values = graph.make_inputs()[0]
    zeros = torch.nn.functional.softshrink(values)
    if not bool(((zeros == 0) & ~torch.signbit(zeros) & (values < 0)).any()):
        pytest.skip("this ATen's softshrink keeps the sign of zeros in every loop")
    op, diverged = localize_divergence(graph, parse_target("crucible-cpp"))
    assert op == "aten.softshrink.default" and "signs of zeros" in diverged, (op, diverged)
    record = _result(Status.FAIL_ACCURACY, op=op, error="v2: RMSE vs fp64", diverged=diverged)
    assert match_known("crucible-cpp", record) is not None
    assert match_known("crucible-cpp", record.replace(op="aten.neg.default")) is None


def _three_node_graph() -> FuzzGraph:
    x = {"shape": [4], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 1}
    meta = [([4], "float32")]
    return FuzzGraph([x, {**x, "seed": 2}, {**x, "seed": 3}],
                     [Node("aten.exp.default", "aten.exp.default(x0)", ["v0"], meta),
                      Node("aten.sign.default", "aten.sign.default(x2)", ["v1"], meta),
                      Node("aten.add.Tensor", "aten.add.Tensor(v1, x1)", ["v2"], meta)], ["v0", "v2"])


def test_a_graph_prunes_to_what_an_output_needs() -> None:
    graph = _three_node_graph()
    cut = graph.pruned(["v2"])
    assert [n.expr for n in cut.nodes] == ["aten.sign.default(x1)", "aten.add.Tensor(v1, x0)"]
    assert [d["seed"] for d in cut.inputs] == [2, 3] and cut.outputs == ["v2"]
    assert graph.pruned(["v0"]).source() == "def graph(x0):\n    v0 = aten.exp.default(x0)\n    return (v0,)\n"


def test_a_shrunk_finding_loses_the_nodes_its_failure_does_not_need() -> None:
    """Wrong on sign, as _ChainRunner; the unrelated exp node (hypothesis keeps such nodes when they
    come first) is pruned, and with it x0; a cut that stops failing is not taken."""
    graph = _three_node_graph()
    runner = _ChainRunner()
    record = runner.run(LocalizeTask.of(graph))
    cut, got = campaign_module._pruned(graph, record, CampaignRequest(target="fake", examples=1), runner,
                                       campaign_module.CampaignSummary())
    assert cut.ops == ["aten.sign.default"] and len(cut.inputs) == 1, cut.source()
    assert campaign_module.signature(got) == campaign_module.signature(record)

    class Needs(_ChainRunner):  # fails only with all three nodes: no cut is taken
        def run(self, task: GraphTask | LocalizeTask) -> Result:
            if len(FuzzGraph.from_json(task.graph).nodes) < 3:
                return _result(Status.PASS)
            return super().run(task)

    cut, got = campaign_module._pruned(graph, record, CampaignRequest(target="fake", examples=1), Needs(),
                                       campaign_module.CampaignSummary())
    assert cut is graph and got is record


def test_the_interpreters_negative_nan_is_known_by_either_accuracy_check() -> None:
    """Campaign 581 (crucible-interpret): copysign(4.4e-9, log(-0.22)) gave -4.4e-9 (numpy's log of a
    negative number is -NaN); a value that small fails the relative check, not the RMSE one. Known on
    the interpreter only: the C++ target giving it is new."""
    for message in ("v3: relative error: RMS vs fp64 1.07e+16 ulp > 4 x eager's 0", "v3: RMSE vs fp64 2 > 2 x eager's 0"):
        record = _result(Status.FAIL_ACCURACY, op="aten.copysign.Tensor", error=message, diverged=message)
        assert match_known("crucible-interpret", record) is not None
        assert match_known("crucible-cpp", record) is None
