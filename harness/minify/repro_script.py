"""The standalone repro: ``DIR/repro.py``, runnable with torch and this project installed.

The minimized graph is written as plain ``torch.ops.aten`` calls; inputs of at most
``INLINE_NUMEL`` elements (contiguous) are written inline, larger ones go to ``repro_inputs.pt``
next to the script. The script re-runs the same predicate as the minimizer and exits 1 when the
failure reproduces, 0 when it does not, printing which.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from harness.minify.case import GraphCase
from harness.minify.check import signature
from harness.result import Result

INLINE_NUMEL = 64
INPUTS_FILE = "repro_inputs.pt"


def _literal(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _input_source(name: str, value: Any, side: dict[str, torch.Tensor]) -> str:
    if not isinstance(value, torch.Tensor):
        return repr(value)
    if value.numel() <= INLINE_NUMEL and value.is_contiguous() and not value.is_complex():
        device = "" if value.device.type == "cpu" else f", device={str(value.device)!r}"
        data = _literal(value.tolist())
        if value.dim() == 0 or value.numel() > 0:
            return f"torch.tensor({data}, dtype={value.dtype}{device})"
        return f"torch.empty({tuple(value.shape)}, dtype={value.dtype}{device})"
    side[name] = value.detach().clone() if value.is_contiguous() else value.detach()
    return f"_side_inputs()[{name!r}]"


def _tolerance_source(tolerance: Any) -> str:
    if tolerance is None:
        return "None"
    fields = ", ".join(f"{k}={getattr(tolerance, k)!r}" for k in ("reason", "dtype", "rmse_ratio", "cosine", "atol", "rtol")
                       if getattr(tolerance, k, None) is not None)
    return f"__import__('corpus.entry', fromlist=['ToleranceOverride']).ToleranceOverride({fields})"


def graph_source(gm: torch.fx.GraphModule) -> str:
    """The graph as a plain function of its inputs calling ``torch.ops.aten`` ops."""
    code = gm.graph.python_code(root_module="self").src.strip()
    return code.replace("def forward(self, ", "def forward(", 1).replace("def forward(self)", "def forward()", 1)


def comment_line(text: str) -> str:
    """``text`` as one comment line of a generated script: line breaks and other unprintable
    characters escaped, so nothing in it can end the comment."""
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return f"# {escaped}" if escaped else "#"


def write_repro(case: GraphCase, result: Result, out_dir: Path, summary: str, plugins: list[str],
                name: str = "repro.py") -> Path:
    """Write the repro script (and its side file when needed); returns the script's path.

    Every string from outside (the case's origin, which holds a corpus entry's name, the target,
    messages, plugin names) enters the script as a Python literal (``repr``) or as a comment line
    (``comment_line``): an entry named with quotes, triple quotes or newlines cannot inject code."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    side: dict[str, torch.Tensor] = {}
    inputs = ",\n        ".join(_input_source(n, v, side) for n, v in zip(names, case.inputs))
    inputs_file = INPUTS_FILE if name == "repro.py" else name.replace(".py", "_inputs.pt")
    if side:
        torch.save(side, out_dir / inputs_file)
    expected = {"status": result.status.value, "signature": signature(result), "error": result.error,
                "failed_pass": result.failed_pass}
    header = "\n".join(comment_line(line) for line in
                       [f"origin: {case.origin or 'a graph case'}", "", *summary.splitlines()])
    script = f'''"""Minimized repro written by `crucible minify`.

Runs the graph below on TARGET and grades it as the minimizer did (parity against eager and float64
for accuracy failures; status and error signature otherwise). Exits 1 when the failure reproduces,
0 when it does not.
"""
{header}
import sys
from math import inf, nan  # noqa: F401  (the graph and inputs may name them)
from pathlib import Path

import torch
from torch import device  # noqa: F401  (the graph code may name devices)

ORIGIN = {case.origin!r}
TARGET = {case.target!r}
DTYPE = {case.dtype!r}
EXPECTED = {expected!r}
TOLERANCE = {_tolerance_source(case.tolerance)}
# Modules imported before the check (they were set through CRUCIBLE_MINIFY_PLUGINS when minimizing).
PLUGINS = {[str(p) for p in plugins]!r}


def _side_inputs():
    return torch.load(Path(__file__).with_name({inputs_file!r}), weights_only=False)


{graph_source(case.gm)}


def make_inputs():
    return [
        {inputs}
    ]


if __name__ == "__main__":
    from harness.minify.reproduce import reproduce_main

    sys.exit(reproduce_main(forward, make_inputs(), TARGET, DTYPE, EXPECTED, PLUGINS, TOLERANCE))
'''
    path = out_dir / name
    path.write_text(script, encoding="utf-8")
    return path
