"""Hypothesis strategies that build ``FuzzGraph``s valid by construction.

An op spec (``harness.fuzz.specs``) asks a ``NodeDraw`` for operands with constraints
(dtypes, rank, contiguity, a shape it must broadcast with); the draw picks an existing value
that satisfies them or creates a fresh graph input that does, so no example is ever rejected.
The node's output metadata (shape, dtype, strides) comes from running its call on meta tensors,
which is exactly what eager will produce. Choices are ordered so that hypothesis shrinks towards
few nodes, fresh inputs, small shapes, contiguous layouts and plain values.

The corners (``GraphLimits.corners``, each on by default and each switched off alone by the A/B
tests of tests/harness/test_fuzz_corners.py):

- ``sizes``: an op that reduces, scans, normalizes or works elementwise may get a fresh input with
  one dim (its "row") drawn from the target's size classes (``harness.fuzz.sizes``), long rows up to
  ~10^5 elements included, and its dim arguments then often name that row;
- ``optionals``: specs draw each optional argument independently (present or absent, positional or
  keyword: ``NodeDraw.call``) and vary attributes (norm eps, weight and bias, groups; pooling
  padding, dilation, ceil_mode; attention scale, masks, causal with more keys than queries);
- ``repeats``: a node may repeat an earlier node's op over the same operands with attributes drawn
  again (two norms of one input with different eps), or add another consumer of a value that
  already has one (an extern and a kernel, two kernels), and a consumed value may be an output too;
- ``layouts``: the ``narrowed`` layout (size-1 dims that are one-element slices of wider dims);
- ``values``: rounding ties of every cast, subnormal and huge divisors broadcast along a row, values
  near the overflow of every accumulation, integer extremes as divisors, floats near 0 (series
  branches) and floats with a large common offset (cancellation in variances and differences).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from hypothesis import strategies as st

from harness.fuzz.graph import DTYPE_NAMES, FuzzGraph, Node, namespace
from harness.fuzz.sizes import GENERIC_BLOCKS, TargetBlocks
from harness.fuzz.values import FLOAT_DTYPES, layout_of

ALL_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "bool")
INT_DTYPES = ("int32", "int64")
# Dim sizes, small first (shrinking goes left): size-1 broadcast dims, 0-size dims, odd sizes and
# sizes past one block (1024 lanes / a 64-wide tile) all appear.
DIM_SIZES = (1, 2, 3, 4, 5, 0, 7, 8, 16, 17, 33, 64, 65, 130, 1025)
FLOAT_SCALARS = (2.0, -1.5, 0.5, 0.0, -0.0, 3.0, 1e-3, -7.25, 1e4, float("inf"), float("nan"))
INT_SCALARS = (2, -3, 1, 0, 7, -1, 5)
ROW_PEERS = (1, 2, 3, 4, 5, 7, 8)  # the other dims of a shape with a row (0-size ones would empty it)
VALUE_NAME = re.compile(r"\b[xv]\d+(?:_\d+)?\b")
CORNERS = frozenset({"sizes", "optionals", "repeats", "layouts", "values"})


@dataclass
class GraphLimits:
    max_nodes: int = 6
    max_rank: int = 4
    max_numel: int = 8192
    dtypes: tuple[str, ...] = ALL_DTYPES
    blocks: TargetBlocks = GENERIC_BLOCKS  # the target's (harness.fuzz.sizes.target_blocks)
    # a tensor with a row drawn from the size classes holds at most this many elements; values
    # larger than max_numel reach only ops that take rows (reductions, scans, norms, pointwise)
    max_row_numel: int = 1 << 17
    # ... and, unless the row alone is longer, at most this many: the other dims of a long row are
    # cut to 1. The oracle's cost grows with the elements (a 131072-element float16 graph took ~2 s to
    # compare, 20 small graphs' worth), and many rows of a long row meet no corner one row does not
    max_rows_numel: int = 1 << 15
    corners: frozenset[str] = CORNERS
    # crucible fuzz --dynamic: each graph also gets further calls at other sizes (harness.fuzz.dynamic)
    dynamic: bool = False


def draw_shape(draw: Any, limits: GraphLimits, min_rank: int = 0, max_rank: int | None = None,
               nonempty: bool = False) -> list[int]:
    """A shape with ``min_rank..max_rank`` dims and at most ``limits.max_numel`` elements."""
    top = min(limits.max_rank, 4 if max_rank is None else max_rank)
    rank = draw(st.integers(min_rank, max(min_rank, top)))
    sizes = st.sampled_from([s for s in DIM_SIZES if s or not nonempty])
    shape = [draw(sizes) for _ in range(rank)]
    # deterministic: the largest dim halves; a 0-size dim counts as 1, or an empty [1025, 1025, 1025, 0]
    # passed as 0 elements and its layer norm over the last dim ran a billion empty rows (21 s in eager)
    while math.prod(max(s, 1) for s in shape) > limits.max_numel:
        i = shape.index(max(shape))
        shape[i] = max(1, shape[i] // 2) if shape[i] != 1025 else 33
    return shape


def draw_row_shape(draw: Any, limits: GraphLimits, kind: str, min_rank: int, max_rank: int) -> tuple[list[int], int]:
    """A shape whose dim ``row`` has a length from the target's size classes for ``kind`` (at most
    ``limits.max_row_numel``); the other dims are cut (largest first) until the shape holds at most
    ``limits.max_rows_numel`` elements, or the row alone."""
    rank = draw(st.integers(max(1, min_rank), max(1, min_rank, min(limits.max_rank, max_rank))))
    shape = [draw(st.sampled_from(ROW_PEERS)) for _ in range(rank)]  # small: the row dominates
    row = draw(st.integers(0, rank - 1))
    classes = limits.blocks.classes(kind)
    short = [c for c in classes if c <= limits.max_rows_numel]
    if len(short) > 1 and draw(st.integers(0, 3)) < 3:  # rows past max_rows_numel one draw in four: some
        classes = short  # ops run elementwise in Python on the interpreter (erfc of 65536 floats: 2.5 s)
    favoured = limits.blocks.favoured if kind == "reduction" else ()
    if favoured and draw(st.booleans()):  # the target's own thresholds (``TargetBlocks.favoured``)
        classes = favoured
        if rank > 1 and draw(st.booleans()):
            # ... as an outer dim before an inner one of several elements: a reduction over it walks
            # columns (the column splits; with the row anywhere, 0 in 150 reduction graphs)
            row = draw(st.integers(0, rank - 2))
            shape[-1] = draw(st.sampled_from([p for p in ROW_PEERS if p > 1]))
    shape[row] = min(draw(st.sampled_from(classes)), limits.max_row_numel)
    budget = min(limits.max_row_numel, max(shape[row], limits.max_rows_numel))
    while math.prod(shape) > budget:
        i = max((s, i) for i, s in enumerate(shape) if i != row)[1]
        shape[i] = max(1, shape[i] // 2)
    return shape, row


def render_scalar(value: Any) -> str:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


class NodeDraw:
    """What an op spec sees while it draws one node: operands, dims, scalars.

    ``echo``: operands of an earlier node (or a value that already has a consumer) that ``tensor``
    offers first, so a repeated op reads the same values (``graphs``). ``earlier``: the choices the
    repeated node made (``again``), so the two calls can differ in a single attribute."""

    def __init__(self, draw: Any, builder: GraphDraw, echo: list[str] | None = None,
                 repeating: str | None = None, earlier: dict[str, Any] | None = None) -> None:
        self._draw, self.builder = draw, builder
        self.echo = list(echo or [])
        self.repeating = repeating  # the call this node repeats (its attributes are drawn again)
        self.earlier = earlier or {}
        self.choices: dict[str, Any] = {}  # this node's ``again`` draws, for a later repeat of it

    def draw(self, strategy: Any) -> Any:
        return self._draw(strategy)

    def again(self, key: str, strategy: Any) -> Any:
        """A draw of attribute ``key`` that a repeat of this node mostly takes over (seven times in
        eight): two norms of one input, one weight and one normalized shape then differ only in what
        the spec always draws again (eps), which is what a result cached on too small a key misses."""
        if key in self.earlier and self.draw(st.integers(0, 7)) < 7:
            value = self.earlier[key]
        else:
            value = self.draw(strategy)
        self.choices[key] = value
        return value

    def corner(self, name: str) -> bool:
        """Whether the corner ``name`` (``GraphLimits.corners``) is generated."""
        return name in self.builder.limits.corners

    def meta(self, name: str) -> torch.Tensor:
        return self.builder.metas[name]

    def dtype(self, name: str) -> str:
        return str(self.meta(name).dtype).removeprefix("torch.")

    def dt(self, dtype: str) -> str:
        return DTYPE_NAMES[dtype]

    def peek_echo(self) -> str | None:
        """The operand ``tensor`` will offer next from the echo (a spec may shape its draw on it)."""
        return self.echo[0] if self.echo else None

    def tensor(self, dtypes: tuple[str, ...] = ALL_DTYPES, min_rank: int = 0, max_rank: int = 4,
               contiguous: bool = False, nonempty: bool = False, shape: list[int] | None = None,
               profile: str | None = None, fresh_only: bool = False, rows: str | None = None,
               **extra: Any) -> str:
        """An operand: an existing value meeting the constraints or a fresh input. ``rows``
        ("reduction" or "pointwise"): the op takes a row from the target's size classes (a fresh
        input may get one; an existing value past ``max_numel`` may be taken)."""
        dtypes = tuple(d for d in dtypes if d in self.builder.limits.dtypes) or dtypes[:1]
        limit = self.builder.limits.max_row_numel if rows else self.builder.limits.max_numel

        def fits(n: str, t: torch.Tensor) -> bool:
            return (str(t.dtype).removeprefix("torch.") in dtypes and min_rank <= t.dim() <= max_rank
                    and (not contiguous or t.is_contiguous()) and (not nonempty or t.numel() > 0)
                    and (shape is None or list(t.shape) == list(shape)) and t.numel() <= limit)

        if self.echo and profile not in ("index", "divisor"):
            name = self.echo.pop(0)
            if fits(name, self.meta(name)) and (not fresh_only or name.startswith("x")):
                return name
        cands = [] if fresh_only or profile in ("index", "divisor") else [
            n for n, t in self.builder.metas.items() if fits(n, t)]
        pick = self.draw(st.integers(0, len(cands)))
        if pick:
            return cands[pick - 1]
        return self.builder.fresh_input(self._draw, dtypes, min_rank, max_rank, contiguous, nonempty,
                                        shape, profile, rows=rows if self.corner("sizes") else None, **extra)

    def partner(self, name: str, dtypes: tuple[str, ...] = ALL_DTYPES, profile: str | None = None) -> str:
        """An operand whose shape broadcasts with ``name``'s (shape-1 dims, fewer dims, or equal)."""
        base = list(self.meta(name).shape)
        dtypes = tuple(d for d in dtypes if d in self.builder.limits.dtypes) or dtypes[:1]
        cands = [] if profile else [
            n for n, t in self.builder.metas.items() if str(t.dtype).removeprefix("torch.") in dtypes
            and _broadcasts(list(t.shape), base)]
        pick = self.draw(st.integers(0, len(cands)))
        if pick:
            return cands[pick - 1]
        drop = self.draw(st.integers(0, len(base)))
        shape = [1 if self.draw(st.booleans()) else s for s in base[drop:]]
        return self.builder.fresh_input(self._draw, dtypes, 0, 4, False, False, shape, profile)

    def divisor(self, name: str, dtypes: tuple[str, ...]) -> str:
        """A float divisor for ``name``: with the ``values`` corner, often a fresh one of subnormal and
        huge magnitudes broadcast along ``name``'s rows (its last dim of size 1: a compiler may hoist
        its reciprocal out of the row, which overflows or goes subnormal where the division does not)."""
        if not self.corner("values") or not self.draw(st.booleans()):
            return self.partner(name, dtypes)
        base = list(self.meta(name).shape)
        shape = [*base[:-1], 1] if base and self.draw(st.booleans()) else [1] * min(len(base), 1)
        return self.builder.fresh_input(self._draw, dtypes, 0, 4, False, False, shape, "tiny_huge")

    def dim(self, name: str) -> int:
        rank = max(1, self.meta(name).dim())
        row = self.builder.rows.get(name)
        if row is not None and self.draw(st.booleans()):
            return row - rank if self.draw(st.booleans()) else row
        return self.draw(st.integers(-rank, rank - 1))

    def dims(self, name: str, min_size: int = 1) -> list[int]:
        rank = self.meta(name).dim()
        if rank == 0:
            return [0] if min_size else []
        row = self.builder.rows.get(name)
        if row is not None and self.draw(st.booleans()):
            return [row - rank if self.draw(st.booleans()) else row]
        chosen = self.draw(st.lists(st.integers(0, rank - 1), min_size=min_size, max_size=rank, unique=True))
        return [d - rank if self.draw(st.booleans()) else d for d in chosen]

    def scalar(self, like: str | None = None, integer: bool | None = None) -> str:
        if integer is None:
            integer = like is not None and not self.meta(like).is_floating_point() and self.draw(st.booleans())
        return render_scalar(self.draw(st.sampled_from(INT_SCALARS if integer else FLOAT_SCALARS)))

    def call(self, op: str, *args: str, **optional: str | None) -> str:
        """``op(*args, ...)`` with each optional argument given (not None) rendered as a keyword or,
        where the schema allows it (not keyword-only, every argument before it given positionally),
        positionally: drawn per argument with the ``optionals`` corner, keywords only without it."""
        schema, kwarg_only = _schema_arguments(op)
        positional, keywords = list(args), []
        for name in [a for a in schema[len(args):] if a in optional] + [k for k in optional if k not in schema]:
            value = optional[name]
            if value is None:
                continue
            in_place = name in schema and name not in kwarg_only and schema.index(name) == len(positional)
            if in_place and not keywords and self.corner("optionals") and self.draw(st.booleans()):
                positional.append(value)
            else:
                keywords.append(f"{name}={value}")
        return f"{op}({', '.join(positional + keywords)})"


@lru_cache(maxsize=512)
def _schema_arguments(op: str) -> tuple[list[str], frozenset[str]]:
    """Argument names of ``op`` ("aten.<name>.<overload>") in schema order, and its keyword-only ones."""
    _, name, overload = op.split(".")
    schema = getattr(getattr(torch.ops.aten, name), overload)._schema
    return [a.name for a in schema.arguments], frozenset(a.name for a in schema.arguments if a.kwarg_only)


def _broadcasts(a: list[int], b: list[int]) -> bool:
    """True when broadcasting ``a`` with ``b`` gives ``b``'s shape."""
    if len(a) > len(b):
        return False
    return all(x == y or x == 1 for x, y in zip(reversed(a), reversed(b)))


class GraphDraw:
    def __init__(self, limits: GraphLimits) -> None:
        self.limits = limits
        self.graph = FuzzGraph()
        self.metas: dict[str, torch.Tensor] = {}
        self.rows: dict[str, int] = {}  # fresh inputs with a row from the size classes: its dim
        self.specs: list[Any] = []  # the spec of each node
        self.choices: list[dict[str, Any]] = []  # the ``NodeDraw.again`` draws of each node
        self.rejected: list[tuple[str, str]] = []  # (op, error): spec bugs, counted, never hidden

    def fresh_input(self, draw: Any, dtypes: tuple[str, ...], min_rank: int, max_rank: int,
                    contiguous: bool, nonempty: bool, shape: list[int] | None, profile: str | None,
                    rows: str | None = None, **extra: Any) -> str:
        dtype = draw(st.sampled_from(dtypes))
        row = None
        free = shape is None
        # one fresh input in five of an op that takes rows: long rows cost the interpreter and the
        # oracle most of a campaign's time (one in three ran crucible-interpret at 0.64x the graphs/s)
        if free and rows and draw(st.integers(0, 4)) == 4:
            shape, row = draw_row_shape(draw, self.limits, rows, min_rank, max_rank)
        elif free:
            shape = draw_shape(draw, self.limits, min_rank, max_rank, nonempty)
        desc: dict[str, Any] = {"shape": list(shape), "dtype": dtype, **extra}
        layouts = ["contiguous"] if contiguous else ["contiguous", "transposed", "sliced", "expanded", "offset"]
        if not contiguous and "layouts" in self.limits.corners:
            layouts.append("narrowed")
        layout = draw(st.sampled_from(layouts))
        if layout == "transposed" and len(shape) < 2 or layout in ("sliced", "narrowed") and not shape:
            layout = "contiguous"
        if layout == "narrowed" and 1 not in shape:
            if not free or any(s == 0 for s in shape):
                layout = "sliced"
            else:  # a size-1 dim where the shape was ours to choose
                unit = draw(st.integers(0, len(shape) - 1))
                shape[unit] = 1
                desc["shape"] = list(shape)
        if layout == "expanded":
            stored = [1 if s > 1 and draw(st.booleans()) else s for s in shape]
            layout, desc["expand_from"] = ("expanded", stored) if stored != list(shape) else ("contiguous", None)
            if desc["expand_from"] is None:
                del desc["expand_from"]
        desc["layout"] = layout
        if profile is None:
            choices = (("normal", "special", "unit", "positive") if dtype in FLOAT_DTYPES else
                       ("bool",) if dtype == "bool" else ("small_int", "extreme"))
            # the values corner's profiles one input in four: as one more choice each, they took a third
            # of the draws and cut the NaN-bearing special inputs (clamp's NaN bug, test_fuzz_ci) by 3x
            if "values" in self.limits.corners and dtype != "bool" and draw(st.integers(0, 3)) == 3:
                choices = ("ties", "accumulation", "small", "shifted") if dtype in FLOAT_DTYPES else \
                    ("ties", "accumulation")
            profile = draw(st.sampled_from(choices))
        desc["profile"] = profile
        desc["seed"] = draw(st.integers(0, 2**16))
        name = f"x{len(self.graph.inputs)}"
        self.graph.inputs.append(desc)
        self.metas[name] = layout_of(desc)
        if row is not None and shape[row] > 1:
            self.rows[name] = row
        return name

    def add_node(self, draw: Any, spec: Any, echo: list[str] | None = None, repeating: int | None = None) -> None:
        """A node of ``spec``; ``repeating``: the index of the earlier node it repeats."""
        earlier = None if repeating is None else self.choices[repeating]
        call = None if repeating is None else self.graph.nodes[repeating].expr
        nd = NodeDraw(draw, self, echo, call, earlier)
        expr = spec.draw(nd)
        ns = {**namespace(), **self.metas}
        try:
            out = eval(expr, ns)  # noqa: S307 -- our own generated call, on meta tensors
        except Exception as exc:  # noqa: BLE001 -- a spec that produced an invalid call: counted
            self.rejected.append((spec.name, f"{type(exc).__name__}: {str(exc)[:200]}"))
            return
        index = len(self.graph.nodes)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if not outs:
            self.rejected.append((spec.name, "returned no tensors"))
            return
        names = [f"v{index}_{k}" for k in range(len(outs))] if isinstance(out, (tuple, list)) else [f"v{index}"]
        self.graph.nodes.append(Node(spec.name, expr, names,
                                     [(list(t.shape), str(t.dtype).removeprefix("torch.")) for t in outs],
                                     isinstance(out, (tuple, list))))
        self.specs.append(spec)
        self.choices.append(nd.choices)
        for n, t in zip(names, outs):
            self.metas[n] = t

    def consumed(self) -> list[str]:
        """Values some node reads, in order of first use."""
        return list(dict.fromkeys(v for node in self.graph.nodes for v in VALUE_NAME.findall(node.expr)))


def _draw_node(draw: Any, builder: GraphDraw, specs: list[Any]) -> None:
    """One node: a spec drawn anew, or (``repeats`` corner) an earlier node's op again over its
    operands with its attributes drawn again, or another consumer of an already consumed value."""
    mode = "new"
    if "repeats" in builder.limits.corners and builder.graph.nodes:
        mode = draw(st.sampled_from(["new", "new", "repeat", "fanout"]))
    if mode == "repeat":
        i = draw(st.integers(0, len(builder.graph.nodes) - 1))
        operands = list(dict.fromkeys(VALUE_NAME.findall(builder.graph.nodes[i].expr)))
        builder.add_node(draw, builder.specs[i], echo=operands, repeating=i)
    elif mode == "fanout" and builder.consumed():
        values = builder.consumed()
        produced = [v for v in values if v.startswith("v")]  # a kernel's result read twice, half the time
        value = draw(st.sampled_from(produced if produced and draw(st.booleans()) else values))
        builder.add_node(draw, draw(st.sampled_from(specs)), echo=[value])
    else:
        builder.add_node(draw, draw(st.sampled_from(specs)))


@st.composite
def graphs(draw: Any, specs: list[Any], limits: GraphLimits) -> FuzzGraph:
    builder = GraphDraw(limits)
    count = draw(st.integers(1, limits.max_nodes))
    for _ in range(count):
        _draw_node(draw, builder, specs)
    if not builder.graph.nodes:  # every drawn node was a spec error: keep the example, return an input
        name = builder.fresh_input(draw, limits.dtypes, 0, 2, False, False, None, None)
        builder.graph.outputs = [name]
    else:
        consumed = set(builder.consumed())
        defined = [o for n in builder.graph.nodes for o in n.outputs]
        builder.graph.outputs = [o for o in defined if o not in consumed] or defined[-1:]
        # a value consumed and returned; the most read first (an output beside two consumers)
        reads = [v for node in builder.graph.nodes for v in set(VALUE_NAME.findall(node.expr))]
        inner = sorted((o for o in defined if o in consumed), key=lambda o: -reads.count(o))
        if "repeats" in limits.corners and inner and draw(st.booleans()):
            builder.graph.outputs.insert(0, draw(st.sampled_from(inner)))
    graph = builder.graph
    graph.rejected = builder.rejected  # type: ignore[attr-defined]
    return graph
