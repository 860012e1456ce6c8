"""The loop-level IR: one op enum and one small frozen expression node.

An ``Expr`` computes one element of a loop nest. Leaves are constants, loop
variables (``XVAR``/``RVAR``: the n-th output / reduction dimension of the loop
the expression belongs to) and loads from named buffers at an index expression.
Everything is plain data: printable, hashable, comparable, cacheable; renderers
pattern-match on ``Expr.op``. Index expressions are ordinary int64 expressions; a
symbolic size or stride in them is a ``SIZE`` leaf (``compiler.sizes``), a constant term to the
affine arithmetic below.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import math
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler.sizes import code as size_code

class Op(enum.Enum):
    # leaves
    CONST = "const"  # arg: python scalar
    XVAR = "xvar"  # arg: output (outer) dimension number
    RVAR = "rvar"  # arg: reduction dimension number
    LOAD = "load"  # arg: buffer name; src: (index,)
    SIZE = "size"  # arg: a symbolic size, a sympy expression over the graph's size symbols (int64)
    # unary
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    EXP2 = "exp2"
    LOG2 = "log2"
    LOG10 = "log10"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SIN = "sin"
    COS = "cos"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ISNAN = "isnan"
    NOT = "not"  # logical not of a bool
    BITNOT = "bitnot"
    CAST = "cast"  # arg: target torch.dtype (the node's dtype)
    BITCAST = "bitcast"  # arg: target torch.dtype of the operand's width: the same bits read as it
    # binary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"  # true division on floats, C-style truncation on integers
    FLOORDIV = "floordiv"  # floor division (python semantics)
    MOD = "mod"  # C-style remainder (sign of the dividend)
    MAX = "max"  # NaN-propagating maximum
    MIN = "min"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"  # logical, on bools
    OR = "or"
    BITAND = "bitand"
    BITOR = "bitor"
    BITXOR = "bitxor"
    SHL = "shl"
    SHR = "shr"
    POW = "pow"  # C pow on floats (its special cases: ATen's); renderers without it get a formula
    # ternary
    WHERE = "where"
    FMA = "fma"  # a * b + c, rounded once (C's fma): no overflow of the product alone
    # reduction over every RVAR of the loop; arg: ReduceOp
    REDUCE = "reduce"


class ReduceOp(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"


def _arg_key(arg: Any) -> Any:
    """``arg`` as equality should see it: -0.0 is not 0.0 (x / -0.0 is -inf where x / 0.0 is inf:
    a CSE that merged the two constants flipped infinities; fuzzer, crucible-interpret, seed 11),
    and a NaN constant equals another NaN constant."""
    if isinstance(arg, float):
        return ("nan",) if math.isnan(arg) else (arg, math.copysign(1.0, arg))
    return arg


COMPARISONS = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})


@dataclass(frozen=True, eq=False)
class Expr:
    op: Op
    dtype: torch.dtype
    src: tuple[Expr, ...] = ()
    arg: Any = None
    _hash: int = field(default=0, repr=False, compare=False)
    depth: int = field(default=1, repr=False, compare=False)  # longest path to a leaf
    # ``var_bit`` of every loop variable inside, and ``REWRITES`` where ``substitute`` would rewrite
    # something even if no variable changed (a load's index not in canonical form, a cast of a constant)
    variables: int = field(default=0, repr=False, compare=False)

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        if not self.src:  # a leaf: a constant, a loop variable
            setattr_(self, "_hash", hash((self.op, self.dtype, (), self.arg)))
            if self.op in (Op.XVAR, Op.RVAR):
                setattr_(self, "variables", var_bit(self))
            return
        # operands are the canonical copies of their structure: comparing two expressions then stops
        # at their operands' identity instead of recursing through equal but distinct sub-DAGs (on
        # convnext_tiny's channels-last graph, 250k recursive ``__eq__`` calls were a third of lowering)
        src = tuple(_canonical(s) for s in self.src)
        setattr_(self, "src", src)
        setattr_(self, "_hash", hash((self.op, self.dtype, src, self.arg)))
        depth, bits = 0, 0
        for s in src:
            depth = max(depth, s.depth)
            bits |= s.variables
        if (self.op is Op.LOAD and not _canonical_index(src[0])) or (self.op is Op.CAST and src[0].op is Op.CONST):
            bits |= REWRITES
        setattr_(self, "depth", depth + 1)
        setattr_(self, "variables", bits)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Expr) or self._hash != other._hash:
            return False
        return ((self.op, self.dtype, _arg_key(self.arg), self.src)
                == (other.op, other.dtype, _arg_key(other.arg), other.src))

    def __repr__(self) -> str:
        return render_expr(self)

    def walk(self) -> Iterator[Expr]:
        """Every distinct sub-expression, operands before users."""
        seen: set[Expr] = set()
        stack: list[tuple[Expr, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                yield node
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            stack.extend((s, False) for s in reversed(node.src) if s not in seen)


# One live expression per structure hash (weak: an expression no longer used anywhere is dropped). An
# equal expression built later shares it as an operand; a hash collision between unequal ones keeps both.
_CANONICAL: weakref.WeakValueDictionary[int, Expr] = weakref.WeakValueDictionary()


def _canonical(e: Expr) -> Expr:
    known = _CANONICAL.get(e._hash)
    if known is None:
        _CANONICAL[e._hash] = e
        return e
    return known if known is e or known == e else e


REWRITES = 1


def var_bit(var: Expr) -> int:
    """A loop variable's bit in ``Expr.variables``."""
    return 2 << (2 * var.arg + (var.op is Op.RVAR))


INDEX_DTYPE = torch.int64


def const(value: Any, dtype: torch.dtype) -> Expr:
    if dtype.is_floating_point:
        value = float(value)
    elif dtype == torch.bool:
        value = bool(value)
    else:
        value = int(value)
    return Expr(Op.CONST, dtype, (), value)


def size(value: Any) -> Expr:
    """An int64 size: a constant when static, else a ``SIZE`` leaf over the graph's symbols."""
    if isinstance(value, int):
        return const(value, INDEX_DTYPE)
    if getattr(value, "is_Integer", False):
        return const(int(value), INDEX_DTYPE)
    size_code(value)  # one the renderers cannot spell fails here, in its lowering rule (a typed extern call)
    return Expr(Op.SIZE, INDEX_DTYPE, (), value)


@functools.cache
def xvar(dim: int) -> Expr:
    return Expr(Op.XVAR, INDEX_DTYPE, (), dim)


@functools.cache
def rvar(dim: int) -> Expr:
    return Expr(Op.RVAR, INDEX_DTYPE, (), dim)


def load(buffer: str, index: Expr, dtype: torch.dtype) -> Expr:
    return Expr(Op.LOAD, dtype, (index,), buffer)


def cast(value: Expr, dtype: torch.dtype) -> Expr:
    if value.dtype == dtype:
        return value
    if value.op is Op.CONST:
        return const(value.arg, dtype)
    return Expr(Op.CAST, dtype, (value,), dtype)


# the bit casts renderers compute: float and integer dtypes of one width (16-bit floats are computed in
# float32, so their bits are not at hand)
BITCAST_PAIRS = frozenset({(torch.float32, torch.int32), (torch.int32, torch.float32),
                           (torch.float64, torch.int64), (torch.int64, torch.float64)})


def bitcast(value: Expr, dtype: torch.dtype) -> Expr:
    """``value``'s bits read as ``dtype`` (``BITCAST_PAIRS``; ``Tensor.view(dtype)`` of one width)."""
    if value.dtype == dtype:
        return value
    if (value.dtype, dtype) not in BITCAST_PAIRS:
        raise ValueError(f"no bit cast from {value.dtype} to {dtype}")
    return Expr(Op.BITCAST, dtype, (value,), dtype)


def unary(op: Op, value: Expr, dtype: torch.dtype | None = None) -> Expr:
    return Expr(op, dtype or value.dtype, (value,))


def binary(op: Op, a: Expr, b: Expr, dtype: torch.dtype | None = None) -> Expr:
    if dtype is None:
        dtype = torch.bool if op in COMPARISONS else a.dtype
    return Expr(op, dtype, (a, b))


def where(cond: Expr, a: Expr, b: Expr) -> Expr:
    return Expr(Op.WHERE, a.dtype, (cond, a, b))


def fma(a: Expr, b: Expr, c: Expr) -> Expr:
    return Expr(Op.FMA, a.dtype, (a, b, c))


def reduce(op: ReduceOp, value: Expr, dtype: torch.dtype) -> Expr:
    return Expr(Op.REDUCE, dtype, (value,), op)


# --- affine index arithmetic ------------------------------------------------
# Index expressions are built in a canonical affine form (sum of coef * var, then
# a constant) so that equal indexing is structurally equal: fusion matches a
# consumer's load against its producer's store by plain ==.

Affine = dict  # {Expr (XVAR/RVAR or other int expr): coefficient, None: constant}
# Coefficients and the constant are ints, or sympy expressions where sizes are symbolic.


def to_affine(expr: Expr, opaque: bool = False) -> Affine | None:
    """Decompose an int expression into {term: coef, None: const}; None if not affine, or with
    ``opaque`` each non-affine sub-expression (a floor division, a product of two variables) a term."""
    if expr.op is Op.CONST:
        return {None: int(expr.arg)}
    if expr.op is Op.SIZE:
        return {None: expr.arg}
    if expr.op in (Op.XVAR, Op.RVAR):
        return {expr: 1}
    if expr.op in (Op.ADD, Op.SUB):
        a, b = to_affine(expr.src[0], opaque), to_affine(expr.src[1], opaque)
        if a is None or b is None:
            return None
        sign = 1 if expr.op is Op.ADD else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if expr.op is Op.MUL:
        a, b = to_affine(expr.src[0], opaque), to_affine(expr.src[1], opaque)
        if a is None or b is None:
            return None
        if set(a) == {None}:
            a, b = b, a
        if set(b) != {None}:
            return {expr: 1} if opaque else None
        return {k: v * b[None] for k, v in a.items()}
    return {expr: 1} if opaque else None


def from_affine(terms: Affine) -> Expr:
    """Canonical expression for an affine map (terms sorted, zero terms dropped). Terms that are not
    loop variables (floor divisions of them, say) sort by ``fingerprint``, the same in every process:
    sorting by ``hash`` put swin's window-partition index terms in an order that changed with the
    interpreter's string-hash seed, so its kernels had other sources and names in each process (no
    Triton disk-cache or tuning-cache hit across processes)."""
    items = [(k, v) for k, v in terms.items() if k is not None and v != 0]
    items.sort(key=lambda kv: (kv[0].op.value, kv[0].arg if kv[0].op in (Op.XVAR, Op.RVAR) else 0,
                               "" if kv[0].op in (Op.XVAR, Op.RVAR) else fingerprint(kv[0])))
    out: Expr | None = None
    for var, coef in items:
        term = var if coef == 1 else binary(Op.MUL, var, size(coef))
        out = term if out is None else binary(Op.ADD, out, term)
    c = terms.get(None, 0)
    if out is None:
        return size(c)
    return binary(Op.ADD, out, size(c)) if c != 0 else out


def _canonical_index(index: Expr) -> bool:
    """Whether ``substitute`` leaves this load index as it is: not affine, or in ``from_affine``'s form."""
    if index.op is Op.CONST or index.op in (Op.XVAR, Op.RVAR):
        return True
    terms = to_affine(index)
    return terms is None or from_affine(terms) == index


def linear_index(indices: list[Expr], strides: tuple[int, ...], offset: int = 0) -> Expr:
    """offset + sum(index_i * stride_i), canonical when every index is affine."""
    total: Affine = {None: offset}
    rest: list[Expr] = []
    for idx, stride in zip(indices, strides):
        if stride == 0:
            continue
        aff = to_affine(idx)
        if aff is None:
            rest.append(binary(Op.MUL, idx, size(stride)) if stride != 1 else idx)
            continue
        for k, v in aff.items():
            total[k] = total.get(k, 0) + v * stride
    out = from_affine(total)
    for r in rest:
        out = binary(Op.ADD, r, out)
    return out


def substitute(expr: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """Replace sub-expressions; loads' indices are re-canonicalized. Where every key is a loop
    variable, a sub-expression with none of them and nothing to rewrite (``REWRITES``) is kept as
    it is, unvisited: a rewrite added here must also set ``REWRITES`` in ``Expr.__post_init__`` on
    what it rewrites, or it is skipped where no key reaches."""
    memo: dict[Expr, Expr] = {}
    only_vars = all(k.op in (Op.XVAR, Op.RVAR) for k in mapping)
    visit = REWRITES
    if only_vars:
        for k in mapping:
            visit |= var_bit(k)

    def go(e: Expr) -> Expr:
        if only_vars and not e.variables & visit:
            return e
        hit = mapping.get(e)
        if hit is not None:
            return hit
        done = memo.get(e)
        if done is not None:
            return done
        if not e.src:
            out = e
        else:
            src = tuple(go(s) for s in e.src)
            if e.op is Op.LOAD:
                aff = to_affine(src[0])
                if aff is not None:
                    src = (from_affine(aff),)
            if e.op is Op.CAST and src[0].op is Op.CONST:
                out = const(src[0].arg, e.dtype)  # as ``cast`` folds it (Triton: no `(0).to(...)`)
            else:
                out = e if src == e.src else Expr(e.op, e.dtype, src, e.arg)
        memo[e] = out
        return out

    return go(expr)


# each expression's loads, kept while it lives: the scheduler asks for the same expressions' loads
# at every fusion it tries
_LOADS: weakref.WeakKeyDictionary[Expr, tuple[Expr, ...]] = weakref.WeakKeyDictionary()



def affine_normal(index: Expr) -> Expr:
    """``index`` in the affine normal form (as is where it is not affine), for comparing indices."""
    affine = to_affine(index)
    return from_affine(affine) if affine is not None else index


def permute_xvars(body: Expr, order: tuple[int, ...]) -> Expr:
    """``body`` over a node's own XVARs when its XVAR(j) walks buffer dim ``order[j]``."""
    if not order:
        return body
    return substitute(body, {xvar(d): xvar(j) for j, d in enumerate(order)})


def loads(expr: Expr) -> list[Expr]:
    found = _LOADS.get(expr)
    if found is None:
        found = _LOADS[expr] = tuple(e for e in expr.walk() if e.op is Op.LOAD)
    return list(found)


def fingerprint(expr: Expr, memo: dict[Expr, str] | None = None) -> str:
    """A digest of ``expr``'s structure, the same in every process: a stable sort key. Linear in the
    DAG (``render_expr``'s string doubles with every shared subexpression: asin(asin(x)) in float64
    held a C++ compile in the sort for minutes; fuzzer, crucible-cpp, seed 1)."""
    memo = {} if memo is None else memo
    for e in expr.walk():  # post-order: sources first
        if e not in memo:
            text = f"{e.op.value}|{e.dtype}|{e.arg!r}|" + ",".join(memo[s] for s in e.src)
            memo[e] = hashlib.sha1(text.encode()).hexdigest()[:16]
    return memo[expr]


def _node_text(e: Expr, operands: list[str]) -> str:
    """One node's text around its operands' texts: ``buf[index]``, ``float32(a)``, ``sum_r(a)``, ``add(a, b)``."""
    if e.op is Op.CONST:
        return repr(e.arg)
    if e.op is Op.XVAR:
        return f"x{e.arg}"
    if e.op is Op.RVAR:
        return f"r{e.arg}"
    if e.op is Op.SIZE:
        return str(e.arg)
    if e.op is Op.LOAD:
        return f"{e.arg}[{operands[0]}]"
    if e.op is Op.CAST:
        return f"{str(e.dtype).replace('torch.', '')}({operands[0]})"
    if e.op is Op.BITCAST:
        return f"bits_as_{str(e.dtype).replace('torch.', '')}({operands[0]})"
    if e.op is Op.REDUCE:
        return f"{e.arg.value}_r({operands[0]})"
    return f"{e.op.value}({', '.join(operands)})"


def expr_listing(roots: Sequence[Expr], prefix: str = "t") -> tuple[list[str], list[str]]:
    """The text of ``roots`` with every shared subexpression printed once, by name: (definitions such as
    ``"t3 = exp(t2)"``, operands before users; each root's text, naming them). Shared: referred to by two
    operand slots, or by a root and an operand slot (a root used twice counts too); constants and loop
    variables are never named. Linear in the DAG: the fully nested text doubles with each level of
    sharing (four chained tanh wrote a 177 MB IR dump in 25 s)."""
    uses: dict[Expr, int] = {}
    order: dict[Expr, None] = {}  # every distinct node, operands first
    for root in roots:
        uses[root] = uses.get(root, 0) + 1
        for e in root.walk():
            if e not in order:
                order[e] = None
                for s in e.src:
                    uses[s] = uses.get(s, 0) + 1
    definitions: list[str] = []
    text: dict[Expr, str] = {}  # a named node's name, or the text of a node used once (until its user takes it)
    for e in order:
        operands = [text[s] for s in e.src]
        for s in e.src:
            if s.src and uses[s] == 1:
                del text[s]
        own = _node_text(e, operands)
        if e.src and uses[e] > 1:
            name = f"{prefix}{len(definitions)}"
            definitions.append(f"{name} = {own}")
            own = name
        text[e] = own
    return definitions, [text[r] for r in roots]


def render_expr(expr: Expr) -> str:
    """A compact one-line rendering for debugging and IR dumps: ``add(mul(x0, 4), 3)``; an expression
    with shared subexpressions names each once, ``let t0 = buf0[x0]; t1 = exp(t0) in add(t1, t1)``
    (``expr_listing``)."""
    definitions, (text,) = expr_listing([expr])
    return f"let {'; '.join(definitions)} in {text}" if definitions else text


def render_definition(head: str, joiner: str, expr: Expr, indent: str = "    ") -> str:
    """``head + joiner + expr`` on one line; where ``expr`` shares subexpressions, ``head`` alone, then
    one indented line per named subexpression and ``joiner.strip() expr`` (IR dumps of lowered nodes)."""
    definitions, (text,) = expr_listing([expr])
    if not definitions:
        return f"{head}{joiner}{text}"
    return "\n".join([head, *(indent + d for d in definitions), f"{indent}{joiner.strip()} {text}"])
