"""The op table: one ``OpSpec`` per ATen overload the fuzzer generates.

A spec's ``draw(node) -> str`` asks a ``harness.fuzz.builder.NodeDraw`` for operands that meet
the op's constraints (dtypes, ranks, contiguity, broadcastable shapes, valid dims, index
ranges, nonzero integer divisors) and returns the call as source text. Output metadata is
not hand-written: the builder runs the call on meta tensors, which is eager's own shape and
dtype logic, type promotion with Python scalars included. Pointwise and reduction specs live
here; movement, indexing, neural-net and scan specs in ``harness.fuzz.specs_structured``.
Random ops are excluded on purpose (no seeded parity across compilers). ``select_specs`` picks
specs by name glob (``crucible fuzz --ops``).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable

from hypothesis import strategies as st

from harness.fuzz.builder import ALL_DTYPES, INT_DTYPES, NodeDraw
from harness.fuzz.opspec import INTEGRAL, NUMERIC, OP_SPECS, OpSpec, spec
from harness.fuzz.values import FLOAT_DTYPES

__all__ = ["OP_SPECS", "OpSpec", "select_specs", "spec"]


def _unary(name: str, dtypes: tuple[str, ...], extra: Callable[[NodeDraw], str] = lambda n: "") -> None:
    def draw(n: NodeDraw) -> str:
        return f"{name}({n.tensor(dtypes, rows='pointwise')}{extra(n)})"

    spec(name, "pointwise")(draw)


# -- unary pointwise ------------------------------------------------------------------------
# Transcendental ops take integer and bool inputs too and promote them to the default float.
for _op in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
            "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf",
            "erfc", "erfinv", "reciprocal", "lgamma", "digamma"):
    _unary(f"aten.{_op}.default", ALL_DTYPES)
for _op in ("gelu", "silu", "mish", "hardswish", "hardsigmoid", "frac", "celu", "selu"):
    _unary(f"aten.{_op}.default", FLOAT_DTYPES)
for _op in ("abs", "neg", "sign", "floor", "ceil", "round", "trunc", "relu", "square"):
    _unary(f"aten.{_op}.default", NUMERIC)
for _op in ("isnan", "isinf", "isfinite", "signbit", "sgn"):
    _unary(f"aten.{_op}.default", NUMERIC)
_unary("aten.logical_not.default", ALL_DTYPES)
_unary("aten.bitwise_not.default", INTEGRAL)
_unary("aten.nan_to_num.default", NUMERIC,
       lambda n: n.draw(st.sampled_from(["", ", 0.0", ", 1.5, 100.0, -100.0", ", None, None, -2.0"])))
_unary("aten.elu.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", 0.5", ", 2.0, 1.5"])))
_unary("aten.leaky_relu.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", 0.2", ", -1.5"])))
_unary("aten.softplus.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", 2.0, 5.0", ", 0.5, 1.0"])))
_unary("aten.hardtanh.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", -0.5, 2.0", ", 0.0, 6.0"])))
_unary("aten.logit.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", 1e-6", ", 0.25"])))
_unary("aten.round.decimals", FLOAT_DTYPES, lambda n: f", decimals={n.draw(st.sampled_from([1, 2, -1]))}")
_unary("aten.hardshrink.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", 0.0", ", 1.5"])))
_unary("aten.softshrink.default", FLOAT_DTYPES, lambda n: n.draw(st.sampled_from(["", ", 0.0", ", 1.5"])))


# -- binary pointwise: broadcasting and type promotion ---------------------------------------
def _binary(name: str, dtypes: tuple[str, ...], other_dtypes: tuple[str, ...] | None = None,
            extra: Callable[[NodeDraw], str] = lambda n: "", divisor: bool = False, divides: bool = False) -> None:
    """``divisor``: integer divisors are nonzero; ``divides`` (or ``divisor``): a float right operand
    divides the left one (``NodeDraw.divisor``: subnormal and huge ones broadcast along a row)."""
    def draw(n: NodeDraw) -> str:
        a = n.tensor(dtypes, rows="pointwise")
        if (divisor or divides) and n.meta(a).is_floating_point():
            return f"{name}({a}, {n.divisor(a, other_dtypes or FLOAT_DTYPES)}{extra(n)})"
        if divisor and not n.meta(a).is_floating_point():
            # integer division by zero raises in eager: integer divisors are fresh, nonzero inputs
            shape = list(n.meta(a).shape)
            b = n.tensor(INT_DTYPES, shape=shape[n.draw(st.integers(0, len(shape))):], profile="divisor")
        else:
            b = n.partner(a, other_dtypes or dtypes)
        if n.draw(st.booleans()):
            a, b = (b, a) if not divisor and list(n.meta(b).shape) == list(n.meta(a).shape) else (a, b)
        return f"{name}({a}, {b}{extra(n)})"

    spec(name, "pointwise")(draw)


for _op in ("add", "sub"):
    _binary(f"aten.{_op}.Tensor", NUMERIC,
            extra=lambda n: n.draw(st.sampled_from(["", "", ", alpha=2", ", alpha=-1"])))
_binary("aten.mul.Tensor", ALL_DTYPES)
_binary("aten.div.Tensor", ALL_DTYPES, divides=True)
_binary("aten.div.Tensor_mode", NUMERIC, divisor=True,
        extra=lambda n: n.draw(st.sampled_from([", rounding_mode='floor'", ", rounding_mode='trunc'"])))
_binary("aten.floor_divide.default", NUMERIC, divisor=True)
_binary("aten.remainder.Tensor", NUMERIC, divisor=True)
_binary("aten.fmod.Tensor", NUMERIC, divisor=True)
for _op in ("maximum", "minimum", "fmax", "fmin"):
    _binary(f"aten.{_op}.default", NUMERIC if _op in ("maximum", "minimum") else FLOAT_DTYPES)
for _op in ("atan2.default", "hypot.default", "copysign.Tensor", "nextafter.default"):
    _binary(f"aten.{_op}", FLOAT_DTYPES, ("float32",) if _op.startswith(("hypot", "nextafter")) else None)
_binary("aten.pow.Tensor_Tensor", FLOAT_DTYPES)
_binary("aten.xlogy.Tensor", FLOAT_DTYPES)
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    _binary(f"aten.{_op}.Tensor", ALL_DTYPES)
for _op in ("logical_and", "logical_or", "logical_xor"):
    _binary(f"aten.{_op}.default", ALL_DTYPES)
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _binary(f"aten.{_op}.Tensor", INTEGRAL)


# -- tensor-scalar pointwise: Python scalars promote by kind, not by dtype -------------------
def _with_scalar(name: str, dtypes: tuple[str, ...], nonzero: bool = False, integer: bool | None = None) -> None:
    def draw(n: NodeDraw) -> str:
        a = n.tensor(dtypes, rows="pointwise")
        s = n.scalar(a, integer=integer)
        if nonzero and s in ("0", "0.0", "-0.0") and not n.meta(a).is_floating_point():
            s = "-3"
        if nonzero and not n.meta(a).is_floating_point() and "." in s:
            s = "2"
        return f"{name}({a}, {s})"

    spec(name, "pointwise")(draw)


for _op in ("add", "sub", "mul", "div"):
    _with_scalar(f"aten.{_op}.Scalar", NUMERIC)
_with_scalar("aten.rsub.Scalar", NUMERIC)
_with_scalar("aten.remainder.Scalar", NUMERIC, nonzero=True)
_with_scalar("aten.fmod.Scalar", NUMERIC, nonzero=True)
_with_scalar("aten.floor_divide.Scalar", NUMERIC, nonzero=True)
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    _with_scalar(f"aten.{_op}.Scalar", NUMERIC)


@spec("aten.pow.Tensor_Scalar", "pointwise")
def _pow_scalar(n: NodeDraw) -> str:
    a = n.tensor(NUMERIC)
    exps = [2, 3, 0, 1] if not n.meta(a).is_floating_point() else [2, 0.5, -1, 3, -0.5, 0, 2.5]
    if n.corner("values") and n.meta(a).is_floating_point():
        # infinite exponents: (-1) ** +-inf is 1, |x| < 1 and |x| > 1 go to 0 or inf (a pow whose
        # special case for a base of -1 was off survived `crucible mutate`: no draw paired them)
        exps += [math.inf, -math.inf]
    return f"aten.pow.Tensor_Scalar({a}, {n.draw(st.sampled_from(exps))!r})"


@spec("aten.clamp.default", "pointwise")
def _clamp(n: NodeDraw) -> str:
    a = n.tensor(NUMERIC)
    lo, hi = n.draw(st.sampled_from([("-0.5", "0.5"), ("None", "1.0"), ("0.0", "None"), ("2.0", "-2.0"),
                                     ("-1", "3"), ("-inf", "0.0")]))
    if not n.meta(a).is_floating_point():
        lo, hi = (v if v == "None" else str(int(float(v))) if "inf" not in v else "-100" for v in (lo, hi))
    return f"aten.clamp.default({a}, {lo}, {hi})"


@spec("aten.clamp_min.default", "pointwise")
def _clamp_min(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES)
    return f"aten.clamp_min.default({a}, {n.scalar(a, integer=False)})"


@spec("aten.clamp_max.default", "pointwise")
def _clamp_max(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES)
    return f"aten.clamp_max.default({a}, {n.scalar(a, integer=False)})"


@spec("aten.threshold.default", "pointwise")
def _threshold(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES)
    return f"aten.threshold.default({a}, {n.scalar(a, integer=False)}, {n.scalar(a, integer=False)})"


@spec("aten.masked_fill.Scalar", "pointwise")
def _masked_fill(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    mask = n.partner(a, ("bool",))
    value = n.scalar(a, integer=not n.meta(a).is_floating_point())
    if n.meta(a).dtype.__str__() == "torch.bool":
        value = "True"
    return f"aten.masked_fill.Scalar({a}, {mask}, {value})"


@spec("aten.where.self", "pointwise")
def _where(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    b = n.partner(a, ALL_DTYPES)
    cond = n.partner(a, ("bool",))
    return f"aten.where.self({cond}, {a}, {b})"


@spec("aten.clamp.Tensor", "pointwise")
def _clamp_tensor(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES)
    return f"aten.clamp.Tensor({a}, {n.partner(a, FLOAT_DTYPES)}, {n.partner(a, FLOAT_DTYPES)})"


@spec("aten.lerp.Tensor", "pointwise")
def _lerp_tensor(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES)
    dt = (n.dtype(a),)
    shape = list(n.meta(a).shape)
    if n.corner("values") and n.draw(st.integers(0, 3)) == 3:
        # an end far from the start and weights near 0: the result is start plus a small step, and a
        # lerp computed from the other end cancels (a swapped |w| < 0.5 branch: 140x eager's RMSE
        # here, ~1 ulp with randn operands, a `crucible mutate` survivor)
        end, weight = n.tensor(dt, shape=shape, profile="shifted", fresh_only=True), n.partner(a, dt, profile="small")
        return f"aten.lerp.Tensor({a}, {end}, {weight})"
    return f"aten.lerp.Tensor({a}, {n.tensor(dt, shape=shape)}, {n.partner(a, dt)})"


@spec("aten.lerp.Scalar", "pointwise")
def _lerp_scalar(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES)
    w = n.draw(st.sampled_from(["0.5", "0.25", "1.5", "-0.5"]))
    return f"aten.lerp.Scalar({a}, {n.tensor((n.dtype(a),), shape=list(n.meta(a).shape))}, {w})"


for _op in ("addcmul", "addcdiv"):
    def _addc(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(FLOAT_DTYPES)
        dt = (n.dtype(a),)
        value = n.draw(st.sampled_from(["", ", value=0.5", ", value=-2"]))
        return f"aten.{_op}.default({a}, {n.partner(a, dt)}, {n.partner(a, dt)}{value})"

    spec(f"aten.{_op}.default", "pointwise")(_addc)


@spec("aten._to_copy.default", "pointwise")
def _to_copy(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    return f"aten._to_copy.default({a}, dtype={n.dt(n.draw(st.sampled_from(ALL_DTYPES)))})"


# -- reductions: any dims, keepdim, correction, dtype -----------------------------------------
def _keep(n: NodeDraw) -> str:
    return repr(n.draw(st.booleans()))


def _optional_keep(n: NodeDraw) -> str | None:
    """keepdim: left at its default (None), or given either way."""
    return n.draw(st.sampled_from([None, "False", "True"]))


@spec("aten.sum.dim_IntList", "reduction")
def _sum(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, rows="reduction")
    if not n.corner("optionals"):
        dtype = n.draw(st.sampled_from(["", "", ", dtype=f32", ", dtype=f64", ", dtype=i64"]))
        return f"aten.sum.dim_IntList({a}, {n.dims(a)}, {_keep(n)}{dtype})"
    return n.call("aten.sum.dim_IntList", a, str(n.dims(a)), keepdim=_optional_keep(n),
                  dtype=n.draw(st.sampled_from([None, "f32", "f64", "i64"])))


@spec("aten.sum.default", "reduction")
def _sum_all(n: NodeDraw) -> str:
    return f"aten.sum.default({n.tensor(ALL_DTYPES, rows='reduction')})"


@spec("aten.mean.dim", "reduction")
def _mean(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES, rows="reduction")
    if not n.corner("optionals"):
        return f"aten.mean.dim({a}, {n.dims(a)}, {_keep(n)})"
    return n.call("aten.mean.dim", a, str(n.dims(a)), keepdim=_optional_keep(n),
                  dtype=n.draw(st.sampled_from([None, "f32", "f64"])))


@spec("aten.prod.dim_int", "reduction")
def _prod(n: NodeDraw) -> str:
    a = n.tensor(NUMERIC, rows="reduction")
    if not n.corner("optionals"):
        return f"aten.prod.dim_int({a}, {n.dim(a)}, {_keep(n)})"
    dtypes = [None, "f64"] if n.meta(a).is_floating_point() else [None, "i64", "f64"]
    return n.call("aten.prod.dim_int", a, str(n.dim(a)), keepdim=_optional_keep(n),
                  dtype=n.draw(st.sampled_from(dtypes)))


for _op in ("amax", "amin"):
    def _amax(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(NUMERIC, nonempty=True, rows="reduction")
        return f"aten.{_op}.default({a}, {n.dims(a)}, {_keep(n)})"

    spec(f"aten.{_op}.default", "reduction")(_amax)

for _op in ("argmax", "argmin"):
    def _arg(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(NUMERIC, nonempty=True, rows="reduction")
        return f"aten.{_op}.default({a}, {n.dim(a)}, {_keep(n)})"

    spec(f"aten.{_op}.default", "reduction")(_arg)

for _op in ("max", "min"):
    def _minmax_dim(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(NUMERIC, nonempty=True, min_rank=1, rows="reduction")
        return f"aten.{_op}.dim({a}, {n.dim(a)}, {_keep(n)})"

    spec(f"aten.{_op}.dim", "reduction")(_minmax_dim)

    def _minmax_all(n: NodeDraw, _op: str = _op) -> str:
        return f"aten.{_op}.default({n.tensor(NUMERIC, nonempty=True, rows='reduction')})"

    spec(f"aten.{_op}.default", "reduction")(_minmax_all)

for _op in ("var", "std", "var_mean"):
    def _var(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(FLOAT_DTYPES, rows="reduction")
        if not n.corner("optionals"):
            correction = n.draw(st.sampled_from(["", ", correction=0", ", correction=1", ", correction=2"]))
            return f"aten.{_op}.correction({a}, {n.dims(a)}{correction}, keepdim={_keep(n)})"
        dims = None if n.draw(st.integers(0, 3)) == 3 else str(n.dims(a))  # None: every dim
        return n.call(f"aten.{_op}.correction", a, dim=dims, keepdim=_optional_keep(n),
                      correction=n.draw(st.sampled_from([None, "0", "1", "2", "0.5"])))

    spec(f"aten.{_op}.correction", "reduction")(_var)

for _op in ("any", "all"):
    def _anyall(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(ALL_DTYPES, rows="reduction")
        return f"aten.{_op}.dim({a}, {n.dim(a)}, {_keep(n)})"

    spec(f"aten.{_op}.dim", "reduction")(_anyall)


@spec("aten.logsumexp.default", "reduction")
def _logsumexp(n: NodeDraw) -> str:
    a = n.tensor(FLOAT_DTYPES, rows="reduction")
    return f"aten.logsumexp.default({a}, {n.dims(a)}, {_keep(n)})"


@spec("aten.linalg_vector_norm.default", "reduction")
def _norm(n: NodeDraw) -> str:
    order = n.draw(st.sampled_from(["2", "1", "inf", "3.0"]))
    # the inf norm has no identity: ATen rejects it over an empty dim (2-3% of the draws were spec errors)
    a = n.tensor(FLOAT_DTYPES, nonempty=order == "inf", rows="reduction")
    if not n.corner("optionals"):
        return f"aten.linalg_vector_norm.default({a}, {order}, {n.dims(a)}, {_keep(n)})"
    dims = None if n.draw(st.integers(0, 3)) == 3 else str(n.dims(a))
    wide = "f64" if n.dtype(a) == "float64" else n.draw(st.sampled_from([None, "f32", "f64"]))
    return n.call("aten.linalg_vector_norm.default", a, ord=order, dim=dims, keepdim=_optional_keep(n), dtype=wide)


@spec("aten.count_nonzero.dim_IntList", "reduction")
def _count_nonzero(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, rows="reduction")
    return f"aten.count_nonzero.dim_IntList({a}, {n.dims(a)})"


def select_specs(ops: str | list[str] | None = None) -> list[OpSpec]:
    """Op specs whose name matches any of the globs (``aten.*sum*``; ``sum`` matches ``aten.sum.*``)."""
    if not ops:
        return list(OP_SPECS.values())
    globs = [ops] if isinstance(ops, str) else list(ops)
    globs = [g for part in globs for g in part.split(",") if g]
    chosen = [s for name, s in OP_SPECS.items()
              if any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(name, f"aten.{g}")
                     or fnmatch.fnmatchcase(name, f"aten.{g}.*") for g in globs)]
    if not chosen:
        raise ValueError(f"--ops {','.join(globs)!s} matches no op spec; "
                         f"`crucible fuzz --list-ops` lists the {len(OP_SPECS)} specs")
    return chosen


import harness.fuzz.specs_structured  # noqa: E402,F401  (registers movement, indexing, nn, scan specs)
import harness.fuzz.specs_attention  # noqa: E402,F401  (registers scaled dot-product attention)

