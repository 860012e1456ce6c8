"""Compile reports: what the compiler did with each graph, as data.

Tests, the harness and ``compiler.inspect`` read these objects directly; nothing
here is scraped from logs. ``collect_reports()`` gathers the reports of every
graph compiled inside a ``with`` block (the harness wraps each target run in it).
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from tabulate import tabulate


class ExternReason(str, enum.Enum):
    """Why an ATen op runs as an extern call instead of a generated kernel."""

    NO_LOWERING = "no_lowering"  # the op has no lowering rule
    LIBRARY_KERNEL = "library_kernel"  # matmul/conv/...: a vendor library is the better kernel
    UNSUPPORTED_DTYPE = "unsupported_dtype"
    UNSUPPORTED_ARGS = "unsupported_args"  # the lowering refused these arguments
    RANDOMNESS = "randomness"  # RNG ops keep ATen's generator semantics
    RENDERER_OP = "renderer_op"  # the chosen renderer cannot emit an IR op the lowering needs
    TEMPLATE_UNSUPPORTED = "template_unsupported"  # no kernel template covers these arguments
    INPUT_STORAGE = "input_storage"  # set_ / shallow_copy_data_: an input takes another tensor's storage
    SYMBOLIC_SIZE = "symbolic_size"  # the rule needs a static size (compiler.lowerings.symbolic)


class FallbackReason(str, enum.Enum):
    """Why a whole graph ran in eager instead of compiled code."""

    COMPILER_ERROR = "compiler_error"
    # a dynamic-shape graph needs a feature not compiled yet (the message names it:
    # compiler.lowerings.symbolic.DynamicUnsupported)
    DYNAMIC_UNSUPPORTED = "dynamic_unsupported"


class CudaGraphStatus(str, enum.Enum):
    """What ``options={"cudagraphs": True}`` did with a graph: captured, or why it runs without a CUDA
    graph (every reason is accepted, not an error: that graph runs its launches as usual)."""

    WARMING_UP = "warming_up"  # requested; the capture happens on the call after the warm-up call
    CAPTURED = "captured"
    CPU_GRAPH = "cpu_graph"  # the graph runs on the CPU: there is nothing to capture
    CPU_INPUTS = "cpu_inputs"  # an input lives on the CPU (the wrapper copies it in: a host-side copy)
    UNSUPPORTED_EXTERN = "unsupported_extern"  # an extern op syncs with the host (data-dependent shapes)
    INPUT_MUTATION = "input_mutation"  # an extern call writes into one of its arguments
    CAPTURE_FAILED = "capture_failed"  # the capture raised; the message says what


@dataclass(frozen=True)
class KernelReport:
    name: str
    codegen: str  # "triton" | "cpp"
    ops: tuple[str, ...]  # ATen ops fused into this kernel
    source: str
    kind: str = "pointwise"  # "pointwise" | "reduction"
    ir_ops: tuple[str, ...] = ()  # the IR ops the kernel computes
    symbol: str = ""  # the function's name in the source (what profilers show), when not ``name``
    # the size symbols it takes as arguments (``compiler.sizes``): non-empty for a size-generic kernel
    size_args: tuple[str, ...] = ()
    # a size-generic template: what it decides per launch and what it fixed without the sizes
    size_decisions: tuple[str, ...] = ()


@dataclass(frozen=True)
class SizeGuard:
    """An assumption the compiler made about a symbolic size and installed as a guard (Dynamo
    recompiles where it fails): ``expr`` as sympy prints it, and why the compiler needed it."""

    expr: str
    reason: str


@dataclass(frozen=True)
class ExternReport:
    op: str  # ATen overload name, e.g. "aten.mm.default"
    reason: ExternReason
    message: str = ""


class FusionReason(str, enum.Enum):
    """Why the scheduler did not put a node into a kernel (Inductor's WhyNoFuse, as data)."""

    REDUCTION_MISMATCH = "reduction_mismatch"  # a reduction over other outer or reduced dims
    PROLOGUE_SHAPE = "prologue_shape"  # a reduction's input side is not the kernel's iteration space
    ROW_TOO_LARGE = "row_too_large"  # a looped (multi-block) reduction takes no fused producers
    NEEDS_PERSISTENT = "needs_persistent"  # an input-side consumer needs the whole row in one block
    ITERATION_SPACE = "iteration_space"  # a pointwise node over other dims than the kernel's
    LOOPED_REDUCTION_CHAIN = "looped_reduction_chain"  # a looped reduction reading one of the kernel's
    CROSS_PROGRAM_READ = "cross_program_read"  # reads a kernel-local value at another element
    TOO_DEEP = "too_deep"  # the fused expression would pass the scheduler's depth limit
    TEMPLATE_EPILOGUE = "template_epilogue"  # not a pointwise consumer of a template's output
    TOO_MANY_BUFFERS = "too_many_buffers"  # the kernel would read or write more than MAX_KERNEL_BUFFERS
    INPUT_WRITE_RACE = "input_write_race"  # writes a graph input the kernel reads at another element


@dataclass(frozen=True)
class FusionRefusal:
    """A fusion the scheduler considered and refused: ``reason`` for tests and aggregation,
    ``message`` with the shapes or indices involved for people."""

    producer: str
    consumer: str
    reason: FusionReason
    message: str = ""

    def __str__(self) -> str:
        return f"{self.producer} -> {self.consumer}: {self.reason.value}: {self.message}".rstrip(": ")


@dataclass(frozen=True)
class WeightFold:
    """A compile-time weight rewrite of an inference graph (``compiler.folding``): the pass that made
    it and the node that now does the folded work."""

    pass_name: str  # "fold_batch_norm" | "convert_weight_layout"
    op: str  # "convolution" | "addmm" | "mm": what absorbed the batch norm, or reads the converted weight
    node: str  # that node's name in the graph that was lowered


@dataclass
class GraphReport:
    """One compiled graph (a forward or a backward)."""

    graph_id: int
    kind: str  # "forward" | "backward" | "inference"
    fx_nodes: int
    codegen: str
    kernels: list[KernelReport] = field(default_factory=list)
    externs: list[ExternReport] = field(default_factory=list)
    refused_fusions: list[FusionRefusal] = field(default_factory=list)
    fallback: FallbackReason | None = None
    fallback_message: str = ""
    failed_pass: str | None = None
    pass_seconds: dict[str, float] = field(default_factory=dict)
    # host seconds of the compiled graph's first call (kernels bound to their launchers, externs'
    # first use; the GPU work runs on after it): part of a cold compile that no pass measures
    first_call_seconds: float | None = None
    passes: list[str] = field(default_factory=list)  # compile-time rewrites that changed the graph, by name
    weight_folds: list[WeightFold] = field(default_factory=list)
    # how often the folded weights were computed from their sources: once, plus once per call after
    # a source (a parameter or buffer) changed
    weight_refills: int = 0
    # the layout decision (``compiler.layout``): "channels_last" | "contiguous", and why
    layout: str = "contiguous"
    layout_reason: str = ""
    cudagraph: CudaGraphStatus | None = None  # None: CUDA graphs were not requested
    cudagraph_message: str = ""
    # replays, and calls that ran without the graph because a static input (a parameter) had moved
    cudagraph_replays: int = 0
    cudagraph_uncaptured_calls: int = 0
    # ``tuning="deferred"`` (compiler.tuning): what was left for after the first call, and whether
    # it has been timed
    deferred_tuning: str = ""
    # dynamic shapes (``compiler.sizes``): whether the graph has symbolic sizes, their symbols with
    # the sizes of the compile's example inputs, and the guards the compiler added (Dynamo's own aside)
    dynamic: bool = False
    symbols: dict[str, int] = field(default_factory=dict)
    size_guards: list[SizeGuard] = field(default_factory=list)

    def __str__(self) -> str:
        head = (f"graph {self.graph_id} ({self.kind}, codegen={self.codegen}): {self.fx_nodes} FX nodes, "
                f"{len(self.kernels)} kernels, {len(self.externs)} extern calls")
        if self.passes:
            head += f"\n  passes: {', '.join(self.passes)}"
        if self.layout_reason:
            head += f"\n  layout: {self.layout} ({self.layout_reason})"
        if self.weight_folds:
            head += f"\n  folded weights: {self.fold_summary()}"
        if self.cudagraph is not None:
            head += f"\n  cuda graph: {self.cudagraph.value}" + (f": {self.cudagraph_message}"
                                                                if self.cudagraph_message else "")
        if self.deferred_tuning:
            head += f"\n  tuning: {self.deferred_tuning}"
        if self.dynamic:
            generic = sum(1 for k in self.kernels if k.size_args)
            symbols = ", ".join(f"{s} (example {v})" for s, v in self.symbols.items()) or "none"
            guards = "; ".join(f"{g.expr} ({g.reason})" for g in self.size_guards) or "none added"
            head += (f"\n  dynamic: symbols {symbols}; {generic} of {len(self.kernels)} kernels size-generic; "
                     f"guards: {guards}")
            decided = dict.fromkeys((k.kind, k.size_decisions) for k in self.kernels if k.size_decisions)
            head += "".join(f"\n  sizes in {kind}: {'; '.join(d)}" for kind, d in decided)
        if self.fallback is not None:
            head += f"\n  FELL BACK TO EAGER in pass {self.failed_pass!r}: {self.fallback.value}: {self.fallback_message}"
        rows = [(k.name, k.kind, k.codegen, ", ".join(k.ops)) for k in self.kernels]
        rows += [(e.op, "extern", "aten", f"{e.reason.value}: {e.message}".rstrip(": ")) for e in self.externs]
        if not rows:
            return head
        return head + "\n" + tabulate(rows, headers=["kernel", "kind", "codegen", "ops / reason"])

    def fold_summary(self) -> str:
        """e.g. "fold_batch_norm: 2 convolution, 1 addmm" (per pass, per op that absorbed the work)."""
        counts: dict[str, dict[str, int]] = {}
        for f in self.weight_folds:
            ops = counts.setdefault(f.pass_name, {})
            ops[f.op] = ops.get(f.op, 0) + 1
        return "; ".join(f"{p}: " + ", ".join(f"{n} {op}" for op, n in ops.items()) for p, ops in counts.items())


@dataclass
class CompileReport:
    """Everything compiled for one ``inspect`` call or one collected region."""

    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def kernels(self) -> list[KernelReport]:
        return [k for g in self.graphs for k in g.kernels]

    @property
    def externs(self) -> list[ExternReport]:
        return [e for g in self.graphs for e in g.externs]

    @property
    def fallbacks(self) -> list[GraphReport]:
        return [g for g in self.graphs if g.fallback is not None]

    def __str__(self) -> str:
        if not self.graphs:
            return "no graphs were compiled"
        return "\n\n".join(str(g) for g in self.graphs)


# Process-wide, not thread-local: autograd compiles a CUDA backward graph on its own thread.
_collectors: list[CompileReport] = []
_collectors_lock = threading.Lock()


@contextlib.contextmanager
def collect_reports() -> Iterator[CompileReport]:
    """Collect the GraphReport of every graph compiled inside the block (any thread)."""
    report = CompileReport()
    with _collectors_lock:
        _collectors.append(report)
    try:
        yield report
    finally:
        with _collectors_lock:
            _collectors.remove(report)


def publish(graph: GraphReport) -> None:
    """Hand a finished GraphReport to every active collector."""
    with _collectors_lock:
        for report in _collectors:
            report.graphs.append(graph)
