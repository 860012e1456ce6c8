"""pow for renderers without a C pow (the Triton interpreter), float64's to about an ulp, from
the IR's arithmetic, exp and bit casts. exp(y * log|x|) carries |y log x| ulps of error, several
hundred near overflow, where pow(2**-1024, -1.0) came out finite instead of inf (fuzzer,
crucible-interpret --dynamic, seed 282).

The product t = y * log|x| is kept in double-double (a pair hi + lo, Dekker's exact sums and
products in plain float64 arithmetic, so no fma is needed): log|x| = e ln2 + log c + log(m / c)
with x = m 2**e (subnormals normalized first), c the nearest of 1 + k/16 to m, and log(m / c)
= 2 atanh(s), s = (m - c) / (m + c) below 0.023 in size, whose series converges fast. Then
|x| ** y = 2**n exp(t - n ln2), with the power of two applied as two exact scalings.

Only finite, nonzero x with |y| <= 2**64 takes this path; the caller keeps exp(y log|x|) for
zeros, infinities and NaNs, where IEEE arithmetic already gives the exact 0, inf or NaN, and for
larger |y|, where |y log|x|| exceeds 2048 for every x but 1 (handled by the caller).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import torch

from compiler import ir
from compiler.ir import Op
from compiler.lowerings.formulas import V, sel, signbit, vabs, vexp, vlog

_SPLITTER = 2.0**27 + 1  # Veltkamp: a * 2**27+1 splits a 53-bit float into two 26-bit halves
LN2_HI = 6.93147180369123816490e-01  # ln 2 with its low 32 bits zero: n * LN2_HI is exact
LN2_LO = 1.90821492927058770002e-10
MAX_EXPONENT = 2.0**64  # past it, |y log|x|| > 2048 for every finite x != 1: exp gives 0 or inf
_TABLE = range(-5, 8)  # k: c = 1 + k/16 covers m in [sqrt(1/2), sqrt(2)]


def _ln_pair(c: float) -> tuple[float, float]:
    """ln(c) as hi + lo, to about 2**-106."""
    with localcontext() as ctx:
        ctx.prec = 50
        exact = Decimal(c).ln()
        hi = float(exact)
        return hi, float(exact - Decimal(hi))


_LN_TABLE = {k: _ln_pair(1 + k / 16) for k in _TABLE}


def _two_sum(a: V, b: V) -> tuple[V, V]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: V) -> tuple[V, V]:
    c = a * _SPLITTER
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a: V, b: V) -> tuple[V, V]:
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _power_of_two(k: V) -> V:
    """2.0 ** k for an integral float64 k in [-1022, 1023], from its bits."""
    biased = ir.cast((k + 1023).e, torch.int64)
    return V(ir.bitcast(ir.binary(Op.SHL, biased, ir.const(52, torch.int64)), torch.float64))


def _log_pair(ax: V) -> tuple[V, V]:
    """ln(ax) as hi + lo for a finite ax > 0."""
    subnormal = ax < 2.0**-1022
    normal = sel(subnormal, ax * 2.0**54, ax)
    bits = ir.bitcast(normal.e, torch.int64)
    biased = ir.binary(Op.SHR, bits, ir.const(52, torch.int64))
    mantissa = ir.binary(Op.BITAND, bits, ir.const((1 << 52) - 1, torch.int64))
    one = ir.binary(Op.BITOR, mantissa, ir.const(1023 << 52, torch.int64))
    m = V(ir.bitcast(one, torch.float64))  # in [1, 2)
    e = V(ir.cast(biased, torch.float64))
    e = e - sel(subnormal, 1023.0 + 54, 1023.0, like=e)
    big = m > math.sqrt(2.0)
    m = sel(big, m * 0.5, m)  # exact
    e = sel(big, e + 1, e)
    k = ((m - 1) * 16 + 0.5).u(Op.FLOOR)
    c = 1 + k * (1 / 16)
    log_c_hi, log_c_lo = m * 0.0, m * 0.0
    for j in _TABLE:
        hit = k.eq(float(j))
        log_c_hi = sel(hit, _LN_TABLE[j][0], log_c_hi)
        log_c_lo = sel(hit, _LN_TABLE[j][1], log_c_lo)
    # s = (m - c) / (m + c) as hi + lo: m - c is exact (Sterbenz), m + c a two-sum
    num = m - c
    den_hi, den_lo = _two_sum(m, c)
    s = num / den_hi
    p, p_err = _two_prod(s, den_hi)
    s_lo = (((num - p) - p_err) - s * den_lo) / den_hi
    z = s * s  # 2 atanh(s) = 2s + 2s z (1/3 + z/5 + z^2/7 + ...), z < 5.1e-4: terms to z^6
    series = 1 / 13
    for odd in (11, 9, 7, 5, 3):
        series = series * z + 1 / odd
    tail = (s * 2) * z * series
    hi, lo = _two_sum(e * LN2_HI, log_c_hi)  # e * LN2_HI is exact
    hi, lo2 = _two_sum(hi, s * 2)
    return _two_sum(hi, lo + lo2 + e * LN2_LO + log_c_lo + s_lo * 2 + tail)


def pow_magnitude_f64(ax: V, y: V) -> V:
    """ax ** y for finite ax > 0 and |y| <= MAX_EXPONENT (float64 operands)."""
    log_hi, log_lo = _log_pair(ax)
    t_hi, t_err = _two_prod(y, log_hi)
    inside = vabs(t_hi) <= 800.0  # past it exp is inf or 0, and the low part (up to ~|t| 2**-53) is moot
    t_lo = sel(inside, t_err + y * log_lo, 0.0)
    t_hi = sel(inside, t_hi, sel(t_hi > 0, 800.0, -800.0, like=t_hi))
    n = (t_hi * (1 / math.log(2)) + 0.5).u(Op.FLOOR)
    f = ((t_hi - n * LN2_HI) - n * LN2_LO) + t_lo  # |f| <= ln2 / 2 (+ rounding)
    half = (n * 0.5).u(Op.FLOOR)
    return f.u(Op.EXP) * _power_of_two(half) * _power_of_two(n - half)


def pow_(x: V, y: V) -> V:
    """x ** y for floats with C pow's special cases: y == 0 or x == 1 give 1 (NaN operands too),
    (-1) ** +-inf is 1, a finite negative base with a non-integer exponent is NaN, and a
    negative base (-0.0 and -inf included) keeps its sign only for odd integer exponents.
    exp(y * log|x|) is off by about |y log x| ulps: narrower floats compute it in float64
    (float32's pow(FLT_MAX, 1.0) came out inf); float64 keeps y log|x| in double-double
    (``pow_magnitude_f64``) where x is finite and nonzero, and zeros, infinities and NaNs keep the
    plain formula, exact there."""
    if x.e.dtype == torch.float64:
        ax = vabs(x)
        plain = (ax.eq(0) | ax.eq(math.inf) | ax.ne(ax) | y.ne(y) | (vabs(y) > MAX_EXPONENT))
        precise = pow_magnitude_f64(sel(plain, 1.0, ax), sel(plain, 0.0, y))
        mag = sel(plain, vexp(y * vlog(ax)), precise)
    else:
        wide_x, wide_y = V(ir.cast(x.e, torch.float64)), V(ir.cast(y.e, torch.float64))
        mag = V(ir.cast(vexp(wide_y * vlog(vabs(wide_x))).e, x.e.dtype))
    y_int = y.u(Op.FLOOR).eq(y)  # +-inf count as (even) integers, as in C
    y_odd = y_int & (y * 0.5).u(Op.FLOOR).ne(y * 0.5)
    negative = signbit(x)
    r = sel(negative & y_odd, -mag, mag)
    r = sel((x < 0) & (x > -math.inf) & y_int.u(Op.NOT), x * 0 + math.nan, r)
    one = y.eq(0) | x.eq(1) | (x.eq(-1) & vabs(y).eq(math.inf))
    return sel(one, 1.0, r)
