"""Iteration spaces that are reshapes of each other, for the scheduler.

A node over (56, 56, 96) and a kernel over (3136,)|(96,) walk the same points in the same row-major
order: point ``(h, w, c)`` of the one is ``(h * 56 + w, c)`` of the other. ``reshape_vars`` gives
the one's index vars as expressions of the other's, where the two differ only by merged or split
dims (a group of adjacent dims of one side whose product is a single dim of the other). A node
re-expressed that way computes the same values at the same program, so fusing it is a question of
the usual index check only. Other re-factorizations (a transpose, (8, 8, 7, 7) against (56, 56))
return None.

Split dims appear as ``mod(floordiv(v, n), m)``; ``fold_divmod`` folds the index sums they leave
back, ``c * n * (v // n) + c * (v % n) == c * v`` for non-negative ``v``, so a consumer's read of
a value the kernel produces compares equal to the producer's store index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from compiler import ir, sizes
from compiler.ir import Expr, Op
from compiler.loop_merging import _resite


def _groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Split both dim lists where their prefix products meet: (src dims, dst dims) per group."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gs, gd = [i], [j]
        if i >= len(src) or j >= len(dst):
            return None
        ps, pd = src[i], dst[j]
        i, j = i + 1, j + 1
        while ps != pd:
            if ps < pd and i < len(src):
                ps *= src[i]
                gs.append(i)
                i += 1
            elif pd < ps and j < len(dst):
                pd *= dst[j]
                gd.append(j)
                j += 1
            else:
                return None
        groups.append((gs, gd))
    return groups


def reshape_vars(src: Sequence[int], dst: Sequence[int], dst_vars: Sequence[Expr]) -> list[Expr] | None:
    """One expression per dim of ``src`` over ``dst_vars`` (one var per dim of ``dst``; both without
    size-1 dims, of equal product) that walks ``src`` in ``dst``'s row-major order; None where some
    group of dims is neither a merge nor a split (or a size is symbolic: not matched yet)."""
    if not sizes.all_static([*src, *dst]) or math.prod(src) != math.prod(dst) or list(src) == list(dst):
        return None
    groups = _groups(src, dst)
    if groups is None:
        return None
    out: list[Expr] = [ir.const(0, ir.INDEX_DTYPE)] * len(src)
    for gs, gd in groups:
        if len(gs) == 1:  # one src dim over merged dst dims: the row-major sum
            terms: ir.Affine = {None: 0}
            stride = 1
            for j in reversed(gd):
                terms[dst_vars[j]] = stride
                stride *= dst[j]
            out[gs[0]] = ir.from_affine(terms)
        elif len(gd) == 1:  # src dims splitting one dst dim: nested floor divisions, innermost last
            q = dst_vars[gd[0]]
            for pos, i in enumerate(reversed(gs)):
                last = pos == len(gs) - 1
                out[i] = q if last else ir.binary(Op.MOD, q, _int(src[i]))
                q = q if last else ir.binary(Op.FLOORDIV, q, _int(src[i]))
        else:
            return None
    return out


def _int(value: int) -> Expr:
    return ir.const(value, ir.INDEX_DTYPE)


def _terms(expr: Expr, scale: int, into: dict) -> None:
    """``expr * scale`` added to ``into`` ({atom: coefficient, None: constant}); atoms are the
    sub-expressions that are not sums or products by constants."""
    if expr.op is Op.CONST and not isinstance(expr.arg, float):
        into[None] = into.get(None, 0) + int(expr.arg) * scale
    elif expr.op in (Op.ADD, Op.SUB):
        _terms(expr.src[0], scale, into)
        _terms(expr.src[1], scale if expr.op is Op.ADD else -scale, into)
    elif expr.op is Op.MUL and expr.src[1].op is Op.CONST and not isinstance(expr.src[1].arg, float):
        _terms(expr.src[0], scale * int(expr.src[1].arg), into)
    elif expr.op is Op.MUL and expr.src[0].op is Op.CONST and not isinstance(expr.src[0].arg, float):
        _terms(expr.src[1], scale * int(expr.src[0].arg), into)
    else:
        into[expr] = into.get(expr, 0) + scale


def _divisor(e: Expr, op: Op) -> int | None:
    if e is None or e.op is not op or e.src[1].op is not Op.CONST or isinstance(e.src[1].arg, float):
        return None
    return int(e.src[1].arg)


def _flat_div(e: Expr) -> tuple[Expr, int]:
    """``e`` as ``(v, d)`` with ``e == v // d`` (nested floor divisions by constants merged: for a
    non-negative ``v``, ``v // p // q == v // (p * q)``); ``d`` is 1 for anything else."""
    d = _divisor(e, Op.FLOORDIV)
    if d is None:
        return e, 1
    inner, p = _flat_div(e.src[0])
    return inner, p * d


def _quotient(v: Expr, d: int) -> Expr:
    return v if d == 1 else ir.binary(Op.FLOORDIV, v, _int(d))


def fold_divmod(index: Expr) -> Expr:
    """``index`` with every ``c * n * (v // (p * n)) + c * ((v // p) % n)`` pair folded into
    ``c * (v // p)`` (``p`` = 1: ``c * v``), repeatedly, for index expressions of the scheduler (``v``
    a non-negative index); canonical when what remains is affine. An index without floor
    divisions comes back unchanged."""
    if not any(e.op is Op.FLOORDIV for e in index.walk()):
        return index
    raw: dict = {}
    _terms(index, 1, raw)
    terms: dict = {}
    for atom, coef in raw.items():  # quotients in one canonical form, v // (p * q)
        key = atom if atom is None or _divisor(atom, Op.FLOORDIV) is None else _quotient(*_flat_div(atom))
        if key is not None and _divisor(key, Op.MOD) is not None:
            key = ir.binary(Op.MOD, _quotient(*_flat_div(key.src[0])), key.src[1])
        terms[key] = terms.get(key, 0) + coef
    folded = True
    while folded:
        folded = False
        for atom, coef in list(terms.items()):
            n = _divisor(atom, Op.MOD)
            if n is None or coef == 0:
                continue
            v, p = _flat_div(atom.src[0])
            outer = _quotient(v, p * n)
            if terms.get(outer, 0) == coef * n:
                del terms[atom], terms[outer]
                _terms(_quotient(v, p), coef, terms)
                folded = True
                break
    return ir.from_affine(terms)


def fold_load_indices(value: Expr) -> Expr:
    """``value`` with ``fold_divmod`` applied to every load's index."""
    mapping = {e: ir.load(e.arg, folded, e.dtype) for e in ir.loads(value)
               if (folded := fold_divmod(e.src[0])) is not e.src[0]}
    return ir.substitute(value, mapping) if mapping else value


def remap(index: Expr, value: Expr, mapping: dict[Expr, Expr]) -> tuple[Expr, Expr]:
    """A store's index and value with ``mapping`` (vars to ``reshape_vars`` expressions) applied and
    the divisions folded."""
    return fold_divmod(_resite(index, mapping)), fold_load_indices(ir.substitute(value, mapping))


def node_mapping(ranges: tuple[int, ...], rranges: tuple[int, ...], outer: tuple[int, ...],
                 xmap: dict[Expr, int | None]) -> tuple[bool, dict[Expr, Expr]] | None:
    """(at the xr level, var mapping) for a pointwise node over ``outer`` (its canonical dims;
    ``xmap``: its vars' positions in them) whose space is a reshape of a kernel's outer dims
    ``ranges`` (the x level) or of its outer and reduced dims (xr), else None."""
    nx = len(ranges)
    targets = [(False, ranges)] + ([(True, ranges + rranges)] if rranges else [])
    for xr, dims in targets:
        exprs = reshape_vars(outer, dims, [ir.xvar(i) if i < nx else ir.rvar(i - nx) for i in range(len(dims))])
        if exprs is not None:
            return xr, {v: _int(0) if i is None else exprs[i] for v, i in xmap.items()}
    return None


# --- permuted views: a consumer that reads a kernel-local value through a permutation ----------

def _dense(terms: dict[Expr, int], sizes: dict[Expr, int]) -> list[tuple[Expr, int, int]] | None:
    """(var, coefficient, size) from the largest coefficient down when ``terms`` (an affine index
    without its constant) addresses every element of a dense block exactly once: each coefficient
    is the next one's times that one's size, the last is 1; else None."""
    items = sorted(((v, c, sizes[v]) for v, c in terms.items() if sizes.get(v, 1) > 1), key=lambda t: -t[1])
    if any(c <= 0 for _, c, _ in items) or (items and items[-1][1] != 1):
        return None
    if any(items[i][1] != items[i + 1][1] * items[i + 1][2] for i in range(len(items) - 1)):
        return None
    return items


def _digit(radix: list[tuple[Expr, int, int]], a: int, n: int) -> Expr | None:
    """``(L // a) % n`` of the mixed-radix number ``L = sum(coef * var)`` (``_dense``'s form) as an
    expression of its vars, where ``a`` and ``a * n`` fall on its digits' boundaries or split one
    digit evenly; else None."""
    total: ir.Affine = {None: 0}
    for var, coef, size in radix:
        lo, hi = coef, coef * size  # this digit's place values: [lo, hi)
        if hi <= a or lo >= a * n:
            continue  # below the extracted range, or above it (removed by % n)
        if lo % a == 0 and (a * n) % hi == 0:
            total[var] = lo // a  # the whole digit lies inside
            continue
        # a digit split by the range: its part in [a, a * n)
        low, high = max(lo, a), min(hi, a * n)
        if low % lo or low % a or hi % high or (high // lo) * lo != high:
            return None
        part = var if low == lo else ir.binary(Op.FLOORDIV, var, _int(low // lo))
        if high != hi:
            part = ir.binary(Op.MOD, part, _int(high // low))
        total[part] = low // a
    return ir.from_affine(total)


def view_mapping(read: Expr, produced_at: Expr, node_sizes: dict[Expr, int],
                 kernel_sizes: dict[Expr, int]) -> dict[Expr, Expr] | None:
    """A node's vars as expressions of a kernel's, for a node that reads a kernel-local value at
    ``read`` (affine in the node's vars) where the kernel produced it at ``produced_at`` (affine in
    its vars), both dense over the same elements: the node then computes, at the kernel's point that
    produced an element, the node point that reads it. swin's window partition (a permuted copy of
    each block's normed rows) so joins its layer norm. None where the two are not such views."""
    r, p = ir.to_affine(read), ir.to_affine(produced_at)
    if not sizes.all_static([*node_sizes.values(), *kernel_sizes.values()]):
        return None  # symbolic sizes (``compiler.sizes``): permuted views are not matched yet
    if r is None or p is None or r.get(None, 0) != p.get(None, 0):
        return None
    rr = _dense({k: v for k, v in r.items() if k is not None}, node_sizes)
    pr = _dense({k: v for k, v in p.items() if k is not None}, kernel_sizes)
    if rr is None or pr is None or math.prod(n for *_, n in rr) != math.prod(n for *_, n in pr):
        return None
    mapping: dict[Expr, Expr] = {}
    for var, coef, size in rr:
        digit = _digit(pr, coef, size)
        if digit is None:
            return None
        mapping[var] = digit
    return mapping
