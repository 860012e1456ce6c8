"""``crucible run`` as a CI gate: bad settings stop it before anything is stored, its exit status says
whether the compiler failed, expected-results files, --maxfail, selection by name, --rerun-failed,
and corpus files that misbehave at import.

Failures are planted with Dynamo's own test backend ``relu_accuracy_error_TESTING_ONLY``, which
compiles relu wrongly: entries using relu fail parity, the others pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.store import ResultStore

VERDICT = """
    import torch
    from corpus.entry import Built, Entry


    def _entry(name, fn):
        return Entry(name=f"verdict/{name}", source="verdict", family="f", tier="smoke",
                     factory=lambda scale: Built(fn, (torch.randn(8),)))


    def entries():
        return [_entry("sin", torch.sin), _entry("relu_a", torch.relu), _entry("relu_b", lambda x: torch.relu(x) * 2)]
"""
WRONG_RELU = "relu_accuracy_error_TESTING_ONLY"


@pytest.fixture
def verdict(tmp_path: Path, make_corpus) -> dict:
    corpus = make_corpus(tmp_path / "verdict", {"verdict.py": VERDICT})
    db = tmp_path / "r.sqlite"
    base = ["run", "--corpus", str(corpus), "--suite", "verdict", "--target", WRONG_RELU, "--no-capture",
            "--db", str(db), "--no-report"]
    return {"args": base, "db": db, "corpus": corpus, "tmp": tmp_path}


def _statuses(db: Path, run: int = -1) -> dict[str, str]:
    with ResultStore(db, read_only=True) as store:
        run_id = store.runs()[run]["id"]
        return {r.name: str(r.status) for r in store.results(run_id)}


def test_the_exit_status_says_whether_the_compiler_failed(verdict: dict, capsys) -> None:
    """Regression: `crucible run` exited 0 when entries failed, so it could not gate a CI job."""
    assert main([*verdict["args"], "-j", "2"]) == 1
    err = capsys.readouterr().err
    assert "FAILED: 2 entries failed against the compiler: verdict/relu_a, verdict/relu_b" in err
    assert _statuses(verdict["db"]) == {"verdict/sin": "pass", "verdict/relu_a": "fail_accuracy",
                                        "verdict/relu_b": "fail_accuracy"}
    first = _run_ids(verdict["db"])[0]
    # --rerun-failed runs what failed in a run, narrowed by --entry globs and --exclude
    assert main([*verdict["args"], "--rerun-failed", first, "--entry", "verdict/relu_*", "--exclude", "*_b"]) == 1
    assert _statuses(verdict["db"]) == {"verdict/relu_a": "fail_accuracy"}
    # -k picks by expression; a run of passing entries exits 0
    assert main([*verdict["args"], "-k", "sin or (relu and not relu)"]) == 0
    assert _statuses(verdict["db"]) == {"verdict/sin": "pass"}


def _run_ids(db: Path) -> list[str]:
    with ResultStore(db, read_only=True) as store:
        return [r["id"] for r in store.runs()]


def test_names_and_expressions_that_select_nothing_or_do_not_parse(verdict: dict, capsys) -> None:
    assert main([*verdict["args"], "--entry", "verdict/rleu_a"]) == 2
    assert "did you mean verdict/relu_a" in capsys.readouterr().err
    assert main([*verdict["args"], "-k", "relu and (sin"]) == 2
    assert "not closed" in capsys.readouterr().err
    assert not verdict["db"].exists()


def test_maxfail_stops_starting_entries_and_resume_goes_on(verdict: dict, capsys) -> None:
    args = [*verdict["args"], "-j", "1", "--exclude", "verdict/sin"]
    assert main([*args, "--maxfail", "1"]) == 1
    assert "stopped after 1 failure(s) (--maxfail 1); 1 entries not run" in capsys.readouterr().err
    assert len(_statuses(verdict["db"])) == 1
    assert main([*args, "--resume"]) == 1
    assert len(_statuses(verdict["db"])) == 2 and len(_run_ids(verdict["db"])) == 1


def test_expected_failures_xfail_improvements_xpass_and_the_file_updates(verdict: dict, capsys) -> None:
    expected = verdict["tmp"] / "expected.csv"
    expected.write_text("# crucible expected results: suite verdict\n# made with torch 0, triton 0\n"
                        "name,status,reason\n"
                        "verdict/relu_a,fail_accuracy,\"planted: relu is wrong, \"\"by design\"\"\"\n"
                        "verdict/relu_b,fail_compile,planted\n"
                        "verdict/sin,fail_run,an old bug since fixed\n")
    args = [*verdict["args"], "--expected", str(expected)]
    # relu_b fails otherwise than expected: that fails the run; the improvement is reported, not failed
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "1 expected failure(s) now pass (xpass): verdict/sin" in err and "FAILED: 1 entry" in err
    assert _statuses(verdict["db"]) == {"verdict/sin": "xpass", "verdict/relu_a": "xfail",
                                        "verdict/relu_b": "fail_accuracy"}
    with ResultStore(verdict["db"], read_only=True) as store:
        results = {r.name: r for r in store.results(store.runs()[-1]["id"])}
    assert results["verdict/relu_a"].expected == 'fail_accuracy: planted: relu is wrong, "by design"'
    assert results["verdict/relu_b"].expected == "fail_compile: planted"
    assert main([*args, "--update-expected"]) == 0
    err = capsys.readouterr().err
    assert "- verdict/sin: fail_run -> xpass (removed)" in err and "+ verdict/relu_b: fail_compile -> fail_accuracy" in err
    text = expected.read_text()
    assert "verdict/sin" not in text and 'verdict/relu_a,fail_accuracy,"planted: relu is wrong' in text
    assert "# made with torch " in text and "verdict/relu_b,fail_accuracy" in text


def test_xpass_fails_the_run_only_when_asked() -> None:
    from argparse import Namespace

    from harness.cli import _run_status
    from harness.result import Result
    from harness.runner import RunOutcome

    outcome = RunOutcome("r", [Result(name="a", target="t", status="xpass"), Result(name="b", target="t", status="xfail")])
    assert _run_status(Namespace(strict_xpass=False), outcome) == 0
    assert _run_status(Namespace(strict_xpass=True), outcome) == 1
    crash = Result(name="c", target="t", status="crash", phase="eager")  # the model's own crash
    assert _run_status(Namespace(strict_xpass=False), RunOutcome("r", [crash])) == 0
    assert _run_status(Namespace(strict_xpass=False), RunOutcome("r", [crash.replace(phase="compile")])) == 1


def test_a_malformed_expected_file_is_a_usage_error(verdict: dict, capsys) -> None:
    expected = verdict["tmp"] / "expected.csv"
    for text, message in (("name,status\nverdict/sin,pass\n", "the first row must be name,status,reason"),
                          ("name,status,reason\nverdict/sin,pass,x\n", "not a failure status"),
                          ("name,status,reason\nverdict/sin,wrong,x\n", "unknown result status 'wrong'")):
        expected.write_text(text)
        assert main([*verdict["args"], "--expected", str(expected)]) == 2
        assert message in capsys.readouterr().err
    assert not verdict["db"].exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--timeout", "-5"], "--timeout must be a positive number"),
    (["--mem-limit-mb", "-1"], "--mem-limit-mb must be a positive integer"),
    (["--limit", "-52"], "--limit must be a positive integer"),
    (["--limit", "0"], "--limit must be a positive integer"),
    (["-j", "0"], "-j/--jobs must be a positive integer"),
    (["--maxfail", "0"], "--maxfail must be a positive integer"),
    (["--shard", "3/2"], "--shard 3/2: need 1 <= i <= n"),
    (["--corpus", "/no/such/corpus"], "--corpus /no/such/corpus: no such directory"),
    (["--json", "/no/such/dir/out.json"], "directory /no/such/dir does not exist"),
    (["--html", "."], "--html .: is a directory"),
    (["--expected", "/no/such/expected.csv"], "no such file"),
    (["--target", "nosuch"], "unknown target 'nosuch'"),
    (["--target", "inductor:nosuch=1"], "Inductor has no option 'nosuch'"),
    (["--entry", "verdict/nope"], "matches no entry"),
    (["--resume", "--rerun-failed", "x"], "give one of them"),
])
def test_bad_settings_stop_before_anything_runs_or_is_stored(verdict: dict, extra: list[str], message: str,
                                                             capsys) -> None:
    """Regression: `--timeout -5` turned every entry into `timeout`, `--mem-limit-mb -1` into `eager_fail`,
    `--limit -52` silently ran one entry, a missing --corpus only warned, bad output paths failed only
    after the whole run; all of it landed in the store."""
    assert main([*verdict["args"], *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert not verdict["db"].exists()


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("CRUCIBLE_DEBUG", "abc", "CRUCIBLE_DEBUG='abc'"),
    ("CRUCIBLE_COMPILE_THREADS", "0", "CRUCIBLE_COMPILE_THREADS"),
    ("CRUCIBLE_GPUS", "0,,1", "CRUCIBLE_GPUS"),
])
def test_bad_environment_values_stop_before_anything_runs(verdict: dict, monkeypatch, variable: str, value: str,
                                                          message: str, capsys) -> None:
    """Regression: CRUCIBLE_DEBUG=abc made every entry `fail_compile` in the store."""
    monkeypatch.setenv(variable, value)
    assert main(verdict["args"]) == 2
    assert message in capsys.readouterr().err
    assert not verdict["db"].exists()


def test_a_corpus_file_that_exits_at_import_is_an_unavailable_source(tmp_path: Path, make_corpus, capsys) -> None:
    """Regression: a corpus file calling sys.exit(0) at import ended the whole run silently (exit 0,
    empty store); one raising KeyboardInterrupt (not a real Ctrl-C) must not stop it either."""
    corpus = make_corpus(tmp_path / "mixed", {
        "verdict.py": VERDICT,
        "exits.py": "import sys\nsys.exit(0)\n",
        "interrupts.py": "raise KeyboardInterrupt('planted at import')\n",
        "raises.py": "raise RuntimeError('planted at import')\n",
    })
    db = tmp_path / "r.sqlite"
    assert main(["run", "--corpus", str(corpus), "--suite", "verdict", "--target", "eager", "--no-capture",
                 "--db", str(db), "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "exits.py: exited (SystemExit)" in err and "interrupts.py: raised KeyboardInterrupt" in err
    assert "raises.py: failed to list entries: RuntimeError: planted at import" in err
    assert _statuses(db) == {"verdict/sin": "pass", "verdict/relu_a": "pass", "verdict/relu_b": "pass"}
    with ResultStore(db, read_only=True) as store:
        assert set(store.runs()[-1]["metadata"]["sources_unavailable"]) == {"mixed/exits.py", "mixed/interrupts.py",
                                                                             "mixed/raises.py"}
