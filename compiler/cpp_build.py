"""Build, cache and load generated C++ kernels as shared libraries (ctypes).

The C++ renderer produces source text exposing ``extern "C"`` functions that take raw
pointers and int64 sizes; this module turns that text into a loaded library::

    lib = build_library(source, "add_kernel")
    fn = lib.function("add_kernel", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    call_kernel(fn, x, out, x.numel())          # tensors are passed as data pointers

Settings come from ``compiler/config.py`` (documented in ``docs/compiler.md``): the compiler
(``config.cxx()``, ``$CXX``, may include arguments such as ``ccache g++``; default the first of
``g++``, ``c++`` on PATH), the tuning flags (``config.cpp_tuning_flags()``; the semantic flags
below are always passed) and the cache directory (``config.private_cache_dir("cpp")``).

Flags. Always: ``-shared -fPIC -std=c++17 -fopenmp -ffp-contract=off -fno-tree-loop-distribution``.
``-fno-tree-loop-distribution`` because GCC 12.2 at ``-O3`` split a reduction's loop from a gather
stored in the same loop and vectorized the parts wrongly: an int64 sum of 4 values came out 1 where
it is 6 (fuzzer, crucible-cpp, seed 388; harness/FINDINGS.md). None of the replay corpus's 584 C++
kernels compiles to other code without it. ``-ffp-contract=off``
because a fused multiply-add rounds once where ATen's mul then add rounds twice, so ``x * a + b``
would differ from eager in the last bit (GCC 12 contracts by default, even with ``-std=c++17``,
as soon as ``-march`` allows FMA; the parity test fails without the flag). Parity matters more
than that last bit of speed. ``-ffast-math`` and its parts that
change results (finite-math, reassociation) are never used: NaN and inf must behave as in
ATen. ``-fno-math-errno`` is safe (it only lets ``sqrt`` and friends inline). ``-march=native``
targets the host ISA, so the host CPU's flags are part of the cache key. The directory of
``cpp_prelude.h`` (conversions, NaN-propagating min/max) is on the include path; with GCC a
precompiled copy of it comes first (``precompiled_prelude``, ``<root>/cpp/pch_<key>/``).

OpenMP. Torch wheels ship their own ``libgomp.so.1`` (here from GCC 8, symbol versions up to
``GOMP_5.0``). A kernel linked against the system ``libgomp.so.1`` resolves to whichever copy
the process loaded first (same soname), so kernels and ATen share one OpenMP runtime: no second
thread pool, and ``torch.set_num_threads`` also bounds kernels. Plain ``parallel for`` and
reductions only need ``GOMP_4.0``; a GCC 12 construct needing ``GOMP_5.1`` (e.g. ``omp error``)
fails to load next to torch's copy, reported as :class:`CppLoadError` naming the version. So
the renderer sticks to OpenMP 4.5 constructs. POSIX only (``fcntl`` locks, ``-fPIC``).

Cache layout, one entry per key (sha256 of kernel name, source, flags, compiler identity
(``$CXX --version``, run once per process), prelude header, host CPU when ``-march=native``)::

    <root>/cpp/<name>_<key[:24]>.cpp     the source, kept for debugging
    <root>/cpp/<name>_<key[:24]>.so      the library, written to a temp file then os.replace'd
    <root>/cpp/<name>_<key[:24]>.json    sha256 and size of the .so; checked before loading
    <root>/cpp/<name>_<key[:24]>.lock    flock'd while building, so concurrent builders wait
    <root>/cpp/pch_<key>/                the precompiled prelude: cpp_prelude.h, its .gch, digest.json
                                         (sha256 and size of both), build.lock; failed.txt if GCC refused

An entry whose .so does not match its .json (truncated, corrupted, half-written) is rebuilt, and so
is a precompiled prelude that does not match its digest.json, each with one line on stderr
(``compiler.cache_files``).
The cache directory is created with mode 0700 and refused if another user could write to it.
In process, a built key maps to the same :class:`CppLibrary` (no second dlopen);
``stats`` counts compiler runs, disk hits, memory hits and rebuilds, for tests and debugging.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler import config
from compiler.cache_files import file_digest, matches_digest, record_digest, report_rebuilt, write_atomic

if TYPE_CHECKING:
    import torch

PRELUDE = Path(__file__).with_name("cpp_prelude.h")
SEMANTIC_FLAGS = ("-shared", "-fPIC", "-std=c++17", "-fopenmp", "-ffp-contract=off", "-fno-tree-loop-distribution")
ERROR_LINES = 20
_CACHE_FORMAT = 1
# 2: a digest.json records the precompiled prelude (directories of format 1 have none and are left unused)
_PCH_FORMAT = 2


# --- errors and counters -------------------------------------------------------------------------

class CppBuildError(RuntimeError):
    """Base class: the kernel could not be turned into a loaded library."""


class CppCompileError(CppBuildError):
    """The compiler is missing or rejected the source."""

    def __init__(self, kernel: str, command: Sequence[str], output: str, reason: str = "failed"):
        self.kernel, self.command, self.output = kernel, list(command), output
        head = "\n".join(output.strip().splitlines()[:ERROR_LINES])
        super().__init__(f"C++ kernel {kernel!r}: compiler {reason}\n"
                         f"command: {shlex.join(self.command)}\n{head}")
        self.reason = reason

    def __reduce__(self):  # crosses process boundaries (harness workers) intact
        return type(self), (self.kernel, self.command, self.output, self.reason)


class CppLoadError(CppBuildError):
    """A library was built but the dynamic loader refused it (e.g. a missing GOMP symbol)."""


@dataclasses.dataclass
class BuildStats:
    compiles: int = 0       # compiler invocations (successful or not)
    disk_hits: int = 0      # loaded from the on-disk cache without compiling
    memory_hits: int = 0    # already loaded in this process
    rebuilds: int = 0       # cache entries (libraries, the precompiled prelude) found corrupted and rebuilt

    def reset(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0)


stats = BuildStats()


# --- identifiers and comments for generated source ------------------------------------------------

_CPP_KEYWORDS = frozenset((  # C++20 keywords, then common libc macros and our namespaces
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
    "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
    "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
    "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
    "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
    "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
    "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
    "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
    "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "final", "override",
    "import", "module", "restrict", "main", "assert", "errno", "NULL", "EOF", "stdin", "stdout",
    "stderr", "INFINITY", "NAN", "offsetof", "setjmp", "va_arg", "crucible", "std",
))
MAX_IDENTIFIER = 64


def sanitize_identifier(text: str) -> str:
    """A C++ identifier derived from ``text``: only [A-Za-z0-9_], no leading digit or
    underscore, no ``__`` (reserved), no keyword or common libc macro, at most 64 chars.
    Not injective ("a.b" and "a_b" collide): the renderer keeps names unique."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", str(text))).strip("_")
    if not name or not name[0].isalpha():
        name = "v_" + name
    if len(name) > MAX_IDENTIFIER:  # keep long names distinct through a hash of the full text
        digest = hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = name[: MAX_IDENTIFIER - 9].rstrip("_") + "_" + digest
    return name + "_" if name in _CPP_KEYWORDS else name


MAX_COMMENT = 200


def safe_comment(text: str) -> str:
    """Text that cannot end or extend a ``/* */`` or ``//`` comment: printable ASCII only
    (newlines and control characters become spaces, other characters ``?``), no backslash
    (line splice), no ``*/`` or ``/*``, no ``??`` (trigraphs), no leading/trailing ``*`` or ``/``,
    at most 200 characters."""
    out = "".join(c if " " <= c <= "~" else (" " if c.isspace() or ord(c) < 32 else "?")
                  for c in str(text))
    if len(out) > MAX_COMMENT:
        out = out[: MAX_COMMENT - 3] + "..."
    out = out.replace("\\", "/")
    previous = None
    while previous != out:
        previous = out
        out = out.replace("*/", "* /").replace("/*", "/ *").replace("??", "?")
    return out.strip(" */")


# --- compiler -------------------------------------------------------------------------------------

def find_compiler(kernel: str = "<none>") -> list[str]:
    """The compiler command prefix: ``$CXX`` (split like a shell would), else g++, else c++."""
    configured = config.cxx()
    if configured:
        words = shlex.split(configured)
        if words and shutil.which(words[0]):
            return [shutil.which(words[0]) or words[0], *words[1:]]
        raise CppCompileError(kernel, words, f"CXX={configured!r} is not an executable on PATH",
                              reason="not found")
    for candidate in ("g++", "c++"):
        if shutil.which(candidate):
            return [shutil.which(candidate) or candidate]
    raise CppCompileError(kernel, ["g++"], "no C++ compiler: set CXX or install g++",
                          reason="not found")


@functools.cache
def compiler_identity(compiler: tuple[str, ...]) -> str:
    """``$CXX --version`` output, computed once per process and compiler."""
    try:
        done = subprocess.run([*compiler, "--version"], check=False, capture_output=True, text=True, timeout=60)
    except OSError as error:
        raise CppCompileError("<none>", [*compiler, "--version"], str(error), reason="not runnable") from error
    return f"{shlex.join(compiler)}\n{done.stdout}"


@functools.cache
def host_cpu_identity() -> str:
    """CPU model and feature flags, so -march=native builds never cross machines."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        import platform
        return platform.machine() + platform.processor()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


@functools.cache
def _prelude_digest() -> str:
    return hashlib.sha256(PRELUDE.read_bytes()).hexdigest()


# --- the cache ------------------------------------------------------------------------------------

class CppLibrary:
    """A loaded kernel library. ``function`` returns a ctypes function with its signature set."""

    def __init__(self, name: str, path: Path, handle: ctypes.CDLL):
        self.name, self.path, self.handle = name, path, handle

    def function(self, symbol: str, argtypes: Sequence[Any], restype: Any = None) -> Any:
        fn = getattr(self.handle, symbol)
        fn.argtypes, fn.restype = list(argtypes), restype
        return fn

    def __repr__(self) -> str:
        return f"CppLibrary({self.name!r}, {str(self.path)!r})"


def call_kernel(fn: Any, *args: torch.Tensor | float) -> Any:
    """Call a kernel: tensors become ``c_void_p(data_ptr())``; the caller keeps them alive,
    contiguous and of the dtype the kernel expects. Other values follow ``fn.argtypes``."""
    import torch
    return fn(*(ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args))


_loaded: dict[Path, CppLibrary] = {}
_key_locks: dict[Path, threading.Lock] = {}
_loaded_guard = threading.Lock()


def clear_memory_cache() -> None:
    """Forget loaded libraries (they stay mapped: ctypes cannot unload safely)."""
    with _loaded_guard:
        _loaded.clear()
    _pch_dirs.clear()


def cache_dir() -> Path:
    try:
        return config.private_cache_dir("cpp")
    except config.UnsafeCacheDir as error:
        raise CppBuildError(str(error)) from error


def build_library(source: str, name: str, *, extra_flags: Sequence[str] = ()) -> CppLibrary:
    """Compile ``source`` to a shared library (or reuse the cached one) and load it."""
    kernel = sanitize_identifier(name)
    compiler = find_compiler(kernel)
    flags = [*SEMANTIC_FLAGS, *config.cpp_tuning_flags(), *extra_flags]
    key = _digest({"format": _CACHE_FORMAT, "source": source, "name": kernel, **_build_identity(compiler, flags)})
    stem = cache_dir() / f"{kernel}_{key[:24]}"
    with _loaded_guard:
        if stem in _loaded:
            stats.memory_hits += 1
            return _loaded[stem]
        key_lock = _key_locks.setdefault(stem, threading.Lock())
    with key_lock:  # one thread per entry in this process; the flock serializes processes
        with _loaded_guard:
            if stem in _loaded:
                stats.memory_hits += 1
                return _loaded[stem]
        library = _load_verified(kernel, stem)
        if library is None:
            with open(stem.with_suffix(".lock"), "a") as lock_file:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
                library = _load_verified(kernel, stem)  # another process may have built it
                if library is None:
                    if stem.with_suffix(".so").exists():
                        stats.rebuilds += 1
                        report_rebuilt("the C++ kernel library", stem.with_suffix(".so"))
                    uses_prelude = f'#include "{PRELUDE.name}"' in source
                    pch = precompiled_prelude(tuple(compiler), tuple(flags)) if uses_prelude else None
                    include = ["-I", str(pch)] if pch is not None else []
                    _compile(kernel, source, stem, [*compiler, *flags, *include, "-I", str(PRELUDE.parent)])
                    library = _load_verified(kernel, stem, built_now=True)
        assert library is not None
        with _loaded_guard:
            _loaded[stem] = library
        return library


def _build_identity(compiler: Sequence[str], flags: Sequence[str]) -> dict[str, Any]:
    """What a build's output depends on besides its source: flags, compiler, prelude, host CPU."""
    return {"flags": list(flags), "compiler": compiler_identity(tuple(compiler)), "prelude": _prelude_digest(),
            "cpu": host_cpu_identity() if any("native" in f for f in flags) else ""}


def _digest(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


_pch_dirs: dict[tuple, Path | None] = {}


def precompiled_prelude(compiler: tuple[str, ...], flags: tuple[str, ...]) -> Path | None:
    """A directory holding ``cpp_prelude.h`` and GCC's precompiled form of it for these flags, put
    ahead of the prelude's own directory on the include path (GCC takes ``cpp_prelude.h.gch`` in
    place of the header when the flags match, and the header otherwise). Parsing the prelude was
    about 0.44 s of each 0.6 s kernel build; the built library is the same. Built once per compiler,
    flags and prelude, under a lock; None (kernels parse the header) for compilers other than GCC,
    when ``config.cpp_pch()`` is off, or when GCC could not build it (the reason is kept there)."""
    memo = (compiler, flags, str(cache_dir()))
    if memo in _pch_dirs:
        return _pch_dirs[memo]
    header_flags = [f for f in flags if f != "-shared"]
    identity = _build_identity(compiler, header_flags)
    if not config.cpp_pch() or "Free Software Foundation" not in identity["compiler"]:  # GCC's banner
        _pch_dirs[memo] = None
        return None
    key = _digest({"format": _PCH_FORMAT, **identity})[:24]
    where = cache_dir() / f"pch_{key}"
    where.mkdir(mode=0o700, exist_ok=True)
    header, gch, failed = where / PRELUDE.name, where / f"{PRELUDE.name}.gch", where / "failed.txt"
    record, files = where / "digest.json", {"header": header, "gch": gch}
    with open(where / "build.lock", "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        # a damaged .gch (or header copy) would fail every kernel build ("cannot read PCH file")
        if gch.exists() and not matches_digest(record, files):
            stats.rebuilds += 1
            report_rebuilt("the precompiled C++ prelude", gch)
            gch.unlink()
        if not gch.exists() and not failed.exists():
            write_atomic(header, PRELUDE.read_bytes())
            fd, tmp = tempfile.mkstemp(dir=where, prefix=gch.name + ".", suffix=".tmp")
            os.close(fd)
            command = [*compiler, *header_flags, "-x", "c++-header", str(header), "-o", tmp]
            try:
                done = subprocess.run(command, check=False, capture_output=True, text=True)
                if done.returncode == 0:
                    # the digest first: a process killed in between leaves a mismatch, rebuilt next time
                    record_digest(record, {"header": header, "gch": Path(tmp)})
                    os.replace(tmp, gch)
                else:
                    write_atomic(failed, f"{shlex.join(command)}\n{done.stderr}{done.stdout}".encode())
            except OSError as error:
                write_atomic(failed, f"{shlex.join(command)}\n{error}".encode())
            finally:
                Path(tmp).unlink(missing_ok=True)
    _pch_dirs[memo] = where if gch.exists() else None
    return _pch_dirs[memo]


def _load_verified(kernel: str, stem: Path, built_now: bool = False) -> CppLibrary | None:
    """Load the entry if its .so matches its .json; None if it is missing or corrupted."""
    so_path, meta_path = stem.with_suffix(".so"), stem.with_suffix(".json")
    if not so_path.exists():
        return None
    try:
        intact = json.loads(meta_path.read_text()) == file_digest(so_path)
    except (OSError, ValueError):
        intact = False
    if not intact:
        return None
    try:
        handle = ctypes.CDLL(str(so_path))
    except OSError as error:
        hint = (" (the libgomp loaded in this process, possibly torch's older copy, lacks that symbol"
                " version: use OpenMP 4.5 constructs)" if "GOMP_" in str(error) else "")
        raise CppLoadError(f"C++ kernel {kernel!r}: cannot load {so_path}: {error}{hint}") from error
    if not built_now:
        stats.disk_hits += 1
    return CppLibrary(kernel, so_path, handle)


def _compile(kernel: str, source: str, stem: Path, command_prefix: list[str]) -> None:
    """Compile into a temp file next to the entry, then publish .so and .json atomically."""
    src_path, so_path = stem.with_suffix(".cpp"), stem.with_suffix(".so")
    write_atomic(src_path, source.encode())
    fd, tmp_so = tempfile.mkstemp(dir=stem.parent, prefix=so_path.name + ".", suffix=".tmp")
    os.close(fd)
    command = [*command_prefix, str(src_path), "-o", tmp_so]
    stats.compiles += 1
    try:
        try:
            done = subprocess.run(command, check=False, capture_output=True, text=True)
        except OSError as error:
            raise CppCompileError(kernel, command, str(error), reason="could not be run") from error
        if done.returncode != 0:
            raise CppCompileError(kernel, command, done.stderr + done.stdout,
                                  reason=f"exited with status {done.returncode}")
        meta = json.dumps(file_digest(Path(tmp_so))).encode()
        os.chmod(tmp_so, 0o700)
        os.replace(tmp_so, so_path)
        write_atomic(stem.with_suffix(".json"), meta)
    finally:
        Path(tmp_so).unlink(missing_ok=True)
