"""``python -m harness.bench.models``: its command line and tables (the GPU run itself is not a test;
performance is read from its table)."""

from __future__ import annotations

import pytest

from harness.bench import models


def _row(model: str, dtype: str, **ms: float) -> dict:
    backends = {b.replace("_", "-"): {"ms": v, "compile_s": 1.0, "max_err": 0.0} for b, v in ms.items()}
    return {"model": model, "dtype": dtype, "backends": backends}


def test_help_works_without_a_gpu(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        models.main(["--help"])
    assert done.value.code == 0 and "--tiny" in capsys.readouterr().out


def test_pairs_and_their_errors() -> None:
    parser = models.argparse.ArgumentParser()
    args = models.argparse.Namespace(pairs=["gpt2:bf16", "resnet50:fp32"], models=[], dtypes=[])
    assert models.pairs(args, parser) == [("gpt2", "bf16"), ("resnet50", "fp32")]
    with pytest.raises(SystemExit):
        models.pairs(models.argparse.Namespace(pairs=["gpt3:fp32"], models=[], dtypes=[]), parser)


def test_table_ratios_and_geomeans() -> None:
    """Speed = the other's time over Crucible's; geomeans per dtype; failures listed, not dropped."""
    rows = [_row("resnet50", "fp32", eager=4.0, inductor=2.0, inductor_ro=1.0, crucible=1.0, crucible_cg=0.5),
            _row("gpt2", "fp32", eager=8.0, inductor=2.0, inductor_ro=2.0, crucible=4.0, crucible_cg=2.0)]
    rows[1]["backends"]["crucible-cg"] = {"error": "RuntimeError: boom"}
    text = models.render_tables(rows, [("crucible launcher (bound at load)", 3.2)])
    lines = text.splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    resnet = [c.strip() for c in next(line for line in lines if line.startswith("| resnet50")).split("|")]
    assert float(resnet[header.index("crucible/inductor")]) == 2.0
    assert float(resnet[header.index("crucible-cg/inductor-ro")]) == 2.0
    geo = next(line for line in lines if line.startswith("| fp32"))
    assert float(geo.split("|")[2]) == 1.0  # crucible/inductor: sqrt(2.0 * 0.5)
    assert "gpt2 fp32 crucible-cg: RuntimeError: boom" in text and "3.2" in text


def test_the_max_autotune_column_and_geomean_appear_when_it_ran() -> None:
    """``--backends ... inductor-ma`` (Inductor's max-autotune, opt-in: minutes of compile a model) adds
    its time, Crucible's speed over it and its compile time, and a geomean over the rows that ran it."""
    rows = [_row("resnet50", "bf16", eager=4.0, inductor=2.0, inductor_ma=1.5, crucible=1.0),
            _row("bert_base", "bf16", eager=4.0, inductor=2.0, inductor_ma=0.5, crucible=1.0)]
    lines = models.render_tables(rows, []).splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    resnet = [c.strip() for c in next(line for line in lines if line.startswith("| resnet50")).split("|")]
    assert float(resnet[header.index("crucible/inductor-ma")]) == 1.5 and resnet[header.index("inductor-ma ms")]
    geo_header = [c.strip() for c in next(line for line in lines if line.startswith("| dtype")).split("|")]
    geo = [c.strip() for c in next(line for line in lines if line.startswith("| bf16")).split("|")]
    assert abs(float(geo[geo_header.index("crucible/inductor-ma")]) - (1.5 * 0.5) ** 0.5) < 0.01
    assert "crucible-cg/inductor-ro" not in geo_header  # no row ran CUDA graphs
    plain = models.render_tables([_row("resnet50", "bf16", eager=4.0, inductor=2.0, crucible=1.0)], [])
    assert "inductor-ma" not in plain
    assert "inductor-ma" not in models.BACKENDS and "inductor-ma" in models.OPT_IN  # never by default


def test_a_row_below_a_peer_lists_both_sides_kernels_and_the_gpu_table_shows_busy_shares() -> None:
    """A row at 0.8x max-autotune (and at Inductor's speed) lists its and max-autotune's longest kernels,
    not Inductor's; every backend's GPU time is in the busy table."""
    row = _row("bert_base", "bf16", eager=4.0, inductor=2.0, inductor_ma=1.6, crucible=2.0)
    for backend, gpu, kernel in (("eager", 3.0, "sm90_gemm"), ("inductor", 1.8, "triton_per_fused"),
                                 ("inductor-ma", 1.5, "triton_tem_fused_mm"), ("crucible", 1.0, "k_softmax")):
        row["backends"][backend].update(gpu_ms=gpu, top_kernels=[[kernel, gpu / 2]])
    text = models.render_tables([row], [])
    busy = next(line for line in text.splitlines() if line.startswith("| bert_base") and "%" in line)
    assert [c.strip() for c in busy.split("|")[-5:-1]] == ["75%", "90%", "50%", "94%"]  # eager, inductor, crucible, ma
    slow = text.split("below 0.95x its peer")[1]
    assert "bert_base bf16 crucible/inductor-ma: wall 0.80:" in slow and "crucible/inductor:" not in slow
    assert "crucible: call 2.00 ms, GPU 1.00 ms: k_softmax 0.500" in slow
    assert "inductor-ma: call 1.60 ms, GPU 1.50 ms: triton_tem_fused_mm 0.750" in slow
    assert "GPU time per call" not in models.render_tables([_row("m", "fp32", eager=1.0, crucible=1.0)], [])


def test_the_untuned_column_shows_what_tuning_buys_and_compiles_first(monkeypatch) -> None:
    """``crucible-untuned`` (options ``tuning="off"``) gets its own columns, without max-autotune's, and
    compiles before ``crucible``: a kernel tuned earlier in the process keeps its tuned config in every
    mode, so after ``crucible`` it would run tuned configs."""
    rows = [_row("resnet50", "bf16", eager=4.0, crucible_untuned=1.1, crucible=1.0)]
    text = models.render_tables(rows, [])
    header = [c.strip() for c in text.splitlines()[0].split("|")]
    resnet = [c.strip() for c in next(line for line in text.splitlines() if line.startswith("| resnet50")).split("|")]
    assert float(resnet[header.index("crucible/crucible-untuned")]) == 1.1 and "inductor-ma" not in text
    assert models.compiled_for("crucible-untuned", models.torch.nn.Identity()) is not None
    order = []
    monkeypatch.setattr(models, "compile_backend", lambda backend, *a: order.append(backend) or (_ for _ in ()).throw(
        RuntimeError("not compiled in this test")))
    done = models.measure_model("gpt2", "fp32", "cpu", True, ("crucible", "crucible-untuned"))
    assert order == ["crucible-untuned", "crucible"] and list(done["backends"]) == ["crucible", "crucible-untuned"]


def test_error_line_is_the_innermost_cause() -> None:
    try:
        try:
            raise ValueError("the real reason\nwith details")
        except ValueError as inner:
            raise RuntimeError("backend='crucible' raised:") from inner
    except RuntimeError as outer:
        assert models.error_line(outer) == "ValueError: the real reason"


def test_render_only_compiles_a_model_for_the_gpu_without_one(capsys) -> None:
    """The strict compile check of every benchmark model, here on the tiny GPT-2."""
    assert models.main(["--render-only", "--tiny", "--pairs", "gpt2:bf16"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpt2 bf16: ") and "kernels +" in out and "externs" in out
    stages = dict(part.rsplit(" ", 1) for part in out.split("s by stage: ")[1].rstrip(")\n").split(", "))
    assert {"capture", "late_decompositions", "weight_passes", "lower", "schedule", "render"} <= set(stages)
    assert all(float(t) >= 0 for t in stages.values()) and float(stages["capture"]) > 0


def test_compile_breakdown_splits_crucible_compile_by_pass() -> None:
    """Each pass's seconds, tuning, and the rest (Dynamo, AOTAutograd, the run) adding up to the compile."""
    row = _row("resnet50", "fp32", crucible=1.0)
    row["backends"]["crucible"].update(compile_s=10.0, tuning_s=1.5, tuned_s=14.0,
                                       passes_s={"lower": 1.0, "schedule": 0.5, "load": 4.0, "first_call": 2.0})
    text = models.compile_breakdown([row, _row("gpt2", "bf16", eager=1.0)])
    header, _, line = text.splitlines()[1:4]
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in line.split("|")]))
    # the first call's 2 s held the 1.5 s of tuning
    assert [float(cells[c]) for c in ("load", "first_call", "tuning", "rest", "deferred")] == [4.0, 0.5, 1.5, 2.5, 4.0]
    assert "gpt2" not in text  # no Crucible compile in that row


def test_a_graphs_first_call_is_timed_on_its_report() -> None:
    """The host time of each graph's first call (kernels bound, externs' first use) goes on its
    report once; the breakdown's ``first_call`` column sums it."""
    import torch

    import compiler

    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.relu(x) + 1, backend="crucible", options={"strict": True})
    with compiler.collect_reports() as report:
        fn(torch.randn(8))
    (graph,) = report.graphs
    first = graph.first_call_seconds
    assert first is not None and first > 0
    fn(torch.randn(8))
    assert graph.first_call_seconds == first  # later calls are not timed
    assert models.compile_passes(report)["first_call"] == first


def test_profile_host_table_ranks_cpu_self_time_per_call():
    """``harness.bench.profile``'s host table (for host-bound graphs: where the wrapper's time
    goes), on a CPU-only profile of a few eager calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness.bench.profile import host_table

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            torch.mm(x, x).relu()
    lines = host_table(prof.key_averages(), 3, 5)
    assert lines[0].startswith("host (CPU self time): ") and "us each" in lines[1]
    assert any("aten::mm" in line for line in lines[2:]), lines
    assert len(lines) <= 7


def test_backends_latencies_are_measured_in_interleaved_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host slowing down call by call falls on every backend alike (timed one after the other, the later
    backend took the slow rounds); a backend that raises is recorded and dropped, the others still timed;
    without a record of failures the error propagates, as ``latency_ms``'s always did."""
    import types

    calls, clock = [], [0.0]  # a clock of its own: on a loaded CI machine real sleeps drifted apart by 30%

    def drifting():
        calls.append(None)
        clock[0] += 0.0005 * (1 + 0.02 * len(calls))

    def broken():
        raise RuntimeError("no kernel for this")

    monkeypatch.setattr(models, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    failed: dict[str, str] = {}
    ms = models.latencies_ms({"a": drifting, "b": drifting, "c": broken}, "cpu", budget_s=0.05, failed=failed)
    assert set(ms) == {"a", "b"} and "no kernel for this" in failed["c"]
    assert abs(ms["a"] - ms["b"]) < 0.25 * ms["a"], ms
    with pytest.raises(RuntimeError, match="no kernel"):
        models.latencies_ms({"c": broken}, "cpu", budget_s=0.01)
    assert models.latency_ms(lambda: None, "cpu", budget_s=0.01) >= 0
