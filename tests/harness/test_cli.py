"""CLI details: the progress line and its ETA, run references, --version, a closed pipe, merge."""

from __future__ import annotations

import io
import subprocess
import sys

from harness import cli
from harness.result import Result
from harness.runner import Progress

from .conftest import REPO, cli_env


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("no real terminal")


def _result(name: str, status: str) -> Result:
    return Result(name=name, target="eager", status=status)


def test_progress_is_one_line_updated_in_place() -> None:
    stream = _Terminal()
    progress = Progress(total=2, stream=stream)
    progress.phase("zoo/a", "compile")
    progress.finished(_result("zoo/a", "pass"))
    progress.finished(_result("zoo/b", "crash"))
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 3
    assert "[2/2]" in text and "crash=1" in text and "pass=1" in text


def test_progress_has_an_eta_from_the_finished_entries() -> None:
    progress = Progress(total=4, stream=io.StringIO())
    assert progress.eta() == ""  # nothing finished: no estimate
    progress.started -= 100.0  # two entries took 100 s: two more take about as long
    progress.finished(_result("zoo/a", "pass"))
    progress.finished(_result("zoo/b", "pass"))
    assert progress.eta() == " ETA 1m40s" and "ETA 1m40s" in progress._line()
    progress.finished(_result("zoo/c", "pass"))
    progress.finished(_result("zoo/d", "pass"))
    assert progress.eta() == ""


def test_unknown_suite_is_an_error_not_a_traceback(capsys) -> None:
    assert cli.main(["list", "--suite", "no-such-suite", "--source", "zoo"]) == 2
    assert "unknown suite" in capsys.readouterr().err


def test_progress_off_a_terminal_prints_seldom() -> None:
    stream = io.StringIO()
    progress = Progress(total=3, stream=stream)
    progress.finished(_result("zoo/a", "pass"))
    assert stream.getvalue() == ""  # not yet LOG_EVERY_S seconds
    progress.logged -= Progress.LOG_EVERY_S
    progress.finished(_result("zoo/b", "pass"))
    assert stream.getvalue().count("\n") == 1 and "[2/3]" in stream.getvalue()


def test_version(capsys) -> None:
    try:
        cli.main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.startswith("crucible ")


def test_a_closed_pipe_is_not_a_traceback() -> None:
    """Regression: `crucible list | head` printed a BrokenPipeError traceback."""
    proc = subprocess.run(f"{sys.executable} -m harness list --suite zoo | head -1", shell=True, cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.startswith("entry") and proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_merge_of_a_missing_file_is_a_usage_error(tmp_path, capsys) -> None:
    """Regression: `crucible merge out.sqlite missing.sqlite` exited 0."""
    out = tmp_path / "all.sqlite"
    assert cli.main(["merge", str(out), str(tmp_path / "missing.sqlite")]) == 2
    assert "no such file" in capsys.readouterr().err and not out.exists()


def test_corpus_check_usage_errors(capsys) -> None:
    assert cli.main(["corpus", "check", "-j", "0"]) == 2
    assert "-j/--jobs must be a positive integer" in capsys.readouterr().err
    assert cli.main(["corpus", "check", "--report", "--compact"]) == 2
