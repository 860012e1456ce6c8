"""Symbolic sizes: what a size, stride, offset or numel is when the graph is dynamic.

**The representation.** A size is a plain ``int`` when static and a sympy expression over the
shape environment's symbols (``s0``, ``s77``: torch's ``ShapeEnv``, which Dynamo and AOTAutograd
already built) when not. Shapes stay tuples, so a static graph runs exactly the code it ran before
(no wrapper object, no simplifier on its path) and a dynamic one uses sympy's arithmetic and
canonical forms where it must: ``s0 * 64`` is structurally equal to ``64 * s0``, ``math.prod`` of a
shape is one expression, and ``==`` between sizes is structural (no guard is ever created by a
comparison; a ``<`` that sympy cannot decide raises ``TypeError``, which lowering turns into a
typed extern reason). In the loop IR a symbolic size is one leaf, ``Op.SIZE`` (its ``arg`` the
sympy expression): affine index arithmetic (``ir.to_affine``) treats it as a constant term and
coefficients may be expressions, so a store's or load's address over symbolic strides is still
one canonical affine form and fusion still matches indices by ``==``.

Measured (2-core CPU, ``python -m harness.bench.dynamic_compile``, see docs/compiler.md): lowering
plus scheduling of a static graph costs what it cost before (the sympy path is never entered); on
a dynamic graph sympy's arithmetic is a small share of the compile (the C++ build dominates).
The alternative, an IR-own size expression with a small simplifier, would have to re-implement
what the guards are written in (Dynamo's guards and ``ShapeEnv`` facts are sympy), so every
comparison with them would convert back and forth.

Symbols are backed sizes that Dynamo already specialized away from 0 and 1, so a rule's test
``n == 1`` is False for a symbol, as it is at run time. Rendering goes through ``code`` (C++ and
Python share the spelling of sums and products; floor division and modulo differ).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import sympy

Size = Any  # int | sympy.Expr: kept loose, the static path never sees sympy


def size_of(value: Any) -> Any:
    """A static ``int``, or the sympy expression of a ``torch.SymInt`` (an int when it is constant,
    and 1 where the graph's guards make it 1: ``_guarded_one``)."""
    if isinstance(value, int):
        return value
    node = getattr(value, "node", None)
    expr = getattr(node, "expr", None) if node is not None else None
    if expr is None:
        if isinstance(value, sympy.Expr):
            expr = value
        else:
            return int(value)
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    return 1 if _guarded_one(expr, getattr(node, "shape_env", None)) else expr


def _guarded_one(expr: sympy.Expr, shape_env: Any) -> bool:
    """Whether the shape environment's guards make the compound size ``expr`` 1. A broadcast over a
    size such as ``Min(s27, s77 - 1)`` (``x / x.diagonal(-1)``) is guarded ``Eq(..., 1)`` by the
    tracer, but the expression is not the literal 1 the rules' ``n == 1`` tests read, so the divisor
    was read along the dim instead of broadcast (fuzzer, crucible-cpp --dynamic, seed 286). A bare
    symbol is never 1 (Dynamo specializes sizes 0 and 1), so only compound sizes are asked."""
    if expr.is_Symbol or shape_env is None:
        return False
    try:
        return bool(shape_env._maybe_evaluate_static(sympy.Eq(expr, 1)))
    except Exception:  # noqa: BLE001  (a private query: a torch without it keeps the expression)
        return False


def shape_of(values: Iterable[Any]) -> tuple:
    return tuple(size_of(v) for v in values)


def is_static(size: Any) -> bool:
    return isinstance(size, int)


def all_static(sizes: Iterable[Any]) -> bool:
    return all(isinstance(s, int) for s in sizes)


def symbols(*sizes: Any) -> set[str]:
    """Names of the symbols in ``sizes`` (nested tuples and lists too)."""
    out: set[str] = set()
    for s in sizes:
        if isinstance(s, (tuple, list)):
            out |= symbols(*s)
        elif isinstance(s, sympy.Expr):
            out |= {sym.name for sym in s.free_symbols}
    return out


def ordered(names: Iterable[str]) -> tuple[str, ...]:
    """Symbol names in a stable order: the prefix, then the number (``s2`` before ``s10``)."""
    def key(name: str) -> tuple:
        digits = name.lstrip("abcdefghijklmnopqrstuvwxyz_")
        return (name[: len(name) - len(digits)], int(digits) if digits.isdigit() else 0, name)
    return tuple(sorted(set(names), key=key))


def lower_bound(size: Any) -> int:
    """A size every run reaches at least: the value with every symbol at 2 (backed sizes are at
    least 2 and sizes are sums of products of them with positive coefficients); 0 when that is not
    provably a lower bound."""
    if isinstance(size, int):
        return size
    if not _monotone(size):
        return 0
    return max(0, int(size.subs({sym: 2 for sym in size.free_symbols})))


def _monotone(e: sympy.Expr) -> bool:
    if e.is_Integer:
        return int(e) >= 0
    if e.is_Symbol:
        return True
    if e.is_Add or e.is_Mul:
        return all(_monotone(a) for a in e.args)
    if e.is_Pow:
        return _monotone(e.base) and e.exp.is_Integer and int(e.exp) > 0
    return False


def at_least(size: Any, n: int) -> bool:
    """Whether ``size >= n`` on every run (False where unknown)."""
    return lower_bound(size) >= n


def within(size: Any, limit: int) -> bool:
    """Whether ``size <= limit`` on every run: a symbolic size is unbounded (no guard is taken)."""
    return isinstance(size, int) and size <= limit


def evaluate(size: Any, values: dict[str, int]) -> int:
    """The value of ``size`` with its symbols at ``values`` (a hint, a test's actual sizes)."""
    if isinstance(size, int):
        return size
    return int(size.subs({sym: values[sym.name] for sym in size.free_symbols}))


class UnrenderableSize(ValueError):
    """A size expression with a function the renderers do not spell (a data-dependent one, say)."""


def code(size: Any, language: str = "c") -> str:
    """``size`` as integer code in ``language`` ("c", "python" for host code, "triton" for a Triton
    kernel's body; the symbols are variables of the same name). Sums and products are spelled alike;
    floor division and modulo (of non-negative values, as sizes are) are ``/``/``%`` in C and
    ``//``/``%`` in Python and Triton."""
    if isinstance(size, int):
        return str(size)
    if isinstance(size, sympy.Integer):
        return str(int(size))
    if language not in _CASTS["ToFloat"]:
        raise ValueError(f"language {language!r}: sizes are spelled in {', '.join(_CASTS['ToFloat'])}")
    return _code(size, language)


# Conversions in a size computed through floats (an upsample's output size from a scale factor:
# TruncToInt(1.5*ToFloat(s13))); the float arithmetic is double in every language, as torch's meta
# function computes it. A Triton kernel's size arguments are scalars of its own types, which Python's
# float() and int() do not take when the kernel is built for a GPU (the interpreter took them).
_CASTS = {"ToFloat": {"c": "((double)({}))", "python": "float({})", "triton": "({}).to(tl.float64)"},
          "TruncToInt": {"c": "((int64_t)({}))", "python": "int({})", "triton": "({}).to(tl.int64)"}}


def _code(e: sympy.Expr, language: str) -> str:
    div = "/" if language == "c" else "//"
    if e.is_Integer:
        return str(int(e))
    if e.is_Float or e.is_Rational:  # a scale factor's constant, inside a float computation
        return repr(float(e))
    if e.is_Symbol:
        return e.name
    if e.is_Add:
        return "(" + " + ".join(_code(a, language) for a in _sorted(e.args)) + ")"
    if e.is_Mul:
        return "(" + " * ".join(_code(a, language) for a in _sorted(e.args)) + ")"
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return "(" + " * ".join([_code(e.base, language)] * int(e.exp)) + ")"
    name = type(e).__name__
    if name in _CASTS:
        return _CASTS[name][language].format(_code(e.args[0], language))
    if name in ("Min", "Max"):  # a view's clipped length (diagonal with an offset: Min(1, s4 - 1))
        args = [_code(a, language) for a in _sorted(e.args)]
        if language != "c":  # Triton maps the builtins to its minimum/maximum
            return f"{name.lower()}({', '.join(args)})"
        out = args[0]
        for arg in args[1:]:
            out = f"({out} {'<' if name == 'Min' else '>'} {arg} ? {out} : {arg})"
        return out
    if name == "FloorDiv":
        return f"({_code(e.args[0], language)} {div} {_code(e.args[1], language)})"
    if name in ("FloatTrueDiv", "IntTrueDiv"):  # attention's default scale, 1 / sqrt(head dim)
        a, b = (_code(x, language) for x in e.args)
        return f"((double)({a}) / (double)({b}))" if language == "c" else f"({a} / {b})"
    if name in ("FloatPow", "PowByNatural") and language != "triton":  # sqrt(scale): math SDPA's q and k
        a, b = (_code(x, language) for x in e.args)
        return f"std::pow((double)({a}), (double)({b}))" if language == "c" else f"(float({a}) ** float({b}))"
    if name == "CeilDiv":
        a, b = (_code(x, language) for x in e.args)
        return f"(({a} + {b} - 1) {div} {b})"
    if name in ("Mod", "PythonMod"):
        return f"({_code(e.args[0], language)} % {_code(e.args[1], language)})"
    if name == "ModularIndexing":
        base, divisor, modulus = (_code(x, language) for x in e.args)
        return f"(({base} {div} {divisor}) % {modulus})"
    raise UnrenderableSize(f"size expression {e} ({name}) has no integer spelling")


def _sorted(args: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    return sorted(args, key=sympy.default_sort_key)


def ceil_div(size: Any, n: int) -> Any:
    """``ceil(size / n)`` for a positive ``n``: an int, or (symbolic) sympy's integer floor form."""
    if isinstance(size, int):
        return -(-size // n)
    from torch.utils._sympy.functions import FloorDiv

    return FloorDiv(size + n - 1, n)


def prod(sizes: Iterable[Any]) -> Any:
    out = math.prod(sizes)
    return int(out) if isinstance(out, sympy.Integer) else out
