"""Standalone ``repro.py`` for a fuzz finding: needs only torch and the target.

The script embeds the input builder (``harness/fuzz/values.py``, torch only), the input
descriptions and the graph source; it runs eager, the float64 reference and the target
(through ``torch.compile``; on ``crucible-sim`` under the simulator's memory checks), prints per
output where they disagree, and exits 1 while the finding reproduces, 0 once it is fixed. A
``--dynamic`` finding (``FuzzGraph.calls``) is compiled once with dynamic shapes and run at every size.
"""

from __future__ import annotations

import inspect

from harness.errors import raised_at
from harness import oracle
from harness.fuzz import values
from harness.fuzz.exact import exact_cone
from harness.fuzz import reference_ops
from harness.fuzz.graph import FuzzGraph
from harness.result import Result
from harness.targets import parse_target

_RUNNER = '''
DTYPE_NAMES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
               "i32": torch.int32, "i64": torch.int64, "b8": torch.bool}


def build(reference):
    """The graph; the float64 reference runs its own source (ops whose defaults depend on the dtype take
    their working dtype's) with every float dtype as float64."""
    ns = {"torch": torch, "aten": ReferenceAten() if reference else torch.ops.aten, "inf": math.inf, "nan": math.nan, **WORKING_DTYPE_OPS}
    ns.update({k: torch.float64 if reference and v.is_floating_point else v for k, v in DTYPE_NAMES.items()})
    exec(REFERENCE_SOURCE if reference else SOURCE, ns)
    return ns["graph"]


def describe(name, eager, got, ref):
    if not isinstance(eager, torch.Tensor):
        return "" if eager == got else f"{name}: eager {eager!r}, target {got!r}"
    got = got.cpu()
    if got.shape != eager.shape or got.dtype != eager.dtype:
        return f"{name}: eager {eager.dtype}{list(eager.shape)}, target {got.dtype}{list(got.shape)}"
    if name in EXACT:  # every op it depends on is exact: it must equal eager bit for bit (a NaN any NaN)
        bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}.get(eager.element_size())
        same = ((eager.contiguous().view(bits) == got.contiguous().view(bits)) | (eager.isnan() & got.isnan())
                if eager.is_floating_point() else eager == got)
        bad = (~same).nonzero()
        return (f"{name}: {len(bad)} values differ from eager bit for bit (exact ops), first at {bad[0].tolist()}: "
                f"eager {eager[tuple(bad[0])].item()!r}, target {got[tuple(bad[0])].item()!r}") if len(bad) else ""
    if not eager.is_floating_point():
        bad = (got != eager).nonzero()
        return f"{name}: {len(bad)} integer/bool values differ, first at {bad[0].tolist()}" if len(bad) else ""
    if ref is not None and ref.shape == eager.shape:
        # eager's own overflow, excused as the harness's oracle does: where eager's NaN/inf is not
        # float64's (rounded to the dtype), a NaN/inf or a value within 1% of float64 (or within rounding
        # noise at the output's largest magnitude) passes; where float64 overflows the dtype and eager
        # does not, float64's value passes
        r64 = ref.cpu().double()
        rounded = r64.to(eager.dtype)
        same = lambda a, b: (a == b) | (torch.isnan(a) & torch.isnan(b))
        top = r64[torch.isfinite(r64)].abs().max().item() if bool(torch.isfinite(r64).any()) else 0.0
        slack = 0.01 * r64.abs() + 4 * torch.finfo(eager.dtype).eps * top
        near = torch.isfinite(got) & torch.isfinite(r64) & ((got.double() - r64).abs() <= slack)
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
        return (relative(name, eager.dtype, g, e, r) or biased(name, eager.dtype, g, e, r)) if BIAS else ""
    return (f"{name}: max abs err vs eager {err:.3g}; RMSE vs float64: target {rmse(g):.3g}, "
            f"eager {rmse(e):.3g}")


def relative(name, dtype, g, e, r):
    """The harness's relative check (without its rounding-spread allowance): the RMS of the target's
    errors vs float64 in ulps, at normal magnitudes, within ULP_RATIO x eager's plus ULP_SLACK."""
    if dtype not in ULP_DTYPES:
        return ""
    rms_g, rms_e = _rms(ulp_errors(g, r, dtype)), _rms(ulp_errors(e, r, dtype))
    if rms_g <= ULP_RATIO * rms_e + ULP_SLACK[dtype]:
        return ""
    return f"{name}: relative error: RMS vs float64 {rms_g:.3g} ulp, eager's {rms_e:.3g}"


def biased(name, dtype, g, e, r):
    """The harness's bias check (without its rounding-spread allowance): the target's mean signed error
    vs float64 in ulps, over distinct float64 values, further from 0 than eager's by BIAS_SIGMAS
    standard errors."""
    keep = torch.isfinite(g) & torch.isfinite(r) & (r != 0)
    distinct, groups = torch.unique(r[keep], return_inverse=True)
    if dtype not in BIAS_DTYPES or distinct.numel() < BIAS_MIN_ELEMENTS:
        return ""
    mean_g, se_g = mean_and_standard_error(signed_error_ulps(g[keep], r[keep], dtype), groups)
    mean_e, se_e = mean_and_standard_error(signed_error_ulps(e[keep], r[keep], dtype), groups)
    if abs(mean_g) - abs(mean_e) <= BIAS_SIGMAS * math.hypot(se_g, se_e):
        return ""
    return f"{name}: biased: mean signed error vs float64 {mean_g:+.3g} ulp, eager's {mean_e:+.3g}"


def checked():
    """crucible-sim: the kernels run under the simulator's memory checks, as the fuzzer ran them."""
    if not CHECKED:
        return contextlib.nullcontext()
    from simulator.session import checking

    return checking()


def at(call):
    """The input descriptions at a further call's shapes (a --dynamic finding; None: as generated)."""
    if call is None:
        return INPUTS
    out = []
    for d, shape in zip(INPUTS, call):
        d = dict(d, shape=list(shape))
        if d.get("expand_from") is not None:  # the stored dims follow the dims not broadcast along
            d["expand_from"] = [1 if s == 1 else n for s, n in zip(d["expand_from"], shape)]
        out.append(d)
    return out


def main():
    # a --dynamic finding: compiled once with symbolic sizes, called at the generated size and at CALLS
    compiled = torch.compile(build(False), backend=BACKEND, options=OPTIONS, dynamic=bool(CALLS))
    failed = False
    for call in [None, *CALLS]:
        descs = at(call)
        fresh = lambda: [make_input(d, DEVICE) for d in descs]
        try:
            eager = build(False)(*fresh())
        except Exception:
            continue  # not valid at this size (the fuzzer dropped it too)
        try:
            ref = build(True)(*[t.double().cpu() if t.is_floating_point() else t.cpu() for t in fresh()])
        except Exception:
            ref = None
        where = "" if call is None else f" (inputs {call})"
        try:
            with checked():
                got = compiled(*fresh())
        except Exception as exc:
            print(f"target {TARGET} raised {type(exc).__name__}{where}: {exc}")
            return 1
        lines = [describe(name, e.cpu() if isinstance(e, torch.Tensor) else e, g,
                          None if ref is None else ref[i]) for i, (name, e, g) in enumerate(zip(OUTPUTS, eager, got))]
        for line in lines:
            if line:
                print(line + where)
        failed = failed or any(lines)
    print(f"expected: {EXPECTED}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _values_source() -> str:
    source = inspect.getsource(values)
    return source.split("from __future__ import annotations\n", 1)[1].replace("import torch\n", "", 1)


def _helper_sources() -> tuple[str, ...]:
    """The oracle's and the graph's helpers that a repro embeds, as source text."""
    return tuple(inspect.getsource(fn) for fn in (oracle.signed_error_ulps, oracle.mean_and_standard_error,
                                                  oracle.ulp_errors, oracle._rms))


def _reference_ops_source() -> str:
    """The float64 reference's own ops (``harness.fuzz.reference_ops``) as source, without its imports."""
    source = inspect.getsource(reference_ops).split("from __future__ import annotations\n", 1)[1]
    return "\n".join(line for line in source.splitlines() if not line.startswith(("import ", "from ")))


# Read once, when the campaign imports this module: ``inspect.getsource`` reads a file as it is on disk
# at the call, at the line numbers of the code loaded earlier, so a campaign whose checkout was edited
# while it ran wrote repros embedding the wrong lines of the edited file in place of its helpers.
VALUES_SOURCE, HELPER_SOURCES, REFERENCE_OPS_SOURCE = _values_source(), _helper_sources(), _reference_ops_source()


def write_repro(graph: FuzzGraph, target: str, device: str | None, record: Result, how_found: str = "",
                tiers: bool = True) -> str:
    """The text of a standalone repro script for ``graph`` failing on ``target`` as ``record`` says;
    ``how_found``: the command line that found it (shell-quoted by the caller); ``tiers``: with the
    oracle's exact tier, relative check and bias check (``harness.fuzz.subject.compare_outputs``)."""
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
        "import contextlib", "import math", "import sys", "", "import torch", "", VALUES_SOURCE.strip(), "",
        f"TARGET = {target!r}", f"BACKEND = {backend!r}", f"CHECKED = {t.checked!r}",
        f"OPTIONS = {dict(t.options) or None!r}", f"DEVICE = {t.device!r}",
        f"EXPECTED = {'outputs as eager computes them (NaN/inf positions, integers exact, float error no worse than eager)'!r}",
        # Python literals (repr): JSON's false/true are no Python names
        f"INPUTS = {graph.inputs!r}", f"OUTPUTS = {graph.outputs!r}", f"CALLS = {graph.calls!r}",
        f"EXACT = {[o for o in graph.outputs if exact_cone(graph, o)] if tiers else []!r}", f"BIAS = {tiers!r}",
        f"BIAS_DTYPES = ({''.join(f'torch.{d}, '.replace('torch.torch.', 'torch.') for d in oracle.BIAS_DTYPES)})",
        f"BIAS_MIN_ELEMENTS = {oracle.BIAS_MIN_ELEMENTS!r}", f"BIAS_SIGMAS = {oracle.BIAS_SIGMAS!r}",
        f"ULP_DTYPES = ({''.join(f'torch.{d}, '.replace('torch.torch.', 'torch.') for d in oracle.ULP_DTYPES)})",
        f"ULP_RATIO = {oracle.ULP_RATIO!r}",
        "ULP_SLACK = {" + ", ".join(f"{d}: {v!r}" for d, v in oracle.ULP_SLACK.items()) + "}", "",
        *HELPER_SOURCES, REFERENCE_OPS_SOURCE.strip(),
        "WORKING_DTYPE_OPS = {" + ", ".join(f"{f.__name__!r}: {f.__name__}" for f in reference_ops.AS_WORKING.values()) + "}",
        f"SOURCE = '''\n{graph.source()}'''",
        f"REFERENCE_SOURCE = '''\n{graph.source(reference=True)}'''", _RUNNER,
    ]
    return "\n".join(header) + "\n" + "\n".join(body)


def _comment(text: str) -> list[str]:
    """``text`` as comment lines: an error message or a command line may hold newlines, which would
    otherwise end the comment and run the rest as code."""
    return [f"# {line}".rstrip() for line in text.splitlines() or [""]]
