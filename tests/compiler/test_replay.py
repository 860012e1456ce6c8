"""Golden-kernel replay: every recorded graph still compiles to the recorded sources."""

from __future__ import annotations

import json

import pytest
import torch

import compiler
from compiler import replay
from compiler.replay import record
from compiler.replay.__main__ import main


def test_golden_kernels_are_unchanged() -> None:
    """The check CI runs: regenerate every kernel the compiler's tests produced and compare.
    On a failure, ``python -m compiler.replay --check`` prints the diffs; after an intended
    change, ``--update`` rewrites the golden file (say why in the commit)."""
    graphs = replay.read_graphs(replay.GOLDEN_DIR / "graphs.jsonl")
    assert len(graphs) > 100
    golden = replay.read_golden(replay.GOLDEN_DIR / "kernels.txt")
    skip = replay.unavailable(graphs)  # ops an older torch lacks
    assert len(skip) < len(graphs) // 10, skip
    diffs = replay.diff_sources(golden, replay.regenerate(graphs, skip), skip)
    assert not diffs, f"{len(diffs)} kernels changed; first:\n{diffs[0]}"


def _small_graph():
    return compiler.trace_aten(lambda a, b: (torch.softmax(a * b, -1), a.t()[1:] + float("inf")),
                               torch.randn(4, 6), torch.randn(6))


def test_recorded_graph_rebuilds_to_the_same_kernels() -> None:
    gm = _small_graph()
    rec = record.graph_record(gm)
    rebuilt = record.graph_module(json.loads(json.dumps(rec)))
    assert record.graph_record(rebuilt) == rec
    assert any(e.get("args") and {"float": "inf"} in e["args"] for e in rec["nodes"])
    sources = replay.render_graph(rec)
    assert {"cpp/wrapper", "triton-interpret/wrapper", "triton-gpu/wrapper"} <= set(sources)
    assert not [k for k in sources if k.endswith("error")]
    assert sum(k.startswith("cpp/kernel") for k in sources) >= 1


def test_graph_with_ops_this_torch_lacks_is_skipped(tmp_path, capsys) -> None:
    rec = record.graph_record(_small_graph())
    gone = json.loads(json.dumps(rec))
    next(e for e in gone["nodes"] if e["op"] == "call_function")["target"] = "aten.no_such_op.default"
    graphs = {record.graph_digest(rec): rec, record.graph_digest(gone): gone}
    replay.write_graphs(tmp_path / "graphs.jsonl", graphs)
    assert replay.unavailable(graphs) == {record.graph_digest(gone): ["aten.no_such_op.default"]}
    assert main(["--update", "--dir", str(tmp_path)]) == 0
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    assert "skipped 1 graphs using ops this torch lacks: aten.no_such_op.default" in capsys.readouterr().err


def test_unrecordable_graph_is_refused_by_name() -> None:
    gm = torch.fx.symbolic_trace(lambda a: torch.nn.functional.relu(a) + 1)
    with pytest.raises(record.Unrecordable, match="call target"):
        record.graph_record(gm)


@pytest.fixture
def small_golden(tmp_path):
    rec = record.graph_record(_small_graph())
    replay.write_graphs(tmp_path / "graphs.jsonl", {record.graph_digest(rec): rec})
    assert main(["--update", "--dir", str(tmp_path)]) == 0
    return tmp_path


def test_check_passes_then_reports_a_changed_kernel(small_golden, monkeypatch, capsys) -> None:
    assert main(["--check", "--dir", str(small_golden)]) == 0
    assert "replay: 0 kernels changed" in capsys.readouterr().out
    from compiler.codegen.cpp import CppRenderer

    render = CppRenderer.render

    def changed(self, kernel):
        r = render(self, kernel)
        return type(r)(r.name, r.codegen, r.source + "// changed\n", r.args, r.grid, symbol=r.symbol)

    monkeypatch.setattr(CppRenderer, "render", changed)
    assert main(["--check", "--dir", str(small_golden)]) == 1
    out = capsys.readouterr().out
    assert "+// changed" in out and "--- golden/" in out and "+++ now/" in out
    cpp_kernels = sum(1 for k in replay.read_golden(small_golden / "kernels.txt") if "/cpp/kernel" in k)
    assert f"replay: {cpp_kernels} kernels changed" in out


def test_golden_file_shares_equal_sources(small_golden) -> None:
    text = (small_golden / "kernels.txt").read_text()
    sources = replay.read_golden(small_golden / "kernels.txt")
    assert " = " in text and len(text) < sum(len(s) for s in sources.values())
    # the wrapper of the interpreted and the compiled Triton renderer is one text
    digest = next(iter(sources)).split("/")[0]
    assert sources[f"{digest}/triton-gpu/wrapper"] == sources[f"{digest}/triton-interpret/wrapper"]


def test_cli_errors_name_the_problem(tmp_path, capsys) -> None:
    assert main(["--check", "--dir", str(tmp_path)]) == 2
    assert "no recorded graphs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["--check", "tests/compiler"])
    assert stop.value.code == 2
