"""One mutant, in isolation: a copy of the package with the mutation, its own kernel caches, its own
campaign process; and the picklable task that runs it on a pool or cluster worker.

``run_child`` copies the package (``shutil.copytree``, bytecode left out) under a fresh working
directory, applies the edit, and starts ``harness.mutate.child`` there with the copy first on its
import path and every kernel cache pointed inside the working directory (``CRUCIBLE_CACHE_DIR``,
``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``): a mutant never loads another's kernels, nor
leaves its own behind. The directory is removed afterwards. The cache starts empty, or (``--cache
warm``) as a private copy of the baseline's: entries are keyed by the digest of the kernel's source,
flags and compiler, so a kernel the mutation changed is built afresh and an unchanged one is not
(``harness.bench.mutate``: 150 graphs on crucible-cpp took 32 s on a cold cache, 8 s on a warm one).

``MutantTask`` is what the single-host pool (``harness.pool.WorkerPool``) or the cluster executor
runs: the child's campaign stops at the first failure the baseline did not have; for a fuzz
campaign that failure's graph is then run on the *unmutated* compiler in the worker itself, and
only when that passes is the mutant killed (a failure the unmutated compiler shares is a
pre-existing bug the baseline happened to miss: its signature is excluded and the campaign goes on
with what is left of the budget). A child that hangs past its deadline or dies from a signal
kills the mutant too (``timeout``/``crash``), as does a mutant the package cannot even be imported
with (the pristine copy's baseline ran, so that is the mutation's doing).

Verdicts travel as a ``Result``: ``pass`` = survived, ``fail_run`` = killed by a failure (its
signature in ``error``), ``timeout``/``crash`` = killed by a hang or a death, ``fail_compile`` =
killed: the campaign could not run; a ``crash`` in phase ``harness`` is an error of the harness,
counted nowhere. ``cases`` = graphs the campaign ran; ``build_s`` = seconds copying the sources,
``load_s`` = the child's imports, ``run_s`` = campaign seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.pool import WorkerContext
from harness.result import Result
from harness.status import Phase, Status

MAX_ROUNDS = 3  # campaigns per mutant: each pre-existing failure found costs one more
START_S = 120.0  # allowance for a child's start (imports) on top of its campaign budget


@dataclass(frozen=True)
class Edit:
    """The mutation: bytes ``start:end`` of ``file`` (relative to the package's parent) replaced."""

    file: str
    start: int
    end: int
    replacement: str


@dataclass(frozen=True)
class ChildRun:
    """How a child campaign ended."""

    status: str  # "ok", "timeout", "crash", "error"
    found: list = field(default_factory=list)
    graphs: int | None = None
    lines: dict | None = None
    calls: dict | None = None  # first lines of the code objects that ran (harness.mutate.tracing)
    line_ops: dict | None = None  # {file: {line: the ops that reach it}} (``attribute``)
    copy_s: float = 0.0
    import_s: float = 0.0
    campaign_s: float = 0.0
    log: str = ""


def package_location(package: str) -> tuple[str, str]:
    """(the package's directory or module file, the directory its top-level name is resolved in
    relative to: the parent of the top-level package) for an importable name, without importing it
    where the finder allows (a subpackage imports its parents)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"--package {package}: cannot be found ({exc}); give an importable package name") from None
    if spec is None or not spec.origin and not spec.submodule_search_locations:
        raise ValueError(f"--package {package}: no such importable package or module; check the name and PYTHONPATH")
    if spec.submodule_search_locations:
        location = str(Path(list(spec.submodule_search_locations)[0]).resolve())
    else:
        location = str(Path(spec.origin).resolve())
        if not location.endswith(".py"):
            raise ValueError(f"--package {package}: {location} is not Python source; only .py files are mutated")
    parent = Path(location)
    for _ in package.split("."):
        parent = parent.parent
    return location, str(parent)


def _die_with_parent() -> None:
    """In the child before it runs: killed when the worker that started it dies (an interrupted or
    timed-out analysis kills its workers; their children must not fuzz on for minutes). Linux only;
    elsewhere the child ends with its own deadline."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_child(settings: dict, package: str, location: str, base: str, edit: Edit | None, timeout_s: float,
              workdir: str | None = None, seed_cache: str | None = None, keep_cache: str | None = None) -> ChildRun:
    """Copy the package (``location``, under ``base``), apply ``edit``, run the campaign ``settings``
    in a child process within ``timeout_s``; the working directory is removed afterwards.

    ``seed_cache``: a kernel cache the child's own starts as a copy of (when it exists on this
    machine); ``keep_cache``: where the child's cache is moved when it finished (the baseline's)."""
    work = tempfile.mkdtemp(prefix="crucible-mutant-", dir=workdir)
    try:
        started = time.monotonic()
        cache = os.path.join(work, "cache")
        if seed_cache and os.path.isdir(seed_cache):
            shutil.copytree(seed_cache, cache, symlinks=True)
        root = os.path.join(work, "src")
        copy = os.path.join(root, os.path.relpath(location, base))
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        if os.path.isdir(location):
            shutil.copytree(location, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(location, copy)
        if edit is not None:
            path = os.path.join(root, edit.file)
            source = Path(path).read_bytes()
            Path(path).write_bytes(source[: edit.start] + edit.replacement.encode() + source[edit.end:])
        copy_s = time.monotonic() - started
        out = os.path.join(work, "out.json")
        settings = dict(settings, out=out, root=root, trace=copy if settings.get("trace") else None)
        spec = os.path.join(work, "settings.json")
        Path(spec).write_text(json.dumps(settings))
        env = dict(os.environ, CRUCIBLE_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path))
        env.pop("CRUCIBLE_TUNING_CACHE", None)  # under the mutant's cache root
        if "cuda_visible_devices" in settings:  # a CUDA target: the GPUs the pool's CPU worker hid
            if settings["cuda_visible_devices"] is None:
                env.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                env["CUDA_VISIBLE_DEVICES"] = settings["cuda_visible_devices"]
        from harness.mutate.child import BOOTSTRAP

        log_path = os.path.join(work, "child.log")
        with open(log_path, "wb") as log:
            process = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, root, package, spec], cwd=root, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_die_with_parent)
            try:
                code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                code = None
        tail = Path(log_path).read_text(errors="replace")[-4000:]
        if code is None:
            return ChildRun("timeout", copy_s=copy_s, log=tail)
        if code < 0:
            return ChildRun("crash", copy_s=copy_s, log=f"signal {-code}\n{tail}")
        if code != 0 or not os.path.exists(out):
            return ChildRun("error", copy_s=copy_s, log=tail)
        if keep_cache and os.path.isdir(cache):
            shutil.rmtree(keep_cache, ignore_errors=True)
            os.makedirs(os.path.dirname(keep_cache), exist_ok=True)
            shutil.move(cache, keep_cache)
        doc = json.loads(Path(out).read_text())
        return ChildRun("ok", doc["found"], doc["graphs"], doc["lines"], doc["calls"], doc.get("line_ops"), copy_s,
                        doc["import_s"], doc["campaign_s"], tail)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _not_unmutated_failure(graph: str, signature: str, target: str, worker: WorkerContext) -> bool:
    """Whether the mutant's failure (``signature``, on ``graph``) is its own: the unmutated compiler
    (this worker's) passes the graph, or fails it another way (another status or error kind; the op
    charged is left out, as a plain run does not localize the way the campaign does). A graph that
    met a known bug of the unmutated compiler, ValueError, while the mutant's template raised
    NameError, was taken for that bug and the mutant survived (templates/attention.py:95, 2,282 graphs)."""
    from harness.fuzz.campaign import error_kind
    from harness.fuzz.graph import FuzzGraph
    from harness.fuzz.tasks import GraphTask
    from harness.pool import run_task
    from harness.targets import parse_target

    result = run_task(GraphTask.of(FuzzGraph.from_json(graph)), parse_target(target), worker.progress)
    if result.status.passed:
        return True
    status, _, kind = (part.strip() for part in signature.split(" | ", 2))
    return status != f"{result.status}" or kind != error_kind(result)


@dataclass(frozen=True)
class MutantTask:
    """Run one mutant's campaign (``settings``: campaign, target, seed, budget) and judge it."""

    name: str
    package: str
    location: str
    base: str
    edit: Edit
    settings: dict
    exclude: tuple[str, ...] = ()
    timeout_s: float = 600.0
    workdir: str | None = None
    seed_cache: str | None = None  # the baseline's kernel cache, copied as this mutant's own (--cache warm)
    imports: tuple[str, ...] = ()

    def __call__(self, worker: WorkerContext) -> Result:
        target = self.settings["target"]
        exclude, graphs, copy_s, import_s, campaign_s = set(self.exclude), 0, 0.0, 0.0, 0.0
        seconds = self.settings.get("seconds")
        verdict = dict(status=Status.PASS, error=None)
        for _ in range(MAX_ROUNDS):
            settings = dict(self.settings, exclude=sorted(exclude))
            if seconds is not None:
                settings["seconds"] = seconds - campaign_s
            run = run_child(settings, self.package, self.location, self.base, self.edit, self.timeout_s, self.workdir,
                            self.seed_cache)
            copy_s, import_s, campaign_s = copy_s + run.copy_s, import_s + run.import_s, campaign_s + run.campaign_s
            graphs += run.graphs or 0
            if run.status != "ok":
                status = {"timeout": Status.TIMEOUT, "crash": Status.CRASH}.get(run.status, Status.FAIL_COMPILE)
                first = (run.log.strip().splitlines() or ["no output"])[-1][:200]
                verdict = dict(status=status, error=f"campaign {run.status}: {first}", error_detail=run.log)
                break
            if not run.found:
                break
            found = run.found[0]
            if found["graph"] is None or self.settings["campaign"] != "fuzz" or \
                    _not_unmutated_failure(found["graph"], found["signature"], target, worker):
                verdict = dict(status=Status.FAIL_RUN, error=f"killed by {found['signature']}", repro=found["graph"])
                break
            exclude.add(found["signature"])  # fails without the mutation too: not this mutant's doing
            if seconds is not None and seconds - campaign_s < 0.1 * seconds:
                break
        return Result(name=self.name, target=target, phase=Phase.RUN.value, cases=graphs, build_s=copy_s,
                      load_s=import_s, run_s=campaign_s, **verdict)
