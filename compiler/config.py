"""Every option and environment variable of the compiler, in one place.

No other module of ``compiler/`` reads ``os.environ`` (``tests/test_hygiene.py`` checks it);
each variable has one function here, called when the value is needed (not cached at import,
so tests and harness workers can set a variable before the compile that uses it).

``docs/compiler.md`` documents them in three tables (backend options, environment variables, debug
levels); ``tests/test_docs.py`` checks those tables against this module: the options of
``Options``, the variables read here and ``DEBUG_LEVELS``. ``environment_problems()`` validates every
variable at once (the harness calls it before a run).

Backend options (``torch.compile(..., options={...})``): ``codegen`` ("triton" | "cpp";
default: the registry's default codegen for the graph's device, triton on CUDA tensors and cpp
on CPU tensors, see ``compiler.codegen.registry``), ``strict`` (raise on an
internal compiler error instead of falling back to eager for that graph), ``cudagraphs``
(replay CUDA graphs after a warm-up call; off by default), ``extern`` ("default" |
"none" | "all": which matmuls and attentions become generated template kernels, see
``compiler.templates``), ``fold_weights`` (inference graphs: fold batch norm into the convolution
or linear before it, from parameters and buffers, refolded when they change; and the matmul rewrites
of ``compiler.extern_passes``; on by default, see ``compiler.folding``), ``layout`` ("auto" |
"channels_last" | "contiguous": the layout of a convolution graph's buffers; "auto", the default,
runs GPU inference graphs channels-last where the measured cost rule of ``compiler.layout`` says it
pays, everything else contiguous).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

CODEGENS = ("triton", "cpp")
# "default": template or ATen per op by the measured rule of ``compiler.templates.policy``;
# "none": every supported matmul/attention is a generated template kernel (CUDA-free);
# "all": every one runs as an ATen extern call (the compiler before templates).
EXTERN_MODES = ("default", "none", "all")
# "auto": ``compiler.layout.COST_RULE`` per graph; the others force that layout on every graph.
LAYOUTS = ("auto", "channels_last", "contiguous")
# when GPU launch configs are built and timed (compiler/tuning.py)
TUNING_MODES = ("deferred", "first_call", "off")
# how AOTAutograd splits a training graph into forward and backward (what the forward saves)
PARTITIONS = ("min_cut", "save_all")


# What each CRUCIBLE_DEBUG level adds, printed to stderr (levels are cumulative).
DEBUG_LEVELS = {
    1: "summary per compiled graph (kernels, extern calls with reasons, fallbacks); on the GPU, "
       "the launch configs timed per kernel",
    2: "+ generated kernel and wrapper source",
    3: "+ the ATen graph and the IR after every pass, with its time",
}


def debug_level() -> int:
    value = os.environ.get("CRUCIBLE_DEBUG", "").strip()
    if not value:
        return 0
    try:
        parsed = int(value)
    except ValueError:
        parsed = -1
    if parsed < 0:
        raise ValueError(f"CRUCIBLE_DEBUG={value!r}: expected a level 0-{max(DEBUG_LEVELS)} "
                         f"(1: graph summaries, 2: + kernel source, 3: + IR after every pass)")
    return parsed


def dump_dir() -> Path | None:
    value = os.environ.get("CRUCIBLE_DUMP_DIR")
    return Path(value) if value else None


def simulator_checks() -> bool:
    return os.environ.get("CRUCIBLE_SIM_CHECK", "0") not in ("", "0")


def gpu_build_check() -> bool:
    """``CRUCIBLE_GPU_BUILD_CHECK=1``: interpreted Triton graphs (CPU tensors) also render every kernel
    for the GPU and build it for an H200 (``compiler/gpu_build.py``); a build error fails the compile."""
    return os.environ.get("CRUCIBLE_GPU_BUILD_CHECK", "0") not in ("", "0")


def kernel_times() -> bool:
    """``CRUCIBLE_KERNEL_TIMES=1``: time every generated kernel's launches (``compiler/kernel_times.py``)."""
    return os.environ.get("CRUCIBLE_KERNEL_TIMES", "0") not in ("", "0")


MAX_DEFAULT_COMPILE_THREADS = 8


def static_launch() -> bool:
    """Bound GPU launches go through torch's static CUDA launcher where it can launch the kernel
    (``compiler.launch_binding.bind_static_launch``); ``0``: through Triton's driver launcher."""
    return os.environ.get("CRUCIBLE_STATIC_LAUNCH", "1") not in ("", "0")


def pause_gc() -> bool:
    """Python's cyclic garbage collector is paused while a graph compiles (``compiler.backend``);
    ``CRUCIBLE_COMPILE_GC=1`` keeps it collecting."""
    return os.environ.get("CRUCIBLE_COMPILE_GC", "0") in ("", "0")


def fused_sdpa() -> bool:
    """CUDA inference SDPA calls stay one op through tracing, their kernel chosen at run time or the
    attention template (``compiler/fused_attention.py``); ``0``: the trace's choice, as before."""
    return os.environ.get("CRUCIBLE_FUSED_SDPA", "1") not in ("", "0")


def compile_threads() -> int:
    value = os.environ.get("CRUCIBLE_COMPILE_THREADS")
    if not value:
        return max(1, min(MAX_DEFAULT_COMPILE_THREADS, os.cpu_count() or 1))
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"CRUCIBLE_COMPILE_THREADS={value!r}: expected a positive integer "
                         f"(kernels built at once; 1 builds them one by one)")
    return threads


def compile_processes() -> int:
    """Processes Triton kernels are built in (``compiler.runtime.build_processes``); 0 (default): on
    the compile threads of the compiling process."""
    value = os.environ.get("CRUCIBLE_COMPILE_PROCESSES", "0")
    try:
        processes = int(value or "0")
    except ValueError:
        processes = -1
    if processes < 0:
        raise ValueError(f"CRUCIBLE_COMPILE_PROCESSES={value!r}: expected 0 (build on threads) or a positive "
                         f"number of build processes")
    return processes


def cache_root() -> Path:
    """``$CRUCIBLE_CACHE_DIR``, else ``$XDG_CACHE_HOME/crucible``, else ``~/.cache/crucible``;
    ``~`` is expanded in either variable (a shell does not expand it inside ``VAR=~/x`` quotes)."""
    explicit = os.environ.get("CRUCIBLE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "crucible"


class UnsafeCacheDir(PermissionError):
    """A kernel cache directory another user could write to (or that is not ours)."""


def private_cache_dir(name: str) -> Path:
    """``<cache root>/<name>``, created with mode 0700 and refused unless this user owns it and
    neither group nor others can write to it: importing a cached Triton module or loading a
    cached C++ library runs its code, so a foreign writer could run code as this user."""
    path = cache_root() / name
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if _foreign(path):
        raise UnsafeCacheDir(f"refusing to load kernels from {path}: it must be owned by this user and "
                             f"not writable by others (loading a kernel runs its code); fix its mode "
                             f"or point CRUCIBLE_CACHE_DIR elsewhere")
    return path


def tuning_cache_path() -> Path | None:
    """The file of tuned launch configs (``compiler.tuning_cache``): ``$CRUCIBLE_TUNING_CACHE`` (a file
    path, ``~`` expanded; ``0``: none, tuning stays per process), else
    ``<cache root>/tuning/configs.json`` (a private directory, as the kernel caches)."""
    value = os.environ.get("CRUCIBLE_TUNING_CACHE")
    if value is not None and value.strip() in ("0", ""):
        return None
    if value:
        return Path(value).expanduser()
    return private_cache_dir("tuning") / "configs.json"


# x86: 512-bit vectors where the host has AVX-512, as ATen's and Inductor's CPU kernels use there.
# g++ 13 targets Sapphire Rapids with 256-bit ones, where a single thread's softmax and layer norm
# ran 0.73-0.78x of ATen's time; on this project's AVX-512 EPYC the kernels alone ran softmax
# 8192x1024 at 0.86x eager with 256-bit vectors, 1.04x with g++'s default there and 1.08x with
# 512 (layer_norm 1.02x, 1.05x, 1.09x). A host without AVX-512 ignores the preference.
DEFAULT_CPP_TUNING_FLAGS = ("-O3", "-march=native", "-fno-math-errno",
                            *(("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ()))


def cxx() -> str | None:
    """``$CXX`` (a command prefix, e.g. ``ccache g++``), or None for the default search."""
    return os.environ.get("CXX") or None


def cpp_tuning_flags() -> tuple[str, ...]:
    """``$CRUCIBLE_CPP_FLAGS`` split like a shell would; an empty value means no tuning flags."""
    text = os.environ.get("CRUCIBLE_CPP_FLAGS")
    return DEFAULT_CPP_TUNING_FLAGS if text is None else tuple(shlex.split(text))


def cpp_pch() -> bool:
    """``$CRUCIBLE_CPP_PCH``: ``0`` builds C++ kernels without the precompiled prelude header."""
    return os.environ.get("CRUCIBLE_CPP_PCH", "1") != "0"


@contextlib.contextmanager
def environment_override(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the block, restoring it afterwards (benchmarks point a
    compiler's cache, ours or Inductor's, at an empty directory this way)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


# The on/off variables: ``0`` or ``1`` (empty reads as unset for most; see each function for its default).
BOOLEAN_VARIABLES = ("CRUCIBLE_SIM_CHECK", "CRUCIBLE_GPU_BUILD_CHECK", "CRUCIBLE_KERNEL_TIMES", "CRUCIBLE_STATIC_LAUNCH",
                     "CRUCIBLE_COMPILE_GC", "CRUCIBLE_FUSED_SDPA", "CRUCIBLE_CPP_PCH")


def environment_problems() -> list[str]:
    """One line per environment variable above whose value the compiler cannot use, each naming the
    variable, its value and what to do; empty when every value is usable. The harness calls it before
    a run starts, so a bad value is one usage error instead of a compile failure in every entry
    (``CRUCIBLE_DEBUG=abc``). Only reads: creates no directory and builds nothing."""
    problems = []
    for read in (debug_level, compile_threads, compile_processes):
        try:
            read()
        except ValueError as why:
            problems.append(str(why))
    for name in BOOLEAN_VARIABLES:
        value = os.environ.get(name)
        if value not in (None, "", "0", "1"):
            problems.append(f"{name}={value!r}: expected 0 or 1")
    problems += _command_problems()
    problems += _path_problems()
    if simulator_checks():
        from compiler.kernel_checks import NoKernelChecks, registered

        try:
            registered()
        except NoKernelChecks as why:
            problems.append(str(why))
    return problems


def _command_problems() -> list[str]:
    problems = []
    for name in ("CRUCIBLE_CPP_FLAGS", "CXX"):
        value = os.environ.get(name)
        try:
            words = shlex.split(value or "")
        except ValueError as why:
            problems.append(f"{name}={value!r}: cannot be split as a shell would ({why}); fix its quoting")
            continue
        if name == "CXX" and words and shutil.which(words[0]) is None:
            problems.append(f"CXX={value!r}: {words[0]!r} is not an executable on PATH; install it, give its "
                            f"full path, or unset CXX (g++ or c++ is then used)")
    return problems


def _path_problems() -> list[str]:
    problems = []
    root = cache_root()
    variable = next((v for v in ("CRUCIBLE_CACHE_DIR", "XDG_CACHE_HOME") if os.environ.get(v)), None)
    setting = f"{variable}={os.environ[variable]!r}" if variable else "the default kernel cache (CRUCIBLE_CACHE_DIR unset)"
    why = _unwritable(root) or next(filter(None, (_foreign(root / sub) for sub in ("triton", "cpp", "tuning")
                                                  if (root / sub).exists())), None)
    if why:
        problems.append(f"{setting}: {why}; point CRUCIBLE_CACHE_DIR at a directory only this user can write to")
    dump = dump_dir()
    why = _unwritable(dump) if dump is not None else None
    if why:
        problems.append(f"CRUCIBLE_DUMP_DIR={os.environ['CRUCIBLE_DUMP_DIR']!r}: {why}; give a directory this user "
                        f"can write to, or unset it")
    value = os.environ.get("CRUCIBLE_TUNING_CACHE")
    if value and value.strip() != "0":
        path = Path(value).expanduser()
        why = f"{path} is a directory" if path.is_dir() else _unwritable(path.parent)
        if why:
            problems.append(f"CRUCIBLE_TUNING_CACHE={value!r}: {why}; give a file path in a directory this user "
                            f"can write to, or 0 for no tuning cache")
    return problems


def _unwritable(path: Path) -> str | None:
    """Why files cannot be made in directory ``path`` (created with its parents if missing), or None."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def _foreign(path: Path) -> str | None:
    """Why ``private_cache_dir`` would refuse the existing ``path``, or None."""
    if not path.is_dir():
        return f"{path} is not a directory"
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return f"{path} is not owned by this user or is writable by others (loading a cached kernel runs its code)"
    return None


@dataclass(frozen=True)
class Options:
    codegen: str | None = None  # None: the registry's default for the graph's device
    strict: bool = False
    cudagraphs: bool = False  # capture CUDA graphs after a warm-up call (compiler/cudagraphs.py)
    extern: str = "default"  # one of EXTERN_MODES
    fold_weights: bool = True  # inference graphs: folding.py and extern_passes.py weight rewrites
    layout: str = "auto"  # one of LAYOUTS (compiler/layout.py)
    tuning: str = "deferred"  # one of TUNING_MODES (compiler/tuning.py)
    partition: str = "min_cut"  # one of PARTITIONS (compiler/backend.py)
    poison: bool = False  # fill each buffer the wrapper allocates or reuses before its kernels run (wrapper.py)
    huge_pages: bool = True  # advise large CPU buffers to use huge pages (compiler/host_memory.py)
    # split reductions (compiler/split_reductions.py): None, where the renderer splits (GPU Triton);
    # True on any renderer (the interpreter and C++ run the GPU's two-stage reductions, which lets a
    # CPU-only fuzzer check them); False nowhere
    split_reductions: bool | None = None

    @staticmethod
    def parse(options: dict | None) -> Options:
        options = dict(options or {})
        known = [f.name for f in fields(Options)]
        unknown = set(options) - set(known)
        if unknown:
            raise ValueError(f"unknown crucible option(s) {sorted(unknown)}; known: {', '.join(known)}")
        codegen = options.get("codegen")
        if codegen is not None and codegen not in CODEGENS:
            raise ValueError(f"codegen must be one of {CODEGENS}, got {codegen!r}")
        for flag in ("strict", "cudagraphs", "fold_weights", "poison", "huge_pages", "split_reductions"):
            if not isinstance(options.get(flag, False), (bool, type(None))):
                raise ValueError(f"option {flag} must be True or False, got {options[flag]!r}")
        extern = options.get("extern") or "default"
        if extern not in EXTERN_MODES:
            raise ValueError(f"extern must be one of {EXTERN_MODES}, got {extern!r} (\"none\": generated "
                             f"kernels for every supported matmul and attention)")
        layout = options.get("layout") or "auto"
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r} (\"auto\": channels-last where "
                             f"the measured rule says it pays)")
        tuning = options.get("tuning") or "deferred"
        if tuning not in TUNING_MODES:
            raise ValueError(f"tuning must be one of {TUNING_MODES}, got {tuning!r} (\"deferred\": the first call "
                             f"runs each kernel's first launch config, the others are built meanwhile and timed "
                             f"in a later call)")
        partition = options.get("partition") or "min_cut"
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r} (\"min_cut\": the forward "
                             f"saves what the backward cannot cheaply recompute)")
        return Options(codegen=codegen, strict=bool(options.get("strict", False)),
                       cudagraphs=bool(options.get("cudagraphs", False)), extern=extern,
                       fold_weights=options.get("fold_weights") is not False, layout=layout, tuning=tuning,
                       partition=partition, poison=bool(options.get("poison", False)),
                       huge_pages=options.get("huge_pages") is not False,
                       split_reductions=options.get("split_reductions"))
