"""When a GPU graph's launch configs are built and tuned (the ``tuning`` backend option).

A Triton kernel with several candidate launch configs (``RenderedKernel.alternatives``) is timed on
its real arguments and keeps the fastest (``KernelLauncher.tune``). Building every candidate before
the first call, and timing them in it, was most of the cold compile: the Triton builds of the load
pass are 60-80% of a benchmark model's first call. So by default the first call waits only for
one candidate per kernel:

* ``"deferred"`` (the default): the load pass builds one config per kernel, the renderer's best
  guess; the other candidates are built on background threads (``config.compile_threads()``) from the end of the graph's first
  call, and the graph's first call after they are all built times them on its real arguments (as
  the first call did before) and binds the fastest. Until then the graph runs the ones built
  first. A CUDA graph is captured only after that tuning (its capture waits for the builds).
  ``finish_tuning()`` waits for the background builds: a benchmark calls it before timing
  steady-state latency, so the builds do not compete with the timed calls for the host.
* ``"first_call"``: every candidate is built in the load pass and timed in the first call.
* ``"off"``: the first candidate (the renderer's best guess) only, never timed (fastest compile;
  for one-shot runs such as a fuzz campaign on the GPU).

A first candidate that fails to build or launch on this GPU (out of resources) has every candidate
timed in that launch instead, skipping the ones that fail, as ``"first_call"`` would.

The renderer offers several candidates only where the benchmark models' tuning data left timing
them worth a build (``compiler.codegen.triton_tiles``): GEMM and attention templates and looped
reductions. Every other generated kernel has one config, so nothing of it is built after the first call.

A kernel whose config is already known (tuned earlier in this process, or in the tuning cache of
``compiler.tuning_cache``) builds that config only, in every mode. CPU graphs, interpreted kernels
and single-config kernels have nothing to tune.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from compiler import config

MODES = config.TUNING_MODES

Job = Callable[[], None]


class _Builder:
    """Threads building deferred launch configs in submission order. Pending builds are dropped
    when the interpreter exits (the running ones finish): a process that ends before its graphs
    are tuned does not wait for builds it will never use."""

    def __init__(self) -> None:
        self.pending: collections.deque[Job] = collections.deque()
        self.running = 0
        self.threads: list[threading.Thread] = []
        self.stopped = False
        self.changed = threading.Condition()
        register = getattr(threading, "_register_atexit", None)  # runs before non-daemon threads are joined
        if register is not None:
            register(self.stop)

    def submit(self, jobs: Sequence[Job]) -> None:
        with self.changed:
            if self.stopped:
                return
            self.pending.extend(jobs)
            wanted = min(config.compile_threads(), len(self.pending) + self.running)
            while len(self.threads) < wanted:
                thread = threading.Thread(target=self.work, name="crucible-tuning-build", daemon=False)
                self.threads.append(thread)
                thread.start()
            self.changed.notify_all()

    def work(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.pending or self.stopped)
                if self.stopped:
                    return
                job = self.pending.popleft()
                self.running += 1
            try:
                job()
            finally:
                with self.changed:
                    self.running -= 1
                    self.changed.notify_all()

    def wait(self, timeout: float | None) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: not self.pending and not self.running, timeout)

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.pending.clear()
            self.changed.notify_all()


_BUILDER: list[_Builder] = []
_BUILDER_LOCK = threading.Lock()


def _builder() -> _Builder:
    with _BUILDER_LOCK:
        if not _BUILDER:
            _BUILDER.append(_Builder())
        return _BUILDER[0]


def finish_tuning(timeout: float | None = None) -> bool:
    """Wait until every deferred launch-config build started so far is done (each graph then tunes
    in its next call); False if ``timeout`` seconds passed first."""
    return _builder().wait(timeout) if _BUILDER else True


class DeferredTuning:
    """One graph's deferred candidates: ``jobs`` build them in the background, from the end of the
    graph's first call (so they do not compete with it for the host); once all are built, the
    graph's next call (``before_call``) hands its ``launchers`` back to tuning."""

    def __init__(self, launchers: Sequence[Any], jobs: Sequence[Job], report: Any = None) -> None:
        self.launchers = list(launchers)  # each with ``retune()``: time its candidates at its next launch
        self.jobs = list(jobs)
        self.report = report  # a GraphReport: its ``deferred_tuning`` line says what is left, then that it ran
        self.note(f"{len(self.launchers)} kernels run their first launch config until {len(self.jobs)} other "
                  f"candidates are built (after the first call); then a call times them")
        self.left = len(self.jobs)
        self.lock = threading.Lock()
        self.built = threading.Event()
        self.started = False
        self.pending = bool(self.launchers)  # retune not yet applied
        if not self.jobs:
            self.built.set()

    def start(self) -> None:
        """Queue the builds (once)."""
        with self.lock:
            if self.started:
                return
            self.started = True
        if self.jobs:
            _builder().submit([self._counted(job) for job in self.jobs])

    def _counted(self, job: Job) -> Job:
        def run() -> None:
            try:
                job()
            finally:
                with self.lock:
                    self.left -= 1
                    if self.left == 0:
                        self.built.set()
        return run

    def before_call(self) -> None:
        """At the start of each call: once everything is built, the launchers tune in this call."""
        if self.pending and self.built.is_set():
            self.pending = False
            for launcher in self.launchers:
                launcher.retune()
            self.note(f"{len(self.launchers)} kernels' candidates built and timed (this graph's call "
                      f"after the builds)")

    def note(self, text: str) -> None:
        if self.report is not None:
            self.report.deferred_tuning = text

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for this graph's builds (a CUDA graph is captured after its kernels are tuned)."""
        self.start()
        return self.built.wait(timeout)


def tuned_call(call: Callable[[list], Any], tuning: DeferredTuning | None) -> Callable[[list], Any]:
    """``call`` (a wrapper's call function) checking, before each call, whether its graph's deferred
    candidates are built (one attribute read while they are not)."""
    if tuning is None or not tuning.pending:
        return call

    def run(args: list) -> Any:
        if not tuning.pending:
            return call(args)
        tuning.before_call()
        out = call(args)
        tuning.start()
        return out

    run.tuning = tuning  # type: ignore[attr-defined]  (the CUDA-graph runner waits on it)
    return run


@contextlib.contextmanager
def restored(args: Sequence[Any], positions: Sequence[int]) -> Iterator[None]:
    """The tensors of ``args`` at ``positions`` (what a kernel reads and writes) put back as they were
    when the block ends: timing launch configs runs the kernel many times, and an update in place
    (a running mean, a step counter kept in the graph) must apply once (GPU, crucible-triton: every
    mutation entry of the smoke tier was off by its repeated updates)."""
    saved = [(args[i], args[i].clone()) for i in positions if hasattr(args[i], "copy_")]
    try:
        yield
    finally:
        for tensor, value in saved:
            tensor.copy_(value)
