"""Decomposition-rule fuzzing: each rule against the ATen op it replaces, on generated inputs.

Rules: every entry of the table Crucible hands AOTAutograd (``decomposition_table_for_compiler``):
a rule of ``compiler.decompositions.RULES`` under its own name, any other core-ATen
decomposition torch applies for us as ``core:<op>`` (``core:aten::addmm``). Inputs: for an op
in the fuzzer's op table, hypothesis draws one-node graphs over fresh inputs (special values,
0-size dims, non-contiguous layouts included) and shrinks failures; for other ops, calls
captured from OpInfo sample inputs (forward and backward) under a dispatch mode, with values
hypothesis may replace by special ones. Rules with neither are listed as uncovered. Each case runs
through the execution engine (``harness.fuzz.decomp_subject``), graded by ``compare``.

Verdict per output: structure, shape and dtype equal the op's (empty outputs included);
integer and bool values equal; NaN and +-inf where the op has them; each float element no
further from the float64 reference than the op's own result is, plus a tolerance of about
two units in the last place of the dtype.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.oracle import flatten_outputs

# rtol per working dtype: ~2 ulp (float16 2^-10, bfloat16 2^-7), float32 a little looser for
# reassociated sums; the absolute part scales with the output (see compare).
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@dataclass(frozen=True)
class Rule:
    name: str
    op: Any
    fn: Any


def decomposition_rules() -> dict[str, Rule]:
    from compiler.decompositions import RULES, decomposition_table_for_compiler

    named = {r.op: r.name for r in RULES.values()}
    rules: dict[str, Rule] = {}
    for op, fn in decomposition_table_for_compiler().items():
        if not isinstance(op, torch._ops.OpOverload):
            continue
        name = named.get(op) or f"core:{op.name()}"
        rules[name] = Rule(name, op, fn)
    return rules


def select_rules(patterns: list[str] | None) -> list[Rule]:
    rules = decomposition_rules()
    if not patterns:
        return list(rules.values())
    chosen = [r for n, r in rules.items() if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not chosen:
        raise ValueError(f"--rule {', '.join(patterns)} matches no decomposition rule; "
                         f"`crucible fuzz-decomps --list` lists the {len(rules)} rules")
    return chosen


def to64(value: Any) -> Any:
    """``value`` with every float tensor in float64 (the reference's inputs)."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(to64(v) for v in value)
    return value


def to64_rounded(value: Any, seed: int = 0) -> Any:
    """Like ``to64``, each float element moved by half a unit in the last place of its own dtype
    (signs drawn from ``seed``): the float64 op on these inputs shows how much the output depends on
    how its inputs were rounded to the working dtype. That is a noise floor no formula beats: where
    terms of 1e2 cancel to 1e-9 (a batch norm backward over centred inputs), it is ~1e-7 in float32."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        half_ulp = torch.finfo(value.dtype).eps / 2
        gen = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, value.shape, generator=gen, dtype=torch.float64) * 2 - 1
        return value.double() * (1 + half_ulp * signs.to(value.device))
    if isinstance(value, (list, tuple)):
        return type(value)(to64_rounded(v, seed + i + 1) for i, v in enumerate(value))
    if isinstance(value, dict):
        return {k: to64_rounded(v, seed + i + 1) for i, (k, v) in enumerate(value.items())}
    return value


def _noise(rounded: Any, ref: torch.Tensor, shape: torch.Size) -> torch.Tensor | float:
    if not isinstance(rounded, torch.Tensor) or rounded.shape != shape or not isinstance(ref, torch.Tensor):
        return 0.0
    return torch.nan_to_num((rounded.double().cpu() - ref.double().cpu()).abs(), nan=0.0, posinf=0.0)


def compare(orig: Any, dec: Any, ref: Any, rounded: Any = None, floats: bool = True) -> str:
    """Why the decomposition's outputs ``dec`` are worse than the op's ``orig`` ("" when not).
    ``rounded``: the float64 op on inputs moved by half an ulp (``to64_rounded``), whose distance
    from ``ref`` is allowed on top (twice: one draw of the rounding). ``floats`` False: float outputs
    are checked for structure, shape and dtype only (float64 values near the top of float64's range
    reach an accumulation: its overflow depends on the order, as the graph fuzzer's
    ``order_dependent``)."""
    lo, ld = flatten_outputs(orig), flatten_outputs(dec)
    if [p for p, _ in lo] != [p for p, _ in ld]:
        return f"structure: op returns {[p for p, _ in lo]}, decomposition {[p for p, _ in ld]}"
    lr = flatten_outputs(ref) if ref is not None else None
    if lr is not None and [p for p, _ in lr] != [p for p, _ in lo]:
        lr = None
    lq = flatten_outputs(rounded) if rounded is not None and lr is not None else None
    if lq is not None and [p for p, _ in lq] != [p for p, _ in lo]:
        lq = None
    for i, ((path, o), (_, d)) in enumerate(zip(lo, ld)):
        if not isinstance(o, torch.Tensor) or not isinstance(d, torch.Tensor):
            if o != d and not (isinstance(o, float) and math.isnan(o) and math.isnan(d)):
                return f"{path}: value: op {o!r}, decomposition {d!r}"
            continue
        if o.shape != d.shape:
            return f"{path}: shape: op {list(o.shape)}, decomposition {list(d.shape)}"
        if o.dtype != d.dtype:
            return f"{path}: dtype: op {o.dtype}, decomposition {d.dtype}"
        if not o.is_floating_point():
            if not torch.equal(o, d):
                return f"{path}: integer/bool values differ"
            continue
        if not floats:
            continue
        r = lr[i][1] if lr is not None else None
        right = _agrees_with_reference(d, r)
        for label, mask in (("NaN", torch.isnan), ("+inf", lambda t: t == math.inf),
                            ("-inf", lambda t: t == -math.inf)):
            if ((mask(o) != mask(d)) & ~right).any():
                return f"{path}: {label} positions differ from the op"
        finite = torch.isfinite(o) & torch.isfinite(d)  # elsewhere both agree, or the rule is right
        if not finite.any():
            continue
        ov, dv = o[finite].double(), d[finite].double()
        rv = r[finite].double() if isinstance(r, torch.Tensor) and r.shape == o.shape else ov
        noise = _noise(lq[i][1], r, o.shape) if lq is not None and rv is not ov else 0.0
        noise = noise[finite.cpu()].to(ov.device) if isinstance(noise, torch.Tensor) else noise
        if not torch.isfinite(rv).all():
            rv, noise = ov, 0.0
        rtol = RTOL.get(o.dtype, 1e-5)
        op_err = (ov - rv).abs()
        # Per element: no further from float64 than the op there, plus ~2 ulp of the element and
        # of the output's largest magnitude (cancellation), plus the op's own worst error anywhere
        # (a rule may round differently, never be worse than the op at its worst).
        # float64 cases: the reference is the op itself, so cancellation noise (1e-14 where the op
        # rounds and the rule is exact) needs an absolute floor the output's scale cannot give.
        floor = 1e-12 if o.dtype == torch.float64 else 1e-30
        tol = rtol * rv.abs() + rtol * rv.abs().max() + op_err.max() + floor
        excess = (dv - rv).abs() - op_err - tol - 2 * noise
        if (excess > 0).any():
            j = int(excess.argmax())
            return (f"{path}: {int((excess > 0).sum())} elements worse than the op, e.g. op {ov[j].item():.6g}, "
                    f"decomposition {dv[j].item():.6g}, float64 {rv[j].item():.6g}")
    return ""


def _agrees_with_reference(d: torch.Tensor, r: Any) -> torch.Tensor:
    """Where the rule's value is the float64 reference's in the working dtype: a NaN, an inf it
    overflows to, or a finite value within 2 ulp. There a NaN/inf pattern that differs from the
    op's is the op's own overflow (native_layer_norm_backward's kernel gives inf - inf = NaN where
    the float64 result, -1.2e74, is -inf in float32 and the rule gives -inf), not the rule's fault."""
    if not isinstance(r, torch.Tensor) or r.shape != d.shape:
        return torch.zeros(d.shape, dtype=torch.bool, device=d.device)
    rounded = r.to(d.dtype).to(d.device)
    same_special = (torch.isnan(d) & torch.isnan(rounded)) | (~torch.isfinite(rounded) & (d == rounded))
    finite = torch.isfinite(rounded) & torch.isfinite(d)
    # within 2 ulp of the element or of the output's largest magnitude, as the values are judged
    # (compare): a row's tiny elements after cancellation are noise at the row's scale (layer norm of
    # (-3.4e38, 1e4, 0.84, -0.60, 3.4e38): the op NaN, the rule -1.58, 3.3e-35, ..., float64 3.7e-35)
    scale = rounded.double()[finite].abs().max() if finite.any() else 0.0
    close = finite & ((d.double() - rounded.double()).abs()
                      <= 2 * RTOL.get(d.dtype, 1e-5) * (rounded.double().abs() + scale))
    return same_special | close


def reason_kind(status: str, reason: str) -> str:
    """The error part of a rule finding's signature: the oracle's criterion, the exception type, or
    for a worker that died the signal (``crucible fuzz``'s ``error_kind`` says the same)."""
    if status in ("timeout", "oom"):
        return str(status)
    if status == "crash":
        return reason.split(" during ")[0].removeprefix("worker died from ")
    for marker, kind in (("NaN positions", "nan_positions"), ("inf positions", "inf_positions"),
                         ("integer/bool", "integer_values"), ("shape:", "shape"), ("dtype:", "dtype"),
                         ("structure:", "structure"), ("worse than the op", "error"), ("value:", "value")):
        if marker in reason:
            return kind
    return reason.split(":")[0] if status != "fail_accuracy" else "accuracy"


class RedirectedAten:
    """``aten`` for a graph's source where one overload means a decomposition rule."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    def __getattr__(self, name: str) -> Any:
        packet = getattr(torch.ops.aten, name)
        rule = self.rule

        class Packet:
            def __getattr__(self, overload: str) -> Any:
                op = getattr(packet, overload)
                return rule.fn if op is rule.op else op

        return Packet()
