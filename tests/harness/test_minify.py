"""The minimizer on planted bugs: test-only broken lowerings (tests/harness/minify_plants.py) that
exist only in the check workers and repro scripts, through CRUCIBLE_MINIFY_PLUGINS; this process
never imports them, so other tests in it keep the real lowerings."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import compiler
from harness.minify import GraphCase, load_case, minify_graph, save_case
from harness.minify.reduce import GraphCut
from harness.minify.worker import CheckWorker
from harness.report import failure_clusters
from harness.result import Result
from harness.status import Phase
from harness.store import ResultStore
from tests.harness.conftest import cli_env

PLANTS = "tests.harness.minify_plants"


@pytest.fixture(scope="module")
def planted() -> Iterator[CheckWorker]:
    """One check worker with the planted bugs, shared by this module's tests (its start imports torch)."""
    saved = {k: os.environ.get(k) for k in ("CRUCIBLE_MINIFY_PLUGINS", "PYTHONPATH")}
    os.environ.update(CRUCIBLE_MINIFY_PLUGINS=PLANTS, PYTHONPATH=cli_env()["PYTHONPATH"])
    try:
        with CheckWorker(timeout_s=120, target="crucible-cpp") as worker:
            yield worker
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_script(path: Path, plugins_off: bool = False) -> subprocess.CompletedProcess:
    env = cli_env()
    env.pop("CRUCIBLE_MINIFY_PLUGINS", None)
    if plugins_off:  # the same repro where the bug is absent must say so and exit 0
        text = path.read_text().replace(f"PLUGINS = [{PLANTS!r}]", "PLUGINS = []")
        path = path.with_name("repro_unplanted.py")
        path.write_text(text)
    return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def _model(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple:
    a = torch.relu(x @ w)
    b = torch.sigmoid(y) * 2
    c = torch.cat([a, b], 1)
    d = (c.softmax(-1) + 1).exp()
    return d.sum(0), a.mean(), torch.var_mean(b, 1)


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g), torch.randn(6, 5, generator=g)]


def test_graph_cut_turns_dropped_values_into_inputs() -> None:
    """A kept node reading a dropped one reads an input holding the original value; unused inputs go."""
    inputs = _inputs()
    gm = compiler.trace_aten(_model, *inputs)
    cut = GraphCut(GraphCase(gm, inputs, "crucible-cpp"))
    (cat_unit,) = [i for i, u in enumerate(cut.units) if u[0].target is torch.ops.aten.cat.default]
    case = cut.build([cat_unit])
    assert [n.target for n in case.gm.graph.nodes if n.op == "call_function"] == [torch.ops.aten.cat.default]
    assert len(case.inputs) == 2  # relu and mul became inputs; x, y and w are unused
    expected = torch.cat([torch.relu(inputs[0] @ inputs[2]), torch.sigmoid(inputs[1]) * 2], 1)
    torch.testing.assert_close(case.gm(*case.inputs)[0], expected)
    # var_mean and its two getitems are one unit: a tuple never crosses a cut
    multi = [u for u in cut.units if len(u) > 1]
    assert len(multi) == 1 and multi[0][0].target is torch.ops.aten.var_mean.correction
    every = cut.build(range(len(cut.units)))
    outs = every.gm(*every.inputs)
    assert any(o.shape == (8,) and torch.allclose(o, _model(*inputs)[0]) for o in outs)  # still an output


def test_minify_accuracy_bug_to_the_cat(planted: CheckWorker, tmp_path: Path) -> None:
    """The issue's scenario: an indexing bug planted in the lowering of cat."""
    inputs = _inputs()
    gm = compiler.trace_aten(_model, *inputs)
    report = minify_graph(gm, inputs, "crucible-interpret", tmp_path, origin="planted cat", worker=planted)
    assert report.result.status == "fail_accuracy"
    assert report.nodes_before > 10 and report.nodes_after == 1 and report.ops == ["aten.cat.default"]
    assert report.localization.first_divergent == "cat (aten.cat.default)"
    assert report.localization.how == "node by node"
    assert report.captured_first_divergent == "cat (aten.cat.default)"  # the same node in the whole graph
    # both codegens share the lowering, so both fail alike: not a renderer fault
    assert report.localization.stage == "lowering/scheduling"
    assert report.repro_verified is True
    source = report.repro.read_text()
    assert "torch.ops.aten.cat.default(" in source and "torch.tensor([[" in source
    fixed = _run_script(report.repro, plugins_off=True)
    assert fixed.returncode == 0 and "NOT REPRODUCED" in fixed.stdout, fixed.stdout + fixed.stderr


def test_minify_compile_error_names_the_lowering(planted: CheckWorker, tmp_path: Path) -> None:
    inputs = _inputs()
    gm = compiler.trace_aten(lambda x, y, w: (torch.atan(x @ w) + 1, y.cos()), *inputs)
    path = save_case(tmp_path / "case.pt", GraphCase(gm, inputs, "crucible-cpp", origin="a fuzz finding"))
    case = load_case(path)  # the form a fuzz finding arrives in
    report = minify_graph(case.gm, case.inputs, case.target, tmp_path / "out", verify=False, worker=planted)
    assert report.result.status == "fail_compile"
    assert "planted bug in the atan lowering" in report.result.error
    assert report.ops == ["aten.atan.default"]
    assert report.localization.stage == "lowering" and report.result.failed_pass == "lower"


def test_minify_crash_in_isolated_worker(planted: CheckWorker, tmp_path: Path) -> None:
    """A lowering that segfaults kills the check worker, never the minimizer; the repro exits 1."""
    inputs = _inputs()
    gm = compiler.trace_aten(lambda x, w: torch.asinh(torch.relu(x @ w)).sum(), inputs[0], inputs[2])
    report = minify_graph(gm, [inputs[0], inputs[2]], "crucible-cpp", tmp_path, worker=planted)
    assert report.result.status == "crash" and "SIGSEGV" in report.result.error
    assert report.result.phase == "compile"  # the lowering died, not the graph's eager run
    assert report.ops == ["aten.asinh.default"]
    assert report.repro_verified is True


def test_minify_memory_bug_on_crucible_sim(planted: CheckWorker, tmp_path: Path) -> None:
    """On crucible-sim every check runs the kernels under the simulator's memory checks (the engine
    applies them to any subject): a lowering that reads past the end of its input is a fail_memory,
    minimized to that op; the unchecked interpreter only sees wrong numbers."""
    inputs = [torch.randn(2, 3), torch.randn(2, 2)]  # small: every check interprets the kernels, checked
    gm = compiler.trace_aten(lambda x, y: (torch.log1p(torch.relu(x)) * 2, y.cos()), *inputs)
    report = minify_graph(gm, inputs, "crucible-sim", tmp_path, worker=planted, verify=False)
    assert report.result.status == "fail_memory" and "out_of_bounds" in report.result.error
    assert report.ops == ["aten.log1p.default"] and report.repro.exists()
    assert "memory error in kernel <name>" in report.signature  # kernel names change as the graph shrinks
    assert planted.check(GraphCase(gm, inputs, "crucible-interpret")).status == "fail_accuracy"


def test_report_groups_failures_by_minimized_signature(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.create_run("r1", "smoke", "crucible-cpp", {})
        for name, err in (("a", "RMSE 0.4 > 2 x 0.1"), ("b", "RMSE 1.07 > 2 x 0.3"), ("c", "other failure")):
            store.record("r1", Result(name=name, target="crucible-cpp", status="fail_accuracy", error=err))
        for name in ("a", "b"):
            store.record_minimized("r1", name, {"signature": "fail_accuracy @ aten.cat.default",
                                                "repro": f"/x/{name}/repro.py"})
        rows = failure_clusters(store.results("r1"))
    assert [r[1] for r in rows] == [2, 1]
    assert rows[0][3] == "minimized: fail_accuracy @ aten.cat.default"


PLANTED_CORPUS = '''
import sys
import types
from unittest import mock

import torch
import tests.harness.minify_plants  # noqa: F401  (the planted cat bug, in every process that lists this corpus)
from corpus.entry import Built, Entry

# As crawled-code corpora do: optional packages that are not installed stand in as mock modules,
# which have no __spec__ (importing Dynamo after them raised "tensorflow.__spec__ is not set")
sys.modules["tensorflow"] = mock.MagicMock()
sys.modules["keras"] = types.ModuleType("keras")


class Mixer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.lin(x))
        return torch.cat([h, x.sin()], 1).softmax(-1)


def entries():
    return [Entry(name=ENTRY_NAME, source="planted", family="mlp", tier="smoke",
                  factory=lambda scale: Built(Mixer(), (torch.randn(4, 8),)))]
'''


def hostile(marker: Path, head: str = "planted/mix") -> str:
    """A name that leaves every kind of string a generated script or a shell could hold it in
    (quotes, triple quotes, a newline, $(...), ;), each time to create ``marker``."""
    touch = f"open({str(marker)!r}, 'w').close()"
    return (head + "'er" + '"""' + "\n" + touch + "\n" + '"""' + "'''" + "\n" + touch + "\n" + "'''" + '"; '
            + touch + " #\r\n" + f"$(touch {marker}); touch {marker}; `touch {marker}`")


@pytest.mark.nightly
def test_cli_minify_entry_links_repro_in_store(cli, make_corpus, tmp_path: Path) -> None:
    """crucible minify on a corpus entry: the run's target is used, the store links entry -> repro.
    The corpus stands in for missing packages with mock modules, as crawled-code corpora do, and
    names its entry with quotes, newlines and shell syntax: the written repro still reproduces when
    the minimizer runs it, and runs nothing of the name."""
    marker = tmp_path / "injected"
    name = hostile(marker)
    corpus = make_corpus(tmp_path / "corpus", {"planted.py": PLANTED_CORPUS.replace("ENTRY_NAME", repr(name))})
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        store.create_run("r1", "planted", "crucible-cpp", {})
        store.record("r1", Result(name=name, suite="planted", target="crucible-cpp",
                                  status="fail_accuracy", error="out: RMSE vs fp64 0.4 > 2.0 x eager's 0"))
    done = cli("minify", name, "--corpus", str(corpus), "--db", str(db), "--out", str(tmp_path / "min"),
               "--plugin", PLANTS, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "minimized signature: fail_accuracy @ aten.cat.default" in done.stdout
    assert "first divergent node: cat (aten.cat.default)" in done.stdout
    assert "(reproduces)" in done.stdout and not marker.exists()
    with ResultStore(db) as store:
        (result,) = store.results("r1")
    assert result.minimized["signature"] == "fail_accuracy @ aten.cat.default"
    assert Path(result.minimized["repro"]) == (tmp_path / "min" / "repro.py").resolve()
    assert result.minimized["nodes_before"] > result.minimized["nodes_after"] == 1


STAND_INS_FIRST = """
import sys, types
from unittest import mock
sys.modules["tensorflow"] = mock.MagicMock()  # a corpus module's stand-ins, loaded before Dynamo
sys.modules["keras"] = types.ModuleType("keras")
stand_in = sys.modules["tensorflow"]
from harness.minify.entry_graphs import prepare_capture
prepare_capture()
import torch._dynamo
assert sys.modules["tensorflow"] is stand_in and type(sys.modules["keras"]) is types.ModuleType
print("imported")
"""


def test_capture_imports_dynamo_past_stand_in_modules() -> None:
    """Regression: with a corpus's mock modules already in sys.modules, Dynamo's first import (which
    asks importlib for the spec of tensorflow and other packages it skips) raised
    "tensorflow.__spec__ is not set", so crucible minify could not capture such an entry."""
    done = subprocess.run([sys.executable, "-c", STAND_INS_FIRST], env=cli_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-2000:]


def test_cli_minify_without_target_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    # in this process: the planted bugs (which this module's fixture names in the environment for its
    # workers) must not be imported here, or every later test in this process compiles with them
    monkeypatch.delenv("CRUCIBLE_MINIFY_PLUGINS", raising=False)
    assert main(["minify", "timm/resnet18", "--out", "out"]) == 2  # no database here to take the target from
    assert "no --target given" in capsys.readouterr().err


def test_minify_any_dynamo_backend(planted: CheckWorker, tmp_path: Path) -> None:
    """A non-crucible target compiles the graph through torch.compile(backend=...), like Inductor."""
    x, y = torch.randn(3, 4), torch.randn(3, 2)
    gm = compiler.trace_aten(lambda a, b: (torch.cat([a.sin(), b], 1).exp(), a.sum()), x, y)
    report = minify_graph(gm, [x, y], "minify_planted_cat", tmp_path, worker=planted, verify=False)
    assert report.result.status == "fail_accuracy" and report.ops == ["aten.cat.default"]
    assert report.localization.first_divergent == "cat (aten.cat.default)"
    assert report.localization.stage is None  # stages are Crucible's


def test_dynamo_backend_gets_a_graph_with_flat_outputs() -> None:
    """Regression: handed to a Dynamo backend directly, a graph returning nested outputs (var_mean's
    tuple inside the output tuple) failed in AOTAutograd ("output spec mismatch") on the GPU runner's
    Inductor check; the backend now gets the graph with flat outputs, as from Dynamo, and the results
    are nested again."""
    from harness.minify.check import check_case

    inputs = _inputs()
    result = check_case(GraphCase(compiler.trace_aten(_model, *inputs), inputs, "aot_eager"))
    assert result.status == "pass", result.error


def test_repro_script_inlines_small_inputs_and_keeps_large_ones_beside_it(tmp_path: Path) -> None:
    import runpy

    from harness.minify.repro_script import INPUTS_FILE, write_repro

    big, strided = torch.randn(10, 10), torch.randn(4, 6).t()  # 100 elements; a transposed view
    small = torch.tensor([[1.5, float("nan")], [float("-inf"), 0.25]])
    gm = compiler.trace_aten(lambda a, b, c: (a.sum(0) + b[0, :4].sum(), c * 2), big, strided, small)
    case = GraphCase(gm, [big, strided, small], "crucible-cpp")
    path = write_repro(case, Result(name="x", target="crucible-cpp", status="fail_accuracy", error="x"), tmp_path,
                       "summary", [])
    assert (tmp_path / INPUTS_FILE).exists() and "torch.tensor([[1.5, nan], [-inf, 0.25]]" in path.read_text()
    script = runpy.run_path(str(path))  # not as __main__: defines forward and make_inputs only
    inputs = script["make_inputs"]()
    assert inputs[1].stride() == strided.stride() and torch.equal(inputs[0], big)
    for got, want in zip(script["forward"](*inputs), gm(*case.inputs)):
        torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("head", ["planted/a", "x'y", 'x"y', "x\\", "x\u2028y\x0cz"])
def test_repro_script_embeds_names_and_messages_as_literals(tmp_path: Path, head: str) -> None:
    """Everything a repro embeds from outside (origin, target, messages, plugin names, the summary)
    is a Python literal or one comment line: hostile text compiles, round-trips, and runs nothing."""
    import runpy

    from harness.minify.repro_script import write_repro

    marker = tmp_path / "injected"
    text = hostile(marker, head)
    x = torch.randn(3)
    case = GraphCase(compiler.trace_aten(lambda a: (a.sin(),), x), [x], "crucible-cpp", origin=text)
    result = Result(name=text, target="crucible-cpp", status="fail_run", error=text, failed_pass=text)
    path = write_repro(case, result, tmp_path, f"{text}\n  {text}", [text])
    source = path.read_text()
    compile(source, str(path), "exec")
    script = runpy.run_path(str(path))  # as an import: everything at top level runs
    assert not marker.exists()
    assert script["ORIGIN"] == text and script["PLUGINS"] == [text] and script["EXPECTED"]["error"] == text
    header = source.split('"""\n', 2)[2].split("import sys")[0]  # between the docstring and the imports
    assert header.strip() and all(line.startswith("#") for line in header.splitlines() if line)


def test_printed_repro_command_is_shell_quoted(tmp_path: Path) -> None:
    import shlex

    from harness.minify.session import MinifyReport

    repro = tmp_path / "out dir; $(touch x)" / "repro.py"
    report = MinifyReport("o", "crucible-cpp", Result(name="o", target="crucible-cpp", status="fail_accuracy"), 3,
                          repro=repro, repro_verified=True)
    (line,) = [line for line in report.summary().splitlines() if "run it: " in line]
    assert shlex.split(line.split("run it: ", 1)[1]) == ["python", str(repro)]


def test_capture_entry_finds_a_decomposition_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entry capture records each ATen graph with its real inputs, after the target's decompositions;
    a broken decomposition rule shows as the decomposed graphs failing parity in eager."""
    from compiler.decompositions import RULES, DecompRule
    from corpus.entry import Built, Entry
    from harness.minify.entry_graphs import capture_entry
    from harness.minify.localize import stage_at_fault
    from harness.targets import parse_target

    entry = Entry(name="t/gelu", source="t", family="mlp", tier="smoke",
                  factory=lambda scale: Built(torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU()),
                                              (torch.randn(3, 6),)))
    target = parse_target("crucible-cpp")
    clean = capture_entry(entry, target)
    assert clean.decomposition.passed and len(clean.cases) == 1
    (case,) = clean.cases
    assert [tuple(v.shape) for v in case.inputs if isinstance(v, torch.Tensor)] == [(6, 6), (6,), (3, 6)]
    assert "aten.erf" in case.gm.code  # gelu arrives decomposed, as the compiler receives it

    name = "torch:aten::gelu"
    rule = RULES[name]
    monkeypatch.setitem(RULES, name, DecompRule(name, rule.op, lambda x, approximate="none": x * 0.5, "crucible"))
    broken = capture_entry(entry, target)
    assert not broken.decomposition.passed
    failing = Result(name="t/gelu", target="crucible-cpp", status="fail_accuracy")
    stage, _ = stage_at_fault(broken.cases[0], failing, lambda c, t: failing.replace(status="pass"),
                              decomposition_fails=True)
    assert stage == "decomposition"


class _BrokenCheckWorker:
    """A worker whose own machinery fails on every check (as a CUDA fork did on the GPU)."""

    checks = 0

    def check(self, case: GraphCase, target: str | None = None) -> Result:
        self.checks += 1
        return Result(name=case.origin, target=target or case.target, status="crash", phase=Phase.HARNESS,
                      error="harness error: RuntimeError: Cannot re-initialize CUDA in forked subprocess")


def test_a_failing_check_is_never_minimized_as_the_targets_failure(tmp_path: Path) -> None:
    """Regression: on a GPU every check crashed in the minimizer's forked child (CUDA cannot be
    initialized again after a fork), and that harness error was minimized as transformers/beit's
    failure down to one convolution."""
    from harness.minify.session import MinifyError, minify_case

    inputs = _inputs()
    case = GraphCase(compiler.trace_aten(_model, *inputs), inputs, "inductor", origin="broken check")
    with pytest.raises(MinifyError, match="the minimizer's own check failed"):
        minify_case(case, tmp_path, worker=_BrokenCheckWorker())
    assert not (tmp_path / "repro.py").exists()


@pytest.mark.gpu
def test_gpu_checks_run_without_a_fork(tmp_path: Path) -> None:
    """GPU checks run in the worker's server process: a forked child cannot initialize CUDA again."""
    inputs = [t.cuda() for t in _inputs()]
    case = GraphCase(compiler.trace_aten(_model, *inputs), inputs, "inductor", origin="gpu graph")
    with CheckWorker(timeout_s=300, device="cuda", target="inductor") as worker:
        first, second = worker.check(case), worker.check(case)
    assert first.status == second.status == "pass", (first.error, second.error)


def test_this_process_never_imported_the_planted_bugs() -> None:
    """The planted lowerings live only in check workers and repro scripts; imported here they would
    break every later test of this pytest process (the cat and tanh plants)."""
    import sys

    assert PLANTS not in sys.modules

