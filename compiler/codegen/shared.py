"""What both renderers read from a ``Kernel`` the same way; each language only spells it.

* ``Parameters``: the rendered function's parameters, each a ``Param`` of ``Kernel.params``
  (dtype, read/written, span) named by the language's spelling;
* ``leaf``: constants and loop indices (``x0``, ``r0``: the same names in both languages);
* ``compute_dtype`` and ``reduction_identity``: the dtype values are computed in and the value a
  reduction starts from;
* ``unravel``: the per-dim indices of a flat index over row-major sizes;
* ``ExprLevels`` and ``affine_index_code``: where a value of a reduction kernel lives, and an
  affine address as text.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from compiler import ir, sizes
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Kernel, Param


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a renderer computes a value of ``dtype`` in: 16-bit floats in float32."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def reduction_identity(op: ReduceOp, dtype: torch.dtype) -> float | int:
    """The value a reduction starts from (each renderer spells it): 0, 1, or the extreme of the
    compute dtype (for bool, of int32) that loses to every element."""
    if op is ReduceOp.SUM:
        return 0
    if op is ReduceOp.PROD:
        return 1
    lowest = op in (ReduceOp.MAX, ReduceOp.ARGMAX)
    if dtype.is_floating_point:
        return -math.inf if lowest else math.inf
    info = torch.iinfo(torch.int32 if dtype == torch.bool else dtype)
    return info.min if lowest else info.max


class Parameters:
    """The parameters of a rendered kernel function, in the order its body first uses them.

    What a parameter is comes from ``Kernel.params``; its name comes from the language's
    ``spell(position, buffer)`` (Triton: positional, so kernels computing the same thing on
    other buffers render to one source; C++: from the buffer's name, readable in a debugger),
    made unique. The order is the renderer's walk over the kernel (C++ names a store's buffer
    before its value's loads, Triton after), so it is part of each language's rendering.
    """

    def __init__(self, kernel: Kernel, spell: Callable[[int, str], str]) -> None:
        self.kernel = kernel
        self._spell = spell
        self._names: dict[str, str] = {}

    def name(self, buffer: str) -> str:
        """The parameter name of ``buffer`` in the source (taking the next position on first use)."""
        found = self._names.get(buffer)
        if found is not None:
            return found
        self.kernel.param(buffer)  # a buffer the kernel does not touch is a renderer bug
        name = base = self._spell(len(self._names), buffer)
        taken, n = set(self._names.values()), 1
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        self._names[buffer] = name
        return name

    @property
    def buffers(self) -> tuple[str, ...]:
        """Buffer names in parameter order (the launch arguments)."""
        return tuple(self._names)

    def signature(self) -> list[tuple[Param, str]]:
        """Each parameter with its name, in order."""
        return [(self.kernel.param(b), name) for b, name in self._names.items()]


def leaf(e: Expr, literal: Callable[[object, torch.dtype], str], language: str = "c") -> str | None:
    """A constant (spelled by the language's ``literal``), a loop index or a symbolic size (the
    kernel's size arguments have the symbols' names), rendered in place; None for every other op."""
    if e.op is Op.CONST:
        return literal(e.arg, e.dtype)
    if e.op is Op.SIZE:
        return sizes.code(e.arg, language)
    if e.op is Op.XVAR:
        return f"x{e.arg}"
    if e.op is Op.RVAR:
        return f"r{e.arg}"
    return None


def unravel_terms(sizes: tuple[int, ...]) -> list[tuple[int, int | None]]:
    """Per dim of row-major ``sizes``: (stride, modulus) such that its index is
    ``(flat // stride) % modulus``; the first dim needs no modulus (None)."""
    return [(math.prod(sizes[i + 1:]), size if i > 0 else None) for i, size in enumerate(sizes)]


def unravel(flat: str, dims: tuple[int, ...], floordiv: str) -> list[str]:
    """The index code of each dim of ``sizes`` from the flat index ``flat``; ``floordiv`` is the
    language's integer division of non-negative values (``/`` in C++, ``//`` in Triton)."""
    out = []
    language = "c" if floordiv == "/" else "triton"
    for stride, modulus in unravel_terms(dims):
        code = flat if stride == 1 else f"({flat} {floordiv} {size_code(stride, language)})"
        out.append(code if modulus is None else f"{code} % {size_code(modulus, language)}")
    return out


def size_code(size: object, language: str = "c") -> str:
    """A size as code: its digits, or (symbolic) ``compiler.sizes.code``."""
    return str(size) if isinstance(size, int) else sizes.code(size, language)


class ExprLevels:
    """Where a value of a reduction kernel lives, memoized per expression.

    ``is_xr``: it varies along the reduced dims (an RVAR outside any REDUCE), so it is
    computed per reduction element; otherwise once per outer point. ``after_reduce``:
    it depends on a REDUCE result, so it can only be computed after that reduction.
    Iterative, because fused expressions can be deeper than Python's recursion limit.
    """

    def __init__(self) -> None:
        self._xr: dict[Expr, bool] = {}
        self._after: dict[Expr, bool] = {}

    def _fill(self, root: Expr) -> None:
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            e, ready = stack.pop()
            if e in self._xr:
                continue
            if not ready:
                stack.append((e, True))
                stack.extend((s, False) for s in e.src if s not in self._xr)
                continue
            if e.op is Op.RVAR:
                self._xr[e] = True
            elif e.op is Op.REDUCE:
                self._xr[e] = False
            else:
                self._xr[e] = any(self._xr[s] for s in e.src)
            self._after[e] = e.op is Op.REDUCE or any(self._after[s] for s in e.src)

    def is_xr(self, e: Expr) -> bool:
        if e not in self._xr:
            self._fill(e)
        return self._xr[e]

    def after_reduce(self, e: Expr) -> bool:
        if e not in self._after:
            self._fill(e)
        return self._after[e]


def affine_index_code(index: Expr, name_of: Callable[[Expr], str], language: str = "c") -> str | None:
    """``index`` as ``a + 3 * b + 7`` (valid C++ and Python), or None when it is not affine.

    ``name_of`` renders a loop variable or other term; both renderers share this text."""
    aff = ir.to_affine(index)
    if aff is None:
        return None
    terms = [name_of(var) if coef == 1 else f"{size_code(coef, language)} * {name_of(var)}"
             for var, coef in aff.items() if var is not None and coef != 0]
    if aff.get(None, 0) != 0 or not terms:
        terms.append(size_code(aff.get(None, 0), language))
    return " + ".join(terms)


# integer arithmetic whose bound ``int_bound`` follows (the Triton renderer widens it past int32)
INT_ARITHMETIC = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.SHL, Op.NEG})


def int_bound(e: Expr, k: Kernel) -> float:
    """A bound on |e| for integer arithmetic over a kernel's loop indices and constants; inf for
    anything else (a load, a symbolic size or range, another op)."""
    if e.op is Op.CONST and isinstance(e.arg, int):
        return abs(e.arg)
    if e.op in (Op.XVAR, Op.RVAR):
        size = (k.ranges if e.op is Op.XVAR else k.rranges)[e.arg]
        return size - 1 if isinstance(size, int) else math.inf
    if e.op not in INT_ARITHMETIC:
        return math.inf
    a = [int_bound(s, k) for s in e.src]
    if e.op is Op.NEG:
        return a[0]
    if e.op in (Op.ADD, Op.SUB):
        return a[0] + a[1]
    if e.op is Op.MUL:
        return a[0] * a[1]
    return a[0] * 2 ** a[1] if a[1] < 64 else math.inf  # SHL
