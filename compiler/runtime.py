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
# launch config picked for each content-named kernel (the same source: the same best config)
_TUNED: dict[str, tuple[tuple[int, ...], dict]] = {}


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
    """A loaded kernel plus its launch facts; ``launcher(*tensors)`` runs it.

    When the renderer offered alternative launch configs (compiled GPU kernels),
    the first call times each one on the real arguments and keeps the fastest.
    A kernel is a pure function of its inputs into buffers it alone writes, so
    running it several times is harmless."""

    def __init__(self, rendered: RenderedKernel, interpret: bool) -> None:
        self.rendered = rendered
        self.interpret = interpret
        symbol = rendered.symbol or rendered.name
        module = load_module(rendered.source, symbol)
        fn = getattr(module, symbol)
        if interpret:
            from simulator.interpreter import interpreted

            fn = interpreted(fn)
        self.fn = fn
        self.configs = [(rendered.grid, dict(rendered.meta))] + [(g, dict(m)) for g, m in rendered.alternatives]
        if interpret:
            for _, meta in self.configs:
                meta.pop("num_warps", None)
        self.symbol = symbol
        self.grid, self.meta = _TUNED.get(symbol, self.configs[0])
        self.tuned = len(self.configs) == 1 or symbol in _TUNED

    def __call__(self, *args: Any) -> None:
        if not self.tuned:
            self.tune(args)
        self.fn[self.grid](*args, **self.meta)

    def tune(self, args: tuple) -> None:
        from triton.testing import do_bench

        timings = []
        for grid, meta in self.configs:
            def launch(grid=grid, meta=meta) -> None:
                self.fn[grid](*args, **meta)

            try:
                timings.append((do_bench(launch, warmup=3, rep=10, return_mode="median"), grid, meta))
            except Exception:  # noqa: BLE001, S112  (a config that does not compile, e.g. out of resources)
                continue
        if timings:
            _, self.grid, self.meta = min(timings, key=lambda t: t[0])
            _TUNED[self.symbol] = (self.grid, self.meta)
        self.tuned = True
        if config.debug_level() >= 1:
            table = ", ".join(f"{m} {t * 1e3:.1f}us" for t, _, m in timings)
            print(f"[crucible] {self.rendered.name} launch configs: {table}; picked {self.meta}", file=sys.stderr)
