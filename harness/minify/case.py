"""A failing graph case: an ATen FX graph, the real values it ran on, and the target it failed on."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.fx

from harness.minify.graph_form import pack_graph, unpack_graph


@dataclass
class GraphCase:
    """What the minimizer works on; everything a check needs travels with it to a worker."""

    gm: torch.fx.GraphModule  # ATen ops only (after Dynamo, AOTAutograd and the target's decompositions)
    inputs: list[Any]  # real values, one per placeholder (tensors on the target's device, or scalars)
    target: str  # a harness target name: crucible-cpp, crucible-interpret, inductor, ...
    dtype: str = "float32"  # the working dtype: selects the parity oracle's tolerances
    origin: str = ""  # where it came from, e.g. "transformers/beit graph 0" or a fuzz finding's id
    notes: dict[str, Any] = field(default_factory=dict)
    tolerance: Any = None  # the entry's corpus.entry.ToleranceOverride for this dtype, if any

    def with_graph(self, gm: torch.fx.GraphModule, inputs: list[Any]) -> GraphCase:
        return replace(self, gm=gm, inputs=inputs)

    def to(self, device: str) -> GraphCase:
        moved = [v.to(device) if isinstance(v, torch.Tensor) else v for v in self.inputs]
        return replace(self, inputs=moved)

    # A case is pickled (to a check worker, for a forked check) with its graph in the minimizer's
    # own form, never as a pickled GraphModule: that goes through torch.package and failed on torch
    # 2.11 for make_fx graphs (see harness.minify.graph_form).
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "gm": pack_graph(self.gm)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({**state, "gm": unpack_graph(state["gm"])})


def node_count(gm: torch.fx.GraphModule) -> int:
    """ATen calls in the graph (what 'nodes before/after' counts); getitem projections excluded."""
    import operator

    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem)


CASE_FORMAT = "crucible-graph-case/2"


def save_case(path: str | Path, case: GraphCase) -> Path:
    """Write ``case`` to one file that ``load_case`` and ``crucible minify FILE`` read back.

    The graph is stored in the minimizer's own form (``graph_form``), so a case written under one
    torch version loads under another."""
    path = Path(path)
    torch.save({"format": CASE_FORMAT, "gm": pack_graph(case.gm), "inputs": case.inputs, "target": case.target,
                "dtype": case.dtype, "origin": case.origin, "notes": case.notes,
                "tolerance": case.tolerance}, path)
    return path


def load_case(path: str | Path) -> GraphCase:
    """Read a case written by ``save_case``; a clear error for anything else."""
    try:
        doc = torch.load(Path(path), weights_only=False)
    except Exception as exc:  # noqa: BLE001 -- any unreadable file gets the same one-line answer
        raise ValueError(f"{path}: not a graph case written by harness.minify.save_case "
                         f"({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or doc.get("format") not in (CASE_FORMAT, "crucible-graph-case/1"):
        raise ValueError(f"{path}: not a graph case written by harness.minify.save_case")
    # format 1 (older files) held a pickled GraphModule
    gm = unpack_graph(doc["gm"]) if doc["format"] == CASE_FORMAT else doc["gm"]
    return GraphCase(gm, list(doc["inputs"]), doc["target"], doc.get("dtype", "float32"),
                     doc.get("origin", str(path)), doc.get("notes", {}), doc.get("tolerance"))
