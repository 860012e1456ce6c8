"""The parity oracle: is a compiled output as close to the truth as eager's?

The truth is the model run in float64 (on the CPU or the target's device). Eager in the working dtype has
its own rounding error against it; a compiled output passes when its RMSE against
the fp64 reference is at most ``rmse_ratio`` times eager's (plus a small absolute
floor, so an eager result that is bit-exact does not demand a bit-exact compiler).
Outputs too large to compare elementwise cheaply, and entries without a float64
reference, fall back to cosine similarity with eager plus an allclose check.

Non-finite values are compared explicitly: NaN and +-Inf must sit at the same
positions as in eager; the metrics use the finite positions only.

With ``bias=True`` a 16-bit output of at least ``BIAS_MIN_ELEMENTS`` values is also
checked for systematic error (``signed_error_ulps``): a cast that truncates where eager rounds is
within every RMSE ratio (its error is at most one ulp) but is half an ulp toward zero on average,
which a mean over hundreds of values shows many standard errors away from eager's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from corpus.entry import ToleranceOverride

# Above this many elements per output the oracle uses the cosine fallback.
HUGE_NUMEL = 50_000_000

# The bias check (``ParityOracle(bias=True)``): outputs of these dtypes with at least this many
# distinct finite, nonzero reference values. Below ~256 values a mean of rounding errors (each within half an
# ulp, standard deviation ~0.29 ulp) has a standard error above 0.02 ulp, and one correlated
# intermediate dominates it.
# float32 is left out: Crucible's float32 math written from primitives is biased by a fraction of an ulp
# where ATen's (Sleef) is not (fuzzer, crucible-cpp, seed 1: acos as atan2(sqrt((1-x)(1+x)), x), +0.33
# ulp on average against eager's +0.02 over 705 values), a quality difference rounding to 16 bits hides;
# the check is for conversions that truncate.
BIAS_DTYPES = (torch.float16, torch.bfloat16)
BIAS_MIN_ELEMENTS = 256
# Fail when the compiled mean signed error exceeds eager's by more than this many standard errors.
# Rounding to nearest gives a mean near 0; truncation gives -0.5 ulp, 20+ standard errors at 256
# values. 5 keeps a normal tail's chance below 1e-6 per output; four clean 120 s campaigns (3747 graphs,
# crucible-cpp and crucible-interpret) had no failure (harness/RESULTS.md).
BIAS_SIGMAS = 5.0
# The relative check (``ParityOracle(bias=True)``, the oracle tiers): the RMS of each element's error in
# ulps of its dtype at the float64 value's magnitude (``ulp_errors``), normal magnitudes only, may be
# ULP_RATIO times eager's (or the rounding-noise references', times BIAS_SPREAD_FACTOR) plus ULP_SLACK.
# The RMSE check's absolute floor (atol 1e-5) forgives any relative error of values below ~1e-2:
# float32 log1p's series with 2/3 for 1/3 is 1e-3 off at x = 0.05 (8000 ulps) and passed it (a
# `crucible mutate` survivor, harness/RESULTS.md). The slack is what Crucible's float32 formulas
# written from primitives may legitimately be off where ATen's are correctly rounded (a few ulps).
# float64's floor (atol 1e-7) forgave a float64 result rounded to float32 (6e-8 relative): the
# interpreter's float64 fmas through float32 survived `crucible mutate` (triton.py, seed 101). Its
# eager run is the reference's own computation (error 0), so the slack is the whole bound: 1024 ulps
# (2e-13 relative) lets Crucible's float64 formulas (a few ulps) and summation orders through.
ULP_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
ULP_RATIO = 4.0
ULP_SLACK = {torch.float32: 16.0, torch.float16: 1.0, torch.bfloat16: 1.0, torch.float64: 1024.0}
# The rounding-noise references perturb each rounded value by a unit roundoff, half an ulp; a
# compiled intermediate may legitimately be a whole ulp off (a sum rounded after another order), and
# an intermediate every element reads (a broadcast sum) makes that error common to all of them.
BIAS_SPREAD_FACTOR = 2.0


@dataclass(frozen=True)
class Tolerance:
    rmse_ratio: float  # compiled RMSE vs fp64 may be this many times eager's
    cosine: float  # minimum cosine similarity in the fallback
    atol: float
    rtol: float


# Per working dtype. rtol/atol follow torch.testing's defaults; the ratios follow
# the RMSE-ratio checks of PyTorch's own benchmark runners (looser for half types,
# whose rounding differs with every change of summation order or fusion).
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(rmse_ratio=2.0, cosine=0.999999, atol=1e-7, rtol=1e-7),
    "float32": Tolerance(rmse_ratio=2.0, cosine=0.9999, atol=1e-5, rtol=1.3e-6),
    "float16": Tolerance(rmse_ratio=3.0, cosine=0.99, atol=1e-5, rtol=1e-3),
    "bfloat16": Tolerance(rmse_ratio=3.0, cosine=0.99, atol=1e-5, rtol=1.6e-2),
}


@contextlib.contextmanager
def working_precision(allow_tf32: bool = False) -> Iterator[None]:
    """Eager, the compiled run and the reference run at the working dtype's full precision.

    The float32 tolerances above assume float32 arithmetic. torch lets cuDNN run float32
    convolutions on TF32 tensor cores by default (``torch.backends.cudnn.allow_tf32 = True``), and
    whether it does depends on the algorithm cuDNN picks for a memory layout. Measured on an H200
    (torch 2.11, cuDNN 9.19): the patch-embedding convolution of the ViT-family entries (beit, deit,
    ijepa, vitdet) ran in float32 in eager (NCHW) and in TF32 under Inductor, whose layout
    optimization makes it channels-last: RMSE against float64 15-27x eager's, max abs error
    7e-4..1.5e-3, and Inductor failed parity for cuDNN's choice, not its own numerics. With TF32
    off for cuDNN and cuBLAS both sides are float32 and Inductor is at 0.03-0.05x eager's RMSE
    (harness/FINDINGS.md). ``allow_tf32=True`` keeps torch's flags as they are.
    """
    if allow_tf32:
        yield
        return
    # torch._C's setters, not torch.backends' properties: importing torch's OpInfo test utilities
    # (the opinfo corpus does) freezes those ("not allowed to set torch.backends.cudnn flags after
    # disable_global_flags"), and their flags() context manager resets every other cuDNN flag.
    cudnn, matmul = torch._C._get_cudnn_allow_tf32(), torch._C._get_cublas_allow_tf32()
    torch._C._set_cudnn_allow_tf32(False)
    torch._C._set_cublas_allow_tf32(False)
    try:
        yield
    finally:
        torch._C._set_cudnn_allow_tf32(cudnn)
        torch._C._set_cublas_allow_tf32(matmul)


def tolerance_for(dtype: str, override: ToleranceOverride | None = None) -> Tolerance:
    base = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"])
    if override is None:
        return base
    changes = {f: getattr(override, f) for f in ("rmse_ratio", "cosine", "atol", "rtol")
               if getattr(override, f) is not None}
    return dataclasses.replace(base, **changes)


@dataclass
class ParityResult:
    passed: bool
    reason: str = ""  # why it failed (empty on pass)
    max_abs_err: float | None = None  # compiled vs eager
    max_rel_err: float | None = None
    rmse_ratio: float | None = None  # RMSE(compiled, fp64) / RMSE(eager, fp64), worst output
    cosine: float | None = None  # compiled vs eager, worst output
    # NaN/inf positions where eager overflowed and the compiled value is the float64 truth (not failed)
    excused_positions: int = 0
    # RMSE vs fp64 of the rounding-noise references (``compare(spread=...)``), worst output
    rounding_spread: float | None = None
    # failed only the RMSE-vs-fp64 comparison: what a rounding spread may excuse
    needs_spread: bool = False
    # floating outputs not compared (``compare(order_dependent=True)``)
    unjudged_outputs: int = 0
    # failed on NaN/inf positions only eager's overflow did not excuse: what ``rounded_steps`` may
    needs_rounded_steps: bool = False
    # mean signed error vs fp64 in ulps toward larger magnitude (``signed_error_ulps``) of the
    # compiled and the eager output, worst output by excess; None when no output was checked
    bias: float | None = None
    eager_bias: float | None = None
    # RMS error vs fp64 in ulps (``ulp_errors``) of the compiled output, worst output; None: none checked
    ulp_rms: float | None = None


def flatten_outputs(value: Any, prefix: str = "out") -> list[tuple[str, Any]]:
    """Flatten nested outputs to (path, leaf) pairs; leaves are tensors or scalars.

    Handles tuples, lists, dicts (HF ModelOutput is an OrderedDict), namedtuples
    and dataclasses. None leaves are dropped (optional outputs).
    """
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, (bool, int, float, complex)):
        return [(prefix, value)]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in flatten_outputs(v, f"{prefix}.{k}")]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [leaf for f in dataclasses.fields(value)
                for leaf in flatten_outputs(getattr(value, f.name), f"{prefix}.{f.name}")]
    if isinstance(value, (tuple, list)):
        return [leaf for i, v in enumerate(value) for leaf in flatten_outputs(v, f"{prefix}[{i}]")]
    # Anything else (strings, custom objects) is compared by equality.
    return [(prefix, value)]


def _as_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (bool, int, float)):
        return torch.tensor(x)
    return None


def nonfinite_mismatch(eager: torch.Tensor, compiled: torch.Tensor) -> str:
    """What differs in the NaN/inf positions of two tensors, or "": which kind, how many positions,
    and the first with both values (a known finding can match the direction, e.g. "eager nan, target")."""
    for name, where in (("NaN", torch.isnan), ("+Inf", lambda t: t == math.inf), ("-Inf", lambda t: t == -math.inf)):
        differ = where(eager) != where(compiled)
        if bool(differ.any()):
            first = tuple(differ.nonzero()[0].tolist())
            return (f"{name} positions differ from eager ({int(differ.sum())} of {differ.numel()}; first at "
                    f"{list(first)}: eager {eager[first].item()!r}, target {compiled[first].item()!r})")
    return ""


def _eager_overflow_excused(eager: torch.Tensor, compiled: torch.Tensor, reference: Any,
                            rounded_steps: Any = None) -> torch.Tensor | None:
    """Positions where a NaN/inf difference from eager is eager's own float overflow.

    With the float64 reference rounded to the working dtype as the truth: where eager's NaN/inf is
    not the truth (a product or partial sum overflowed), the compiled value passes when it is
    non-finite too (it overflowed as well, perhaps into inf where eager's inf + -inf gave NaN) or
    within 1% of the truth; where the truth itself overflows the dtype and eager stayed finite, it
    passes when it equals the truth. Returns the mask of excused positions, or None when any NaN/inf
    difference is of another kind (or there is no usable reference).

    Example (a GEMM fuzzed with finfo.max): eager's products -0.77 * -inf and -1.6 * 3.4e38 round to
    inf and -inf and sum to NaN; a kernel that fuses each product into the accumulation (FMA, as
    GPU GEMMs do) gives inf, which is the float64 result rounded to float32.

    ``rounded_steps``: the float64 computation with every step's result rounded to its working dtype
    (what a correctly rounded eager would give); a NaN/inf difference where the compiled value is
    that run's passes too. Example (fuzzer, crucible-cpp, seed 21): float16 pow(x, log_softmax(x))
    at x = -0.98: the log_softmax rounds to -6.0 (correctly; eager's kernel gives -6.0039), and
    pow of a negative base is finite at an integer exponent and NaN elsewhere."""
    rt = _as_tensor(reference)
    if rt is None or rt.shape != eager.shape or not rt.is_floating_point() or rt.is_complex():
        return None
    rt = rt.cpu()
    rounded = rt.to(eager.dtype)

    def same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a == b) | (torch.isnan(a) & torch.isnan(b))

    finite_e, finite_c = torch.isfinite(eager), torch.isfinite(compiled)
    nonfinite_differs = ~same(eager, compiled) & ~(finite_e & finite_c)
    eager_overflowed = ~finite_e & ~same(eager, rounded)
    # within 1% of the truth, or noise at the output's scale: a layer-norm row (1.1, -3.4e38, -1.2, 3.4e38)
    # is NaN in eager (its Welford overflows) and (4.7e-39, -1.41, -4.9e-39, 1.41) in Crucible, where
    # float64 gives 4.6e-39 and -5.0e-39 (fuzzer, crucible-cpp, seed 27)
    finite_r = torch.isfinite(rt)
    scale = rt.double()[finite_r].abs().max().item() if bool(finite_r.any()) else 0.0
    slack = 0.01 * rt.double().abs() + 4 * torch.finfo(eager.dtype).eps * scale
    near_truth = finite_c & finite_r & ((compiled.double() - rt.double()).abs() <= slack)
    truth_overflows = finite_e & ~torch.isfinite(rounded)
    excused = nonfinite_differs & ((eager_overflowed & (~finite_c | near_truth))
                                   | (truth_overflows & same(compiled, rounded)))
    if rounded_steps is not None:
        excused |= nonfinite_differs & _agrees(compiled, rounded_steps)
    return excused if torch.equal(excused, nonfinite_differs) else None


def _agrees(compiled: torch.Tensor, rounded_steps: Any) -> torch.Tensor:
    """Where ``compiled`` is the value of the computation with every step rounded to its working
    dtype (the same NaN or inf, or finite within 1%): False where that run is unusable."""
    st = _as_tensor(rounded_steps)
    if st is None or st.shape != compiled.shape or not st.is_floating_point() or st.is_complex():
        return torch.zeros(compiled.shape, dtype=torch.bool)
    st = st.cpu().double()
    c = compiled.double()
    both_nan = torch.isnan(c) & torch.isnan(st)
    same_inf = ~torch.isfinite(st) & (c == st)
    close = torch.isfinite(c) & torch.isfinite(st) & ((c - st).abs() <= 0.01 * st.abs())
    return both_nan | same_inf | close


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.sqrt(torch.mean((a - b) ** 2)).item() if a.numel() else 0.0


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 1.0
    scale = max(a.abs().max().item(), b.abs().max().item())
    if 0 < scale < math.inf:  # squares of values near 1e-308 underflow (a norm of 0), of 1e200 overflow
        a, b = a / scale, b / scale
    na, nb = a.norm().item(), b.norm().item()
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float((a.flatten() @ b.flatten()).item() / (na * nb))


def signed_error_ulps(x: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Each error of ``x`` against ``reference`` (float64 values) in ulps of ``dtype`` at the
    reference's magnitude, positive away from zero: a truncation toward zero is negative everywhere,
    rounding to nearest averages 0 whatever the signs. Only where both are finite and the reference
    is nonzero."""
    keep = torch.isfinite(x) & torch.isfinite(reference) & (reference != 0)
    x, r = x[keep].double(), reference[keep].double()
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(r)  # r = m * 2^exponent, 0.5 <= |m| < 1: one ulp is eps * 2^(exponent - 1)
    ulp = torch.ldexp(torch.full_like(r, info.eps), exponent - 1).clamp_min(info.smallest_normal * info.eps)
    return (x - r) * torch.sign(r) / ulp


def ulp_errors(x: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Each |error| of ``x`` against ``reference`` (float64 values of the same shape) in ulps of ``dtype``
    at the reference's magnitude, where both are finite and the reference is a normal number of
    ``dtype`` (subnormal results are left to the absolute checks: a flushed subnormal is off by
    millions of its tiny ulps and by nothing that matters)."""
    r = reference.double()
    keep = torch.isfinite(x) & torch.isfinite(r) & (r.abs() >= torch.finfo(dtype).smallest_normal)
    return signed_error_ulps(x[keep], r[keep], dtype).abs()


def _ulp_distance(x: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``ulp_errors`` at every position, NaN where it is not defined (the same shape as ``x``). Not built
    on by ``ulp_errors``: a finding's repro script carries that function's source alone."""
    r = reference.double()
    keep = torch.isfinite(x) & torch.isfinite(r) & (r.abs() >= torch.finfo(dtype).smallest_normal)
    out = torch.full(x.shape, math.nan, dtype=torch.float64)
    out[keep] = signed_error_ulps(x[keep], r[keep], dtype).abs()
    return out


def _rms(z: torch.Tensor) -> float:
    return torch.sqrt(torch.mean(z * z)).item() if z.numel() else 0.0


def mean_and_standard_error(z: torch.Tensor, groups: torch.Tensor | None = None) -> tuple[float, float]:
    """The mean of ``z`` and its standard error; with ``groups`` (a group index per value), of the
    group means: values of one group share their errors (copies of one value broadcast), so a group
    counts once."""
    if groups is not None:
        count = int(groups.max()) + 1 if groups.numel() else 0
        z = torch.zeros(count, dtype=z.dtype).index_add_(0, groups, z) / torch.bincount(groups, minlength=count)
    n = z.numel()
    return z.mean().item(), (z.std().item() / math.sqrt(n) if n > 1 else math.inf)


class ParityOracle:
    """Compare a compiled run's outputs with eager's and the float64 reference."""

    def __init__(self, dtype: str = "float32", override: ToleranceOverride | None = None,
                 bias: bool = False) -> None:
        self.dtype = dtype
        self.tol = tolerance_for(dtype, override)
        self.bias = bias  # also the bias check (``_bias``)

    def compare(self, eager: Any, compiled: Any, reference: Any = None, spread: list[Any] | None = None,
                order_dependent: bool = False, rounded_steps: Any = None) -> ParityResult:
        """Judge ``compiled`` against ``eager`` and the float64 ``reference``.

        ``spread``: float64 runs of the same computation with rounding noise (each value an op rounds
        in the working dtype perturbed by one unit roundoff, random sign: a Monte Carlo estimate of
        how much the computation amplifies rounding). The RMSE-vs-fp64 check then allows the ratio
        times the larger of eager's error and the spread's: an ill-conditioned step (exp of 54.6
        turns one ulp into 55) makes a correct kernel's error many times a lucky eager's.
        ``rounded_steps``: the computation in float64 with every step rounded to its working dtype;
        a NaN/inf difference where the compiled value is that run's passes (see
        ``_eager_overflow_excused``); ``needs_rounded_steps`` says when it would be read.
        ``order_dependent``: floating outputs, and integer/bool outputs that differ, are checked for
        shape and dtype only, and counted in ``unjudged_outputs`` (the caller knows float64 values near the top of its range reach an
        accumulating op: overflow and cancellation then depend on the evaluation order, and no wider
        reference can say which order is right)."""
        e_leaves, c_leaves = flatten_outputs(eager), flatten_outputs(compiled)
        r_leaves = flatten_outputs(reference) if reference is not None else None
        s_leaves = [flatten_outputs(s) for s in spread or []]
        q_leaves = flatten_outputs(rounded_steps) if rounded_steps is not None else None
        if q_leaves is not None and [p for p, _ in q_leaves] != [p for p, _ in e_leaves]:
            q_leaves = None
        if r_leaves is None or any([p for p, _ in s] != [p for p, _ in r_leaves] for s in s_leaves):
            s_leaves = []
        if [p for p, _ in e_leaves] != [p for p, _ in c_leaves]:
            return ParityResult(False, f"output structure differs: eager {[p for p, _ in e_leaves]}, "
                                       f"compiled {[p for p, _ in c_leaves]}")
        if r_leaves is not None and [p for p, _ in r_leaves] != [p for p, _ in e_leaves]:
            r_leaves = None  # the fp64 run took another path; fall back to eager-only checks
        result = ParityResult(True, max_abs_err=0.0, max_rel_err=0.0)
        for i, (path, e) in enumerate(e_leaves):
            c = c_leaves[i][1]
            r = r_leaves[i][1] if r_leaves is not None else None
            q = q_leaves[i][1] if q_leaves is not None else None
            reason = self._compare_leaf(result, e, c, r, [s[i][1] for s in s_leaves], order_dependent, q)
            if reason and result.passed:
                result.passed, result.reason = False, f"{path}: {reason}"
        return result

    def _compare_leaf(self, result: ParityResult, e: Any, c: Any, r: Any, spread: list[Any],
                      order_dependent: bool, rounded_steps: Any = None) -> str:
        et, ct = _as_tensor(e), _as_tensor(c)
        if et is None or ct is None:
            return "" if e == c else f"value differs: eager {e!r}, compiled {c!r}"
        if et.shape != ct.shape:
            return f"shape differs: eager {tuple(et.shape)}, compiled {tuple(ct.shape)}"
        if et.dtype != ct.dtype:
            return f"dtype differs: eager {et.dtype}, compiled {ct.dtype}"
        if not (et.is_floating_point() or et.is_complex()):
            if torch.equal(et.cpu(), ct.cpu()):
                return ""
            # where eager's float rounding flipped a comparison (or an argmax) that the float64
            # reference decides the other way, the compiled value may be the reference's: the
            # logical_and of a group norm that is exactly 0 (float64, Crucible) and ~1e-8 (eager)
            rt = _as_tensor(r)
            if rt is not None and rt.shape == et.shape and not (rt.is_floating_point() or rt.is_complex()):
                differs = et.cpu() != ct.cpu()
                if bool((ct.cpu()[differs] == rt.cpu().to(ct.dtype)[differs]).all()):
                    result.excused_positions += int(differs.sum())
                    return ""
            if order_dependent:
                # an index or comparison of values whose float digits depend on the evaluation
                # order (a stable sort's indices of sums of +-3.4e38 that cancel: fuzzer,
                # crucible-interpret, seed 82) depends on the order just as much
                result.unjudged_outputs += 1
                return ""
            return "integer/bool values differ from eager"
        if order_dependent:
            result.unjudged_outputs += 1
            return ""
        et, ct = et.cpu(), ct.cpu()
        if et.is_complex():  # resolve_conj: ihfft and friends return lazily conjugated views
            et, ct = torch.view_as_real(et.resolve_conj()), torch.view_as_real(ct.resolve_conj())
        mismatch = nonfinite_mismatch(et, ct)
        if mismatch:
            excused = _eager_overflow_excused(et, ct, r, rounded_steps)
            if excused is None:
                result.needs_rounded_steps = rounded_steps is None
                return mismatch
            keep = ~excused  # judge the other positions as usual
            et, ct, r = et[keep], ct[keep], _as_tensor(r).cpu()[keep]
            spread = [_as_tensor(s).cpu()[keep] for s in spread if _as_tensor(s) is not None
                      and _as_tensor(s).shape == keep.shape]
            result.excused_positions += int(excused.sum())
        finite = torch.isfinite(et)
        e64, c64 = et[finite].double(), ct[finite].double()
        diff = (c64 - e64).abs()
        max_abs = diff.max().item() if diff.numel() else 0.0
        max_rel = (diff / e64.abs().clamp_min(1e-12)).max().item() if diff.numel() else 0.0
        cos = _cosine(c64, e64)
        result.max_abs_err = max(result.max_abs_err or 0.0, max_abs)
        result.max_rel_err = max(result.max_rel_err or 0.0, max_rel)
        result.cosine = cos if result.cosine is None else min(result.cosine, cos)
        close = self._allclose(c64, e64)
        rt = _as_tensor(r)
        use_reference = (rt is not None and rt.shape == et.shape and et.numel() <= HUGE_NUMEL
                         and rt.is_floating_point())
        if use_reference:
            rt = rt.cpu()
            if rt.is_complex():
                rt = torch.view_as_real(rt)
            known = torch.isfinite(rt)
            if not known[finite].any():
                use_reference = False  # the fp64 run overflowed differently: no usable truth
            elif not known[finite].all():
                # judge the positions the fp64 run has a value for: at a domain edge the working dtype
                # rounds onto the domain and float64 past it (fuzzer, crucible-interpret with
                # split_reductions=true, seed 304: asin of a bfloat16 layer norm, 1 of 260 values NaN
                # in float64 only). Eager's layer norm had overflowed to 0 there, so the fallback,
                # cosine against eager, failed a compiled output within 0.007 of float64 elsewhere
                finite = finite & known
                e64, c64 = et[finite].double(), ct[finite].double()
                close = self._allclose(c64, e64)
            r64 = rt[finite].double()
        if not use_reference:
            if close or cos >= self.tol.cosine:
                return ""
            return f"cosine {cos:.6f} < {self.tol.cosine} and not allclose (max abs err {max_abs:.3g})"
        rmse_eager, rmse_compiled = _rmse(e64, r64), _rmse(c64, r64)
        # An exact eager would make any rounding difference an infinite ratio; the
        # floor is the absolute error a dtype's rounding makes at this magnitude.
        scale = r64.abs().mean().item() if r64.numel() else 0.0
        floor = self.tol.atol + self.tol.rtol * scale
        noise = self._spread(spread, finite, et.shape, r64)
        if noise is not None:
            result.rounding_spread = noise if result.rounding_spread is None else max(result.rounding_spread, noise)
        bound = max(rmse_eager, noise or 0.0)
        ratio = rmse_compiled / max(bound, floor)
        result.rmse_ratio = ratio if result.rmse_ratio is None else max(result.rmse_ratio, ratio)
        if close or rmse_compiled <= self.tol.rmse_ratio * bound + floor:
            if not self.bias:
                return ""
            return (self._relative(result, et.dtype, c64, e64, r64, spread, finite, et.shape)
                    or self._bias(result, et.dtype, c64, e64, r64, spread, finite, et.shape))
        result.needs_spread = noise is None
        spread_text = "" if noise is None else f", rounding spread {noise:.3g}"
        return (f"RMSE vs fp64 {rmse_compiled:.3g} > {self.tol.rmse_ratio} x eager's {rmse_eager:.3g}{spread_text} "
                f"(+{floor:.2g}); max abs err vs eager {max_abs:.3g}")

    def _allclose(self, c64: torch.Tensor, e64: torch.Tensor) -> bool:
        """Every compiled value within the tolerance's atol + rtol * |eager| (True when there are none)."""
        return bool(torch.all((c64 - e64).abs() <= self.tol.atol + self.tol.rtol * e64.abs()))

    def _relative(self, result: ParityResult, dtype: torch.dtype, c64: torch.Tensor, e64: torch.Tensor,
                  r64: torch.Tensor, spread: list[Any], finite: torch.Tensor, shape: torch.Size) -> str:
        """Whether the RMS of the compiled errors in ulps (``ulp_errors``) exceeds ``ULP_RATIO`` times
        eager's (or ``BIAS_SPREAD_FACTOR`` times the rounding-noise references') plus ``ULP_SLACK``: ""
        when not, or when the output is not checked. Small values weigh as much as large ones here,
        which the RMSE check's absolute floor does not let them. With ``spread``, judged twice: over
        every position, and over those the rounding-noise references move by at most ``ULP_SLACK``."""
        if dtype not in ULP_DTYPES or c64.shape != e64.shape or c64.shape != r64.shape:
            return ""
        samples = [st.cpu()[finite].double() for st in map(_as_tensor, spread)
                   if st is not None and st.shape == shape and st.is_floating_point() and not st.is_complex()]
        reason = self._relative_at(result, dtype, c64, e64, r64, samples)
        # the positions the modelled rounding alone moves past the slack (values out of cancellation:
        # gelu's tail, a cancelling sum) would set a bound that forgives every other position. Where
        # they are most of the output, the few others are no safer: two noise streams whose effects
        # cancel in one reference cancel in its antithetic partner too, so a sensitive position can look
        # still in both (fuzzer, crucible-cpp, seed 336: fmod by 1.3e-38 of a float64 addcdiv, 126 of 128
        # positions moved by 1e16 ulps, and a 1-ulp difference of the addcdiv failed at 1 of the 2 left)
        kept = torch.ones_like(r64, dtype=torch.bool)
        for s64 in samples:
            kept &= ~(_ulp_distance(s64, r64, dtype) > ULP_SLACK[dtype])  # (NaN compares False: kept)
        if not reason and kept.any() and 2 * kept.sum() >= kept.numel() and not kept.all():
            reason = self._relative_at(result, dtype, c64[kept], e64[kept], r64[kept], [s[kept] for s in samples])
        return reason

    def _relative_at(self, result: ParityResult, dtype: torch.dtype, c64: torch.Tensor, e64: torch.Tensor,
                     r64: torch.Tensor, samples: list[torch.Tensor]) -> str:
        rms_c, rms_e = _rms(ulp_errors(c64, r64, dtype)), _rms(ulp_errors(e64, r64, dtype))
        bound, noise_text = rms_e, ""
        noise = [_rms(ulp_errors(s64, r64, dtype)) for s64 in samples]
        if noise:
            bound = max(bound, BIAS_SPREAD_FACTOR * max(noise))
            noise_text = f", rounding spread's {max(noise):.3g}"
        result.ulp_rms = rms_c if result.ulp_rms is None else max(result.ulp_rms, rms_c)
        if rms_c <= ULP_RATIO * bound + ULP_SLACK[dtype]:
            return ""
        result.needs_spread = not noise
        return (f"relative error: RMS vs fp64 {rms_c:.3g} ulp > {ULP_RATIO:g} x eager's {rms_e:.3g}{noise_text} "
                f"(+{ULP_SLACK[dtype]:g})")

    def _bias(self, result: ParityResult, dtype: torch.dtype, c64: torch.Tensor, e64: torch.Tensor,
              r64: torch.Tensor, spread: list[Any], finite: torch.Tensor, shape: torch.Size) -> str:
        """Whether the compiled mean signed error (``signed_error_ulps``) is further from 0 than eager's
        by more than ``BIAS_SIGMAS`` standard errors of the difference: "" when not, or when the output
        is not checked. With ``spread``, the rounding-noise references' mean signed error (times
        ``BIAS_SPREAD_FACTOR``) may stand in for eager's, as for the RMSE."""
        if dtype not in BIAS_DTYPES or c64.shape != e64.shape or c64.shape != r64.shape:
            return ""
        keep = torch.isfinite(c64) & torch.isfinite(r64) & (r64 != 0)
        # equal reference values are one sample (an expanded input holds one value 512 times, and a
        # kernel one ulp off there is off everywhere)
        distinct, groups = torch.unique(r64[keep], return_inverse=True)
        if distinct.numel() < BIAS_MIN_ELEMENTS:
            return ""
        c64, e64, r64 = c64[keep], e64[keep], r64[keep]
        mean_c, se_c = mean_and_standard_error(signed_error_ulps(c64, r64, dtype), groups)
        mean_e, se_e = mean_and_standard_error(signed_error_ulps(e64, r64, dtype), groups)
        bound, noise_text = abs(mean_e), ""
        noise = []
        for s in spread:
            st = _as_tensor(s)
            if st is not None and st.shape == shape and st.is_floating_point() and not st.is_complex():
                noise.append(abs(mean_and_standard_error(signed_error_ulps(st.cpu()[finite].double()[keep], r64,
                                                                           dtype))[0]))
        if noise:
            bound = max(bound, BIAS_SPREAD_FACTOR * max(noise))
            noise_text = f", rounding spread's {max(noise):.3g}"
        excess, se = abs(mean_c) - bound, math.hypot(se_c, se_e)
        if result.bias is None or excess > abs(result.bias) - abs(result.eager_bias or 0.0):
            result.bias, result.eager_bias = mean_c, mean_e
        if excess <= BIAS_SIGMAS * se:
            return ""
        result.needs_spread = not noise
        return (f"biased: mean signed error vs fp64 {mean_c:+.3g} ulp (eager's {mean_e:+.3g}{noise_text}) over "
                f"{distinct.numel()} distinct values, {excess / se:.1f} standard errors beyond (> {BIAS_SIGMAS:g})")

    @staticmethod
    def _spread(spread: list[Any], finite: torch.Tensor, shape: torch.Size, r64: torch.Tensor) -> float | None:
        """The largest RMSE vs fp64 of the rounding-noise references at the judged positions (None:
        none usable; positions a noisy run made non-finite are left out of its RMSE)."""
        rmses = []
        for s in spread:
            st = _as_tensor(s)
            if st is None or st.shape != shape or not st.is_floating_point() or st.is_complex():
                continue
            s64 = st.cpu()[finite].double()
            ok = torch.isfinite(s64)
            rmses.append(_rmse(s64[ok], r64[ok]))
        return max(rmses) if rmses else None


def outputs_identical(a: Any, b: Any) -> bool:
    """Bitwise equality of two eager runs (NaN equal to NaN), for nondeterminism detection."""
    la, lb = flatten_outputs(a), flatten_outputs(b)
    if [p for p, _ in la] != [p for p, _ in lb]:
        return False
    for (_, x), (_, y) in zip(la, lb):
        tx, ty = _as_tensor(x), _as_tensor(y)
        if tx is None or ty is None:
            if x != y:
                return False
        elif not _same_bits(tx, ty):
            return False
    return True


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    x, y = x.detach().cpu(), y.detach().cpu()
    if x.is_quantized:  # quantized models (torchvision's int8 entries): compare what they stand for
        x, y = x.dequantize(), y.dequantize()
    if x.is_complex():
        x, y = torch.view_as_real(x.resolve_conj()), torch.view_as_real(y.resolve_conj())
    if x.is_floating_point():
        return bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all())
    return torch.equal(x, y)
