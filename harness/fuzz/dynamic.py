"""Dynamic shapes for generated graphs (``crucible fuzz --dynamic``): the sizes of the further calls.

A graph compiled once with symbolic sizes is run at several sizes. Which input dims may change, and
which must change together, follows from the graph itself: it is traced on fake tensors whose sizes
are symbols of a ``ShapeEnv`` with duck sizing, as Dynamo traces it. Each input dim then has an
expression over free symbols (a broadcast or a matmul's K unifies two inputs' dims into one symbol, a
cat's result compared with another input makes that input's dim a sum); a dim that is 0 or 1, or that
the trace specialized, is a number and stays as it is. The guards the trace recorded (a slice's bound,
a view to literal sizes: ``Eq(s1*s22, 45)``) must hold at every further size, so a size drawn for a
symbol that breaks one is set back to the generated size: Dynamo, tracing the same calls, would
otherwise recompile, and eager might not run. Where a guard cannot be decided, or tracing fails
(data-dependent output shapes), the graph runs at its generated size only.

Sizes are drawn per symbol from the generated size (first: hypothesis shrinks toward it) and, around
the target's blocks (``harness.fuzz.sizes``), 2, b-1, b+1 and a few blocks plus an odd tail; never 0 or
1, which torch specializes. A further call's input, and every value the graph computes from it, holds
at most ``MAX_CALL_NUMEL`` elements (a 0 dim counted as 1), or its generated count when that is larger (an outer product of two
inputs within the budget is their sizes' product: [24583, 1] @ [1, 24583] in float64 took the worker
past the machine's memory, seed 196); a symbol whose size breaks that keeps its generated size. A
dim some index input's values point into keeps at least its generated size (the indices stay valid).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from hypothesis import strategies as st

from harness.fuzz.graph import FuzzGraph
from harness.fuzz.sizes import ODD_TAIL, TargetBlocks
from harness.fuzz.values import layout_of

FURTHER_CALLS = 3  # calls after the first (generated) size: each costs an eager, reference and compiled run
# elements of one input at a further call: the size corner's budget for many rows
# (GraphLimits.max_rows_numel), so a symbol shared by several dims cannot blow a graph up
MAX_CALL_NUMEL = 1 << 15
SMALL_SIZES = (2, 3)  # the smallest sizes torch keeps symbolic


@dataclass(frozen=True)
class SymbolicDims:
    """A graph's input sizes over the symbols of its trace: ``dims[i][d]`` is an int (fixed) or a sympy
    expression; ``symbols`` the free ones with their generated sizes; ``guards`` what must hold."""

    dims: list[list[Any]]
    symbols: dict[sympy.Symbol, int]
    guards: list[sympy.Expr]
    floors: dict[sympy.Symbol, int]  # symbols an index input points into: no size below this
    known: dict[sympy.Symbol, int]  # every symbol of the trace (strides' too) at its generated value
    # the symbolic element counts of the values the graph computes, each with its generated count
    numels: tuple[tuple[sympy.Expr, int], ...] = ()

    def values_within(self, values: dict[sympy.Symbol, int], budget: int) -> bool:
        """Whether every computed value holds at most ``budget`` elements, or its generated count."""
        full = {**self.known, **values}
        try:
            return all(int(n.xreplace(full)) <= max(budget, generated) for n, generated in self.numels)
        except TypeError:  # not a number at these values: taken as too large
            return False

    def shapes(self, values: dict[sympy.Symbol, int]) -> list[list[int]] | None:
        """Every input's shape with ``values`` for the symbols, or None when a guard fails there."""
        full = {**self.known, **values}
        for guard in self.guards:
            try:
                held = bool(guard.xreplace(full))
            except TypeError:  # undecidable (a symbol the trace did not back): take it as broken
                held = False
            if not held:
                return None
        return [[d if isinstance(d, int) else int(d.xreplace(full)) for d in dims] for dims in self.dims]


def symbolic_dims(graph: FuzzGraph) -> SymbolicDims | None:
    """``graph``'s input dims over the symbols of a fake-tensor trace (None: the trace failed).

    Remembered per graph (``_traced``): hypothesis replays an example and requires the same draws, and
    a trace in a process that has run others need not end the same way (a campaign of seed 138 died
    with "Inconsistent data generation" when a replayed graph drew for fewer symbols)."""
    return _traced(FuzzGraph(graph.inputs, graph.nodes, graph.outputs).to_json())


@lru_cache(maxsize=4096)  # a campaign's graphs and their shrinks; ~1 KB each
def _traced(graph_json: str) -> SymbolicDims | None:
    graph = FuzzGraph.from_json(graph_json)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    metas = [layout_of(desc) for desc in graph.inputs]
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # it logs every op it cannot trace as an error
    try:
        fakes = [mode.from_tensor(m, symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DUCK] * m.dim())) for m in metas]
        with mode:  # every value the graph computes, not only its outputs (their sizes are budgeted)
            computed = graph.prefix(len(graph.nodes)).function()(*fakes)
    except Exception:  # noqa: BLE001 -- data-dependent shapes, a guard on a data value: static only
        return None
    finally:
        quiet.setLevel(level)
    dims: list[list[Any]] = []
    symbols: dict[sympy.Symbol, int] = {}
    values = {s: int(v) for s, v in _backed_values(env).items()}
    for fake in fakes:
        row: list[Any] = []
        for size in fake.shape:
            expr = env.replace(size.node.expr) if isinstance(size, torch.SymInt) else sympy.Integer(size)
            if expr.is_number:
                row.append(int(expr))
                continue
            row.append(expr)
            for sym in sorted(expr.free_symbols, key=str):
                symbols[sym] = values[sym]
        dims.append(row)
    guards = [env.replace(g.expr) for g in env.guards]
    floors = {}
    for desc in graph.inputs:
        if desc.get("profile") == "index":  # its values index a dim of size "bound": keep that size or more
            for sym, size in symbols.items():
                if size == int(desc.get("bound", 0)):
                    floors[sym] = size
    numels = [env.replace(t.numel().node.expr) for t in computed
              if isinstance(t, torch.Tensor) and isinstance(t.numel(), torch.SymInt)]
    return SymbolicDims(dims, symbols, [g for g in guards if g is not sympy.true], floors, values,
                        tuple((n, int(n.xreplace(values))) for n in numels if not n.is_number))


def _backed_values(env: Any) -> dict:
    return env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val


def budgeted(shape: list[int]) -> int:
    """A shape's size against the budget: its element count with a 0 dim counted as 1 (as the graph
    builder counts it). An empty tensor's kernels may still walk its other dims: ATen's CPU sort over an
    empty last dim of [65535, 65537, 3, 0] visits its 12.9e9 rows, 21 s an eager call, and the graph's
    eager, reference and noise runs timed out a campaign's worker (fuzzer, crucible-interpret:extern=none
    --dynamic, seed 249)."""
    return math.prod(max(s, 1) for s in shape)


def candidate_sizes(generated: int, blocks: TargetBlocks, floor: int = 0) -> list[int]:
    """Sizes for one symbol: the generated one first, then 2, 3, and b-1, b+1, 3b+7 per block."""
    sizes = [*SMALL_SIZES]
    for b in sorted({*blocks.pointwise, *blocks.reduction}):
        sizes += [b - 1, b + 1, 3 * b + ODD_TAIL]
    rest = sorted({s for s in sizes if s >= max(2, floor) and s != generated})
    return [generated, *rest]


def further_calls(draw: Any, graph: FuzzGraph, blocks: TargetBlocks,
                  dims: SymbolicDims | None = None) -> list[list[list[int]]]:
    """The input shapes of ``FURTHER_CALLS`` further calls, drawn per symbol (``[]``: none varies)."""
    dims = symbolic_dims(graph) if dims is None else dims
    if dims is None or not dims.symbols:
        return []
    budget = [max(MAX_CALL_NUMEL, budgeted(d["shape"])) for d in graph.inputs]
    calls = []
    for _ in range(FURTHER_CALLS):
        values: dict[sympy.Symbol, int] = {}
        for sym in dims.symbols:  # in order of first appearance in the inputs' dims
            size = draw(st.sampled_from(candidate_sizes(dims.symbols[sym], blocks, dims.floors.get(sym, 0))))
            trial = {**values, sym: size}
            shapes = dims.shapes(trial)
            if (shapes is not None and all(budgeted(s) <= b for s, b in zip(shapes, budget))
                    and dims.values_within(trial, MAX_CALL_NUMEL)):
                values = trial  # else it keeps its generated size: a guard or the budget says no
        shapes = dims.shapes(values)
        if shapes is not None and values and any(v != dims.symbols[s] for s, v in values.items()):
            calls.append(shapes)
    return calls


def dynamic_graphs(strategy: Any, blocks: TargetBlocks) -> Any:
    """``strategy``'s graphs with their further calls drawn (``crucible fuzz --dynamic``)."""
    @st.composite
    def attach(draw: Any, graph: FuzzGraph) -> FuzzGraph:
        graph.calls = further_calls(draw, graph, blocks)
        return graph
    return strategy.flatmap(attach)
