"""``crucible mutate``: operators, line tracing, and whole runs over a tiny fake compiler package."""

from __future__ import annotations

import ast
import json
import os
import textwrap
import threading
from pathlib import Path

import pytest

from harness.cli import main
from harness.mutate.operators import mutants_of
from harness.mutate.tracing import LineTracer, load_coverage_file
from harness.fuzz.graph import FuzzGraph
from harness.status import Status

SOURCE = textwrap.dedent('''\
    import math
    import torch


    def rule(x: torch.dtype, n: int = 3) -> int:
        """A docstring is never mutated."""
        total = 0
        for i in range(n):
            if i < n and x == torch.float32:
                total = total + i * 2
        lowest = -math.inf if x.is_floating_point else torch.iinfo(x).min
        code = "m = float('-inf')"
        return a * (b - c), lowest, code, math.inf, not total
    ''').encode()


def _edits(operator: str) -> set[tuple[str, str]]:
    return {(m.original, m.replacement) for m in mutants_of(SOURCE, "pkg/rules.py") if m.operator == operator}


@pytest.mark.parametrize("operator,expected", [
    ("boundary", {("<", "<=")}),
    ("negate", {("==", "!="), ("not total", "total")}),
    ("swap", {("b - c", "c - b"), ("i < n", "n < i")}),
    ("drop", {("total + i * 2", "total"), ("total + i * 2", "i * 2"), ("i * 2", "i"), ("i * 2", "2"),
              ("i < n and x == torch.float32", "i < n"), ("i < n and x == torch.float32", "x == torch.float32")}),
    ("constant", {("0", "1"), ("0", "-1"), ("2", "3"), ("2", "1")}),
    ("loop_bound", {("n", "n + 1"), ("n", "n - 1")}),
    ("identity", {("-math.inf", "math.inf"), ("math.inf", "-math.inf"), ("torch.iinfo(x).min", "torch.iinfo(x).max"),
                  ('"m = float(\'-inf\')"', '"m = float(\'inf\')"')}),
    ("dtype", {("torch.float32", "torch.float64")}),
])
def test_each_operator_plants_the_intended_edit(operator: str, expected: set) -> None:
    assert expected <= _edits(operator)


def test_mutants_are_checked_deterministic_and_leave_annotations_alone() -> None:
    mutants = mutants_of(SOURCE, "pkg/rules.py")
    assert [m.id for m in mutants] == [m.id for m in mutants_of(SOURCE, "pkg/rules.py")]
    assert len({m.id for m in mutants}) == len(mutants)
    for m in mutants:
        mutated = m.apply(SOURCE)
        assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(SOURCE)), m
    # on the signature line only the default (code) is mutated, never the annotations
    assert {(m.original, m.replacement) for m in mutants if m.line == 5} == {("3", "4"), ("3", "2")}
    assert min(m.line for m in mutants) == 5
    # a swap inside parentheses keeps them: the edit is the node's own span
    swap = next(m for m in mutants if m.original == "b - c")
    assert b"a * (c - b)" in swap.apply(SOURCE)
    assert "-    return a * (b - c), lowest" in swap.diff(SOURCE) and "+    return a * (c - b), lowest" in swap.diff(SOURCE)


def test_a_replacement_that_would_bind_differently_is_parenthesized() -> None:
    source = b"y = not x + z\n"  # dropping z from x + z: "not x" is right; a lower-precedence term needs parens
    drops = {m.replacement for m in mutants_of(source, "f.py") if m.operator == "drop"}
    assert drops == {"x", "z"}
    source = b"y = 2 * (a if c else b) + z\n"
    for m in mutants_of(source, "f.py"):
        ast.parse(m.apply(source))


def test_only_covered_lines_are_mutated() -> None:
    assert {m.line for m in mutants_of(SOURCE, "pkg/rules.py", lines={9})} == {9}
    assert mutants_of(SOURCE, "pkg/rules.py", lines=set()) == []


def test_line_tracer_records_the_package_files_and_threads_only(tmp_path: Path) -> None:
    package = tmp_path / "tracedpkg"
    package.mkdir()
    (package / "__init__.py").write_text("def f(x):\n    if x:\n        return 1\n    return 2\n")
    (tmp_path / "other.py").write_text("def g():\n    return 3\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import other
        import tracedpkg

        with LineTracer([str(package)]) as tracer:
            tracedpkg.f(0)
            other.g()
            thread = threading.Thread(target=tracedpkg.f, args=(1,))
            thread.start()
            thread.join()
    finally:
        sys.path.remove(str(tmp_path))
    file = os.path.realpath(package / "__init__.py")
    assert set(tracer.lines) == {file}
    assert {2, 3, 4} <= tracer.lines[file]  # line 3 only in the thread


def test_coverage_file_ours_and_coverage_py(tmp_path: Path) -> None:
    ours = tmp_path / "lines.json"
    ours.write_text(json.dumps({"pkg/a.py": [1, 2]}))
    theirs = tmp_path / "coverage.json"
    theirs.write_text(json.dumps({"files": {str(tmp_path / "pkg" / "a.py"): {"executed_lines": [3]},
                                            "/elsewhere/b.py": {"executed_lines": [1]}}}))
    assert load_coverage_file(str(ours), str(tmp_path)) == {"pkg/a.py": {1, 2}}
    assert load_coverage_file(str(theirs), str(tmp_path)) == {"pkg/a.py": {3}}
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected"):
        load_coverage_file(str(tmp_path / "bad.json"), str(tmp_path))


# -- whole runs over a fake compiler -----------------------------------------------------------------

FAKE_PACKAGE = '''\
def clamp_index(i, n):
    if i >= n:
        return n - 1
    return i


def magnitude(x):
    if x >= 0:  # '>' is an equivalent mutant here: -0 is 0
        return x
    return -x


def never_called(x):
    return x < 3
'''

FAKE_CAMPAIGN = '''\
import fakecc


def run(budget):
    failures = [f"clamp_index({i}, 4)" for i in range(6) if fakecc.clamp_index(i, 4) != min(i, 3)]
    return failures + [f"magnitude({x})" for x in range(-3, 4) if fakecc.magnitude(x) != abs(x)]
'''


@pytest.fixture
def fake_compiler(tmp_path: Path) -> Path:
    (tmp_path / "fakecc").mkdir()
    (tmp_path / "fakecc" / "__init__.py").write_text(FAKE_PACKAGE)
    (tmp_path / "fakecampaign.py").write_text(FAKE_CAMPAIGN)
    return tmp_path


def _mutate(capsys: pytest.CaptureFixture, out: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["mutate", "--package", "fakecc", "--campaign", "fakecampaign:run", "--targets", "eager",
                 "--operators", "boundary", "--out", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_kills_the_obvious_mutant_reports_the_equivalent_one_and_resumes(fake_compiler: Path, monkeypatch,
                                                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.syspath_prepend(str(fake_compiler))  # the pool's workers and the children inherit it
    out = fake_compiler / "mutants.jsonl"
    code, stdout, stderr = _mutate(capsys, out)
    assert code == 0, stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    mutants = {r["line"]: r for r in records if r["kind"] == "mutant"}
    # boundary sites on covered lines: clamp_index's i >= n (2) and magnitude's x >= 0 (8); never_called's
    # x < 3 (14) is on a line the baseline campaign never runs, so it is not mutated
    assert set(mutants) == {2, 8}
    assert mutants[2]["verdict"] == "killed" and "clamp_index(4, 4)" in mutants[2]["how"]
    assert mutants[8]["verdict"] == "survived"
    assert "mutation score 50.0%: 1 killed, 1 survived of 2 mutants" in stdout
    assert "fakecc/__init__.py:8 boundary" in stdout and "+    if x > 0:" in stdout
    assert "1 sites on lines no baseline reached" in stdout
    code, stdout, stderr = _mutate(capsys, out)
    assert code == 0, stderr
    assert "2 done in" in stderr and "0 to run" in stderr
    assert out.read_text().count('"kind": "mutant"') == 2
    assert "mutation score 50.0%" in stdout
    code, _, stderr = _mutate(capsys, out, "--seed", "1")
    assert code == 2 and "other settings" in stderr


@pytest.mark.parametrize("args,message", [
    (["--paths", "nothing/*.py"], "matches no file"),
    (["--operators", "boundary,typo"], "no operator typo"),
    (["--package", "no_such_package_here"], "no such importable package"),
    (["--budget-s", "0"], "--budget-s must be a positive number"),
    (["--campaign", "justamodule"], "give fuzz or MODULE:FUNCTION"),
])
def test_bad_settings_are_one_line_errors_before_any_work(args: list[str], message: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    code = main(["mutate", "--out", str(tmp_path / "m.jsonl"), *args])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.jsonl").exists()


PROBE_CAMPAIGN = '''\
import os

import fakecc


def probe(budget):
    """Reports where fakecc came from, what it computes and what the kernel cache holds."""
    cache = os.environ["CRUCIBLE_CACHE_DIR"]
    seen = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
    os.makedirs(cache, exist_ok=True)
    open(os.path.join(cache, "written-by-child"), "w").close()
    return [f"file {fakecc.__file__}", f"clamp {fakecc.clamp_index(4, 4)}", f"cache {seen}", f"seed {budget.seed}"]
'''


def test_child_runs_the_mutated_copy_with_its_own_seeded_cache(fake_compiler: Path, monkeypatch) -> None:
    from harness.mutate.tasks import Edit, package_location, run_child

    (fake_compiler / "probecampaign.py").write_text(PROBE_CAMPAIGN)
    monkeypatch.syspath_prepend(str(fake_compiler))
    location, base = package_location("fakecc")
    assert (location, base) == (str(fake_compiler / "fakecc"), str(fake_compiler))
    source = (fake_compiler / "fakecc" / "__init__.py").read_bytes()
    start = source.index(b"n - 1")
    seed, kept = fake_compiler / "seed-cache", fake_compiler / "kept" / "cache"
    seed.mkdir()
    (seed / "from-baseline").write_text("")
    settings = {"campaign": "probecampaign:probe", "target": "eager", "seed": 7, "seconds": 1.0, "graphs": None}
    run = run_child(settings, "fakecc", location, base, Edit("fakecc/__init__.py", start, start + 5, "n + 1"), 60,
                    str(fake_compiler), seed_cache=str(seed), keep_cache=str(kept))
    assert run.status == "ok", run.log
    found = {f["signature"].split(" ", 1)[0]: f["signature"].split(" ", 1)[1] for f in run.found}
    assert "crucible-mutant-" in found["file"] and found["file"].endswith("src/fakecc/__init__.py")
    assert found["clamp"] == "5"  # the edit, not the original's 3
    assert found["cache"] == "['from-baseline']" and found["seed"] == "7"
    assert sorted(os.listdir(kept)) == ["from-baseline", "written-by-child"]
    assert sorted(os.listdir(seed)) == ["from-baseline"]  # the seed is copied, never written to
    assert not list(fake_compiler.glob("crucible-mutant-*"))  # the mutant's directory is gone
    assert (fake_compiler / "fakecc" / "__init__.py").read_bytes() == source


def test_corpus_tier_reports_an_entry_the_mutation_breaks(monkeypatch) -> None:
    from compiler.lowering import LOWERINGS
    from harness.mutate.child import _corpus

    settings = {"corpus_suite": "smoke", "corpus_entries": ["zoo/mlp"], "target": "crucible-cpp"}
    assert _corpus(settings, set()) == []

    def broken(*args, **kwargs):
        raise KeyError("planted: no lowering")

    for op in list(LOWERINGS):
        monkeypatch.setitem(LOWERINGS, op, broken)
    assert _corpus(settings, set()) == [{"signature": "corpus | zoo/mlp | fail_compile", "graph": None}]
    assert _corpus(settings, {"corpus | zoo/mlp | fail_compile"}) == []  # a baseline failure is no kill


def test_decorator_arguments_are_not_mutated() -> None:
    source = b"import functools\n\n\n@functools.lru_cache(maxsize=4096)\ndef f(x):\n    return x + 1\n"
    assert {m.line for m in mutants_of(source, "f.py")} == {6}


def test_selection_is_deterministic_for_a_seed_and_covers_only_reached_lines(fake_compiler: Path, monkeypatch) -> None:
    from harness.mutate.analysis import MutateRequest, ResultsFile, plan, source_files, sources_digest
    from harness.mutate.tasks import package_location

    monkeypatch.syspath_prepend(str(fake_compiler))
    location, base = package_location("fakecc")
    files = source_files(location, base, ())

    def chosen(seed: int, mutants: int) -> list[str]:
        request = MutateRequest(package="fakecc", campaign="fakecampaign:run", targets=("eager",), seed=seed,
                                mutants=mutants, out=str(fake_compiler / f"plan-{seed}-{mutants}.jsonl"))
        results = ResultsFile(request.out, request.key(sources_digest(base, files)))
        # a stored baseline that reached clamp_index and magnitude (lines 1-10), not never_called
        results.baselines["eager"] = {"signatures": [], "lines": {"fakecc/__init__.py": list(range(1, 11))}}
        picked, reach = plan(request, results, location, base, files, lambda line: None)
        assert reach["unreached"] == {"fakecc/__init__.py": 4}  # x < 3: boundary, negate... swap, constant +-1
        assert all(m.line <= 10 and target == "eager" for m, target in picked)
        return [m.id for m, _ in picked]

    assert chosen(0, 5) == chosen(0, 5)
    assert sorted(chosen(0, 100)) == sorted(chosen(1, 100))  # every candidate, in another order
    assert chosen(0, 5) != chosen(1, 5)
    assert chosen(0, 8)[:5] == chosen(0, 5)  # a larger --mutants extends the sample


def test_a_subpackage_is_resolved_to_the_mutated_copy(tmp_path: Path, monkeypatch) -> None:
    """``--package outer.inner``: only the subpackage is copied; a finder resolves it to the copy while
    ``outer`` stays the installed one."""
    from harness.mutate.tasks import Edit, package_location, run_child

    (tmp_path / "fakeouter" / "inner").mkdir(parents=True)
    (tmp_path / "fakeouter" / "__init__.py").write_text("ORIGIN = 'outer'\n")
    (tmp_path / "fakeouter" / "inner" / "__init__.py").write_text("def limit():\n    return 10\n")
    (tmp_path / "innercampaign.py").write_text(
        "import fakeouter\nimport fakeouter.inner\n\n\ndef run(budget):\n"
        "    return [fakeouter.__file__, fakeouter.inner.__file__, str(fakeouter.inner.limit())]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    location, base = package_location("fakeouter.inner")
    source = (tmp_path / "fakeouter" / "inner" / "__init__.py").read_bytes()
    mutant = next(m for m in mutants_of(source, "fakeouter/inner/__init__.py") if m.replacement == "11")
    settings = {"campaign": "innercampaign:run", "target": "eager", "seed": 0, "seconds": 1.0, "graphs": None}
    run = run_child(settings, "fakeouter.inner", location, base,
                    Edit(mutant.file, mutant.start, mutant.end, mutant.replacement), 60, str(tmp_path))
    assert run.status == "ok", run.log
    outer, inner, limit = [f["signature"] for f in run.found]
    assert outer == str(tmp_path / "fakeouter" / "__init__.py")
    assert "crucible-mutant-" in inner and inner.endswith("src/fakeouter/inner/__init__.py")
    assert limit == "11"


def test_resumed_file_runs_harness_errors_again(tmp_path: Path) -> None:
    from harness.mutate.analysis import ResultsFile

    path = tmp_path / "m.jsonl"
    ResultsFile(str(path), "k")
    for verdict in ("killed", "error"):
        with open(path, "a") as f:
            f.write(json.dumps({"kind": "mutant", "id": verdict, "verdict": verdict}) + "\n")
    assert set(ResultsFile(str(path), "k").done) == {"killed"}


def test_a_compiler_mutant_is_fuzzed_in_its_copy_and_killed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The real path on Crucible's compiler: pow(x, 2)'s lowering (square's, once decomposed) with a
    factor dropped (x * x -> x), chosen through a coverage file, is killed on crucible-cpp, and the
    kill is checked on the unmutated compiler."""
    line = next(i for i, text in enumerate((Path(__file__).parents[2] / "compiler/lowerings/pointwise.py")
                                           .read_text().splitlines(), 1)
                if "return pointwise(node, lambda x: x * x, a, compute=common)" in text)
    coverage = tmp_path / "lines.json"
    coverage.write_text(json.dumps({"compiler/lowerings/pointwise.py": [line]}))
    out = tmp_path / "m.jsonl"
    code = main(["mutate", "--paths", "lowerings/pointwise.py", "--operators", "drop", "--coverage-file",
                 str(coverage), "--ops", "square", "--budget-graphs", "2", "--targets", "crucible-cpp",
                 "--out", str(out)])
    done = capsys.readouterr()
    assert code == 0, done.err
    mutant = next(json.loads(r) for r in out.read_text().splitlines() if '"mutant"' in r)
    assert (mutant["original"], mutant["replacement"], mutant["line"]) == ("x * x", "x", line)
    assert mutant["verdict"] == "killed" and "aten.square" in mutant["how"], mutant
    assert "mutation score 100.0%: 1 killed, 0 survived of 1 mutants" in done.out


def test_a_lambda_counts_as_reached_only_when_it_ran(tmp_path: Path, monkeypatch) -> None:
    """A table of lambdas runs its line at import; only the lambdas called are mutated."""
    from harness.mutate.analysis import MutateRequest, ResultsFile, plan, source_files, sources_digest
    from harness.mutate.tasks import package_location

    (tmp_path / "faketable").mkdir()
    source = "TABLE = {\n    'double': lambda x: x * 2,\n    'triple': lambda x: x * 3,\n}\n"
    (tmp_path / "faketable" / "__init__.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with LineTracer([str(tmp_path / "faketable")]) as tracer:
        import faketable

        faketable.TABLE["double"](1)
    file = os.path.realpath(tmp_path / "faketable" / "__init__.py")
    assert tracer.lines[file] >= {1, 2, 3} and 2 in tracer.calls[file] and 3 not in tracer.calls[file]
    assert {m.lambda_line for m in mutants_of(source.encode(), "faketable/__init__.py")} == {2, 3}

    location, base = package_location("faketable")
    files = source_files(location, base, ())
    request = MutateRequest(package="faketable", campaign="x:y", targets=("eager",), out=str(tmp_path / "m.jsonl"))
    results = ResultsFile(request.out, request.key(sources_digest(base, files)))
    results.baselines["eager"] = {"signatures": [], "lines": {"faketable/__init__.py": [1, 2, 3, 4]},
                                  "calls": {"faketable/__init__.py": [1, 2]}}
    picked, reach = plan(request, results, location, base, files, lambda line: None)
    assert {m.line for m, _ in picked} == {2} and reach["unreached"]["faketable/__init__.py"] > 0


def test_data_counts_as_reached_only_when_code_that_ran_reads_it(tmp_path: Path, monkeypatch) -> None:
    """Module-level tables run at import: a table only an unexecuted branch reads is not mutated (the
    GPU tile tables a CPU campaign imports were 10 of 53 survivors), one read by a line that ran is,
    and so is data no function of the package reads (read from elsewhere, so no evidence either way)."""
    from harness.mutate.analysis import MutateRequest, ResultsFile, plan, source_files, sources_digest
    from harness.mutate.tasks import package_location

    (tmp_path / "faketiles").mkdir()
    source = ("GPU = [128, 64]\nCPU = [16]\nEXPORTED = 3 + 4\n\n\ndef pick(gpu):\n    if gpu > 0:\n"
              "        return GPU[0] + 1\n    return CPU[0] + 1\n")
    (tmp_path / "faketiles" / "__init__.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert {m.line: m.data_names for m in mutants_of(source.encode(), "faketiles/__init__.py")} == {
        1: ("GPU",), 2: ("CPU",), 3: ("EXPORTED",), 7: (), 8: (), 9: ()}
    # (line 8's mutants are unreached by their line, line 1's by the data rule)
    location, base = package_location("faketiles")
    files = source_files(location, base, ())
    request = MutateRequest(package="faketiles", campaign="x:y", targets=("eager",), out=str(tmp_path / "m.jsonl"))
    results = ResultsFile(request.out, request.key(sources_digest(base, files)))
    results.baselines["eager"] = {"signatures": [], "lines": {"faketiles/__init__.py": [1, 2, 3, 6, 7, 9]},
                                  "calls": {"faketiles/__init__.py": [6]}}
    picked, reach = plan(request, results, location, base, files, lambda line: None)
    assert {m.line for m, _ in picked} == {2, 3, 7, 9}
    assert reach["unreached"]["faketiles/__init__.py"] == len(
        [m for m in mutants_of(source.encode(), "faketiles/__init__.py") if m.line in (1, 8)])


@pytest.mark.parametrize("package,cache,expected", [
    ("compiler", "auto", "warm"), ("compiler.lowerings", "auto", "warm"),
    # Inductor's FX graph cache is keyed by its installed sources: a warm copy would replay the baseline
    ("torch._inductor.lowering", "auto", "cold"), ("torch._inductor.lowering", "warm", "warm"),
    ("compiler", "cold", "cold"),
])
def test_a_warm_cache_is_the_default_only_for_crucible(package: str, cache: str, expected: str) -> None:
    import argparse

    from harness.mutate.command import _cache

    assert _cache(argparse.Namespace(package=package, cache=cache)) == expected


def test_report_scores_gpu_only_mutants_apart_and_lists_survivors() -> None:
    from harness.mutate.command import render

    def record(i: int, verdict: str, gpu: bool, status: str = "fail_run") -> dict:
        return {"id": f"m{i}", "file": "compiler/x.py", "line": i, "operator": "boundary", "target": "t",
                "gpu_only": gpu, "verdict": verdict, "status": "pass" if verdict == "survived" else status,
                "how": None, "graphs": 10, "copy_s": 0.1, "import_s": 2.0, "campaign_s": 5.0, "wall_s": 8.0,
                "cache": "warm", "diff": f"-    if a < {i}:\n+    if a <= {i}:"}

    records = [record(1, "killed", False), record(2, "survived", False), record(3, "killed", False, "crash"),
               record(4, "survived", True), record(5, "error", False, "crash")]
    text = render({"records": records, "reach": {"unreached": {"compiler/gpu.py": 7}}, "out": "m.jsonl",
                   "wall_s": 12.0, "baselines": {"crucible-cpp": {"graphs": 100, "seconds": 60.0, "signatures": []}}})
    assert "mutation score 66.7%: 2 killed, 1 survived of 3 mutants (1 harness errors, not counted)" in text
    assert "GPU-only code mutation score 0.0%: 0 killed, 1 survived of 1 mutants" in text
    assert "killed by: a failure 1, a crash 1" in text
    assert "not mutated: 7 sites" in text and "compiler/gpu.py 7" in text
    assert "m2 compiler/x.py:2 boundary" in text and "+    if a <= 2:" in text and "m4 compiler/x.py:4" in text


@pytest.mark.parametrize(("status", "error", "own"), [
    (Status.PASS, None, True),  # the unmutated compiler passes the graph: the mutant's failure
    (Status.FAIL_RUN, "ValueError: Mask argument cannot be block type", True),  # another error kind
    (Status.FAIL_ACCURACY, "v0: NaN positions differ", True),  # another status
    (Status.FAIL_RUN, "NameError: name 'omask' is not defined", False),  # the same failure: not the mutant's
])
def test_a_failure_the_unmutated_compiler_shares_is_not_a_kill(monkeypatch, status, error, own: bool) -> None:
    """Regression: a graph the mutant failed with NameError met a known ValueError of the unmutated
    compiler; the failure was taken for that bug and the mutant (attention.py:95) survived."""
    from harness import pool
    from harness.mutate import tasks
    from harness.result import Result

    monkeypatch.setattr(pool, "run_task", lambda task, target, progress: Result(
        name="g", target="crucible-interpret", status=status, error=error))
    graph = FuzzGraph([{"shape": [2], "dtype": "float32"}], [], ["x0"]).to_json()
    worker = type("W", (), {"progress": None})()
    signature = "fail_run | aten.scaled_dot_product_attention.default | NameError"
    assert tasks._not_unmutated_failure(graph, signature, "crucible-interpret", worker) is own


def test_attribution_gives_each_line_the_ops_that_reach_it_most_reliably(tmp_path: Path, monkeypatch) -> None:
    """A line only pooling graphs run goes to the pooling op, though add's graph ran first and add
    shares pooling's graphs; a line every graph runs (the pipeline's) is generic: no ops."""
    from harness.mutate.tracing import Attribution

    (tmp_path / "fakelower").mkdir()
    (tmp_path / "fakelower" / "__init__.py").write_text(
        "def pool(x):\n    return x * 2\n\n\ndef add(x):\n    return x + 1\n\n\ndef compile(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fakelower

    graphs = [["aten.add.Tensor"], ["aten.max_pool2d.default", "aten.add.Tensor"], ["aten.mul.Tensor"],
              ["aten.max_pool2d.default"], ["aten.sub.Tensor"], ["aten.exp.default"], ["aten.neg.default"]]
    with LineTracer([str(tmp_path / "fakelower")]) as tracer:
        attribution = Attribution(tracer)
        for ops in graphs:
            fakelower.compile(1)
            if "aten.max_pool2d.default" in ops:
                fakelower.pool(1)
            if "aten.add.Tensor" in ops:
                fakelower.add(1)
            attribution.after(ops)
    lines = attribution.ops()[os.path.realpath(tmp_path / "fakelower" / "__init__.py")]
    assert lines[2] == ["aten.max_pool2d.default"]
    assert lines[6] == ["aten.add.Tensor"]
    assert 10 not in lines  # six ops reach compile() in every graph


def test_a_focused_round_fuzzes_a_survivor_on_the_ops_that_reach_it(tmp_path: Path) -> None:
    """``--focus-s``: a first-round survivor whose line the baseline reached through square's graphs is
    fuzzed again on square alone, killed there, and the report counts it apart."""
    from harness.mutate.analysis import MutateRequest, ResultsFile, _focused_round, focus_ops
    from harness.mutate.command import render
    from harness.mutate.tasks import package_location

    source = (Path(__file__).parents[2] / "compiler/lowerings/pointwise.py").read_bytes()
    mutant = next(m for m in mutants_of(source, "compiler/lowerings/pointwise.py", ("drop",))
                  if m.original == "x * x" and b"lambda x: x * x, a, compute=common" in source.splitlines()[m.line - 1])
    line_ops = {mutant.file: {str(mutant.line): ["aten.square.default"], str(mutant.line + 1): ["aten.add.Tensor"]}}
    assert focus_ops(mutant, line_ops) == ["aten.square.default"]
    request = MutateRequest(targets=("crucible-cpp",), out=str(tmp_path / "m.jsonl"), focus_s=30.0, cache="cold")
    results = ResultsFile(request.out, "k")
    results.baselines["crucible-cpp"] = {"signatures": [], "graphs": 1, "seconds": 1.0}
    results.reach["crucible-cpp"] = {"line_ops": line_ops}
    first = {"kind": "mutant", **mutant.to_dict(), "target": "crucible-cpp", "gpu_only": False, "verdict": "survived",
             "status": "pass", "how": None, "graphs": 700, "diff": mutant.diff(source)}
    results.done[mutant.id] = first
    location, base = package_location("compiler")
    _focused_round(request, results, [(mutant, "crucible-cpp")], location, base, lambda line: None)
    entry = results.done[mutant.id]
    assert entry["verdict"] == "killed" and "aten.square" in entry["how"], entry
    assert entry["focus"]["ops"] == ["aten.square.default"]
    assert ResultsFile(request.out, "k").done[mutant.id]["focus"]  # appended: a resumed run skips it
    text = render({"records": [entry], "reach": {"unreached": {}}, "baselines": {}, "wall_s": 1.0,
                   "out": request.out})
    assert "focused round: 1 of 1 first-round survivors killed" in text and "first round alone: 0.0%" in text


def test_a_results_file_resumes_only_on_the_python_version_that_drew_its_sample(monkeypatch) -> None:
    """The sample comes from ``ast`` positions, which differ between Python versions: a file drawn on
    3.11 resumed on 3.12 ran 27 other mutants as if they belonged to the same sample."""
    import sys

    from harness.mutate.analysis import MutateRequest

    request = MutateRequest()
    here = request.key("digest")
    monkeypatch.setattr(sys, "version_info", (3, sys.version_info[1] + 1, 0, "final", 0))
    assert request.key("digest") != here
