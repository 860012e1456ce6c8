"""The one command that reruns a stored result as its run ran it.

Every output that tells a user how to reproduce a failure (the text report, the HTML report, the
pytest plugin) prints ``reproduce_command``: ``crucible run --entry NAME --target TARGET[:options]``
plus each external corpus the run loaded (``--corpus``: without it an external entry is not
found), the device, train mode and dynamic shapes, as the run ran them. The command is quoted for a
POSIX shell (``shlex.join``), so an entry name or a path holding spaces, quotes, ``$(...)`` or ``;``
pastes as one argument and runs nothing else.

What it reads from the run's metadata (``harness.runner.execute_run`` writes it): ``corpus``
(absolute paths; runs stored before it was recorded have none), ``device``, ``mode``, ``dynamic``,
and ``reference``/``capture`` where a run recorded them.
"""

from __future__ import annotations

import shlex
from typing import Any

from harness.result import Result


def reproduce_argv(run: dict[str, Any], result: Result) -> list[str]:
    """The argument vector of the command that reruns ``result`` (one entry) as ``run`` ran it."""
    meta = run.get("metadata") or {}
    argv = ["crucible", "run", "--entry", result.name, "--target", result.target or run["target"]]
    for path in meta.get("corpus") or ():
        argv += ["--corpus", str(path)]
    if meta.get("device"):
        argv += ["--device", str(meta["device"])]
    mode = result.mode or meta.get("mode") or "inference"
    if mode != "inference":
        argv += ["--mode", mode]
    if result.dynamic if result.dynamic is not None else meta.get("dynamic"):
        argv.append("--dynamic")
    if meta.get("reference") not in (None, "auto"):
        argv += ["--reference", str(meta["reference"])]
    if meta.get("capture") is False:
        argv.append("--no-capture")
    return argv


def reproduce_command(run: dict[str, Any], result: Result) -> str:
    """``reproduce_argv`` as one line to paste into a shell."""
    return shlex.join(reproduce_argv(run, result))
