"""Loop merging: adjacent dims of a scheduled kernel that every access walks contiguously become
one dim (fewer div/mods in the rendered index arithmetic). Works on the scheduler's kernel builder
(``ranges``, ``rranges``, ``stores``, ``produced``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler import ir
from compiler.ir import Expr, Op


def _var_sites(k: Any) -> tuple[list[Expr], set[Expr]]:
    """Affine index sites, and the vars used anywhere else (which block merging)."""
    sites: list[Expr] = []
    values = [s.value for s in k.stores]
    for s in k.stores:
        sites.append(s.index)
    for v in values:
        for e in v.walk():
            if e.op is Op.LOAD:
                sites.append(e.src[0])
    blocked: set[Expr] = set()
    for site in sites:
        if ir.to_affine(site) is None:
            blocked.update(e for e in site.walk() if e.op in (Op.XVAR, Op.RVAR))
    for v in values:
        blocked.update(_vars_outside_indices(v))
    return sites, blocked


def _vars_outside_indices(value: Expr) -> set[Expr]:
    """Index vars that ``value`` uses as values (an iota, a mask bound), not inside a load's
    address: merging dims would change those values."""
    found: set[Expr] = set()
    seen: set[Expr] = set()
    stack = [value]
    while stack:
        e = stack.pop()
        if e in seen:
            continue
        seen.add(e)
        if e.op in (Op.XVAR, Op.RVAR):
            found.add(e)
        stack.extend(() if e.op is Op.LOAD else e.src)  # a load's only operand is its address
    return found


def _try_merge(k: Any, kind: Op) -> bool:
    sizes = list(k.ranges if kind is Op.XVAR else k.rranges)
    make = ir.xvar if kind is Op.XVAR else ir.rvar
    sites, blocked = _var_sites(k)
    affs = [ir.to_affine(s) for s in sites]
    for i in range(len(sizes) - 1):
        outer_v, inner_v = make(i), make(i + 1)
        if outer_v in blocked or inner_v in blocked:
            continue
        if all(a is None or a.get(outer_v, 0) == a.get(inner_v, 0) * sizes[i + 1] for a in affs):
            mapping: dict[Expr, Expr] = {}
            for d in range(len(sizes)):
                if d == i:
                    # outer*inner_size + inner == merged var; the outer coefficient is absorbed
                    mapping[make(d)] = ir.const(0, ir.INDEX_DTYPE)
                elif d > i:
                    mapping[make(d)] = make(d - 1)
            mapping[inner_v] = make(i)
            # outer var's coefficient equals inner's * size: dropping it and renaming inner keeps
            # sum(coef*var) identical as a function of the merged var.
            k.stores = [dataclasses.replace(s, index=_resite(s.index, mapping), value=ir.substitute(s.value, mapping))
                        for s in k.stores]
            sizes[i:i + 2] = [sizes[i] * sizes[i + 1]]
            if kind is Op.XVAR:
                k.ranges = tuple(sizes)
            else:
                k.rranges = tuple(sizes)
            return True
    return False


def _resite(index: Expr, mapping: dict[Expr, Expr]) -> Expr:
    out = ir.substitute(index, mapping)
    aff = ir.to_affine(out)
    return ir.from_affine(aff) if aff is not None else out


def merge_loops(k: Any) -> None:
    """Merge adjacent dims that every access walks contiguously (fewer div/mods)."""
    k.produced = {}
    while _try_merge(k, Op.XVAR):
        pass
    while _try_merge(k, Op.RVAR):
        pass
