"""The minimizer: shrink a failing ATen graph to a minimal standalone repro and say where it fails.

Entry points:

* ``crucible minify ENTRY --out DIR`` (``harness.minify.command``): capture the failing entry's
  ATen graphs with real inputs, minimize each failing one, localize, write ``DIR/repro.py``.
* ``minify_graph(gm, inputs, target=..., out_dir=...)``: the same for any ATen FX graph plus real
  inputs (a fuzz finding, a graph saved with ``save_case``), without a corpus entry.

A check is the execution engine's run of the case (``check.CaseSubject``); its outcome is a
``harness.result.Result``, and ``check.signature`` / ``check.same_failure`` say which failure it is.

Names are imported on first use, so the ``crucible`` command can register ``minify`` without
importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"GraphCase": "case", "load_case": "case", "save_case": "case", "CaseSubject": "check",
            "check_case": "check", "same_failure": "check", "signature": "check", "MinifyReport": "session",
            "minify_case": "session", "minify_graph": "session"}

__all__ = ["CaseSubject", "GraphCase", "MinifyReport", "check_case", "load_case", "minify_case", "minify_graph",
           "same_failure", "save_case", "signature"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'harness.minify' has no attribute {name!r}")
    return getattr(importlib.import_module(f"harness.minify.{_EXPORTS[name]}"), name)
