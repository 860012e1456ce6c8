"""Which lines of the compiler under test a campaign executes (``crucible fuzz --coverage``).

The measured code is a set of package directories, the *roots*: Crucible's ``compiler/`` for the
``crucible-*`` targets, the packages the user names for another compiler. A ``CoverageMap`` is
{file: lines executed}, files named relative to their root's parent (``compiler/lowering.py``), so
maps from different processes and machines merge and serialize as plain JSON.

Two tracers record lines, one per Python version, behind one interface (``LineTracer``):

- Python 3.12+: ``sys.monitoring``. Each line location reports once and is then disabled
  (``DISABLE``), so a line already seen, or any line outside the roots, costs nothing again.
- Python 3.11: coverage.py's C tracer (a dependency on 3.11 only), restricted to the roots.

A tracer reports lines *new to its session* (``take``): a worker sends each line once over a
campaign's life, and the campaign merges them (``CoverageMap.merge``); a task of another campaign
(another session) starts the worker's record afresh. A line counts as executable
when it belongs to a function body (a code object with ``CO_OPTIMIZED``, its ``def`` line excluded):
module and class bodies run at import, before any campaign starts, so they are left out of both
sides of covered/total.

For other tools (``crucible mutate`` asks which lines a campaign covers)::

    with collect(package_roots(["compiler"])) as covered:
        ...                        # run something
    covered.lines                  # {"compiler/lowering.py": {12, 13, ...}}
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import CodeType
from typing import Any

CRUCIBLE_PACKAGES = ("compiler",)


@dataclass
class CoverageMap:
    """{file: executed lines}; files relative to their root's parent (``compiler/ir.py``)."""

    lines: dict[str, set[int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(v) for v in self.lines.values())

    def merge(self, other: CoverageMap) -> CoverageMap:
        """Add ``other``'s lines to this map; the lines that were new here (a map, maybe empty)."""
        new = CoverageMap()
        for file, lines in other.lines.items():
            have = self.lines.setdefault(file, set())
            fresh = lines - have
            if fresh:
                have |= fresh
                new.lines[file] = set(fresh)
        return new

    def to_json(self) -> str:
        return json.dumps({f: sorted(v) for f, v in sorted(self.lines.items())})

    @classmethod
    def from_json(cls, text: str | None) -> CoverageMap:
        return cls({f: set(v) for f, v in json.loads(text).items()} if text else {})


# -- what is measured


def package_roots(packages: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The directories (or single files) of importable packages or modules, or of paths given as such.
    An unknown name raises ValueError naming it."""
    roots = []
    for name in packages:
        path = Path(name)
        if path.exists():
            roots.append(str(path.resolve()))
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise ValueError(f"no package or path {name!r} to measure; give an importable package "
                             f"(compiler, torch._inductor) or a directory")
        if spec.submodule_search_locations:
            roots.extend(str(Path(p).resolve()) for p in spec.submodule_search_locations)
        elif spec.origin:
            roots.append(str(Path(spec.origin).resolve()))
    return tuple(dict.fromkeys(roots))


def measured_packages(target: str, packages: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The packages a campaign on ``target`` measures: the ones named, else Crucible's compiler for a
    ``crucible-*`` target; another compiler needs them named (ValueError saying so)."""
    if packages:
        return tuple(packages)
    if target.split(":")[0].startswith("crucible"):
        return CRUCIBLE_PACKAGES
    raise ValueError(f"--coverage on {target}: name the packages of that compiler to measure with "
                     f"--coverage-package (for inductor: torch._inductor)")


def file_key(path: str, roots: tuple[str, ...]) -> str | None:
    """``path`` relative to its root's parent, or None when it is under no root."""
    for root in roots:
        if path == root or path.startswith(root + os.sep):
            return os.path.relpath(path, os.path.dirname(root))
    return None


@lru_cache(maxsize=16)
def source_files(roots: tuple[str, ...]) -> dict[str, str]:
    """{file key: absolute path} of every Python source under ``roots``."""
    files: dict[str, str] = {}
    for root in roots:
        paths = [Path(root)] if root.endswith(".py") else sorted(Path(root).rglob("*.py"))
        for path in paths:
            key = file_key(str(path), roots)
            if key is not None:
                files[key] = str(path)
    return files


def code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from code_objects(const)


@lru_cache(maxsize=1024)
def executable_lines(path: str) -> frozenset[int]:
    """Lines of ``path`` inside function bodies (what can be covered after import); empty when the
    file does not compile."""
    try:
        module = compile(Path(path).read_text(encoding="utf-8"), path, "exec", dont_inherit=True)
    except (SyntaxError, OSError, UnicodeDecodeError):
        return frozenset()
    lines: set[int] = set()
    for code in code_objects(module):
        if not code.co_flags & inspect.CO_OPTIMIZED:
            continue  # the module and class bodies: they run at import
        body = {line for _, _, line in code.co_lines() if line is not None}
        if code.co_name != "<lambda>":
            body.discard(code.co_firstlineno)
        lines |= body
    return frozenset(lines)


# -- tracers


class _MonitoringBackend:
    """Python 3.12+: ``sys.monitoring`` LINE events, each location disabled after its first report."""

    def __init__(self, roots: tuple[str, ...], sink: dict[str, set[int]]) -> None:
        self.roots, self.sink = roots, sink
        self.keys: dict[str, str | None] = {}
        self.tool: int | None = None

    def start(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        for tool in (mon.COVERAGE_ID, 3, 4):
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "crucible-coverage")
                self.tool = tool
                break
        else:
            raise RuntimeError("every sys.monitoring tool id Crucible can use is taken (another tracer runs)")
        mon.register_callback(self.tool, mon.events.LINE, self._line)
        mon.set_events(self.tool, mon.events.LINE)
        self.restart()

    def restart(self) -> None:
        """Locations disabled so far (by this tracer or an earlier one) report again."""
        sys.monitoring.restart_events()  # type: ignore[attr-defined]

    def _line(self, code: CodeType, line: int) -> Any:
        file = code.co_filename
        key = self.keys.get(file, "")
        if key == "":
            key = self.keys[file] = file_key(file, self.roots)
        if key is not None:
            self.sink.setdefault(key, set()).add(line)
        return sys.monitoring.DISABLE  # type: ignore[attr-defined]

    def flush(self) -> None:
        return None

    def pause(self) -> None:
        sys.monitoring.set_events(self.tool, 0)  # type: ignore[attr-defined]

    def resume(self) -> None:
        sys.monitoring.set_events(self.tool, sys.monitoring.events.LINE)  # type: ignore[attr-defined]

    def stop(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        if self.tool is not None:
            mon.set_events(self.tool, 0)
            mon.register_callback(self.tool, mon.events.LINE, None)
            mon.free_tool_id(self.tool)
            self.tool = None


class _CoveragePyBackend:
    """Python 3.11: coverage.py's C tracer over the roots (``flush`` copies its data out)."""

    def __init__(self, roots: tuple[str, ...], sink: dict[str, set[int]]) -> None:
        import coverage

        self.roots, self.sink = roots, sink
        include = [os.path.join(r, "*") if not r.endswith(".py") else r for r in roots]
        self.cov = coverage.Coverage(data_file=None, include=include, config_file=False, branch=False)
        self.cov.set_option("run:disable_warnings", ["no-data-collected", "module-not-measured",
                                                     "module-not-imported", "couldnt-parse"])

    def start(self) -> None:
        self.cov.start()

    def restart(self) -> None:
        """Forget what was recorded: the next flush reports only lines run from now on."""
        self.cov.stop()
        self.cov.erase()
        self.cov.start()

    def pause(self) -> None:
        self.cov.stop()

    def resume(self) -> None:
        self.cov.start()

    def flush(self) -> None:
        # The collector's live {file: lines} when this coverage.py has one: ``get_data()`` writes
        # the lines into its SQLite data first, 16-20 ms a call, as long as a small graph's compile.
        live = getattr(getattr(self.cov, "_collector", None), "data", None)
        if isinstance(live, dict):
            files = [(path, set(lines)) for path, lines in live.copy().items()]  # copies: tracer threads add
        else:
            data = self.cov.get_data()
            files = [(path, set(data.lines(path) or ())) for path in data.measured_files()]
        for path, lines in files:
            key = file_key(path, self.roots)
            if key is not None and lines:
                self.sink.setdefault(key, set()).update(line for line in lines if isinstance(line, int))

    def stop(self) -> None:
        self.flush()
        self.cov.stop()


def tracer_kind() -> str:
    """The tracer this Python uses: "sys.monitoring" or "coverage.py"."""
    return "sys.monitoring" if sys.version_info >= (3, 12) else "coverage.py"


def check_tracer() -> None:
    """Raise ValueError, saying what to install, when this Python has no tracer."""
    if tracer_kind() == "coverage.py" and importlib.util.find_spec("coverage") is None:
        raise ValueError("--coverage on Python < 3.12 needs coverage.py: pip install 'coverage>=7.4' "
                         "(installed with crucible on these Pythons), or run on Python 3.12+")


class LineTracer:
    """Records the lines executed under ``roots`` in this process while started; ``take()`` returns
    the lines not returned before in the current session. One tracer per process at a time
    (``sys.monitoring`` and coverage.py both trace the whole process)."""

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots
        self._seen: dict[str, set[int]] = {}
        self._backend = (_MonitoringBackend if tracer_kind() == "sys.monitoring" else _CoveragePyBackend)(
            roots, self._seen)
        self._reported = CoverageMap()
        self._sizes: dict[str, int] = {}  # lines seen per file at the last take
        self.running = self.paused = False
        self.session = ""
        self.tasks = 0  # tasks measured (harness.fuzz.tasks traces a tracer's first task whole)

    def begin(self, session: str) -> None:
        """Report to ``session`` from now on: a process serving several campaigns in turn (the
        in-process runner, a cluster's worker) reports each campaign every line it runs, not only
        lines the process had never run."""
        if session != self.session:
            self._backend.restart()
            self._seen.clear()
            self._sizes.clear()
            self._reported = CoverageMap()
            self.session = session

    def start(self) -> None:
        self._backend.start()
        self.running = True
        self.paused = False

    def stop(self) -> None:
        if self.running:
            if self.paused:
                self._backend.resume()
            self._backend.stop()
            self.running = False

    def pause(self) -> None:
        """Stop recording (and costing) until ``resume``: a graph the campaign does not sample."""
        if self.running and not self.paused:
            self._backend.pause()
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused:
            self._backend.resume()
            self.paused = False

    def take(self) -> CoverageMap:
        """Executable lines run since the last ``take`` and never returned before."""
        self._backend.flush()
        files = source_files(self.roots)
        measured = CoverageMap()
        for key, lines in list(self._seen.items()):
            if len(lines) == self._sizes.get(key):
                continue  # nothing new in this file since the last take
            self._sizes[key] = len(lines)
            path = files.get(key)
            measured.lines[key] = set(lines) & executable_lines(path) if path else set(lines)
        return self._reported.merge(measured)


# The process's tracer while one runs (one per process: both backends trace globally); workers
# keep theirs across tasks, so each task reports only the lines new to the worker.
_ACTIVE: list[LineTracer] = []


def process_tracer(roots: tuple[str, ...], session: str = "") -> LineTracer:
    """The running tracer of this process for ``roots``, reporting to ``session``; started on first
    use (a worker's) and kept until ``stop_process_tracer``."""
    if not (_ACTIVE and _ACTIVE[0].roots == roots):
        stop_process_tracer()
        tracer = LineTracer(roots)
        tracer.start()
        _ACTIVE.append(tracer)
    _ACTIVE[0].resume()
    _ACTIVE[0].begin(session)
    return _ACTIVE[0]


def pause_process_tracer() -> None:
    """Pause this process's tracer, if one runs: the next task is not measured."""
    for tracer in _ACTIVE:
        tracer.pause()


def stop_process_tracer() -> None:
    """Stop this process's tracer, if one runs (an in-process campaign's, when it closes)."""
    for tracer in _ACTIVE:
        tracer.stop()
    _ACTIVE.clear()


@contextmanager
def collect(roots: tuple[str, ...]) -> Iterator[CoverageMap]:
    """Lines executed under ``roots`` inside the block, in this process; the map is filled when
    the block ends. Any tracer this process runs is stopped first (a worker's starts again fresh)."""
    stop_process_tracer()
    covered = CoverageMap()
    tracer = LineTracer(roots)
    tracer.start()
    try:
        yield covered
    finally:
        covered.merge(tracer.take())
        tracer.stop()


@dataclass(frozen=True)
class FileCoverage:
    file: str
    covered: int
    total: int
    missed: tuple[int, ...]  # executable lines never run, ascending


def file_coverage(covered: CoverageMap, roots: tuple[str, ...]) -> list[FileCoverage]:
    """Covered/total and the never-executed lines of every source file under ``roots``."""
    rows = []
    for key, path in sorted(source_files(roots).items()):
        total = executable_lines(path)
        if not total:
            continue
        hit = covered.lines.get(key, set()) & total
        rows.append(FileCoverage(key, len(hit), len(total), tuple(sorted(total - hit))))
    return rows


def line_ranges(lines: tuple[int, ...] | list[int]) -> str:
    """1,2,3,5,7,8 -> "1-3, 5, 7-8"."""
    spans: list[list[int]] = []
    for line in lines:
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
