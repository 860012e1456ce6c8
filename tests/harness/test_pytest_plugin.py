"""The pytest plugin: corpus entries as pytest items, -k, --lf and -n over pytest-xdist, one store.

Each test starts pytest in a subprocess (the plugin loaded with ``-p``, as the ``pytest11`` entry point
loads it for an installed package), with a planted corpus and a planted 'compiler'."""

from __future__ import annotations

import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.store import ResultStore

from .conftest import cli_env

PLANTED = """
    import torch
    from torch._dynamo.backends.registry import _BACKENDS, register_backend
    from corpus.entry import Built, Entry, ExpectedFailure


    def off_by_one(gm, example_inputs, **kwargs):
        # a 'compiler' that gets every graph with a sin wrong
        if not any(n.target in (torch.sin, torch.Tensor.sin, "sin") for n in gm.graph.nodes):
            return gm.forward
        return lambda *args: [o + 1 for o in gm(*args)]


    if "planted_off_by_one" not in _BACKENDS:
        register_backend(name="planted_off_by_one")(off_by_one)


    def broken(x):
        raise ValueError("planted eager failure")


    def _entry(name, fn, **kw):
        return Entry(name=f"plug/{name}", source="plug", family="op", tier="smoke",
                     factory=lambda scale: Built(fn, (torch.randn(4, 4),)), **kw)


    def _known(status, reason):
        return (ExpectedFailure("planted_*", status, reason),)


    def entries():
        return [_entry("sin", lambda x: x.sin()), _entry("cos", lambda x: x.cos()), _entry("broken", broken),
                # off by one as expected (xfail), and an expected failure that no longer fails (xpass)
                _entry("known_bug", lambda x: x.sin() * 2, expected_failures=_known("fail_accuracy", "planted bug")),
                _entry("fixed", lambda x: x.exp(), expected_failures=_known("fail_accuracy", "was off by one"))]
"""


def _plugin_args() -> list[str]:
    """``-p harness.pytest_plugin`` unless the installed package's ``pytest11`` entry point already
    loads it (naming it twice is pytest's "Plugin already registered" error)."""
    from importlib.metadata import entry_points

    installed = any(ep.value == "harness.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "harness.pytest_plugin"]


def _pytest(tmp_path: Path, corpus: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:randomly", "--rootdir", str(tmp_path), "-q", "-rA", "--crucible-suite", "plug", "--crucible-target",
           "planted_off_by_one", "--crucible-corpus", str(corpus), "--crucible-db", str(tmp_path / "r.sqlite"),
           "--crucible-timeout", "120", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300, check=False)


def test_plugin_collects_runs_and_stores(tmp_path: Path, make_corpus) -> None:
    corpus = make_corpus(tmp_path / "my plug corpus", {"plug.py": PLANTED})  # a space in the path
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = _pytest(tmp_path, corpus, "--junitxml", str(tmp_path / "j.xml"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "1 failed, 2 passed, 1 skipped, 1 xfailed" in out, out[-3000:]
    assert "FAILED crucible/planted_off_by_one::plug/sin" in out
    assert "SKIPPED" in out and "eager_fail: ValueError: planted eager failure" in out
    assert "XFAIL" in out and "expected fail_accuracy (planted bug)" in out
    # the reproduce command names the external corpus, quoted, so that it finds the entry when pasted
    # (pytest may print a failure's text twice: in the failures section and, with -rA, in the summary)
    (line,) = {ln for ln in out.splitlines() if ln.startswith("reproduce: ")}
    assert shlex.split(line.removeprefix("reproduce: ")) == [
        "crucible", "run", "--entry", "plug/sin", "--target", "planted_off_by_one", "--corpus", str(corpus)]
    with ResultStore(tmp_path / "r.sqlite") as store:
        (run,) = store.runs()
        results = {r.name: r.status for r in store.results(run["id"])}
        assert run["finished"] and run["metadata"]["runner"] == "pytest"
        assert run["metadata"]["corpus"] == [str(corpus)]
    assert results == {"plug/sin": "fail_accuracy", "plug/cos": "pass", "plug/broken": "eager_fail",
                       "plug/known_bug": "xfail", "plug/fixed": "xpass"}
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
    assert len(cases) == 5
    fixed = {p.get("name"): p.get("value") for p in cases["plug/fixed"].iter("property")}
    assert "expected fail_accuracy (was off by one), now passes" in fixed["improved"]
    assert cases["plug/fixed"].find("failure") is None and cases["plug/fixed"].find("skipped") is None
    assert {p.get("name") for p in cases["plug/sin"].iter("property")} >= {"phase", "mode", "rmse_ratio"}

    # --lf reruns only the failure of the last session
    proc = _pytest(tmp_path, corpus, "--lf")
    assert "1 failed" in proc.stdout and "4 deselected" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(("option", "message"), [
    (("--crucible-target", "nosuch"), "unknown target 'nosuch'"),
    (("--crucible-timeout", "-5"), "--crucible-timeout must be a positive number"),
    (("--crucible-corpus", "missing"), "--crucible-corpus missing: no such directory"),
])
def test_plugin_refuses_bad_options_before_running(tmp_path: Path, make_corpus, option, message) -> None:
    corpus = make_corpus(tmp_path / "plug", {"plug.py": PLANTED})
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = _pytest(tmp_path, corpus, *option)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, (proc.stdout + proc.stderr)[-3000:]
    assert message in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "r.sqlite").exists()  # nothing stored


@pytest.mark.nightly
def test_plugin_over_xdist_writes_one_run(tmp_path: Path, make_corpus) -> None:
    corpus = make_corpus(tmp_path / "plug", {"plug.py": PLANTED})
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = _pytest(tmp_path, corpus, "-n", "2", "--dist", "load", "-k", "sin or cos")
    out = proc.stdout + proc.stderr
    # -k selects entries by name (xdist's summary does not count the deselected one; the store shows it)
    assert "1 failed, 1 passed in" in out, out[-3000:]
    with ResultStore(tmp_path / "r.sqlite") as store:
        (run,) = store.runs()  # the controller's run, written by both xdist workers
        assert {r.name for r in store.results(run["id"])} == {"plug/sin", "plug/cos"}
        assert run["metadata"]["xdist_workers"] == 2
