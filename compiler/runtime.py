"""Runtime: load rendered kernels and launch them.

Triton kernel sources are written to the cache directory and imported as
modules (Triton reads a kernel's source through ``inspect``, so it must live in
a real file). Every launch goes through ``KernelLauncher``, which knows each
argument's buffer; on the CPU it launches the kernel in Triton's interpreter
(``compiler.interpreter``, where the simulator's checks hook in). On
the GPU (launch configs tuned when ``compiler.tuning`` says) its first launch
goes through Triton's JIT dispatch and binds the compiled kernel; later launches call torch's static CUDA launcher on it
(``bind_static_launch``) or, where that cannot launch it, Triton's driver
launcher (``bind_launch``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import torch

from compiler import config, tuning_cache
from compiler.bucket_tuning import BucketTuner
from compiler.cache_files import report_rebuilt, write_atomic
from compiler.interpreter import interpreted
from compiler.launch_binding import (  # noqa: F401  (re-exported: the launcher API)
    ALIGNMENT, _aligned, bind_launch, bind_static_launch, loaded_function, static_launch_refusal)
from compiler.codegen.base import RenderedKernel
from compiler.tuning import restored

T = TypeVar("T")
R = TypeVar("R")

_MODULES: dict[str, Any] = {}
_MODULES_LOCK = threading.Lock()  # kernels load on several threads; identical ones share a module
# launch config picked for each content-named kernel (the same source: the same best config)
_TUNED: dict[str, tuple[tuple[int, ...], dict]] = {}
# seconds this process has spent timing launch configs (part of first calls; benchmarks report it)
TUNING_SECONDS = [0.0]


def triton_source_dir() -> Path:
    """Where generated Triton modules are written before import: ``<cache root>/triton``, with
    the ownership check the C++ cache has (importing a module runs it)."""
    return config.private_cache_dir("triton")


def load_module(source: str, stem: str) -> Any:
    """Import ``source`` as a module from a content-addressed file (cached per process)."""
    with _MODULES_LOCK:
        return _load_module_locked(source, stem)


def _load_module_locked(source: str, stem: str) -> Any:
    data = source.encode()
    key = f"crucible_gen_{stem}_{hashlib.sha256(data).hexdigest()[:20]}"
    if key in _MODULES:
        return _MODULES[key]
    path = triton_source_dir() / f"{key}.py"
    try:
        on_disk: bytes | None = path.read_bytes()
    except FileNotFoundError:
        on_disk = None
    if on_disk != data:  # the name is the digest of what the file must hold
        if on_disk is not None:
            report_rebuilt("the Triton kernel module", path)
        write_atomic(path, data)  # concurrent processes never see half a file
    _MODULES[key] = _exec_source(key, path, source)
    return _MODULES[key]


def _exec_source(name: str, path: Path, source: str) -> Any:
    """``source`` run as the module ``name`` whose file is ``path`` (Triton reads a kernel's source from
    there through ``inspect``). Compiled from the text, never from a cached ``.pyc``: Python's import
    trusts one whose header matches the file's time and size, and a truncated one then fails every
    later load ("marshal data too short")."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102  (our own generated code)
    return module


def parallel_map(fn: Callable[[T], R], items: Sequence[T], threads: int | None = None) -> list[R]:
    """``[fn(x) for x in items]`` on up to ``threads`` threads (``config.compile_threads()``).

    For building kernels: g++ and Triton's compiler (its LLVM passes, ptxas) run without the GIL.
    Results keep the order of ``items``; the first failing item's exception is raised, as a
    loop would raise it."""
    threads = config.compile_threads() if threads is None else threads
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="crucible-build") as pool:
        futures = [pool.submit(fn, x) for x in items]
        return [f.result() for f in futures]


_BUILD_POOL: list[Any] = []  # the process pool of ``build_processes``, once started
_BUILD_POOL_LOCK = threading.Lock()


def build_processes() -> Any:
    """The pool of processes Triton kernels are built in (``CRUCIBLE_COMPILE_PROCESSES``), started on
    first use and kept for the process's life; None: build on threads of this process (the default:
    ``harness.bench.build_time`` measured 2 threads at 1.6-1.9x serial with Triton 3.6 and 3.8, and 2
    processes no faster, see harness/bench/RESULTS.md). Spawned, not forked: the parent has CUDA. The
    workers start (torch, Triton's driver) at once, in the background: the pipeline asks for the pool
    before it lowers a GPU graph. They do not import the parent's ``__main__`` (a spawned process
    normally does: a script that compiles at import, without a main guard, would run again in each)."""
    processes = config.compile_processes()
    if processes < 1:
        return None
    with _BUILD_POOL_LOCK:
        if not _BUILD_POOL:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
            # a spawning pool starts a process per submit while none is idle: all of them start here,
            # and a stand-in ``__main__`` (no file, no spec) keeps the parent's out of their start-up
            main = sys.modules["__main__"]
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                for _ in range(processes):
                    pool.submit(_start_build_process)
            finally:
                sys.modules["__main__"] = main
            _BUILD_POOL.append(pool)
        return _BUILD_POOL[0]


def _start_build_process() -> None:
    import triton

    triton.runtime.driver.active.get_current_target()


def _triton_cache_dir() -> str:
    import triton

    return str(triton.knobs.cache.dir)


def build_in_process(path: str, symbol: str, dtypes: list[str], grid: tuple, meta: dict, cache_dir: str) -> None:
    """Build one launch config of the kernel ``symbol`` in ``path`` into Triton's cache ``cache_dir``
    (the parent's, which may change between graphs); runs in a ``build_processes`` worker."""
    import triton

    triton.knobs.cache.dir = cache_dir
    name = Path(path).stem
    module = sys.modules.get(name) or _exec_source(name, Path(path), Path(path).read_text())
    getattr(module, symbol).warmup(*[getattr(torch, d) for d in dtypes], grid=grid, **meta)


# Triton options every GPU kernel is built with. Triton links libdevice in flush-to-zero mode by
# default; ATen's CUDA kernels (nvcc without fast math) keep subnormals, so ours do too.
BUILD_OPTIONS = {"enable_reflect_ftz": False}


class KernelLauncher:
    """A loaded kernel plus its launch facts; ``launcher(*tensors)`` runs it.

    When the renderer offered alternative launch configs (compiled GPU kernels),
    the first call times each one on the real arguments and keeps the fastest.
    Timing runs a kernel many times: the buffers it both reads and writes (an input
    mutation kept in the graph, an update in place: ``rewritten``) are put back after
    timing, so the launch that follows applies the update once."""

    def __init__(self, rendered: RenderedKernel, interpret: bool) -> None:
        self.rendered = rendered
        self.interpret = interpret
        symbol = rendered.symbol or rendered.name
        module = load_module(rendered.source, symbol)
        self.path = module.__file__
        fn = getattr(module, symbol)
        if interpret:
            fn = interpreted(fn)
        self.fn = fn
        self.configs = [(rendered.grid, dict(rendered.meta))] + [(g, dict(m)) for g, m in rendered.alternatives]
        for _, meta in self.configs:
            if interpret:
                meta.pop("num_warps", None)
                meta.pop("num_stages", None)  # template kernels' pipelining depth
            else:
                meta.update(BUILD_OPTIONS)
        self.symbol = symbol
        self.grid, self.meta = _TUNED.get(symbol, self.configs[0])
        self.tuned = len(self.configs) == 1 or symbol in _TUNED
        self.bound: Callable[..., None] | None = None
        self.untimed = False  # running the first candidate without timing the others (``defer_tuning``)
        self.launch_path = "dispatch"  # then "static" or "triton": what ``bind`` bound (benchmarks print it)
        # argument positions whose alignment a launch checks: every one, unless the loader says which
        # buffers are the wrapper's own allocations (always 16-byte aligned), see ``check_alignment``
        self.checked: tuple[int, ...] = tuple(range(len(rendered.args)))
        # a size-generic kernel: its launch config from each call's sizes (``triton_tiles.SizeLaunch``)
        self.size_launch = rendered.size_launch
        self.numels = rendered.size_launch.numels() if rendered.size_launch is not None else None
        self.buckets = BucketTuner(self) if rendered.size_launch is not None else None  # its configs per size bucket
        # argument positions the kernel reads and writes, restored after timing (set by the load pass)
        self.rewritten: tuple[int, ...] = ()

    def check_alignment(self, positions: Sequence[int]) -> None:
        """Check only these argument positions (the graph's inputs and extern results) before a bound
        launch; the others are buffers the wrapper allocates."""
        self.checked = tuple(positions)
        self.bound = None

    def precompile_jobs(self, arg_dtypes: Sequence[torch.dtype]) -> list[Callable[[], None]]:
        """One job per launch config that builds it ahead of the first launch (GPU only), so a
        graph's builds run in parallel instead of one by one inside its first call. Built for
        16-byte aligned arguments, as the wrapper allocates them (a launch with other alignments
        builds its own variant). A config that fails to build is left to the first launch,
        which reports the error (or to tuning, which skips it)."""
        return self.build_jobs(arg_dtypes, self.configs_to_build())

    def configs_to_build(self) -> list[tuple[tuple, dict]]:
        """What a launch needs built: the config in use once it is decided, else every candidate."""
        return [(self.grid, self.meta)] if self.tuned else self.configs

    def build_jobs(self, arg_dtypes: Sequence[torch.dtype], configs: Sequence[tuple[tuple, dict]]) -> list[Callable[[], None]]:
        """One job per config of ``configs`` that builds it (see ``precompile_jobs``)."""
        if self.interpret:
            return []
        pool = build_processes()

        def build(grid: tuple, meta: dict) -> None:
            try:
                if pool is not None:  # built there into Triton's disk cache; the warmup here loads it
                    pool.submit(build_in_process, self.path, self.symbol, [str(d).removeprefix("torch.")
                                for d in arg_dtypes], grid, meta, _triton_cache_dir()).result()
                self.fn.warmup(*arg_dtypes, grid=grid, **meta)
            except Exception:  # noqa: BLE001, S110  (see the docstring)
                pass

        return [lambda grid=grid, meta=meta: build(grid, meta) for grid, meta in configs]

    def defer_tuning(self, mode: str) -> list[tuple[tuple, dict]]:
        """Before the load pass: the candidates to build later (``compiler.tuning``; ``mode`` is the
        ``tuning`` option). A config known from this process or the tuning cache is taken now, in
        every mode; with ``"off"`` launches run the first candidate (the renderer's best guess)
        untimed, with ``"deferred"`` as well until ``retune``. Returns the configs ``"deferred"``
        builds later."""
        if self.buckets is not None:  # a size-generic kernel tunes per size bucket as it meets them
            self.buckets.mode = mode
        if self.tuned or self.interpret:
            return []
        if self.symbol in _TUNED or self.cached_config():
            self.grid, self.meta = _TUNED.setdefault(self.symbol, (self.grid, self.meta))
            self.tuned = True
            return []
        if mode == "first_call":
            return []
        self.tuned = self.untimed = True  # one candidate, timed by nothing (until ``retune``)
        if mode != "deferred":
            return []
        return self.configs[1:]

    def retune(self) -> None:
        """The deferred candidates are built: the next launch times them (or takes the config an
        identical kernel was tuned to meanwhile) and rebinds."""
        self.tuned = self.untimed = False
        self.bound = None

    def __call__(self, *args: Any) -> None:
        if self.bound is not None:
            self.bound(*args)
            return
        if self.buckets is not None:  # buffers, then the size arguments
            self.buckets(args)
            return
        self.dispatch(*args)

    def dispatch(self, *args: Any) -> None:
        """A launch through Triton's JIT dispatch (it binds the arguments, computes their
        specialization key and looks the compiled kernel up); the first one on the GPU binds the
        compiled kernel, so later launches skip all that (``BoundLaunch``). A first candidate run
        untimed (``defer_tuning``) that fails to build or launch (out of resources on this GPU) has
        every candidate timed at once instead, which skips the ones that fail."""
        if self.untimed:
            try:
                self._dispatch(*args)
                return
            except Exception:  # noqa: BLE001  (tuning below raises it again if no candidate runs)
                self.untimed, self.tuned, self.bound = False, False, None
        self._dispatch(*args)

    def _dispatch(self, *args: Any) -> None:
        if not self.tuned:
            self.tune(args)
        if self.interpret:
            self.fn[self.grid](*args, **self.meta)
            return
        if self.bound is None and self.static_ok(args):
            # compiled (or found in Triton's cache) without a launch, so Triton's launcher is not built
            kernel = self.fn.run(*args, grid=self.grid, warmup=True, **self.meta)
            if kernel is not None:
                self.bind(kernel, args)
                if self.bound is not None and self.launch_path == "static":
                    self.bound(*args)
                    return
        kernel = self.fn.run(*args, grid=self.grid, warmup=False, **self.meta)
        if self.bound is None and kernel is not None and all(_aligned(a) for a in args):
            self.bind(kernel, args)

    @staticmethod
    def static_ok(args: tuple) -> bool:
        """Whether a launch on ``args`` may go through torch's static launcher (CUDA tensors, aligned)."""
        return bool(args) and config.static_launch() and all(isinstance(a, torch.Tensor) and a.is_cuda and _aligned(a)
                                              for a in args)

    def static_config_launch(self, args: tuple, grid: tuple, meta: dict) -> Callable[[], None] | None:
        """One config launched on ``args`` through torch's static launcher, for timing it without
        building Triton's launcher (None where that launcher cannot run it: Triton's path then)."""
        if not self.static_ok(args):
            return None
        try:
            kernel = self.fn.run(*args, grid=grid, warmup=True, **meta)
            bound = None if kernel is None else bind_static_launch(
                kernel, self.fn.arg_names, grid, len(args), (), lambda *a: self.fn[grid](*a, **meta),
                torch.cuda.current_device())
        except Exception:  # noqa: BLE001  (Triton's path times it, or reports why it cannot)
            return None
        return None if bound is None else (lambda: bound(*args))

    def bind(self, kernel: Any, args: tuple) -> None:
        """Bind later launches to torch's static launcher where it can launch this kernel (and
        ``CRUCIBLE_STATIC_LAUNCH`` allows it), else to Triton's driver launcher."""
        device = torch.cuda.current_device()
        if config.static_launch() and all(isinstance(a, torch.Tensor) for a in args):
            self.bound = bind_static_launch(kernel, self.fn.arg_names, self.grid, len(args), self.checked,
                                            self.dispatch, device)
            self.launch_path = "static" if self.bound is not None else self.launch_path
        if self.bound is None:
            self.bound = bind_launch(kernel, self.fn.arg_names, self.grid, self.meta, len(args),
                                     self.checked, self.dispatch, device)
            self.launch_path = "triton" if self.bound is not None else "dispatch"

    @staticmethod
    def count_tuning(seconds: float) -> None:
        TUNING_SECONDS[0] += seconds

    def _time_configs(self, args: tuple, timings: list[tuple[float, int]]) -> None:
        from triton.testing import do_bench

        for index, (grid, meta) in enumerate(self.configs):
            try:
                static = self.static_config_launch(args, grid, meta)

                def launch(grid=grid, meta=meta, static=static) -> None:
                    if static is not None:
                        static()
                    else:
                        self.fn[grid](*args, **meta)

                # 1 + 4 ms per config: every kernel of a graph is tuned in its first call (with 3 + 10
                # ms, tuning was 10 s of deit3_large's compile on the H200)
                timings.append((do_bench(launch, warmup=1, rep=4, return_mode="median"), index))
            except Exception:  # noqa: BLE001, S112  (a config that does not compile, e.g. out of resources)
                continue

    def tune(self, args: tuple) -> None:
        if self.symbol in _TUNED:
            # an identical kernel (same source: same name) tuned since this one was loaded, such as
            # another layer's copy in the same graph: every launcher of a graph loads before any tunes
            self.grid, self.meta = _TUNED[self.symbol]
            self.tuned = True
            return
        if self.cached_config():
            return
        key = self.tuning_key()
        started = time.perf_counter()
        timings = []
        with restored(args, self.rewritten):
            self._time_configs(args, timings)
        if timings:
            ms, index = min(timings)
            self.grid, self.meta = _TUNED[self.symbol] = self.configs[index]
            if key:
                timed = {i: t for t, i in timings}
                tuning_cache.store(key, index, str(self.meta), ms * 1e3,
                                   [(str(m), timed[i] * 1e3 if i in timed else None)
                                    for i, (_, m) in enumerate(self.configs)], self.rendered.work)
        self.tuned = True
        TUNING_SECONDS[0] += time.perf_counter() - started
        if config.debug_level() >= 1:
            table = ", ".join(f"{self.configs[i][1]} {t * 1e3:.1f}us" for t, i in timings)
            print(f"[crucible] {self.rendered.name} launch configs: {table}; picked {self.meta}", file=sys.stderr)

    def cached_config(self) -> bool:
        """Take the config an earlier process picked on this GPU and Triton version (the tuning
        cache), if there is one."""
        key = self.tuning_key()
        cached = tuning_cache.lookup(key, len(self.configs)) if key else None
        if cached is None:
            return False
        self.grid, self.meta = _TUNED[self.symbol] = self.configs[cached]
        self.tuned = True
        if config.debug_level() >= 1:
            print(f"[crucible] {self.rendered.name} launch config from the tuning cache: {self.meta}", file=sys.stderr)
        return True

    def tuning_key(self) -> str:
        """The tuning-cache key, qualified by the GPU and the Triton version: the renderer's (a
        template's family, dtype, shape bucket and candidates) or else the kernel's own, by its
        content-named symbol and the number of candidate configs."""
        import triton

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
        own = self.rendered.tuning_key or f"kernel {self.symbol} ({len(self.configs)} configs)"
        return tuning_cache.full_key(own, name, triton.__version__)


class CppLauncher:
    """A built and loaded C++ kernel; ``launcher(*tensors)`` calls it on their data pointers.

    Tensors may be non-contiguous views: the kernel indexes with the strides it was
    compiled for, relative to each tensor's ``data_ptr``. The C++ call releases the GIL.
    """

    def __init__(self, rendered: RenderedKernel) -> None:
        import ctypes

        from compiler import cpp_build

        self.rendered = rendered
        # by symbol: kernels sharing a source (``compiler.kernel_sharing``) share one library
        self.library = cpp_build.build_library(rendered.source, rendered.symbol or rendered.name,
                                               extra_flags=EXTRA_FLAGS)
        symbol = rendered.symbol or cpp_build.sanitize_identifier(rendered.name)
        self.fn = self.library.function(symbol, [ctypes.c_void_p] * len(rendered.args)
                                        + [ctypes.c_int64] * len(rendered.sizes))
        self.buffers = len(rendered.args)
        divides = any(h in rendered.source for h in ("crucible::div_trunc", "crucible::mod_trunc",
                                                      "crucible::div_floor"))
        self.take_zero_division = (self.library.function("crucible_take_zero_division", [], ctypes.c_int)
                                   if divides else None)

    def __call__(self, *args: Any) -> None:
        n = self.buffers  # tensors, then a size-generic kernel's sizes (ints)
        self.fn(*[t.data_ptr() for t in args[:n]], *args[n:])
        if self.take_zero_division is not None and self.take_zero_division():
            raise RuntimeError(f"ZeroDivisionError (integer division by zero in {self.rendered.name})")


# Integer overflow wraps like ATen's through the prelude's wrap_* helpers, not -fwrapv (which
# blocks vectorizing strided loads, see cpp_prelude.h). -fno-trapping-math: floating-point
# exceptions are not observable from torch, and without it g++ will not vectorize floor/ceil/
# float-int conversions (so neither exp_f32); values are unchanged (unlike -ffast-math, it allows
# no reassociation and keeps NaN/inf/-0.0 semantics), but for one fold: GCC 12 turns (float)(int)x
# into trunc(x), -0.0 for x in (-1, 0), so the renderer writes that round trip as the prelude's
# int_round_trip (harness/FINDINGS.md: 'GCC 12: a float-int-float round trip').
EXTRA_FLAGS = ("-fno-trapping-math",)


# How the kernels of each source language load, keyed by ``RenderedKernel.codegen`` (the language a
# renderer writes: a renderer registered under another name, e.g. a narrower C++ one, still writes
# "cpp"). Renderers say what they write; only the runtime knows how to build and launch it.
LOADERS: dict[str, Callable[[RenderedKernel, torch.device], KernelLauncher | CppLauncher]] = {
    "triton": lambda rendered, device: KernelLauncher(rendered, interpret=device.type != "cuda"),
    "cpp": lambda rendered, device: CppLauncher(rendered),
}


def launcher_for(rendered: RenderedKernel, device: torch.device) -> KernelLauncher | CppLauncher:
    """The launcher of a rendered kernel: the runtime's one way to load and call kernels."""
    load = LOADERS.get(rendered.codegen)
    if load is None:
        raise ValueError(f"kernel {rendered.name}: no loader for source language {rendered.codegen!r} "
                         f"(the runtime loads {', '.join(LOADERS)}; add one to compiler.runtime.LOADERS)")
    return load(rendered, device)
