"""A pytest plugin (entry point ``pytest11``): corpus entries as pytest items.

``pytest --crucible-suite S --crucible-target T [--crucible-corpus DIR]`` collects the entries of
suite S as items ``crucible/<target>::<entry>``; each runs isolated in the harness's worker machinery
(``harness.tasks.EntryTask`` on one warm worker process per pytest process, replaced after a crash
or timeout) and is written to the same results store as ``crucible run`` (``--crucible-db``, one run
per pytest session). Users get ``-k``, ``--lf``, ``-n N``/``--dist`` over pytest-xdist and their
CI's test view. Outcomes follow the result's ``harness.status.Status``: a failure against the
compiler fails; the model's own problems and entries that do not run here are skipped with the
reason; an expected failure is an xfail; an improvement (xpass) passes. A failure's text ends with
the command that reproduces it (``harness.reproduce``). User properties are the result fields
flagged ``junit`` (``harness.result.JUNIT_FIELDS``), as in ``crucible run --junit``.

Every option is checked when pytest starts, before anything is collected or stored: the target (and
its options), the timeout, the corpus directories; a bad one is pytest's usage error.

Under xdist the controller creates the run and hands its id to the workers; each xdist worker owns
its harness worker and writes the store concurrently (the store is safe for concurrent writers).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.store import DEFAULT_DB, ResultStore, StoreError

_RUN_ID = "crucible_run_id"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crucible", "Crucible: corpus entries as tests")
    group.addoption("--crucible-suite", metavar="S", help="collect this suite's corpus entries (a tier, a "
                                                          "source or 'all'); without it the plugin does nothing")
    group.addoption("--crucible-target", metavar="T", help="target to compile with (default: as `crucible run`)")
    group.addoption("--crucible-corpus", action="append", metavar="DIR", default=[],
                    help="also load an external corpus directory (repeatable)")
    group.addoption("--crucible-db", default=DEFAULT_DB, metavar="PATH",
                    help=f"results store (default {DEFAULT_DB}; the same store `crucible report` reads)")
    group.addoption("--crucible-run-id", metavar="ID", help="name the run (default: suite-target-time)")
    group.addoption("--crucible-mode", choices=("inference", "train"), default="inference",
                    help="inference (default) or train (gradients graded too)")
    group.addoption("--crucible-dynamic", action="store_true", help="dynamic shapes at several batch sizes")
    group.addoption("--crucible-device", choices=("cpu", "cuda"), help="device of eager/Dynamo-backend targets")
    group.addoption("--crucible-timeout", type=float, default=600.0, help="seconds per entry (default 600)")


_RUN_KEY = pytest.StashKey[str]()
_POOL_KEY = pytest.StashKey[Any]()
_SELECTION_KEY = pytest.StashKey[tuple]()


def _active(config: pytest.Config) -> bool:
    return bool(config.getoption("crucible_suite"))


def _target(config: pytest.Config) -> str:
    from harness.targets import default_target

    return config.getoption("crucible_target") or default_target()


def _corpus(config: pytest.Config) -> list[str]:
    """The external corpus directories, absolute (a reproduce command must work from anywhere)."""
    return [str(Path(p).resolve()) for p in config.getoption("crucible_corpus")]


def _settings(config: pytest.Config) -> dict[str, Any]:
    """How this session runs its entries: the run's metadata, and what its reproduce commands say."""
    return {"mode": config.getoption("crucible_mode"), "dynamic": config.getoption("crucible_dynamic"),
            "device": config.getoption("crucible_device"), "corpus": _corpus(config)}


def _select(config: pytest.Config) -> tuple[Any, list]:
    """The catalog and the selected entries (listing an external corpus imports it: a Dynamo backend
    it registers is known afterwards)."""
    from harness.selection import selected_entries

    args = SimpleNamespace(suite=config.getoption("crucible_suite"), source=None, tag=None, entry=None,
                           exclude=None, keyword=None, corpus=config.getoption("crucible_corpus") or None)
    return selected_entries(args)


def _check_options(config: pytest.Config) -> None:
    """Every setting, before anything is collected or stored; a bad one is a ``pytest.UsageError``."""
    from harness.targets import validate_target
    from harness.validation import corpus_paths, positive

    try:
        positive("--crucible-timeout", config.getoption("crucible_timeout"))
        corpus_paths("--crucible-corpus", config.getoption("crucible_corpus"))
        cat, entries = _select(config)
        if not entries:
            raise ValueError(f"--crucible-suite {config.getoption('crucible_suite')}: no entries selected"
                             + ("" if config.getoption("crucible_corpus") else
                                " (an external corpus needs --crucible-corpus DIR)"))
        validate_target(_target(config), config.getoption("crucible_device"))
    except ValueError as exc:  # UsageError, TargetError
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SELECTION_KEY] = (cat, entries)


def _new_run(config: pytest.Config) -> str:
    from harness.runner import run_metadata

    suite, target = config.getoption("crucible_suite"), _target(config)
    cat, _ = config.stash[_SELECTION_KEY]
    metadata = run_metadata(suite, target, None, None, cat.unavailable)
    metadata.update(_settings(config), runner="pytest",
                    xdist_workers=int(getattr(config.option, "numprocesses", 0) or 0))
    with ResultStore(config.getoption("crucible_db")) as store:
        if config.getoption("crucible_run_id"):
            store.create_run(config.getoption("crucible_run_id"), suite, target, metadata)
            return config.getoption("crucible_run_id")
        tags = ("-train" if metadata["mode"] == "train" else "") + ("-dynamic" if metadata["dynamic"] else "")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        return store.create_unique_run(f"{suite}-{target}{tags}-{stamp}", suite, target, metadata)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "crucible: a Crucible corpus entry (collected by --crucible-suite)")
    if not _active(config):
        return
    _check_options(config)
    worker_input = getattr(config, "workerinput", None)
    try:
        if worker_input is not None and _RUN_ID in worker_input:
            config.stash[_RUN_KEY] = worker_input[_RUN_ID]  # an xdist worker: the controller's run
        else:
            config.stash[_RUN_KEY] = _new_run(config)
    except StoreError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistController(config.stash[_RUN_KEY]), "crucible-xdist")


class _XdistController:
    """Hands the run id to every xdist worker, so all of them write one run."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_RUN_ID] = self.run_id


class CorpusItem(pytest.Item):
    """One corpus entry on the session's target."""

    def __init__(self, *, entry: Any, origin: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entry, self.origin = entry, origin
        self.add_marker(pytest.mark.crucible)
        for tag in sorted(entry.tags):
            self.keywords[tag] = True  # -k selects by tag too
        self.keywords[entry.source] = True

    def runtest(self) -> None:
        from harness.junit import properties, skip_reason
        from harness.result import Result
        from harness.status import Status
        from harness.tasks import EntryTask

        config = self.config
        settings = _settings(config)
        task = EntryTask(self.entry.name, self.origin, mode=settings["mode"], dynamic=settings["dynamic"])
        results: list[Result] = []
        _pool(config).run([task], results.append)
        # a worker that died left a result without them
        result = results[0].replace(suite=results[0].suite or self.entry.source,
                                    mode=results[0].mode or settings["mode"])
        with ResultStore(config.getoption("crucible_db")) as store:
            store.record(config.stash[_RUN_KEY], result)
        self.user_properties.extend(properties(result))
        if result.against_compiler:
            raise CorpusFailure(result, {"target": _target(config), "metadata": settings})
        if result.status == Status.XFAIL:
            pytest.xfail(skip_reason(result))
        reason = skip_reason(result)
        if reason is not None:
            pytest.skip(reason)

    def repr_failure(self, excinfo: pytest.ExceptionInfo, style: Any = None) -> str:
        if isinstance(excinfo.value, CorpusFailure):
            from harness.reproduce import reproduce_command

            r = excinfo.value.result
            return (f"{r.status} in phase {r.phase}: {r.error}\n"
                    f"reproduce: {reproduce_command(excinfo.value.run, r)}\n{r.error_detail or ''}")
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, None, f"crucible {self.entry.name}"


class CorpusFailure(Exception):
    """A failure against the compiler; ``run`` is what its reproduce command needs of the session."""

    def __init__(self, result: Any, run: dict[str, Any]) -> None:
        super().__init__(f"{result.status}: {result.error}")
        self.result, self.run = result, run


def _pool(config: pytest.Config) -> Any:
    """This pytest process's harness worker (kept warm between items)."""
    if _POOL_KEY not in config.stash:
        from harness.pool import WorkerConfig, WorkerPool, visible_gpus
        from harness.targets import parse_target

        target = _target(config)
        device = config.getoption("crucible_device")
        worker_input = getattr(config, "workerinput", None) or {}
        share = int(worker_input.get("workercount", 1))  # xdist workers share the cores
        gpus: tuple[str, ...] = ()
        if parse_target(target, device).device == "cuda":
            every = visible_gpus()
            index = int(str(worker_input.get("workerid", "gw0"))[2:] or 0)
            gpus = (every[index % len(every)],) if every else ()  # xdist worker i on GPU i mod n
        wc = WorkerConfig(target=target, device=device, timeout_s=config.getoption("crucible_timeout"),
                          jobs=share, gpus=gpus)
        config.stash[_POOL_KEY] = WorkerPool(wc, 1, keep=True)
    return config.stash[_POOL_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if not _active(config):
        return
    cat, entries = config.stash[_SELECTION_KEY]
    target = _target(config)
    for entry in entries:
        items.append(CorpusItem.from_parent(session, name=entry.name, nodeid=f"crucible/{target}::{entry.name}",
                                            entry=entry, origin=cat.origin_of(entry.name)))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _POOL_KEY in config.stash:
        config.stash[_POOL_KEY].close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _active(config) or hasattr(config, "workerinput") or _RUN_KEY not in config.stash:
        return
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        with ResultStore(config.getoption("crucible_db")) as store:
            store.finish_run(config.stash[_RUN_KEY])


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _active(config) or hasattr(config, "workerinput"):
        return None
    return (f"crucible: suite {config.getoption('crucible_suite')} on {_target(config)}, run "
            f"{config.stash.get(_RUN_KEY, '?')} in {os.path.abspath(config.getoption('crucible_db'))}")
