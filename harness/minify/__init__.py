"""The minimizer: shrink a failing ATen graph to a minimal standalone repro and say where it fails.

Entry points:

* ``crucible minify ENTRY --out DIR`` (``harness.minify.command``): capture the failing entry's
  ATen graphs with real inputs, minimize each failing one, localize, write ``DIR/repro.py``.
* ``minify_graph(gm, inputs, target=..., out_dir=...)``: the same for any ATen FX graph plus real
  inputs (a fuzz finding, a graph saved with ``save_case``), without a corpus entry.
"""

from __future__ import annotations

from harness.minify.case import GraphCase, load_case, save_case
from harness.minify.check import Outcome, check_case
from harness.minify.session import MinifyReport, minify_case, minify_graph

__all__ = ["GraphCase", "MinifyReport", "Outcome", "check_case", "load_case", "minify_case", "minify_graph",
           "save_case"]
