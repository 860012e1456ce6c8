"""Seed corpora: graphs that reached compiler lines first, kept and mutated (``--seed-corpus NAME``).

A campaign with ``--seed-corpus NAME`` reads corpus NAME from the results store before it starts
(an explicit input: the same seed and the same corpus give the same campaign) and, measuring
coverage, adds at its end every graph that executed a line of the compiler neither the corpus nor an
earlier graph of the campaign had reached, with those lines. The corpus's lines are the campaign's
starting point: a graph only enters the corpus for lines no seed reached.

With seeds, half of the generated examples are plain generation and half mutations of a seed
(``corpus_graphs``, ``MIX``), a quarter each way. A seed is picked with a weight growing with the lines it reached
first (log2: a seed that opened 200 lines is picked about 8 times as often as one that opened 1),
then mutated in one of two ways, both valid by construction:

- **extend**: the seed's graph rebuilt (its values' metadata from meta tensors), then 1 to
  ``max_nodes`` more nodes drawn from the op table, consuming the seed's outputs (its frontier), each
  other's, or fresh inputs: the code a seed reached meets new consumers, attributes and dtypes
  downstream of it, and graphs grow past ``max_nodes`` by composing what reached new code;
- **inputs**: every input keeps its shape and dtype (so every node's metadata stands) and may get
  another layout (contiguous, transposed, sliced, offset storage), another value profile of its
  kind and another value seed: the seed's lowering path meets strides and values it did not.

Hypothesis shrinks a mutated example toward the first seeds, fewer added nodes and unchanged
inputs.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from harness.fuzz.builder import VALUE_NAME, GraphDraw, GraphLimits, graphs
from harness.fuzz.coverage import CoverageMap
from harness.fuzz.dynamic import dynamic_graphs
from harness.fuzz.graph import FuzzGraph, namespace
from harness.fuzz.values import FLOAT_DTYPES, layout_of

# how examples are drawn with seeds (shrinking prefers the first): half plain generation, keeping the
# campaign's breadth (two thirds mutations covered more lines per campaign but fewer over three: 2481
# against plain's 2554, harness/RESULTS.md), a quarter each mutation
MIX = ("plain", "extend", "plain", "inputs")
# value profiles an input may switch between (inputs with an op's own profile, index or divisor, keep it)
_PROFILES = {"float": ("normal", "special", "unit", "positive"), "int": ("small_int", "extreme")}


@dataclass
class Seed:
    graph: str  # FuzzGraph JSON
    new_lines: int  # lines it reached first, when it entered the corpus


@dataclass
class SeedCorpus:
    """A corpus as a campaign takes it: its seeds in order and the lines they reached together."""

    name: str
    seeds: list[Seed] = field(default_factory=list)
    lines: CoverageMap = field(default_factory=CoverageMap)
    dropped: int = 0  # stored seeds whose graph no longer builds (an op's contract changed)

    @property
    def digest(self) -> str:
        """What identifies this input of a campaign (printed and stored with the run)."""
        text = "\n".join(s.graph for s in self.seeds)
        return hashlib.sha1(text.encode()).hexdigest()[:12]


def load_corpus(store: Any, name: str) -> SeedCorpus:
    corpus = SeedCorpus(name)
    for row in store.seeds(name):
        corpus.lines.merge(CoverageMap.from_json(row["lines"]))
        if rebuild(FuzzGraph.from_json(row["graph"]), GraphLimits()) is None:
            corpus.dropped += 1
            continue
        corpus.seeds.append(Seed(row["graph"], int(row["new_lines"] or 0)))
    return corpus


def rebuild(graph: FuzzGraph, limits: GraphLimits) -> GraphDraw | None:
    """A builder holding ``graph`` (its inputs and nodes, their metadata from meta tensors), ready to
    draw more nodes; None when a node no longer evaluates."""
    builder = GraphDraw(limits)
    builder.graph = FuzzGraph(list(graph.inputs), list(graph.nodes), list(graph.outputs))
    for i, desc in enumerate(graph.inputs):
        builder.metas[f"x{i}"] = layout_of(desc)
    for node in graph.nodes:
        try:
            out = eval(node.expr, {**namespace(), **builder.metas})  # noqa: S307 -- our own stored call
        except Exception:  # noqa: BLE001 -- a seed that no longer builds is dropped, counted
            return None
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(node.outputs):
            return None
        builder.metas.update(zip(node.outputs, outs))
    return builder


def _outputs(graph: FuzzGraph) -> list[str]:
    """Every value no node consumes (as ``harness.fuzz.builder.graphs`` chooses them)."""
    consumed = {v for node in graph.nodes for v in VALUE_NAME.findall(node.expr)}
    defined = [o for n in graph.nodes for o in n.outputs]
    return [o for o in defined if o not in consumed] or defined[-1:]


def _weighted(seeds: list[Seed]) -> list[int]:
    """Seed indices, each repeated 1 + log2(1 + its new lines) times."""
    return [i for i, s in enumerate(seeds) for _ in range(1 + int(math.log2(1 + max(s.new_lines, 0))))]


@st.composite
def extended(draw: Any, seeds: list[Seed], specs: list[Any], limits: GraphLimits) -> FuzzGraph:
    seed = seeds[draw(st.sampled_from(_weighted(seeds)))]
    builder = rebuild(FuzzGraph.from_json(seed.graph), limits)
    assert builder is not None  # load_corpus keeps only seeds that rebuild
    # grow from the frontier: the new nodes may consume what the seed returns (or fresh inputs), not
    # its inputs and intermediates, so they compose with the code the seed reached
    frontier = set(builder.graph.outputs)
    builder.metas = {name: meta for name, meta in builder.metas.items() if name in frontier}
    for _ in range(draw(st.integers(1, limits.max_nodes))):
        builder.add_node(draw, draw(st.sampled_from(specs)))
    graph = builder.graph
    graph.outputs = _outputs(graph)
    graph.rejected = builder.rejected  # type: ignore[attr-defined]
    return graph


@st.composite
def new_inputs(draw: Any, seeds: list[Seed]) -> FuzzGraph:
    graph = FuzzGraph.from_json(seeds[draw(st.sampled_from(_weighted(seeds)))].graph)
    for desc in graph.inputs:
        if not draw(st.booleans()):
            continue
        rank = len(desc["shape"])
        layouts = ["contiguous", "offset"] + (["sliced"] if rank else []) + (["transposed"] if rank >= 2 else [])
        if desc.get("layout") != "expanded":  # an expanded input stays so (its stored shape is its point)
            desc["layout"] = draw(st.sampled_from(layouts))
        kind = "float" if desc["dtype"] in FLOAT_DTYPES else "int" if desc["dtype"] != "bool" else None
        if kind and desc.get("profile") in _PROFILES[kind]:
            desc["profile"] = draw(st.sampled_from(_PROFILES[kind]))
        desc["seed"] = draw(st.integers(0, 2**16))
    graph.rejected = []  # type: ignore[attr-defined]
    return graph


def corpus_graphs(specs: list[Any], limits: GraphLimits, corpus: SeedCorpus | None) -> Any:
    """The campaign's strategy: plain generation, and with seeds, as often mutations of a seed."""
    plain = graphs(specs, limits)
    if corpus is None or not corpus.seeds:
        strategy = plain
    else:
        ways = {"plain": plain, "extend": extended(corpus.seeds, specs, limits), "inputs": new_inputs(corpus.seeds)}
        strategy = st.sampled_from(MIX).flatmap(ways.__getitem__)
    return dynamic_graphs(strategy, limits.blocks) if limits.dynamic else strategy


def new_seeds(found: list[tuple[str, CoverageMap]], corpus: SeedCorpus | None) -> list[tuple[str, str, int]]:
    """(graph, lines JSON, count) of each graph in ``found`` (in campaign order) that reaches lines
    neither the corpus nor an earlier graph of ``found`` reached: what the corpus keeps."""
    known = CoverageMap()
    if corpus is not None:
        known.merge(corpus.lines)
    kept = []
    for graph, lines in found:
        new = known.merge(lines)
        if len(new):
            kept.append((graph, new.to_json(), len(new)))
    return kept
