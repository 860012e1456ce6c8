"""Enumerating corpus entries: the built-in sources, external corpora and suites.

Listing never builds a model. A source that cannot be imported, or whose
``entries()`` raises, is reported as unavailable with the reason; it never stops
the listing of the others.

External corpora (``--corpus PATH``) are directories of Python files. Each file
not starting with ``_`` is imported on its own and provides its entries either
as a function ``entries() -> list[Entry]`` or as a module-level list ``ENTRIES``.
A file that fails to import is reported as a problem with its error.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import signal
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from corpus import SOURCES
from corpus.entry import TIERS, Built, Entry


@dataclass(frozen=True)
class Origin:
    """Where an entry comes from, so a worker process can find it again by name.

    ``module`` is an importable module name (a built-in source) or, for external
    corpora, the path of the Python file.
    """

    module: str
    external: bool = False


@dataclass
class SourceLoad:
    """The result of loading one source (or one external corpus file)."""

    name: str
    origin: Origin
    entries: list[Entry] = field(default_factory=list)
    unavailable: str | None = None  # why the source gave no entries, if it failed


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _entries_of(module: ModuleType, path: Path | None = None) -> list[Entry]:
    if callable(getattr(module, "entries", None)):
        found = list(module.entries())
    elif hasattr(module, "ENTRIES"):
        found = list(module.ENTRIES)
    elif path is not None and hasattr(module, "TESTCASES"):
        found = testcase_entries(path.stem, module.TESTCASES)
    else:
        raise AttributeError(f"{module.__name__} defines neither entries(), ENTRIES nor TESTCASES")
    bad = [e for e in found if not isinstance(e, Entry)]
    if bad:
        raise TypeError(f"{module.__name__}: entries must be corpus.entry.Entry, got {type(bad[0]).__name__}")
    return found


def testcase_entries(source: str, testcases: list) -> list[Entry]:
    """Entries of a crawled-code file in the test-case format of crawled-module parity suites: a list
    of ``(module class, init_args, forward_args, ...)``, each ``*_args`` a callable returning
    ``(args, kwargs)``. One entry per case, ``<source>/<class>`` (``_<n>`` from a class's second case
    on), tier ``smoke``: such cases are single modules on tiny inputs. A case that is not of that
    shape is a ``TypeError`` naming it, so the file is reported, not half listed."""
    entries, seen = [], Counter()
    for i, case in enumerate(testcases):
        if not (isinstance(case, tuple) and len(case) >= 3 and isinstance(case[0], type)
                and callable(case[1]) and callable(case[2])):
            raise TypeError(f"{source}: TESTCASES[{i}] is not (module class, init_args, forward_args, ...)")
        cls, init_args, forward_args = case[:3]
        seen[cls.__name__] += 1
        name = cls.__name__ if seen[cls.__name__] == 1 else f"{cls.__name__}_{seen[cls.__name__]}"
        entries.append(Entry(name=f"{source}/{name}", source=source, family="crawled",
                             factory=functools.partial(_build_case, cls, init_args, forward_args), tier="smoke",
                             tags=frozenset(("crawled",)), description=f"{cls.__module__}.{cls.__qualname__}"))
    return entries


def _build_case(cls: type, init_args: Callable, forward_args: Callable, scale: str) -> Built:
    args, kwargs = init_args()
    model = cls(*args, **kwargs)
    if hasattr(model, "eval"):
        model.eval()
    inputs, input_kwargs = forward_args()
    return Built(model, tuple(inputs), dict(input_kwargs))


def _load_module(origin: Origin) -> ModuleType:
    if not origin.external:
        return importlib.import_module(origin.module)
    path = Path(origin.module)
    # A unique module name per file keeps two corpora's "models.py" apart.
    name = "crucible_external_" + str(abs(hash(str(path.resolve()))))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    # crawled files import their siblings (shared helpers of the corpus) by plain module name
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class _Interrupts:
    """Tells a real Ctrl-C from a ``KeyboardInterrupt`` a source raises itself: while a source is
    imported, SIGINT is noted before Python turns it into the exception."""

    def __init__(self) -> None:
        self.received = False

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            self.received = True  # only the main thread may set handlers: every KeyboardInterrupt is real here
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def noted(signum: int, frame: object) -> None:
            self.received = True
            if callable(previous):
                previous(signum, frame)
            else:
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, noted)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def load_origin(name: str, origin: Origin) -> SourceLoad:
    """Import one source and list its entries; failures become ``unavailable``.

    Anything a source raises makes it unavailable, ``SystemExit`` included (a crawled module that
    calls ``sys.exit`` at import must not end the run); only a real Ctrl-C propagates."""
    load = SourceLoad(name=name, origin=origin)
    interrupts = _Interrupts()
    try:
        with interrupts.watching():
            module = _load_module(origin)
            reason_fn = getattr(module, "unavailable", None)
            reason = reason_fn() if callable(reason_fn) else None
            if reason:
                load.unavailable = str(reason)
                return load
            load.entries = _entries_of(module, Path(origin.module) if origin.external else None)
    except ImportError as exc:
        load.unavailable = f"not importable: {_first_line(exc)}"
    except KeyboardInterrupt as exc:
        if interrupts.received:
            raise
        load.unavailable = f"raised KeyboardInterrupt while importing or listing: {_where(exc)}"
    except BaseException as exc:  # noqa: BLE001 -- a broken source (even one calling sys.exit) must not stop the others
        what = "exited (SystemExit)" if isinstance(exc, SystemExit) else "failed to list entries"
        load.unavailable = f"{what}: {_first_line(exc)} ({_where(exc)})"
    return load


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"


def load_sources(names: list[str] | None = None) -> list[SourceLoad]:
    """Load the built-in sources (all of ``corpus.SOURCES`` unless ``names`` is given)."""
    wanted = names if names is not None else list(SOURCES)
    unknown = [n for n in wanted if n not in SOURCES]
    if unknown:
        raise KeyError(f"unknown source(s) {unknown}; known: {sorted(SOURCES)}")
    return [load_origin(n, Origin(SOURCES[n])) for n in wanted]


def load_external(path: str | Path) -> list[SourceLoad]:
    """Load every ``*.py`` file (not starting with ``_``) of an external corpus directory."""
    root = Path(path)
    if not root.exists():
        return [SourceLoad(name=str(root), origin=Origin(str(root), external=True),
                           unavailable="corpus path does not exist")]
    files = [root] if root.is_file() else sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    return [load_origin(f"{root.name}/{f.name}" if f != root else f.name,
                        Origin(str(f.resolve()), external=True)) for f in files]


@dataclass
class Catalog:
    """Every loaded entry with its origin, plus the sources that gave none."""

    loads: list[SourceLoad]

    @property
    def entries(self) -> list[Entry]:
        return [e for load in self.loads for e in load.entries]

    @property
    def unavailable(self) -> dict[str, str]:
        return {load.name: load.unavailable for load in self.loads if load.unavailable}

    def origin_of(self, name: str) -> Origin:
        for load in self.loads:
            if any(e.name == name for e in load.entries):
                return load.origin
        raise KeyError(name)

    def duplicates(self) -> list[str]:
        seen: set[str] = set()
        dups = []
        for e in self.entries:
            if e.name in seen:
                dups.append(e.name)
            seen.add(e.name)
        return dups


def catalog(corpus_paths: list[str] | None = None, builtin: bool = True,
            sources: list[str] | None = None) -> Catalog:
    """Load the built-in sources (unless ``builtin`` is False) and any external corpora."""
    loads = load_sources(sources) if builtin else []
    for path in corpus_paths or []:
        loads += load_external(path)
    return Catalog(loads)


def suites(cat: Catalog) -> list[str]:
    """Suite names: the tiers, then every source that gave entries."""
    return list(TIERS) + sorted({e.source for e in cat.entries} | set(SOURCES))


def select(entries: list[Entry], suite: str | None = None, source: str | None = None,
           tag: str | None = None, names: list[str] | None = None) -> list[Entry]:
    """Filter entries. ``suite`` is a tier name (cumulative) or a source name."""
    known_source = suite in SOURCES or any(e.source == suite for e in entries)
    if suite is not None and suite not in TIERS and suite != "all" and not known_source:
        raise KeyError(f"unknown suite {suite!r}; suites are tiers {list(TIERS)}, 'all' or a source name")
    out = []
    for e in entries:
        if suite in TIERS and not e.in_suite(suite):
            continue
        if suite not in TIERS and suite not in (None, "all") and e.source != suite:
            continue
        if source is not None and e.source != source:
            continue
        if tag is not None and tag not in e.tags:
            continue
        if names and not any(e.name == n or e.name.split("/", 1)[1] == n for n in names):
            continue
        out.append(e)
    return out


@functools.cache
def _entries_by_name(origin: Origin) -> tuple[dict[str, Entry], str | None]:
    # A worker runs many entries of one source: list each source once per process.
    load = load_origin(origin.module, origin)
    return {e.name: e for e in load.entries}, load.unavailable


def find_entry(name: str, origin: Origin) -> Entry:
    """Re-import an entry's source in a worker process and return the entry called ``name``."""
    by_name, unavailable = _entries_by_name(origin)
    if unavailable:
        raise RuntimeError(f"source of {name} unavailable: {unavailable}")
    if name not in by_name:
        raise KeyError(f"{name} is not listed by {origin.module}")
    return by_name[name]
