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


class _GraphLog:
    """The graphs Dynamo hands a backend and the breaks between them, from Dynamo's counters."""

    def __init__(self) -> None:
        self.result = CaptureResult()
        self._reasons: list[tuple[str, str]] = []  # (message, frame) of graphs ended by a break
        self._before = Counter(_dynamo_counters())

    def saw(self, gm: torch.fx.GraphModule) -> None:
        self.result.graphs += 1
        why = getattr(gm, "compile_subgraph_reason", None)
        if why is not None and getattr(why, "graph_break", False):
            self._reasons.append((why.reason, _user_frame(list(getattr(why, "user_stack", None) or []))))

    def breaks(self) -> list[GraphBreak]:
        after = Counter(_dynamo_counters())
        after.subtract(self._before)
        messages = Counter({m: n for m, n in after.items() if n > 0})
        # Breaks that ended a graph carry a frame; the counter also sees breaks after
        # which nothing was captured (e.g. a print right before return).
        breaks: list[GraphBreak] = []
        for message, frame in self._reasons:
            key = next((m for m in messages if messages[m] > 0 and
                        m.splitlines()[0] == message.strip().splitlines()[0]), None)
            if key is not None:
                messages[key] -= 1
            reason, category = describe_reason(message)
            breaks.append(GraphBreak(reason, category, frame))
        for message, n in messages.items():
            reason, category = describe_reason(message)
            breaks += [GraphBreak(reason, category, "")] * max(n, 0)
        return breaks

    def finish(self, captured_ops: int) -> CaptureResult:
        self.result.breaks = self.breaks()
        self.result.graph_breaks = len(self.result.breaks)
        self.result.captured_ops = captured_ops
        return self.result


def analyze_capture(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[CaptureResult, Any]:
    """Run ``fn`` once through Dynamo with a counting backend; returns (result, output).

    The caller resets Dynamo before and after; the eager op count is filled in
    separately (see ``count_eager_ops``).
    """
    log = _GraphLog()
    counter = OpCounter()

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        log.saw(gm)

        def run_graph(*args: Any) -> Any:
            try:
                with counter:
                    return gm.forward(*args)
            except NotImplementedError as exc:
                # Older torch refuses higher-order ops (torch.cond, ...) under a user
                # dispatch mode: run the graph uncounted and report coverage as unknown.
                if "HigherOrderOperator" not in str(exc):
                    raise
                log.result.uncounted_graphs += 1
                return gm.forward(*args)

        return run_graph

    out = torch.compile(fn, backend=counting_backend)(*args, **kwargs)
    return log.finish(counter.count), out


class CaptureProbe:
    """Capture analysis riding along a compile, so that Dynamo traces the model once, not twice.

    ``wrap(backend)`` is a Dynamo backend that logs each graph as ``analyze_capture`` does and
    compiles it with ``backend``. A graph's ATen ops are counted once, by running it on fake copies
    of its example inputs (no side effects, no random draws, nothing computed), and added each time
    its compiled form runs; ``finish`` stops the counting (later recompiles and calls do not count,
    as the capture run is one call). A graph that cannot run on fake tensors leaves coverage unknown.
    """

    def __init__(self) -> None:
        self._log = _GraphLog()
        self._ops = 0
        self._done: CaptureResult | None = None

    def wrap(self, backend: Callable[..., Any]) -> Callable[..., Any]:
        def probing_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable[..., Any]:
            if self._done is not None:
                return backend(gm, example_inputs, **kwargs)
            self._log.saw(gm)
            ops = _fake_op_count(gm, example_inputs)
            if ops is None:
                self._log.result.uncounted_graphs += 1
            return self._counting(backend(gm, example_inputs, **kwargs), ops or 0)

        return probing_backend

    def _counting(self, compiled: Callable[..., Any], ops: int) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            if self._done is None:
                self._ops += ops
            return compiled(*args)

        if hasattr(compiled, "_boxed_call"):  # whoever reads the convention reads it unchanged
            run._boxed_call = compiled._boxed_call  # type: ignore[attr-defined]
        return run

    @property
    def finished(self) -> bool:
        return self._done is not None

    def finish(self) -> CaptureResult:
        if self._done is None:
            self._done = self._log.finish(self._ops)
        return self._done


class _FakeRunCounter(OpCounter):
    """OpCounter for a run on fake tensors: fake tensors answer metadata queries (``prim::device``)
    through the dispatcher, which real tensors never do; those are not ops of the model."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if getattr(func, "namespace", None) == "prim":
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def _fake_op_count(gm: torch.fx.GraphModule, example_inputs: list) -> int | None:
    """The ATen ops one run of ``gm`` dispatches, counted on fake tensors; None where it cannot run so."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    fake_inputs = [t for t in example_inputs if isinstance(t, FakeTensor)]
    counter = _FakeRunCounter()
    if any(_symbolic(v) for v in example_inputs):
        # With dynamic shapes the fakes' sizes are the compile's own symbols: running on them would
        # specialize the compile (a BERT encoder's sequence length, and every new length recompiled:
        # --dynamic counted the probe's guards as the compiler's recompiles). Count on static fakes
        # of the example sizes, in a mode of their own.
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            inputs = [_at_hint(v) for v in example_inputs]
    else:
        # Dynamo hands a backend the real inputs (some versions their fakes): either way the graph
        # runs in one fake mode that also takes the module's real parameters
        mode = fake_inputs[0].fake_mode if fake_inputs else FakeTensorMode(allow_non_fake_inputs=True)
        inputs = example_inputs
    try:
        fakes = [t if isinstance(t, FakeTensor) else mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
                 for t in inputs]
        with torch.no_grad(), mode, counter:
            gm.forward(*fakes)
    except Exception:  # noqa: BLE001 -- unknown rather than wrong (see CaptureResult.coverage)
        return None
    return counter.count


def _symbolic(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _hint(value: Any) -> Any:
    """A symbolic number's example value (the size it stands for in this compile)."""
    if not isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value
    node = value.node
    hint = node.hint if node.hint is not None else node.shape_env.size_hint(node.expr)
    return node.pytype(hint)


def _at_hint(value: Any) -> Any:
    """``value`` with every symbolic size replaced by its example value (a new, static tensor)."""
    if isinstance(value, torch.Tensor) and _symbolic(value):
        return torch.empty_strided([_hint(s) for s in value.shape], [_hint(s) for s in value.stride()],
                                   dtype=value.dtype, device=value.device)
    return _hint(value)


def count_eager_ops(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[int, Any]:
    counter = OpCounter()
    with counter:
        out = fn(*args, **kwargs)
    return counter.count, out
