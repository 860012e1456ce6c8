"""The capture analysis riding along a compile (CaptureProbe) measures what the separate capture run
measures: graphs, breaks with their reasons and frames, and the ATen ops run inside captured graphs."""

from __future__ import annotations

import pytest
import torch

import harness.targets
from corpus import zoo
from harness.capture import CaptureProbe, analyze_capture
from harness.entry_subject import run_entry
from harness.model_runs import DTYPES, ModelCopies, cast
from harness.targets import parse_target

ENTRIES = zoo.entries()
# the two deep networks (tier nightly-cpu, thousands of nodes: 25 s and 8 s here) run nightly
PARAMS = [e if e.tier == "smoke" else pytest.param(e, marks=pytest.mark.nightly) for e in ENTRIES]


def _as_traced(gm: torch.fx.GraphModule, example_inputs: list, **options: object):
    return gm.forward  # a backend that runs the graph as Dynamo traced it


def _both(entry):
    built = entry.build("small")
    dtype = DTYPES[entry.dtype]
    copies = ModelCopies(entry, "small", built.model)
    args = cast(built.inputs, "cpu", dtype)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            apart, _ = analyze_capture(copies.fresh("cpu", dtype), args, {})
            torch._dynamo.reset()
            probe = CaptureProbe()
            torch.compile(copies.fresh("cpu", dtype), backend=probe.wrap(_as_traced))(*args)
            along = probe.finish()
    finally:
        torch._dynamo.reset()
    return apart, along


@pytest.mark.parametrize("entry", PARAMS, ids=lambda e: e.name.split("/")[1])
def test_probe_measures_what_the_capture_run_measures(entry) -> None:
    apart, along = _both(entry)
    assert (along.graphs, along.graph_breaks, along.breaks) == (apart.graphs, apart.graph_breaks, apart.breaks)
    # ops counted on fake tensors, once per graph, equal the ops of the counted real run
    assert (along.captured_ops, along.uncounted_graphs) == (apart.captured_ops, apart.uncounted_graphs)


def test_probe_counts_one_call_and_wraps_the_backend_it_is_given() -> None:
    calls = []

    def backend(gm, example_inputs, **options):
        calls.append(options)
        return gm.forward

    probe = CaptureProbe()
    fn = torch.compile(lambda x: (x.sin() + 1).relu(), backend=probe.wrap(backend), options={"k": 1})
    x = torch.randn(4)
    fn(x)
    first = probe.finish()
    fn(x)  # after finish: no more counting
    assert first.graphs == 1 and first.captured_ops == 3 and probe.finish().captured_ops == 3
    assert calls == [{"options": {"k": 1}}]  # torch.compile's options reach the wrapped backend


def _entry(name: str):
    return next(e for e in ENTRIES if e.name == name)


def test_a_crucible_entry_is_traced_once_and_a_failed_compile_still_gets_its_capture(monkeypatch) -> None:
    entry = _entry("zoo/item_branch")  # two graphs, one break
    expected = zoo.expected_counts(entry, torch.__version__)
    passed = run_entry(entry, parse_target("crucible-interpret"))
    assert passed.status == "pass", passed.error
    assert (passed.graphs, passed.graph_breaks) == expected and len(passed.break_reasons) == 1
    assert passed.captured_ops > 0 and passed.capture_s is None  # no capture phase of its own

    def broken(gm, example_inputs, **options):
        raise RuntimeError("planted: this backend cannot compile anything")

    monkeypatch.setattr(harness.targets, "_crucible_backend", lambda: broken)
    failed = run_entry(entry, parse_target("crucible-interpret"))
    assert failed.status.startswith("fail_") and failed.phase == "compile", failed
    # the compile stopped before its first call returned: the capture ran apart, as before
    assert (failed.graphs, failed.graph_breaks) == expected and failed.capture_s is not None
    assert failed.captured_ops == passed.captured_ops
