"""Hypothesis strategies that build ``FuzzGraph``s valid by construction.

An op spec (``harness.fuzz.specs``) asks a ``NodeDraw`` for operands with constraints
(dtypes, rank, contiguity, a shape it must broadcast with); the draw picks an existing value
that satisfies them or creates a fresh graph input that does, so no example is ever rejected.
The node's output metadata (shape, dtype, strides) comes from running its call on meta tensors,
which is exactly what eager will produce. Choices are ordered so that hypothesis shrinks towards
few nodes, fresh inputs, small shapes, contiguous layouts and plain values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from harness.fuzz.graph import DTYPE_NAMES, FuzzGraph, Node, namespace
from harness.fuzz.values import FLOAT_DTYPES, layout_of

ALL_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "bool")
INT_DTYPES = ("int32", "int64")
# Dim sizes, small first (shrinking goes left): size-1 broadcast dims, 0-size dims, odd sizes and
# sizes past one block (1024 lanes / a 64-wide tile) all appear.
DIM_SIZES = (1, 2, 3, 4, 5, 0, 7, 8, 16, 17, 33, 64, 65, 130, 1025)
FLOAT_SCALARS = (2.0, -1.5, 0.5, 0.0, -0.0, 3.0, 1e-3, -7.25, 1e4, float("inf"), float("nan"))
INT_SCALARS = (2, -3, 1, 0, 7, -1, 5)
VALUE_NAME = re.compile(r"\b[xv]\d+(?:_\d+)?\b")


@dataclass
class GraphLimits:
    max_nodes: int = 6
    max_rank: int = 4
    max_numel: int = 8192
    dtypes: tuple[str, ...] = ALL_DTYPES


def draw_shape(draw: Any, limits: GraphLimits, min_rank: int = 0, max_rank: int | None = None,
               nonempty: bool = False) -> list[int]:
    """A shape with ``min_rank..max_rank`` dims and at most ``limits.max_numel`` elements."""
    top = min(limits.max_rank, 4 if max_rank is None else max_rank)
    rank = draw(st.integers(min_rank, max(min_rank, top)))
    sizes = st.sampled_from([s for s in DIM_SIZES if s or not nonempty])
    shape = [draw(sizes) for _ in range(rank)]
    while math.prod(shape) > limits.max_numel:  # deterministic: the largest dim halves
        i = shape.index(max(shape))
        shape[i] = max(1, shape[i] // 2) if shape[i] != 1025 else 33
    return shape


def render_scalar(value: Any) -> str:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


class NodeDraw:
    """What an op spec sees while it draws one node: operands, dims, scalars."""

    def __init__(self, draw: Any, builder: GraphDraw) -> None:
        self._draw, self.builder = draw, builder

    def draw(self, strategy: Any) -> Any:
        return self._draw(strategy)

    def meta(self, name: str) -> torch.Tensor:
        return self.builder.metas[name]

    def dtype(self, name: str) -> str:
        return str(self.meta(name).dtype).removeprefix("torch.")

    def dt(self, dtype: str) -> str:
        return DTYPE_NAMES[dtype]

    def tensor(self, dtypes: tuple[str, ...] = ALL_DTYPES, min_rank: int = 0, max_rank: int = 4,
               contiguous: bool = False, nonempty: bool = False, shape: list[int] | None = None,
               profile: str | None = None, fresh_only: bool = False, **extra: Any) -> str:
        """An operand: an existing value meeting the constraints or a fresh input."""
        dtypes = tuple(d for d in dtypes if d in self.builder.limits.dtypes) or dtypes[:1]
        cands = [] if fresh_only or profile in ("index", "divisor") else [
            n for n, t in self.builder.metas.items()
            if str(t.dtype).removeprefix("torch.") in dtypes and min_rank <= t.dim() <= max_rank
            and (not contiguous or t.is_contiguous()) and (not nonempty or t.numel() > 0)
            and (shape is None or list(t.shape) == list(shape))]
        pick = self.draw(st.integers(0, len(cands)))
        if pick:
            return cands[pick - 1]
        return self.builder.fresh_input(self._draw, dtypes, min_rank, max_rank, contiguous, nonempty,
                                        shape, profile, **extra)

    def partner(self, name: str, dtypes: tuple[str, ...] = ALL_DTYPES) -> str:
        """An operand whose shape broadcasts with ``name``'s (shape-1 dims, fewer dims, or equal)."""
        base = list(self.meta(name).shape)
        dtypes = tuple(d for d in dtypes if d in self.builder.limits.dtypes) or dtypes[:1]
        cands = [n for n, t in self.builder.metas.items() if str(t.dtype).removeprefix("torch.") in dtypes
                 and _broadcasts(list(t.shape), base)]
        pick = self.draw(st.integers(0, len(cands)))
        if pick:
            return cands[pick - 1]
        drop = self.draw(st.integers(0, len(base)))
        shape = [1 if self.draw(st.booleans()) else s for s in base[drop:]]
        return self.builder.fresh_input(self._draw, dtypes, 0, 4, False, False, shape, None)

    def dim(self, name: str) -> int:
        rank = max(1, self.meta(name).dim())
        return self.draw(st.integers(-rank, rank - 1))

    def dims(self, name: str, min_size: int = 1) -> list[int]:
        rank = self.meta(name).dim()
        if rank == 0:
            return [0] if min_size else []
        chosen = self.draw(st.lists(st.integers(0, rank - 1), min_size=min_size, max_size=rank, unique=True))
        return [d - rank if self.draw(st.booleans()) else d for d in chosen]

    def scalar(self, like: str | None = None, integer: bool | None = None) -> str:
        if integer is None:
            integer = like is not None and not self.meta(like).is_floating_point() and self.draw(st.booleans())
        return render_scalar(self.draw(st.sampled_from(INT_SCALARS if integer else FLOAT_SCALARS)))


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
        self.rejected: list[tuple[str, str]] = []  # (op, error): spec bugs, counted, never hidden

    def fresh_input(self, draw: Any, dtypes: tuple[str, ...], min_rank: int, max_rank: int,
                    contiguous: bool, nonempty: bool, shape: list[int] | None, profile: str | None,
                    **extra: Any) -> str:
        dtype = draw(st.sampled_from(dtypes))
        if shape is None:
            shape = draw_shape(draw, self.limits, min_rank, max_rank, nonempty)
        desc: dict[str, Any] = {"shape": list(shape), "dtype": dtype, **extra}
        layouts = ["contiguous"] if contiguous else ["contiguous", "transposed", "sliced", "expanded", "offset"]
        layout = draw(st.sampled_from(layouts))
        if layout == "transposed" and len(shape) < 2 or layout == "sliced" and not shape:
            layout = "contiguous"
        if layout == "expanded":
            stored = [1 if s > 1 and draw(st.booleans()) else s for s in shape]
            layout, desc["expand_from"] = ("expanded", stored) if stored != list(shape) else ("contiguous", None)
            if desc["expand_from"] is None:
                del desc["expand_from"]
        desc["layout"] = layout
        if profile is None:
            choices = (("normal", "special", "unit", "positive") if dtype in FLOAT_DTYPES else
                       ("bool",) if dtype == "bool" else ("small_int", "extreme"))
            profile = draw(st.sampled_from(choices))
        desc["profile"] = profile
        desc["seed"] = draw(st.integers(0, 2**16))
        name = f"x{len(self.graph.inputs)}"
        self.graph.inputs.append(desc)
        self.metas[name] = layout_of(desc)
        return name

    def add_node(self, draw: Any, spec: Any) -> None:
        nd = NodeDraw(draw, self)
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
        for n, t in zip(names, outs):
            self.metas[n] = t


@st.composite
def graphs(draw: Any, specs: list[Any], limits: GraphLimits) -> FuzzGraph:
    builder = GraphDraw(limits)
    count = draw(st.integers(1, limits.max_nodes))
    for _ in range(count):
        builder.add_node(draw, draw(st.sampled_from(specs)))
    if not builder.graph.nodes:  # every drawn node was a spec error: keep the example, return an input
        name = builder.fresh_input(draw, limits.dtypes, 0, 2, False, False, None, None)
        builder.graph.outputs = [name]
    else:
        consumed = {v for node in builder.graph.nodes for v in VALUE_NAME.findall(node.expr)}
        defined = [o for n in builder.graph.nodes for o in n.outputs]
        builder.graph.outputs = [o for o in defined if o not in consumed] or defined[-1:]
    graph = builder.graph
    graph.rejected = builder.rejected  # type: ignore[attr-defined]
    return graph
