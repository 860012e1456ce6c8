"""CLI dispatch details: `crucible corpus check`, the progress line, run references."""

from __future__ import annotations

import io
import sys
import types

from harness import cli
from harness.runner import Progress


def test_corpus_check_is_dispatched_with_its_arguments(monkeypatch) -> None:
    seen = []
    fake = types.ModuleType("corpus.check")
    fake.main = lambda argv: seen.append(argv) or 7
    monkeypatch.setitem(sys.modules, "corpus.check", fake)
    assert cli.main(["corpus", "check", "--source", "zoo"]) == 7
    assert seen == [["--source", "zoo"]]
    assert cli.main(["corpus"]) == 2


def test_corpus_check_missing_is_a_clear_error(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "corpus.check", None)
    assert cli.main(["corpus", "check"]) == 2
    assert "not available" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("no real terminal")


def test_progress_is_one_line_updated_in_place() -> None:
    stream = _Terminal()
    progress = Progress(total=2, stream=stream)
    progress.phase("zoo/a", "compile")
    progress.finished({"name": "zoo/a", "status": "pass"})
    progress.finished({"name": "zoo/b", "status": "crash"})
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 3
    assert "[2/2]" in text and "crash=1" in text and "pass=1" in text


def test_unknown_suite_is_an_error_not_a_traceback(capsys) -> None:
    assert cli.main(["list", "--suite", "no-such-suite", "--source", "zoo"]) == 2
    assert "unknown suite" in capsys.readouterr().err


def test_progress_off_a_terminal_prints_seldom() -> None:
    stream = io.StringIO()
    progress = Progress(total=3, stream=stream)
    progress.finished({"name": "zoo/a", "status": "pass"})
    assert stream.getvalue() == ""  # not yet LOG_EVERY_S seconds
    progress.logged -= Progress.LOG_EVERY_S
    progress.finished({"name": "zoo/b", "status": "pass"})
    assert stream.getvalue().count("\n") == 1 and "[2/3]" in stream.getvalue()
