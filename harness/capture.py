"""Capture analysis: what TorchDynamo captured of one model run, measured.

Counts come from running the model once through a counting backend:
- graphs: FX graphs Dynamo handed to the backend;
- graph breaks: Dynamo's own graph-break counter, with each break's reason
  (Dynamo's stable graph-break type, plus its registry id ``GBxxxx`` when the
  installed torch ships the registry), a coarse category and the user frame;
- capture coverage: ATen ops executed inside captured graphs divided by the ATen
  ops the eager run executes. Both are counted with a TorchDispatchMode: around
  the whole eager run, and around each captured graph when it executes (Dynamo
  does not compile while an outer dispatch mode is active, so the two counts come
  from separate runs).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts ATen ops dispatched while active.

    A higher-order op (torch.cond, ...) counts as one op: its branches run below
    the mode, so counting them would depend on how the op is implemented.
    """

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class GraphBreak:
    reason: str  # "GB0123: <Dynamo graph-break type>" or the reason's first line
    category: str
    frame: str  # "file.py:12 in forward" ('' when Dynamo recorded none)


@dataclass
class CaptureResult:
    graphs: int = 0
    graph_breaks: int = 0
    breaks: list[GraphBreak] = field(default_factory=list)
    captured_ops: int = 0  # ATen ops run inside captured graphs
    eager_ops: int = 0  # ATen ops of the whole eager run
    uncounted_graphs: int = 0  # graphs whose ops could not be counted (see run_graph)

    @property
    def coverage(self) -> float | None:
        if self.eager_ops == 0 or self.uncounted_graphs:
            return None  # unknown rather than wrong
        return min(1.0, self.captured_ops / self.eager_ops)


# Coarse categories, matched in order against the graph-break type (lower case).
# They group Dynamo's hundreds of types into what a compiler engineer acts on.
_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("item()", "data-dependent"),
    ("generic_jump", "data-dependent"),
    ("jump", "data-dependent"),
    ("data-dependent", "data-dependent"),
    ("data dependent", "data-dependent"),
    ("dynamic shape", "data-dependent"),
    ("nonzero", "data-dependent"),
    ("tolist", "data-dependent"),
    ("builtin operator", "unsupported builtin"),
    ("print", "print/logging"),
    ("logging", "print/logging"),
    ("logger", "print/logging"),
    ("numpy", "numpy"),
    ("generator", "generators"),
    ("yield", "generators"),
    ("fake tensor", "fake tensor propagation"),  # an op Dynamo could not run on fake tensors
    ("exception", "exceptions"),
    ("try", "exceptions"),
    ("raise", "exceptions"),
    ("autograd", "autograd"),
    ("backward", "autograd"),
    ("skip", "skipped function"),
    ("marked as", "skipped function"),
    ("graph_break()", "explicit graph break"),
    ("deepcopy", "unsupported feature"),
    ("unsupported method", "unsupported method/attribute"),
    ("attribute", "unsupported method/attribute"),
    ("non-tensor", "non-tensor values"),
    ("constant", "non-tensor values"),
    ("context manager", "context managers"),
    ("side effect", "side effects"),
    ("mutation", "side effects"),
    ("global", "side effects"),
    ("c extension", "C extensions"),
    ("builtin", "unsupported builtin"),
    ("unsupported", "unsupported feature"),
)


def categorize(gb_type: str, detail: str = "") -> str:
    # The stable type decides first; the free-text detail only when it says nothing.
    for text in (gb_type.lower(), detail.lower()):
        for needle, category in _CATEGORIES:
            if needle in text:
                return category
    return "other"


@functools.lru_cache(maxsize=1)
def _gb_registry() -> dict[str, str]:
    """Dynamo's graph-break registry (gb_type -> 'GBxxxx'), when this torch ships one."""
    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    try:
        with open(path) as f:
            registry = json.load(f)
    except (OSError, ValueError):
        return {}
    return {item["Gb_type"]: gb_id for gb_id, items in registry.items() for item in items
            if isinstance(item, dict) and "Gb_type" in item}


def describe_reason(message: str) -> tuple[str, str]:
    """(reason, category) for one Dynamo graph-break message.

    Since torch 2.7 a message's first line is its stable ``gb_type``; older or
    unconverted messages fall back to the first line with numbers and
    addresses removed so that the same break groups together across entries.
    """
    first = message.strip().splitlines()[0] if message.strip() else "unknown"
    first = re.sub(r"^Graph Break Reason:\s*", "", first)
    gb_id = _gb_registry().get(first)
    if gb_id:
        return f"{gb_id}: {first}", categorize(first, message)
    normalized = re.sub(r"0x[0-9a-f]+|\b\d+\b", "N", first)[:160]
    return normalized, categorize(first, message)


_LIBRARY_DIRS = (os.path.dirname(os.__file__), os.path.dirname(torch.__file__))


def _user_frame(stack: list) -> str:
    """The innermost frame of user code (not the standard library, not torch)."""
    frames = [f for f in stack if f is not None]
    user = [f for f in frames if not f.filename.startswith(_LIBRARY_DIRS)]
    summary = (user or frames or [None])[-1]
    if summary is None:
        return ""
    return f"{os.path.basename(summary.filename)}:{summary.lineno} in {summary.name}"


def _dynamo_counters() -> Counter:
    from torch._dynamo.utils import counters

    return counters["graph_break"]


def analyze_capture(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[CaptureResult, Any]:
    """Run ``fn`` once through Dynamo with a counting backend; returns (result, output).

    The caller resets Dynamo before and after; the eager op count is filled in
    separately (see ``count_eager_ops``).
    """
    result = CaptureResult()
    counter = OpCounter()
    graph_reasons: list[tuple[str, str]] = []  # (message, frame) of graphs ended by a break

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        result.graphs += 1
        why = getattr(gm, "compile_subgraph_reason", None)
        if why is not None and getattr(why, "graph_break", False):
            graph_reasons.append((why.reason, _user_frame(list(getattr(why, "user_stack", None) or []))))

        def run_graph(*args: Any) -> Any:
            try:
                with counter:
                    return gm.forward(*args)
            except NotImplementedError as exc:
                # Older torch refuses higher-order ops (torch.cond, ...) under a user
                # dispatch mode: run the graph uncounted and report coverage as unknown.
                if "HigherOrderOperator" not in str(exc):
                    raise
                result.uncounted_graphs += 1
                return gm.forward(*args)

        return run_graph

    before = Counter(_dynamo_counters())
    out = torch.compile(fn, backend=counting_backend)(*args, **kwargs)
    after = Counter(_dynamo_counters())
    after.subtract(before)
    messages = Counter({m: n for m, n in after.items() if n > 0})
    # Breaks that ended a graph carry a frame; the counter also sees breaks after
    # which nothing was captured (e.g. a print right before return).
    breaks: list[GraphBreak] = []
    for message, frame in graph_reasons:
        key = next((m for m in messages if messages[m] > 0 and
                    m.splitlines()[0] == message.strip().splitlines()[0]), None)
        if key is not None:
            messages[key] -= 1
        reason, category = describe_reason(message)
        breaks.append(GraphBreak(reason, category, frame))
    for message, n in messages.items():
        reason, category = describe_reason(message)
        breaks += [GraphBreak(reason, category, "")] * max(n, 0)
    result.breaks = breaks
    result.graph_breaks = len(breaks)
    result.captured_ops = counter.count
    return result, out


def count_eager_ops(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[int, Any]:
    counter = OpCounter()
    with counter:
        out = fn(*args, **kwargs)
    return counter.count, out
