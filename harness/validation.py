"""Checking every setting of a command before anything runs.

A bad setting (a negative timeout, an output path that cannot be written, a corpus directory that
is not there, an environment variable the compiler cannot read) is a ``UsageError``: the command
prints its one line, naming the setting and what to do, and exits 2 with nothing stored. Without
these checks a bad value turned every entry into a fake compiler failure in the store.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


class UsageError(ValueError):
    """A setting that cannot work; its message names the setting and what to do."""


def positive(option: str, value: float | None, integer: bool = False) -> None:
    """``value`` must be above 0 (when given)."""
    if value is None:
        return
    if value <= 0 or (integer and int(value) != value):
        kind = "a positive integer" if integer else "a positive number"
        raise UsageError(f"{option} must be {kind}, got {value:g}")


def writable_output(option: str, path: str | None) -> None:
    """``path`` can be written: its directory exists, it is not a directory, and opening it for
    writing works (tried now, so a typo fails before the run, not after it). Nothing is truncated."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    if not target.parent.exists():
        raise UsageError(f"{option} {path}: directory {target.parent} does not exist; create it or choose another path")
    existed = target.exists()
    try:
        with open(target, "a"):
            pass
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot be written ({exc.strerror or exc}); choose another path") from None
    if not existed:
        target.unlink(missing_ok=True)


def corpus_paths(option: str, paths: list[str] | None) -> None:
    """Each external corpus is an existing directory (or one Python file)."""
    for path in paths or []:
        p = Path(path)
        if not p.exists():
            raise UsageError(f"{option} {path}: no such directory")
        if p.is_file() and p.suffix != ".py":
            raise UsageError(f"{option} {path}: not a directory of Python files (nor one .py file)")


def environment() -> None:
    """The environment variables Crucible reads, checked: the compiler's (``compiler.config``) and the
    harness's own."""
    from compiler.config import environment_problems  # here: `crucible --help` must not import torch

    problems = environment_problems()
    gpus = os.environ.get("CRUCIBLE_GPUS")
    if gpus is not None and gpus.strip() and not all(g.strip() for g in gpus.split(",")):
        problems.append(f"CRUCIBLE_GPUS={gpus!r}: expected comma-separated CUDA device ids or UUIDs (0,1,2)")
    for name in filter(None, (n.strip() for n in os.environ.get("CRUCIBLE_MINIFY_PLUGINS", "").split(","))):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            problems.append(f"CRUCIBLE_MINIFY_PLUGINS: no module {name!r} to import; check the name and PYTHONPATH")
    if problems:
        raise UsageError(problems[0] if len(problems) == 1 else
                         "environment: " + "; ".join(problems))
