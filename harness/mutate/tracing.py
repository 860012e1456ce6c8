"""Which lines of the package under test a baseline campaign executes (only those are mutated).

``LineTracer`` records the executed lines of files under given roots (and the first lines of the
code objects that ran: a lambda counts as covered only when called), in this process and its
threads (the compiler builds kernels on a thread pool): with ``sys.monitoring`` on Python 3.12+
(each line reported once, then its event disabled; code outside the roots disabled at its first
line), and with ``sys.settrace`` on 3.11, whose global function returns None for frames of other
files so only the package's own frames pay for line events. No dependency.

``covered_lines`` is the one entry point the rest of ``crucible mutate`` uses: it runs the baseline
campaign in a child process (``harness.mutate.child``) with the tracer on, or reads a coverage
file instead (``load_coverage_file``: our JSON, ``{file: [lines]}``, or coverage.py's ``coverage
json`` output). Campaign coverage built elsewhere in the harness can be routed through it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

_TOOL_NAME = "crucible-mutate"


class LineTracer:
    """``with LineTracer(roots) as tracer: ...``; then ``tracer.lines``: {absolute file: {line}}."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots)
        self.lines: dict[str, set[int]] = defaultdict(set)
        # first lines of the code objects that ran (functions, lambdas, comprehensions): a lambda's
        # body shares its line with the code that makes it, so a line alone does not say it ran
        self.calls: dict[str, set[int]] = defaultdict(set)
        self._wanted: dict[str, str | None] = {}
        self._tool: int | None = None
        # with ``Attribution``: the (file, line) pairs run since the last ``take`` (None: not kept)
        self.current: set[tuple[str, int]] | None = None

    def take(self) -> set[tuple[str, int]]:
        """The lines run since the last call (``current``), and a fresh set; on Python 3.12+ each
        line's event is enabled again, so the next call sees every line that runs again."""
        ran, self.current = self.current or set(), set()
        if self._tool is not None:
            sys.monitoring.restart_events()  # type: ignore[attr-defined]
        return ran

    def _file(self, filename: str) -> str | None:
        """``filename`` resolved when it is under a root, else None (memoized: called per frame)."""
        if filename not in self._wanted:
            real = os.path.realpath(filename)
            self._wanted[filename] = real if real.startswith(self.roots) and real.endswith(".py") else None
        return self._wanted[filename]

    def __enter__(self) -> LineTracer:
        if sys.version_info >= (3, 12):
            self._start_monitoring()
        else:
            threading.settrace(self._call)
            sys.settrace(self._call)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tool is not None:
            monitoring = sys.monitoring  # type: ignore[attr-defined]
            monitoring.set_events(self._tool, 0)
            monitoring.register_callback(self._tool, monitoring.events.LINE, None)
            monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        else:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]

    # -- Python 3.11: settrace, local tracing only in the package's frames
    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        # the call event's line is the ``def`` line, which runs when the module does, not on calls:
        # not recorded, as sys.monitoring does not report it either
        file = self._file(frame.f_code.co_filename)
        if file is None:
            return None
        self.calls[file].add(frame.f_code.co_firstlineno)
        return self._line

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            file = self._file(frame.f_code.co_filename)
            if file is not None:
                self.lines[file].add(frame.f_lineno)
                if self.current is not None:
                    self.current.add((file, frame.f_lineno))
        return self._line

    # -- Python 3.12+: sys.monitoring, each line reported once
    def _start_monitoring(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        tool = next((t for t in range(6) if monitoring.get_tool(t) is None), None)
        if tool is None:
            raise RuntimeError("every sys.monitoring tool id is taken; coverage cannot be recorded")
        monitoring.use_tool_id(tool, _TOOL_NAME)
        disable = monitoring.DISABLE

        def on_line(code: Any, line: int) -> Any:
            file = self._file(code.co_filename)
            if file is not None:
                self.lines[file].add(line)
                if self.current is not None:
                    self.current.add((file, line))
            return disable

        def on_start(code: Any, offset: int) -> Any:
            file = self._file(code.co_filename)
            if file is not None:
                self.calls[file].add(code.co_firstlineno)
            return disable

        monitoring.register_callback(tool, monitoring.events.LINE, on_line)
        monitoring.register_callback(tool, monitoring.events.PY_START, on_start)
        monitoring.set_events(tool, monitoring.events.LINE | monitoring.events.PY_START)
        monitoring.restart_events()
        self._tool = tool


MAX_FOCUS_OPS = 4  # a line more ops reach about as often is generic: no op to focus on


class Attribution:
    """Which ops reach each line a ``LineTracer`` records: ``after(ops)`` after each graph counts,
    for every line the graph ran, its ops. ``ops()`` then gives each line the ops whose graphs run it
    most reliably: the share of an op's graphs that ran the line, those above half the best share,
    at most ``MAX_FOCUS_OPS`` (a line that more ops reach as reliably, the compile pipeline's, gets
    none). Attributing each line to the first graph that ran it gave every line the first graph's
    ops (a campaign's first graph runs most of the pipeline), and focused nothing."""

    def __init__(self, tracer: LineTracer) -> None:
        self.tracer = tracer
        tracer.take()
        self.hits: dict[tuple[str, int], Counter] = defaultdict(Counter)
        self.graphs_with: Counter = Counter()

    def after(self, ops: list[str]) -> None:
        distinct = set(ops)
        self.graphs_with.update(distinct)
        for key in self.tracer.take():
            self.hits[key].update(distinct)

    def ops(self) -> dict[str, dict[int, list[str]]]:
        """{absolute file: {line: ops}}, lines with no specific ops left out."""
        out: dict[str, dict[int, list[str]]] = defaultdict(dict)
        for (file, line), counts in self.hits.items():
            share = {op: n / self.graphs_with[op] for op, n in counts.items()}
            best = max(share.values())
            chosen = sorted((op for op, v in share.items() if v > best / 2), key=lambda op: (-share[op], op))
            if len(chosen) <= MAX_FOCUS_OPS:
                out[file][line] = sorted(chosen)
        return out


def relative_lines(lines: dict[str, Any], base: str) -> dict[str, Any]:
    """``lines`` keyed by path relative to ``base`` (the package's parent directory), sorted."""
    base = os.path.realpath(base)
    return {os.path.relpath(f, base): sorted(n) if isinstance(n, set) else n
            for f, n in sorted(lines.items()) if f.startswith(base + os.sep)}


def load_coverage_file(path: str, base: str) -> dict[str, set[int]]:
    """Executed lines from a file: ``{file: [lines]}`` (files relative to ``base``, the package's
    parent directory, or absolute), or coverage.py's JSON report (``{"files": {file:
    {"executed_lines": [...]}}}``). Keys come back relative to ``base``."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--coverage-file {path}: cannot be read as JSON ({exc}); give `coverage json` output "
                         "or {file: [lines]}") from None
    if isinstance(doc, dict) and isinstance(doc.get("files"), dict):
        doc = {f: v.get("executed_lines", []) for f, v in doc["files"].items() if isinstance(v, dict)}
    if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
        raise ValueError(f"--coverage-file {path}: expected {{file: [lines]}} or coverage.py's JSON report")
    base = os.path.realpath(base)
    out: dict[str, set[int]] = {}
    for file, lines in doc.items():
        absolute = os.path.realpath(file if os.path.isabs(file) else os.path.join(base, file))
        if absolute.startswith(base + os.sep):
            out.setdefault(os.path.relpath(absolute, base), set()).update(int(n) for n in lines)
    return out
