"""Math formulas over IR expressions: ``V``, operator sugar over ``Expr``, and the functions
(tanh, expm1, atan, round-half-even, ...; pow is in ``powers``) written from the IR's primitives,
so every renderer's op table stays small and interpreter-safe. Pointwise and reduction lowerings use them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler import ir
from compiler.ir import Expr, Op


class V:
    """Operator sugar over Expr for writing math formulas; constants take V's dtype."""

    __slots__ = ("e",)

    def __init__(self, e: Expr) -> None:
        self.e = e

    def _c(self, other: Any) -> Expr:
        if isinstance(other, V):
            return other.e
        if isinstance(other, (bool, int, float)):
            return ir.const(other, self.e.dtype)
        return ir.cast(ir.size(other), self.e.dtype)  # a symbolic size (``compiler.sizes``)

    def __add__(self, o: Any) -> V:
        return V(ir.binary(Op.ADD, self.e, self._c(o)))

    __radd__ = __add__

    def __sub__(self, o: Any) -> V:
        return V(ir.binary(Op.SUB, self.e, self._c(o)))

    def __rsub__(self, o: Any) -> V:
        return V(ir.binary(Op.SUB, self._c(o), self.e))

    def __mul__(self, o: Any) -> V:
        return V(ir.binary(Op.MUL, self.e, self._c(o)))

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> V:
        return V(ir.binary(Op.DIV, self.e, self._c(o)))

    def __rtruediv__(self, o: Any) -> V:
        return V(ir.binary(Op.DIV, self._c(o), self.e))

    def __neg__(self) -> V:
        return V(ir.unary(Op.NEG, self.e))

    def __lt__(self, o: Any) -> V:
        return V(ir.binary(Op.LT, self.e, self._c(o)))

    def __le__(self, o: Any) -> V:
        return V(ir.binary(Op.LE, self.e, self._c(o)))

    def __gt__(self, o: Any) -> V:
        return V(ir.binary(Op.GT, self.e, self._c(o)))

    def __ge__(self, o: Any) -> V:
        return V(ir.binary(Op.GE, self.e, self._c(o)))

    def eq(self, o: Any) -> V:
        return V(ir.binary(Op.EQ, self.e, self._c(o)))

    def ne(self, o: Any) -> V:
        return V(ir.binary(Op.NE, self.e, self._c(o)))

    def __and__(self, o: V) -> V:
        return V(ir.binary(Op.AND, self.e, o.e))

    def __or__(self, o: V) -> V:
        return V(ir.binary(Op.OR, self.e, o.e))

    def u(self, op: Op) -> V:
        return V(ir.unary(op, self.e))


def sel(cond: V, a: V | float, b: V | float, like: V | None = None) -> V:
    """where(cond, a, b); python numbers take the dtype of the other arm (or ``like``)."""
    ref = a if isinstance(a, V) else b if isinstance(b, V) else like
    if ref is None:
        raise TypeError("sel() needs a tensor arm or like=")
    return V(ir.where(cond.e, ref._c(a), ref._c(b)))


def vabs(x: V) -> V:
    return x.u(Op.ABS)


def vexp(x: V) -> V:
    return x.u(Op.EXP)


def vlog(x: V) -> V:
    return x.u(Op.LOG)


def vsqrt(x: V) -> V:
    return x.u(Op.SQRT)


def vmax(a: V, b: V) -> V:
    return V(ir.binary(Op.MAX, a.e, b.e))


def vmin(a: V, b: V) -> V:
    return V(ir.binary(Op.MIN, a.e, b.e))


def expm1(x: V) -> V:
    if x.e.dtype == torch.float64:
        return _expm1_f64(x)
    # exp(x) - 1 cancels near 0 (8.5 ulps at x = 0.117 with the switch at 0.1): below 0.5 a Taylor
    # series to x^9 (remainder under 0.01 ulp), as x (1 + x (...)): x + x^2 (...) would turn -0.0 into +0.0.
    c = [1 / math.factorial(k) for k in range(2, 10)]
    p = c[-1]
    for k in reversed(c[:-1]):
        p = x * p + k
    return sel(vabs(x) < 0.5, x * (1 + x * p), vexp(x) - 1)


def log1p(x: V) -> V:
    if x.e.dtype == torch.float64:
        return _log1p_quotient(x)
    series = x * (1 + x * (-0.5 + x * (1 / 3 + x * (-0.25 + x * (0.2 + x * (-1 / 6))))))
    # log(x + 1) alone loses x + 1's rounding: 11 ulps at x = 0.0617 (fuzzer, crucible-cpp, seed 229:
    # a float64 cumsum of it 19x eager's error); Kahan's quotient cancels it (the float64 form below)
    return sel(vabs(x) < 0.05, series, _log1p_quotient(x))


# float64 forms: the float32 series and polynomials above are good to ~1e-8 relative in float64
# (atan 2e-8, expm1 2e-10, log1p 2e-9 measured over randn inputs), which a float64 graph's parity
# check sees (logit(acos(x)) failed it). Kahan's quotients cancel the rounding of exp/log to a
# few ulps; atan is Cephes's double-precision rational form.
def _expm1_f64(x: V) -> V:
    u = vexp(x)
    # the quotient first: (u - 1) * x overflowed for x near 709 (u - 1 ~ 8e307), as log(u) * x did
    # in log1p (fuzzer, crucible-cpp, seed 13: log1p(1.8e308) was inf, eager 709.78)
    r = (u - 1) * (x / vlog(u))
    return sel(u.eq(1), x, sel((u - 1).eq(-1), -1.0, sel(u.eq(math.inf), math.inf, r)))


def _log1p_quotient(x: V) -> V:
    u = x + 1
    r = vlog(u) * (x / (u - 1))
    return sel(u.eq(1), x, sel(u.eq(math.inf), math.inf, r))


_ATAN_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
           -1.228866684490136173410e2, -6.485021904942025371773e1)
_ATAN_Q = (2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964425e2)

def _atan_f64(x: V) -> V:
    a = vabs(x)
    big = a > 2.41421356237309504880  # tan(3pi/8)
    mid = a > 0.66
    t = sel(big, -1 / a, sel(mid, (a - 1) / (a + 1), a))
    base = sel(big, math.pi / 2, sel(mid, math.pi / 4, 0.0, like=x))
    z = t * t
    p = z * 0 + _ATAN_P[0]
    for c in _ATAN_P[1:]:
        p = p * z + c
    q = z + _ATAN_Q[0]
    for c in _ATAN_Q[1:]:
        q = q * z + c
    r = base + (t * (z * p / q) + t)
    return sel(signbit(x), -r, r)  # atan(-0.0) is -0.0


def sigmoid(x: V) -> V:
    return 1 / (vexp(-x) + 1)


def tanh(x: V) -> V:
    """|tanh| as -m / (m + 2) with m = expm1(-2|x|) near 0, and as 1 - 2 / (expm1(2|x|) + 2) past
    log(3)/2 (musl's split): there m is near -1 and its rounding decides the result's last bit (at
    |x| = 8.99 the first form gives 1.0 where tanh rounds to 1 - 2^-24, and erfinv of it +inf:
    fuzzer, crucible-sim, seed 376). One expm1 serves both forms."""
    a = vabs(x)
    big = a > 0.5493061443340549
    t = expm1(sel(big, a * 2, a * -2))
    q = sel(big, -2.0, -t) / (t + 2)
    mag = sel(big, q + 1, q)
    return sel(signbit(x), -mag, mag)  # tanh(-0.0) is -0.0


def atan(x: V) -> V:
    if x.e.dtype == torch.float64:
        return _atan_f64(x)
    # Range reduction to |t| <= tan(pi/12), then an odd minimax polynomial (Cephes atanf).
    a = vabs(x)
    big = a > 2.414213562373095
    mid = a > 0.4142135623730950
    t = sel(big, -1 / a, sel(mid, (a - 1) / (a + 1), a))
    base = sel(big, math.pi / 2, sel(mid, math.pi / 4, 0.0, like=x))
    z = t * t
    poly = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    r = base + poly
    return sel(signbit(x), -r, r)  # atan(-0.0) is -0.0


def atan2(y: V, x: V) -> V:
    """C's atan2, special cases included: the quotient y / x loses both infinities (atan2(inf, inf)
    is pi/4, atan2(-inf, -inf) -3pi/4) and the signs of zeros (atan2(+-0, x) is +-0 for x > 0 or
    x = +0, +-pi for x < 0 or x = -0)."""
    r = atan(y / x)
    r = sel(x < 0, sel(y < 0, r - math.pi, r + math.pi), r)
    r = sel(x.eq(0), sel(y > 0, math.pi / 2, sel(y < 0, -math.pi / 2, y * 0)), r)  # NaN y stays NaN
    y_negative = signbit(y)
    quarter = sel(x > 0, math.pi / 4, 3 * math.pi / 4, like=y)
    r = sel(vabs(y).eq(math.inf) & vabs(x).eq(math.inf), sel(y_negative, quarter * -1, quarter), r)
    along = sel(signbit(x), math.pi, 0.0, like=y)  # y = +-0 on the x axis: 0 or pi, signed as y
    return sel(y.eq(0) & x.eq(x), sel(y_negative, along * -1, along), r)


ERFC_SPLIT = 2.5  # below: 1 - erf(x) in float64; above: Laplace's continued fraction
ERFC_TERMS = 32  # its depth: 7e-15 relative from 2.5 up (measured against math.erfc)


def erfc(x: V) -> V:
    """erfc in float64, cast back to x's type: 1 - erf(x) lost every digit past x = 4 in float32
    (erfc(8) = 1.1e-29 came out 0; fuzzer, crucible-cpp and crucible-interpret). Below 2.5 the
    subtraction loses at most 1e-13 relative; above it erfc(x) = exp(-x^2) / sqrt(pi) / t, where
    t = x + (1/2) / (x + (2/2) / (x + (3/2) / ...)), ERFC_TERMS deep, evaluated from the inside."""
    wide = V(ir.cast(x.e, torch.float64))
    t = wide
    for k in range(ERFC_TERMS, 0, -1):
        t = wide + (k / 2) / t
    tail = vexp(wide * wide * -1) * (1 / math.sqrt(math.pi)) / t
    near = 1 - V(ir.unary(Op.ERF, wide.e))
    return V(ir.cast(sel(wide < ERFC_SPLIT, near, tail).e, x.e.dtype))


def lerp(start: V, end: V, weight: V) -> V:
    """ATen's lerp: from the nearer end (|weight| < 0.5: start), one fused multiply-add as its
    vectorized CPU loop and its CUDA kernel compute it; a separate product overflows to inf where
    (weight - 1) * (end - start) passes finfo.max before adding end brings it back in range."""
    small = vabs(weight) < 0.5
    coeff = sel(small, weight, weight - 1)
    base = sel(small, start, end)
    return V(ir.fma(coeff.e, (end - start).e, base.e))


def sign(x: V) -> V:
    # ATen computes (0 < x) - (x < 0): NaN gives 0 and -0.0 gives +0.0
    return sel(x > 0, 1, sel(x < 0, -1, 0, like=x), like=x)


def unit_sign(x: V) -> V:
    return sel(x > 0, 1, sel(x < 0, -1, x, like=x), like=x)  # keeps NaN and -0.0 (for odd functions)


def asinh(x: V) -> V:
    # x*x overflows past ~1e19 in float32 (inf/inf = NaN); there asinh(|x|) = log(2|x|) to
    # within 1/(4x^2), far below one ulp.
    a = vabs(x)
    small = log1p(a + a * a / (vsqrt(a * a + 1) + 1))
    return unit_sign(x) * sel(a > 1e9, vlog(a) + math.log(2.0), small)


def _half_exp(a: V) -> V:
    """e^a / 2 for a >= 20 (where e^-a is below an ulp), as (e^(a/2) / 2) e^(a/2): e^a itself overflows
    past 88.72 in float32 where sinh and cosh stay finite up to 89.41 (ATen: sinh(89) = 2.24e38 where
    (e^x - e^-x) / 2 gave inf; fuzzer, crucible-cpp:extern=all --dynamic, seed 227). a / 2 is exact."""
    half = vexp(a * 0.5)
    return (half * 0.5) * half


def sinh(x: V) -> V:
    a = vabs(x)
    return sel(a > 20, unit_sign(x) * _half_exp(a), (expm1(x) - expm1(-x)) * 0.5)


def cosh(x: V) -> V:
    # below ln 2 / 2, 1 + t^2 / (2 (1 + t)) with t = expm1(|x|): (e^x + e^-x) / 2 carries both exps'
    # roundings, up to an ulp near 1, and pow(x, cosh(x)) of a negative x turned NaN (eager, cosh
    # 1 + 1 ulp) into x (cosh rounded to 1; fuzzer, crucible-cpp --max-nodes 12, seed 469)
    a = vabs(x)
    t = expm1(a)
    near_one = 1 + t * t / ((1 + t) * 2)
    return sel(a > 20, _half_exp(a), sel(a < math.log(2) / 2, near_one, (vexp(x) + vexp(-x)) * 0.5))


def acosh(x: V) -> V:
    # (x-1)(x+1) overflows past ~1e19 in float32 (acosh(1e30) gave inf) and, for x = INT_MIN
    # cast to float, x + sqrt(x*x - 1) rounds to 0 (log 0 = -inf where ATen gives NaN): below 1
    # the result is NaN, and past 1e9 acosh(x) = log(2x) to within 1/(4x^2).
    big = vlog(x) + math.log(2.0)
    return sel(x < 1, x * 0 + math.nan, sel(x > 1e9, big, vlog(x + vsqrt((x - 1) * (x + 1)))))



def atanh(x: V) -> V:
    if x.e.dtype == torch.float64:  # 2x/(1-x) near -1 lost 1e-10 relative through log1p's slope
        return (log1p(x) - log1p(-x)) * 0.5
    # odd: atanh(|x|) with x's sign. Near -1, 2x / (1 - x) is near -1 and log1p's 1 + q kept only the
    # quotient's rounding (atanh(-0.9999) 0.4% off in float32; fuzzer, crucible-interpret, seed 448);
    # for |x| the quotient is >= 0, where log1p is well conditioned
    a = vabs(x)
    return unit_sign(x) * (log1p(2 * a / (1 - a)) * 0.5)


def round_half_even(x: V) -> V:
    f = x.u(Op.FLOOR)
    diff = x - f
    half = f * 0.5
    f_even = half.u(Op.FLOOR).eq(half)
    up = sel(diff > 0.5, f + 1, sel(diff < 0.5, f, sel(f_even, f, f + 1)))
    return sel(up.eq(0), x * 0, up)  # -0.3 rounds to -0.0, like ATen


def trunc(x: V) -> V:
    return sel(x < 0, x.u(Op.CEIL), x.u(Op.FLOOR))


def signbit(x: V) -> V:
    """x < 0 or x is -0.0 (NaN excluded). A constant is decided here: 1 / 0.0 between two literals
    is Python's ZeroDivisionError in Triton's interpreter (pow over an empty sum raised it)."""
    if x.e.op is Op.CONST:
        v = float(x.e.arg)
        return V(ir.const(not math.isnan(v) and math.copysign(1.0, v) < 0, torch.bool))
    return (x < 0) | (x.eq(0) & ((1 / x) < 0))
