"""Coverage feedback for fuzz campaigns: the line tracer, the merged map of isolated workers, seed
corpora in the store and their mutations, the report of dead rules, and an A/B test: a planted
defect that a campaign grown from coverage seeds finds and plain generation misses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from harness.fuzz.builder import GraphLimits
from harness.fuzz.campaign import CampaignRequest, run_campaign
from harness.fuzz.coverage import (CoverageMap, collect, executable_lines, file_coverage, line_ranges,
                                   measured_packages, package_roots, process_tracer, stop_process_tracer)
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.seeds import Seed, SeedCorpus, corpus_graphs, load_corpus, new_seeds
from harness.fuzz.specs import OP_SPECS, select_specs
from harness.fuzz.unreached import rule_reach
from harness.fuzz.workers import InProcessRunner
from harness.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
COMPILER = package_roots(["compiler"])
UNARY = "neg.default,abs.default,sin.default"

SAMPLE = '''\
class Box:
    size = 3

    def grow(self, n):
        """Doc."""
        total = 0
        for i in range(n):
            if i % 2:
                total += i
            else:
                total -= 1
        return total

    def never(self):
        return 1


def twice(f):
    return lambda x: f(f(x))
'''


@pytest.fixture
def sample_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    package = tmp_path / "cov_sample_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "box.py").write_text(SAMPLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package_roots(["cov_sample_pkg"])
    sys.modules.pop("cov_sample_pkg.box", None)
    sys.modules.pop("cov_sample_pkg", None)


def test_executable_lines_are_function_bodies_without_def_lines() -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SAMPLE)
    lines = executable_lines(f.name)
    os.unlink(f.name)
    # class body (2), def lines (4, 14, 18) and the docstring (5) are not counted; ``else:`` (10) has no code
    assert lines == {6, 7, 8, 9, 11, 12, 15, 19}


def test_collect_records_the_lines_a_block_runs_and_the_report_names_the_rest(sample_package) -> None:
    with collect(sample_package) as covered:
        from cov_sample_pkg.box import Box

        Box().grow(3)
    assert covered.lines == {"cov_sample_pkg/box.py": {6, 7, 8, 9, 11, 12}}
    rows = {r.file: r for r in file_coverage(covered, sample_package)}
    assert (rows["cov_sample_pkg/box.py"].covered, rows["cov_sample_pkg/box.py"].total) == (6, 8)
    assert rows["cov_sample_pkg/box.py"].missed == (15, 19)
    assert line_ranges([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8"


def test_a_process_tracer_reports_each_line_once_per_session(sample_package) -> None:
    from cov_sample_pkg.box import Box

    try:
        tracer = process_tracer(sample_package, "campaign-a")
        Box().grow(2)
        first = tracer.take()
        Box().grow(2)
        assert len(first) == 6 and not len(tracer.take())  # already reported to this session
        tracer = process_tracer(sample_package, "campaign-b")
        Box().grow(2)
        assert tracer.take().lines == first.lines  # another campaign gets them again
    finally:
        stop_process_tracer()


def test_a_paused_tracer_records_nothing_until_the_next_measured_task(sample_package) -> None:
    from cov_sample_pkg.box import Box

    from harness.fuzz.coverage import pause_process_tracer

    try:
        tracer = process_tracer(sample_package, "a")
        pause_process_tracer()  # a graph the campaign does not sample
        Box().grow(2)
        tracer = process_tracer(sample_package, "a")
        assert not len(tracer.take())
        Box().grow(2)
        assert len(tracer.take()) == 6
    finally:
        stop_process_tracer()


def test_sampling_traces_one_graph_in_n_and_every_graph_with_a_new_op() -> None:
    from harness.result import Result
    from harness.status import Status

    class Recorder:
        def __init__(self) -> None:
            self.traced: list[list[str]] = []

        def run(self, task):  # noqa: ANN001, ANN201
            if task.coverage:
                self.traced.append(FuzzGraph.from_json(task.graph).ops)
            return Result(name=task.name, target="crucible-cpp", status=Status.PASS)

    recorder = Recorder()
    summary = run_campaign(CampaignRequest(target="crucible-cpp", examples=40, seed=3, ops=UNARY, max_nodes=2,
                                           coverage=COMPILER, coverage_sample=10), recorder)
    assert summary.traced == len(recorder.traced) and 4 <= summary.traced < 40
    assert {op for ops in recorder.traced for op in ops} == {f"aten.{op}" for op in UNARY.split(",")}
    off = Recorder()
    run_campaign(CampaignRequest(target="crucible-cpp", examples=10, seed=3, ops=UNARY), off)
    assert off.traced == []


def test_coverage_maps_merge_and_serialize() -> None:
    a = CoverageMap({"compiler/ir.py": {1, 2}})
    new = a.merge(CoverageMap({"compiler/ir.py": {2, 3}, "compiler/graph.py": {7}}))
    assert new.lines == {"compiler/ir.py": {3}, "compiler/graph.py": {7}}
    assert CoverageMap.from_json(a.to_json()) == a and len(a) == 4


def test_what_is_measured_per_target() -> None:
    assert measured_packages("crucible-cpp") == ("compiler",)
    assert measured_packages("inductor", ["torch._inductor"]) == ("torch._inductor",)
    with pytest.raises(ValueError, match="--coverage-package"):
        measured_packages("inductor")
    with pytest.raises(ValueError, match="no package or path"):
        package_roots(["no_such_package_anywhere"])


def test_dead_rules_are_told_apart_from_unreached_ones() -> None:
    rows = {r.name: r for r in rule_reach(CoverageMap(), COMPILER, set(OP_SPECS))}
    var_mean = rows["crucible:var_mean_to_var_and_mean"]
    assert var_mean.dead and "CompositeImplicitAutograd" in var_mean.dead
    assert "decomposed before lowering" in rows["lower_transpose"].dead
    assert rows["lower_isfinite"].dead  # isfinite.default decomposed; its other overloads are scalar ones
    assert rows["lower_cat"].dead is None and rows["lower_cat"].in_op_table
    # a dead rule a campaign did execute is reported as executed, never as dead
    file, span = rows["lower_transpose"].where.split(":")
    first, last = map(int, span.split("-"))
    ran = rule_reach(CoverageMap({file: set(range(first, last + 1))}), COMPILER, set(OP_SPECS))
    assert next(r for r in ran if r.name == "lower_transpose").dead is None


def test_seed_corpora_round_trip_through_the_store(tmp_path: Path) -> None:
    seed_graph = _one_node("aten.abs.default")
    store = ResultStore(tmp_path / "r.sqlite")
    lines = CoverageMap({"compiler/ir.py": {5, 6}})
    corpus = SeedCorpus("c", lines=CoverageMap({"compiler/ir.py": {5}}))
    kept = new_seeds([(seed_graph.to_json(), lines), (seed_graph.to_json(), CoverageMap({"compiler/ir.py": {6}}))],
                     corpus)
    assert [(n, CoverageMap.from_json(text).lines) for _, text, n in kept] == [(1, {"compiler/ir.py": {6}})]
    store.record_seeds("c", "run-1", "crucible-cpp", kept)
    loaded = load_corpus(store, "c")
    assert [s.graph for s in loaded.seeds] == [seed_graph.to_json()] and len(loaded.lines) == 1
    assert load_corpus(store, "other").seeds == []


def test_mutations_keep_the_seed_and_are_deterministic_for_a_seed() -> None:
    seed_graph = _one_node("aten.abs.default")
    corpus = SeedCorpus("c", [Seed(seed_graph.to_json(), 10)])
    drawn: list[str] = []

    @settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @hypothesis_seed(7)
    @given(corpus_graphs(select_specs(UNARY), GraphLimits(max_nodes=1), corpus))
    def draw(graph: FuzzGraph) -> None:
        drawn.append(graph.to_json())

    draw()
    first, drawn[:] = list(drawn), []
    draw()
    assert drawn == first  # same seed, same corpus: same examples
    graphs = [FuzzGraph.from_json(g) for g in first]
    grown = [g for g in graphs if len(g.nodes) > 1]
    assert grown and all(g.nodes[0].expr == "aten.abs.default(x0)" for g in grown)
    assert any("(v0)" in g.nodes[1].expr for g in grown)  # a grown node consumes the seed's output
    relaid = [g for g in graphs if len(g.nodes) == 1 and g.nodes[0].op == "aten.abs.default"
              and g.inputs[0]["shape"] == [3, 4] and g.inputs[0] != seed_graph.inputs[0]]
    assert relaid  # the seed with new input layouts or values (same shape and dtype)


def test_a_defect_only_grown_seeds_reach_is_found_with_a_seed_corpus_and_missed_without() -> None:
    """A/B: neg mishandles a fused operand. A campaign of one-op graphs (--max-nodes 1) can never
    compose neg with another op; with a seed corpus from an earlier coverage campaign, its seeds grow
    and one is found."""
    from tests.harness import fuzz_plants

    fuzz_plants.neg_of_a_fused_operand()
    runner = InProcessRunner("crucible-cpp")
    base = dict(target="crucible-cpp", ops=UNARY, max_nodes=1, coverage=COMPILER, shrink_seconds=10)
    try:
        first = run_campaign(CampaignRequest(examples=12, seed=0, **base), runner)
        corpus = SeedCorpus("c")
        for graph, lines, n in new_seeds(first.seed_candidates, None):
            corpus.seeds.append(Seed(graph, n))
            corpus.lines.merge(CoverageMap.from_json(lines))
        assert corpus.seeds and not first.findings
        guided = run_campaign(CampaignRequest(examples=200, max_findings=1, seed=1, seed_corpus=corpus, **base),
                              runner)
        plain = run_campaign(CampaignRequest(examples=guided.graphs, seed=1, **base), runner)
    finally:
        runner.close()
    assert [f.op for f in guided.new_findings] == ["aten.neg.default"]
    assert not plain.findings


def test_isolated_workers_report_coverage_and_parallel_campaigns_merge_it(tmp_path: Path, capsys) -> None:
    """Through the CLI: two campaigns (-j 2), one worker each; the printed report, the run's metadata
    and the seed corpus."""
    db = tmp_path / "r.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CRUCIBLE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "harness", "fuzz", "--target", "crucible-cpp", "--examples", "4", "-j", "2", "--coverage-sample", "1",
               "--ops", UNARY, "--max-nodes", "2", "--seed-corpus", "unary", "--db", str(db), "--no-replay"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "coverage (" in done.stdout and "compiler/lowering.py" in done.stdout
    assert "dead decomposition crucible:var_mean_to_var_and_mean" in done.stdout
    with ResultStore(db, read_only=True) as store:
        run = store.runs()[0]
        covered = run["metadata"]["fuzz"]["coverage"]
        seeds = store.seeds("unary")
    assert covered["covered"] > 100 and "compiler/lowerings/pointwise.py" in covered["lines"]
    assert 0 < len(seeds) == run["metadata"]["fuzz"]["seed_corpus"]["added"]
    assert sum(s["new_lines"] for s in seeds) == covered["covered"]  # the corpus started empty
    from harness.bench.fuzz_coverage import union

    union(str(db), COMPILER)  # the benchmark's report of several runs together
    assert f"{covered['covered']}/" in capsys.readouterr().out


def test_usage_errors_come_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from harness import cli

    for extra, message in ((["--target", "inductor", "--coverage"], "--coverage-package"),
                           (["--coverage-package", "compiler"], "add --coverage"),
                           (["--coverage", "--coverage-package", "no_such_pkg_x"], "no package or path"),
                           (["--seed-corpus", " "], "--seed-corpus needs a name")):
        assert cli.main(["fuzz", "--examples", "1", "--db", str(tmp_path / "r.sqlite"), *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "r.sqlite").exists()


def test_the_312_tracer_matches_the_311_one_when_a_312_python_is_at_hand(sample_package, tmp_path: Path) -> None:
    """The sys.monitoring backend on Python 3.12+ records what coverage.py records on 3.11."""
    python = os.environ.get("CRUCIBLE_TEST_PY312") or "python3.12"
    # the module needs only the standard library: loaded by path, it runs on a bare 3.12
    script = textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(Path(sample_package[0]).parent)!r})
        spec = importlib.util.spec_from_file_location("tracer", {str(ROOT / "harness/fuzz/coverage.py")!r})
        tracer = importlib.util.module_from_spec(spec)
        sys.modules["tracer"] = tracer
        spec.loader.exec_module(tracer)
        with tracer.collect(tracer.package_roots(["cov_sample_pkg"])) as covered:
            from cov_sample_pkg.box import Box
            Box().grow(3)
        print(tracer.tracer_kind(), sorted(covered.lines["cov_sample_pkg/box.py"]))
    """)
    try:
        done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        done = None
    if done is None or done.returncode == 127 or "Python 3.1" not in subprocess.run(
            [python, "--version"], capture_output=True, text=True).stdout:
        pytest.skip("no Python 3.12+ here (set CRUCIBLE_TEST_PY312 to one)")
    assert done.stdout.split(" ", 1) == ["sys.monitoring", "[6, 7, 8, 9, 11, 12]\n"], done.stderr


def _one_node(op: str) -> FuzzGraph:
    from harness.fuzz.graph import Node

    x = {"shape": [3, 4], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 1}
    return FuzzGraph([x], [Node(op, f"{op}(x0)", ["v0"], [([3, 4], "float32")])], ["v0"])
