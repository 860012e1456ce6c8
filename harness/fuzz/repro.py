"""Standalone ``repro.py`` for a fuzz finding: needs only torch and the target.

The script embeds the input builder (``harness/fuzz/values.py``, torch only), the input
descriptions and the graph source; it runs eager, the float64 reference and the target
(through ``torch.compile``; on ``crucible-sim`` under the simulator's memory checks), prints per
output where they disagree, and exits 1 while the finding reproduces, 0 once it is fixed.
"""

from __future__ import annotations

import inspect

from harness.errors import raised_at
from harness.fuzz import values
from harness.fuzz.graph import FuzzGraph
from harness.result import Result
from harness.targets import parse_target

_RUNNER = '''
DTYPE_NAMES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
               "i32": torch.int32, "i64": torch.int64, "b8": torch.bool}


def build(reference):
    """The graph; the float64 reference runs the same source with every float dtype as float64."""
    ns = {"torch": torch, "aten": torch.ops.aten, "inf": math.inf, "nan": math.nan}
    ns.update({k: torch.float64 if reference and v.is_floating_point else v for k, v in DTYPE_NAMES.items()})
    exec(SOURCE, ns)
    return ns["graph"]


def describe(name, eager, got, ref):
    if not isinstance(eager, torch.Tensor):
        return "" if eager == got else f"{name}: eager {eager!r}, target {got!r}"
    got = got.cpu()
    if got.shape != eager.shape or got.dtype != eager.dtype:
        return f"{name}: eager {eager.dtype}{list(eager.shape)}, target {got.dtype}{list(got.shape)}"
    if not eager.is_floating_point():
        bad = (got != eager).nonzero()
        return f"{name}: {len(bad)} integer/bool values differ, first at {bad[0].tolist()}" if len(bad) else ""
    if ref is not None and ref.shape == eager.shape:
        # eager's own overflow, excused as the harness's oracle does: where eager's NaN/inf is not
        # float64's (rounded to the dtype), a NaN/inf or a value within 1% of float64 passes; where
        # float64 overflows the dtype and eager does not, float64's value passes
        r64 = ref.cpu().double()
        rounded = r64.to(eager.dtype)
        same = lambda a, b: (a == b) | (torch.isnan(a) & torch.isnan(b))
        near = torch.isfinite(got) & torch.isfinite(r64) & ((got.double() - r64).abs() <= 0.01 * r64.abs())
        over = ~torch.isfinite(eager) & ~same(eager, rounded) & (~torch.isfinite(got) | near)
        short = torch.isfinite(eager) & ~torch.isfinite(rounded) & same(got, rounded)
        got = torch.where((over | short) & ~(torch.isfinite(eager) & torch.isfinite(got)), eager, got)
    for label, mask in (("NaN", torch.isnan), ("+inf", lambda t: t == math.inf), ("-inf", lambda t: t == -math.inf)):
        bad = (mask(got) != mask(eager)).nonzero()
        if len(bad):
            i = tuple(bad[0].tolist())
            return f"{name}: {label} positions differ at {list(i)}: eager {eager[i].item()}, target {got[i].item()}"
    finite = torch.isfinite(eager)
    e, g = eager[finite].double(), got[finite].double()
    if not e.numel():
        return ""
    err = (g - e).abs().max().item()
    if err == 0:
        return ""
    if ref is None:
        return f"{name}: max abs err vs eager {err:.3g}"
    r = ref.cpu()[finite].double()
    rmse = lambda a: ((a - r) ** 2).mean().sqrt().item()
    # the harness's criterion: RMSE against float64 within 2x (3x for 16-bit types) eager's, plus a floor
    ratio = 3.0 if eager.dtype in (torch.float16, torch.bfloat16) else 2.0
    if rmse(g) <= ratio * rmse(e) + 1e-5 + 1e-6 * r.abs().mean().item():
        return ""
    return (f"{name}: max abs err vs eager {err:.3g}; RMSE vs float64: target {rmse(g):.3g}, "
            f"eager {rmse(e):.3g}")


def checked():
    """crucible-sim: the kernels run under the simulator's memory checks, as the fuzzer ran them."""
    if not CHECKED:
        return contextlib.nullcontext()
    from simulator.session import checking

    return checking()


def main():
    inputs = [make_input(d, DEVICE) for d in INPUTS]
    fresh = lambda: [make_input(d, DEVICE) for d in INPUTS]
    eager = build(False)(*fresh())
    try:
        ref = build(True)(*[t.double().cpu() if t.is_floating_point() else t.cpu() for t in fresh()])
    except Exception:
        ref = None
    compiled = torch.compile(build(False), backend=BACKEND, options=OPTIONS, dynamic=False)
    try:
        with checked():
            got = compiled(*inputs)
    except Exception as exc:
        print(f"target {TARGET} raised {type(exc).__name__}: {exc}")
        return 1
    lines = [describe(name, e.cpu() if isinstance(e, torch.Tensor) else e, g,
                      None if ref is None else ref[i]) for i, (name, e, g) in enumerate(zip(OUTPUTS, eager, got))]
    for line in lines:
        if line:
            print(line)
    print(f"expected: {EXPECTED}")
    return 1 if any(lines) else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _values_source() -> str:
    source = inspect.getsource(values)
    return source.split("from __future__ import annotations\n", 1)[1].replace("import torch\n", "", 1)


def write_repro(graph: FuzzGraph, target: str, device: str | None, record: Result, how_found: str = "") -> str:
    """The text of a standalone repro script for ``graph`` failing on ``target`` as ``record`` says;
    ``how_found``: the command line that found it (shell-quoted by the caller)."""
    t = parse_target(target, device)
    backend = t.backend or "eager"
    header = [f"# Crucible fuzz finding on {target}: {record.status} at {record.op}",
              *_comment(str(record.error or "")[:300])]
    if how_found:
        header += _comment(f"found by: {how_found}")
    where = raised_at(record.error_detail)
    if where:
        header.append(f"# raised at: {where}")
    header.append("# Run: python repro.py  (exit 1 while it reproduces; needs torch and the target)")
    body = [
        "import contextlib", "import math", "import sys", "", "import torch", "", _values_source().strip(), "",
        f"TARGET = {target!r}", f"BACKEND = {backend!r}", f"CHECKED = {t.checked!r}",
        f"OPTIONS = {dict(t.options) or None!r}", f"DEVICE = {t.device!r}",
        f"EXPECTED = {'outputs as eager computes them (NaN/inf positions, integers exact, float error no worse than eager)'!r}",
        # Python literals (repr): JSON's false/true are no Python names
        f"INPUTS = {graph.inputs!r}", f"OUTPUTS = {graph.outputs!r}",
        f"SOURCE = '''\n{graph.source()}'''", _RUNNER,
    ]
    return "\n".join(header) + "\n" + "\n".join(body)


def _comment(text: str) -> list[str]:
    """``text`` as comment lines: an error message or a command line may hold newlines, which would
    otherwise end the comment and run the rest as code."""
    return [f"# {line}".rstrip() for line in text.splitlines() or [""]]
