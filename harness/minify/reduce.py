"""Delta debugging over the nodes of an ATen graph.

The graph is cut into *units*: one ATen call each, with the ``getitem`` projections of a
multi-output call in their producer's unit (a tuple never crosses a cut). A candidate is a set of
kept units; ``GraphCut.build`` turns it into a standalone graph: every value a kept unit reads from
a dropped one becomes a graph input holding that value as the original graph computed it (a scalar
becomes a constant), inputs nobody reads disappear, and every kept tensor nobody reads downstream is
an output. So removing a node, replacing its uses with an input and dropping unused inputs are one
operation, and each candidate still runs on real values.

Passes, each re-checking the same failure predicate (``predicate(case) -> bool``):

1. ``truncate``: binary search for the shortest failing prefix of the graph;
2. ``ddmin``: Zeller's delta debugging over the remaining units (subsets, then complements);
3. ``shrink_sizes``: halve input dimensions where the graph still runs with the smaller sizes.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from harness.minify.case import GraphCase, node_count

Predicate = Callable[[GraphCase], bool]


class CutError(Exception):
    """A set of kept units that cannot stand alone (a non-tensor, non-scalar value crosses the cut)."""


class Budget:
    """Stops a reduction when its wall-clock time or its number of checks runs out."""

    def __init__(self, seconds: float, checks: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.checks_left = checks

    @property
    def spent(self) -> bool:
        return time.monotonic() > self.deadline or self.checks_left <= 0


def node_values(gm: torch.fx.GraphModule, inputs: list[Any]) -> dict[torch.fx.Node, Any]:
    """Every node's value in one eager run of the graph on ``inputs``."""
    values: dict[torch.fx.Node, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            values[n] = out
            return out

    with torch.no_grad():
        Recorder(gm).run(*[v.clone() if isinstance(v, torch.Tensor) else v for v in inputs])
    return values


class GraphCut:
    """Builds standalone sub-graphs of one graph from sets of kept units."""

    def __init__(self, case: GraphCase) -> None:
        self.case = case
        self.values = node_values(case.gm, case.inputs)
        self.units: list[list[torch.fx.Node]] = []
        owner: dict[torch.fx.Node, int] = {}
        for n in case.gm.graph.nodes:
            if n.op != "call_function":
                continue
            producer = n.args[0] if n.target is operator.getitem and n.args else None
            if isinstance(producer, torch.fx.Node) and producer in owner:
                owner[n] = owner[producer]
                self.units[owner[n]].append(n)
            else:
                owner[n] = len(self.units)
                self.units.append([n])
        output = next(n for n in case.gm.graph.nodes if n.op == "output")
        self.outputs = set(output.all_input_nodes)

    def build(self, kept: Sequence[int], all_outputs: bool = False) -> GraphCase:
        """The candidate graph of ``kept`` units (indices, any order). ``all_outputs``: every kept
        tensor is an output (node-by-node localization), not only the dangling ones."""
        nodes = [n for i in sorted(set(kept)) for n in self.units[i]]
        kept_set = set(nodes)
        graph = torch.fx.Graph()
        env: dict[torch.fx.Node, Any] = {}
        inputs: list[Any] = []
        for n in nodes:
            for a in n.all_input_nodes:
                if a in kept_set or a in env:
                    continue
                value = self.values[a]
                if isinstance(value, torch.Tensor):
                    env[a] = graph.placeholder(a.name)
                    inputs.append(value)
                elif isinstance(value, (bool, int, float)):
                    env[a] = value  # a scalar crossing the cut becomes a constant
                else:
                    raise CutError(f"cannot cut at {a.name}: its value is a {type(value).__name__}")
        for n in nodes:
            env[n] = graph.node_copy(n, lambda a: env[a])
            env[n].meta = {}  # fake values of the original graph; a check re-derives its own
        sinks = [n for n in nodes if isinstance(self.values.get(n), torch.Tensor)
                 and (all_outputs or n in self.outputs or not any(u in kept_set for u in n.users))]
        graph.output(tuple(env[n] for n in sinks))
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        case = self.case.with_graph(gm, inputs)
        case.notes = {**self.case.notes, "output_nodes": [n.name for n in sinks],
                      "output_ops": [str(n.target) for n in sinks]}
        return case


@dataclass
class Reduction:
    case: GraphCase
    nodes_before: int
    nodes_after: int = 0
    checks: int = 0
    seconds: float = 0.0
    failing_prefix_end: str | None = None  # the last node of the shortest failing prefix
    log: list[str] = field(default_factory=list)
    budget_ran_out: bool = False


class Reducer:
    def __init__(self, case: GraphCase, predicate: Predicate, budget: Budget,
                 progress: Callable[[str], None] = lambda s: None) -> None:
        self.cut = GraphCut(case)
        self.predicate = predicate
        self.budget = budget
        self.progress = progress
        self.cache: dict[frozenset[int], bool] = {}
        self.result = Reduction(case, node_count(case.gm))

    def test(self, kept: Sequence[int]) -> bool:
        key = frozenset(kept)
        if key not in self.cache:
            if self.budget.spent or not key:
                return False
            try:
                candidate = self.cut.build(kept)
            except CutError:
                self.cache[key] = False
                return False
            self.budget.checks_left -= 1
            self.result.checks += 1
            self.cache[key] = self.predicate(candidate)
        return self.cache[key]

    def truncate(self, kept: list[int]) -> list[int]:
        lo, hi = 1, len(kept)  # invariant: the prefix of length hi fails
        while lo < hi and not self.budget.spent:
            mid = (lo + hi) // 2
            if self.test(kept[:mid]):
                hi = mid
            else:
                lo = mid + 1
        last = self.cut.units[kept[hi - 1]][0]
        self.result.failing_prefix_end = f"{last.name} ({last.target})"
        self.progress(f"truncate: {len(kept)} -> {hi} units")
        return kept[:hi]

    def ddmin(self, kept: list[int]) -> list[int]:
        n = 2
        while len(kept) >= 2 and not self.budget.spent:
            size = math.ceil(len(kept) / n)
            chunks = [kept[i:i + size] for i in range(0, len(kept), size)]
            for chunk in chunks:
                if self.test(chunk):
                    kept, n = chunk, 2
                    break
            else:
                for chunk in chunks:
                    rest = [i for i in kept if i not in set(chunk)]
                    if len(chunks) > 2 and self.test(rest):
                        kept, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(kept):
                        break
                    n = min(2 * n, len(kept))
                    continue
            self.progress(f"ddmin: {len(kept)} units")
        return kept

    def run(self) -> Reduction:
        start = time.monotonic()
        kept = list(range(len(self.cut.units)))
        if kept:
            kept = self.truncate(kept)
            kept = self.ddmin(kept)
        best = self.cut.build(kept) if kept else self.result.case
        best = shrink_sizes(best, self.predicate, self.budget, self.result, self.progress)
        self.result.case = best
        self.result.nodes_after = node_count(best.gm)
        self.result.seconds = time.monotonic() - start
        self.result.budget_ran_out = self.budget.spent
        return self.result


def _runs_in_eager(case: GraphCase) -> bool:
    try:
        with torch.no_grad():
            case.gm(*[v.clone() if isinstance(v, torch.Tensor) else v for v in case.inputs])
        return True
    except Exception:  # noqa: BLE001 -- the smaller sizes do not fit the graph's hard-coded shapes
        return False


def _halved(inputs: list[Any], pick: Callable[[int, int, int], bool]) -> list[Any] | None:
    out, changed = [], False
    for i, v in enumerate(inputs):
        if isinstance(v, torch.Tensor):
            for d in range(v.dim()):
                if v.shape[d] > 1 and pick(i, d, v.shape[d]):
                    v, changed = v.narrow(d, 0, (v.shape[d] + 1) // 2), True
            v = v.clone() if changed else v
        out.append(v)
    return out if changed else None


def shrink_sizes(case: GraphCase, predicate: Predicate, budget: Budget, result: Reduction,
                 progress: Callable[[str], None]) -> GraphCase:
    """Halve input dimensions while the graph still runs and still fails: first every dimension
    of one size across all inputs (what broadcasting and cat need), then one dimension at a time."""
    improved = True
    while improved and not budget.spent:
        improved = False
        sizes = sorted({s for v in case.inputs if isinstance(v, torch.Tensor) for s in v.shape if s > 1},
                       reverse=True)
        picks: list[Callable[[int, int, int], bool]] = [lambda i, d, s, size=size: s == size for size in sizes]
        picks += [lambda i, d, s, at=(k, dim): (i, d) == at for k, v in enumerate(case.inputs)
                  if isinstance(v, torch.Tensor) for dim in range(v.dim())]
        for pick in picks:
            if budget.spent:
                break
            inputs = _halved(case.inputs, pick)
            if inputs is None:
                continue
            candidate = case.with_graph(case.gm, inputs)
            if not _runs_in_eager(candidate):
                continue
            budget.checks_left -= 1
            result.checks += 1
            if predicate(candidate):
                case, improved = candidate, True
                progress(f"shrink: inputs {[tuple(v.shape) for v in inputs if isinstance(v, torch.Tensor)]}")
                break
    return case
