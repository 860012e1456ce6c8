"""Every option and environment variable of the compiler, in one place.

| variable | meaning |
|---|---|
| ``CRUCIBLE_DEBUG`` | 1: summary per compiled graph; 2: + generated kernel source; 3: + IR after every pass |
| ``CRUCIBLE_DUMP_DIR`` | write every stage of every graph to files there (incl. a runnable repro) |
| ``CRUCIBLE_CACHE_DIR`` | cache root for generated kernels (default: ``$XDG_CACHE_HOME/crucible`` or ``~/.cache/crucible``) |
| ``CRUCIBLE_CPP_FLAGS`` | replaces the C++ tuning flags (default ``-O3 -march=native -fno-math-errno``) |
| ``CXX`` | the C++ compiler (default: g++, then c++) |
| ``CRUCIBLE_SIM_CHECK`` | 1: Triton kernels run in the interpreter are checked by the simulator (bounds, poison, races, ...) |
| ``CRUCIBLE_COMPILE_THREADS`` | kernels built at once per graph (C++ builds, Triton GPU builds of every launch config); default: CPU cores, at most 8 (harness workers: their share of the cores); 1 builds one by one |

Backend options (``torch.compile(..., options={...})``): ``codegen`` ("triton" | "cpp";
default triton on CUDA tensors and cpp on CPU tensors), ``strict`` (raise on an
internal compiler error instead of falling back to eager for that graph).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CODEGENS = ("triton", "cpp")


def debug_level() -> int:
    try:
        return int(os.environ.get("CRUCIBLE_DEBUG", "0") or 0)
    except ValueError:
        return 1


def dump_dir() -> Path | None:
    value = os.environ.get("CRUCIBLE_DUMP_DIR")
    return Path(value) if value else None


def simulator_checks() -> bool:
    return os.environ.get("CRUCIBLE_SIM_CHECK", "0") not in ("", "0")


MAX_DEFAULT_COMPILE_THREADS = 8


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


def cache_root() -> Path:
    if os.environ.get("CRUCIBLE_CACHE_DIR"):
        return Path(os.environ["CRUCIBLE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "crucible"


@dataclass(frozen=True)
class Options:
    codegen: str | None = None  # None: pick from the device
    strict: bool = False

    @staticmethod
    def parse(options: dict | None) -> Options:
        options = dict(options or {})
        unknown = set(options) - {"codegen", "strict"}
        if unknown:
            raise ValueError(f"unknown crucible option(s) {sorted(unknown)}; known: codegen, strict")
        codegen = options.get("codegen")
        if codegen is not None and codegen not in CODEGENS:
            raise ValueError(f"codegen must be one of {CODEGENS}, got {codegen!r}")
        return Options(codegen=codegen, strict=bool(options.get("strict", False)))

    def codegen_for(self, device_type: str) -> str:
        if self.codegen is not None:
            return self.codegen
        return "triton" if device_type == "cuda" else "cpp"
