"""Launch configs of size-generic Triton kernels, tuned per size bucket (dynamic shapes, stage 2).

A kernel compiled for symbolic sizes takes its sizes as arguments, and each launch computes the
numbers its launch depends on (``xnumel`` and ``rnumel`` of a pointwise or reduction kernel,
``triton_tiles.SizeLaunch``; a template's batch, M, N and K or its attention rows, keys and head
dims, ``templates.launch``) and their candidate configs. The candidates depend on the sizes (a
persistent reduction's RBLOCK is its row's next power of two, a GEMM's tiles its M), so they are
tuned per **bucket**: the next power of two of each of those numbers, as the tuning cache buckets a
static template's rows. Per bucket, by the ``tuning`` option:

* ``"off"``, interpreted kernels, a bucket with one candidate, and launches inside a CUDA-graph
  capture (nothing can be timed there): the first candidate, the tile rule's best guess, untimed.
* ``"first_call"``: the first launch in a bucket builds and times every candidate on its real
  arguments and keeps the fastest.
* ``"deferred"`` (the default): the first launch in a bucket runs the first candidate and queues the
  others' builds on the background builder (``compiler.tuning``); the first launch in that bucket
  after they are built times them, so a new size never waits for builds.

A pick is shared by every launcher of the same kernel in the process and kept in the tuning cache
(``compiler.tuning_cache``) under the kernel's key and the bucket, so a later process starts tuned.

Once a bucket's pick is final, the launcher binds the compiled kernel at those exact size arguments
(``launch_binding.bind_launch``: Triton's driver launcher with the grid and block sizes fixed), so a
size met again skips Triton's JIT dispatch (its argument binding, specialization key and cache
lookup, ~11 us a launch on the H200), as a static kernel's launches do. The key is the size
arguments themselves, not the bucket: Triton specializes integer arguments (1, multiples of 16), so
a compiled kernel belongs to its sizes.
The timed launches run the kernel on the launch's own arguments; the buffers it reads and writes
(``KernelLauncher.rewritten``) are put back after timing, so the launch that follows updates them once.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import torch

from compiler import config, tuning_cache
from compiler.tuning import restored
from compiler.templates.tiles import bucket  # the tuning cache's size bucket, as a static template's

# (kernel symbol, bucket of each launch number) -> index of the picked candidate, for every launcher in the process
_PICKS: dict[tuple, int] = {}
SEEN_SIZES = 256  # launch numbers a launcher remembers the candidates of (then it starts over)


class BucketTuner:
    """The per-bucket picks of one launcher (a ``runtime.KernelLauncher`` with a ``size_launch``)."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self.mode = "off"  # the tuning option; set by the launcher's ``defer_tuning``
        self.built: dict[tuple, threading.Event] = {}  # deferred buckets: their builds are done
        # launch numbers -> (candidates, bucket key): sizes recur from call to call, and building the
        # candidates took 2-6 us a launch (2-core CPU), on the host path of every size-generic kernel
        self.seen: dict[tuple, tuple[list, tuple]] = {}
        self.bound: dict[tuple, Any] = {}  # size arguments -> the launch bound at them (module docstring)
        self.buffers = len(launcher.rendered.args)

    def __call__(self, args: tuple) -> None:
        """Launch on ``args``: buffers, then the size arguments."""
        bound = self.bound.get(args[self.buffers:])
        if bound is not None:
            bound(*args)
            return
        self.launch(args, *self.launcher.numels(*args[self.buffers:]))

    def launch(self, args: tuple, *numbers: int) -> None:
        """Launch on ``args``; ``numbers``: what the launch depends on, computed from its sizes."""
        known = self.seen.get(numbers)
        if known is None:
            if len(self.seen) >= SEEN_SIZES:
                self.seen.clear()
            known = self.seen[numbers] = (self.launcher.size_launch.candidates(*numbers),
                                          (self.launcher.symbol, *(bucket(n) for n in numbers)))
        configs, key = known
        index = _PICKS.get(key)
        final = index is not None
        if index is None:
            index = self.decide(key, configs, args)
            final = key in _PICKS or self.first_for_good(configs)
        grid, meta = configs[index if index < len(configs) else 0]
        if final and self.bindable(args):
            self.bind(args[self.buffers:], args, grid, meta)
        else:
            self.launcher.fn[grid](*args, **meta)

    def bindable(self, args: tuple) -> bool:
        tensors = [a for a in args[:self.buffers] if isinstance(a, torch.Tensor)]
        return not self.launcher.interpret and bool(tensors) and all(t.is_cuda for t in tensors)

    def bind(self, sizes: tuple, args: tuple, grid: tuple, meta: dict) -> None:
        """Launch through the JIT dispatch, and bind its compiled kernel for the launches at ``sizes``."""
        from compiler.launch_binding import bind_launch

        fn = self.launcher.fn
        kernel = fn.run(*args, grid=grid, warmup=False, **meta)
        if kernel is None:
            return
        bound = bind_launch(kernel, fn.arg_names, grid, meta, len(args), self.launcher.checked,
                            lambda *a: fn[grid](*a, **meta), torch.cuda.current_device())
        if bound is not None:
            if len(self.bound) >= SEEN_SIZES:
                self.bound.clear()
            self.bound[sizes] = bound

    def first_for_good(self, configs: list) -> bool:
        """Whether a bucket runs its first candidate untimed, never to be tuned."""
        return self.launcher.interpret or len(configs) == 1 or self.mode == "off"

    def decide(self, key: tuple, configs: list, args: tuple) -> int:
        """The candidate for a bucket with no pick yet (recorded once it is final)."""
        if self.first_for_good(configs) or _capturing():
            return 0
        cached = tuning_cache.lookup(self.cache_key(key, configs), len(configs))
        if cached is not None:
            _PICKS[key] = cached
            return cached
        if self.mode == "deferred":
            built = self.built.get(key[1:])
            if built is None:
                self.built[key[1:]] = self.queue_builds(configs[1:], args)
                return 0
            if not built.is_set():
                return 0
        _PICKS[key] = index = self.time(key, configs, args)
        return index

    def queue_builds(self, configs: list, args: tuple) -> threading.Event:
        from compiler.tuning import _builder

        done, left = threading.Event(), [len(configs)]
        lock = threading.Lock()
        fn = self.launcher.fn
        # built for dtypes, not the tensors (the queue would keep them alive), with aligned pointers as
        # the wrapper allocates them; a launch that specializes otherwise builds its own variant
        signature = [a.dtype if isinstance(a, torch.Tensor) else a for a in args]

        def build(grid: tuple, meta: dict) -> None:
            try:
                fn.warmup(*signature, grid=grid, **meta)
            except Exception:  # noqa: BLE001, S110  (timing skips a config that does not build)
                pass
            finally:
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()

        _builder().submit([lambda grid=grid, meta=meta: build(grid, meta) for grid, meta in configs])
        return done

    def time(self, key: tuple, configs: list, args: tuple) -> int:
        from triton.testing import do_bench

        started = time.perf_counter()
        timings = []
        with restored(args, self.launcher.rewritten):
            for index, (grid, meta) in enumerate(configs):
                try:
                    timings.append((do_bench(lambda grid=grid, meta=meta: self.launcher.fn[grid](*args, **meta),
                                             warmup=1, rep=4, return_mode="median"), index))
                except Exception:  # noqa: BLE001, S112  (a config that does not compile, e.g. out of resources)
                    continue
        self.launcher.count_tuning(time.perf_counter() - started)
        if not timings:
            return 0
        ms, index = min(timings)
        timed = {i: t for t, i in timings}
        tuning_cache.store(self.cache_key(key, configs), index, str(configs[index][1]), ms * 1e3,
                           [(str(m), timed[i] * 1e3 if i in timed else None) for i, (_, m) in enumerate(configs)])
        if config.debug_level() >= 1:
            table = ", ".join(f"{configs[i][1]} {t * 1e3:.1f}us" for t, i in timings)
            print(f"[crucible] {self.launcher.rendered.name} bucket {_name(key)} launch configs: {table}; "
                  f"picked {configs[index][1]}", file=sys.stderr)
        return index

    def cache_key(self, key: tuple, configs: list) -> str:
        return f"{self.launcher.tuning_key()} bucket {_name(key)} ({len(configs)} configs)"


def _name(key: tuple) -> str:
    return "x".join(str(b) for b in key[1:])


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
