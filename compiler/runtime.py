"""Runtime: load rendered kernels and launch them.

Triton kernel sources are written to the cache directory and imported as
modules (Triton reads a kernel's source through ``inspect``, so it must live in
a real file). Every launch goes through ``KernelLauncher``, which knows each
argument's buffer: the one entry point future simulator checks hook into.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from compiler import config
from compiler.codegen.base import RenderedKernel

_MODULES: dict[str, Any] = {}


def triton_source_dir() -> Path:
    path = config.cache_root() / "triton"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def load_module(source: str, stem: str) -> Any:
    """Import ``source`` as a module from a content-addressed file (cached per process)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    key = f"crucible_gen_{stem}_{digest}"
    if key in _MODULES:
        return _MODULES[key]
    path = triton_source_dir() / f"{key}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)  # atomic: concurrent processes never see half a file
    spec = importlib.util.spec_from_file_location(key, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    _MODULES[key] = module
    return module


class KernelLauncher:
    """A loaded kernel plus its launch facts; ``launcher(*tensors)`` runs it."""

    def __init__(self, rendered: RenderedKernel, interpret: bool) -> None:
        self.rendered = rendered
        self.interpret = interpret
        module = load_module(rendered.source, rendered.name)
        fn = getattr(module, rendered.name)
        if interpret:
            from simulator.interpreter import interpreted

            fn = interpreted(fn)
        self.fn = fn
        self.grid = rendered.grid
        self.meta = dict(rendered.meta)
        if interpret:
            self.meta.pop("num_warps", None)

    def __call__(self, *args: Any) -> None:
        self.fn[self.grid](*args, **self.meta)
