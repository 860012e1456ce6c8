"""The compiler pipeline for one ATen graph, as named passes called in order.

    late_decompositions -> [fold_batch_norm -> fuse_extern_epilogues -> merge_matmuls -> onednn_linears]
    -> [pad_gemms] -> choose_layout -> [convert_weight_layout -> onednn_convolutions] -> lower -> schedule -> render -> load -> wrap

``late_decompositions`` applies the decomposition rules left out of capture, once per distinct
call (``compiler.late_decompositions``). The bracketed weight passes run on inference graphs whose
static inputs (parameters, buffers) are known, unless ``options={"fold_weights": False}`` (``compiler.folding``, ``compiler.extern_passes``).
``pad_gemms`` pads GPU graphs' unaligned library GEMMs (``compiler.gemm_padding``).
``choose_layout`` decides the graph's layout (``options={"layout": ...}``, ``compiler.layout``); a
channels-last inference graph's static convolution weights are converted once by
``convert_weight_layout``, and on the CPU packed for oneDNN's fused convolution with its relu (or hardswish) and residual
add (``compiler.onednn_convolutions``).

Each pass is timed and can be dumped (``CRUCIBLE_DEBUG`` / ``CRUCIBLE_DUMP_DIR``).
An exception inside a pass becomes a ``CompilerError`` naming the pass and the
graph; the backend decides whether that raises (strict) or falls back to eager.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from compiler import config, debug, gemm_padding
from compiler.codegen.base import RenderedKernel, Renderer
from compiler.codegen.registry import renderer_for
from compiler.extern_passes import RewrittenGraph, fuse_extern_epilogues, merge_matmuls, onednn_linears
from compiler.folding import FoldedGraph, fold_batch_norm
from compiler.graph import Buffer, LoweredGraph, View
from compiler.kernel_sharing import render_shared
from compiler.layout import LayoutDecision, choose_layout, convert_weight_layout
from compiler.onednn_convolutions import onednn_convolutions
from compiler.late_decompositions import expand_late_decompositions
from compiler.lowering import lower
from compiler.lowerings.symbolic import check_dynamic
from compiler.report import ExternReport, GraphReport, KernelReport, WeightFold
from compiler.runtime import KernelLauncher, build_processes, launcher_for, parallel_map
from compiler.scheduler import Kernel, Schedule
from compiler.sizes import all_static
from compiler.templates.scheduling import schedule, template_kind
from compiler.tuning import DeferredTuning
from compiler.wrapper import Wrapper, generate_wrapper

_graph_ids = itertools.count()


class CompilerError(RuntimeError):
    """An internal error while compiling a graph, with the failing pass and the graph."""

    def __init__(self, pass_name: str, graph_id: int, cause: BaseException, graph_code: str) -> None:
        self.pass_name = pass_name
        self.graph_id = graph_id
        self.graph_code = graph_code
        super().__init__(f"crucible: pass {pass_name!r} failed on graph {graph_id}: "
                         f"{type(cause).__name__}: {cause}\n--- graph ---\n{graph_code}")


def graph_device(gm: torch.fx.GraphModule) -> torch.device:
    devices = set()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.Tensor):
            devices.add(val.device)
    if not devices:
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                devices.add(val.device)
    cuda = [d for d in devices if d.type == "cuda"]
    return cuda[0] if cuda else torch.device("cpu")


def load_kernels(rendered: dict[str, RenderedKernel], device: torch.device,
                 kernels: dict[str, Kernel], buffers: dict[str, Buffer] | None = None,
                 tuning: str = "first_call", deferred: list[DeferredTuning] | None = None,
                 report: GraphReport | None = None) -> dict[str, Any]:
    """Every kernel built and loaded, several at once (``config.compile_threads()``): C++
    libraries, and on the GPU the Triton launch configs the first call needs (``tuning``: one of
    ``compiler.tuning.MODES``), which Triton would otherwise build one by one during that call;
    with ``"deferred"`` the other candidates are left to a ``DeferredTuning``, appended to
    ``deferred`` (and noted on ``report``). A Triton launcher checks the alignment of the graph's
    inputs and extern results only: the wrapper's own allocations are aligned."""
    # kernels that share a source (``compiler.kernel_sharing``) build it once: the first of each is
    # built, in parallel, before the rest, which then load what it built
    first: dict[tuple[str, str], str] = {}
    for n, r in rendered.items():
        first.setdefault((r.source, r.symbol), n)
    names = list(first.values())
    names += [n for n in rendered if first[(rendered[n].source, rendered[n].symbol)] != n]
    loaded = parallel_map(lambda n: launcher_for(rendered[n], device), names[:len(first)])
    loaded += parallel_map(lambda n: launcher_for(rendered[n], device), names[len(first):])
    launchers = dict(zip(names, loaded))
    names = list(rendered)
    for n in names:
        if isinstance(launchers[n], KernelLauncher) and buffers is not None:
            launchers[n].check_alignment([i for i, a in enumerate(rendered[n].args)
                                          if a not in buffers or buffers[a].kind != "computed"])
        if isinstance(launchers[n], KernelLauncher):
            params = [kernels[n].param(a) for a in rendered[n].args]
            launchers[n].rewritten = tuple(i for i, p in enumerate(params) if p.read and p.written)
    now: dict[tuple, Callable[[], None]] = {}  # identical kernels (a model's layers) build once
    later: dict[tuple, Callable[[], None]] = {}
    retuned = []
    for n in names:
        launcher = launchers[n]
        if not isinstance(launcher, KernelLauncher):
            continue
        dtypes = [kernels[n].param(a).dtype for a in rendered[n].args]
        rest = launcher.defer_tuning(tuning)
        for jobs, configs in ((now, launcher.configs_to_build()), (later, rest)):
            for config_, job in zip(configs, launcher.build_jobs(dtypes, configs)):
                jobs.setdefault((launcher.symbol, repr(config_), tuple(dtypes)), job)
        if rest:
            retuned.append(launcher)
    parallel_map(lambda job: job(), list(now.values()))
    if retuned and deferred is not None:
        deferred.append(DeferredTuning(retuned, [job for key, job in later.items() if key not in now], report))
    return launchers


def _calls(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")


class GraphCompilation:
    """One graph through every pass; fills a GraphReport as it goes."""

    def __init__(self, gm: torch.fx.GraphModule, codegen: str, kind: str, extern: str = "default",
                 static_inputs: Sequence[int] = (), fold_weights: bool = True, layout: str = "auto",
                 cudagraphs: bool = False, tuning: str = "first_call", poison: bool = False,
                 saved_from: int | None = None, huge_pages: bool = True,
                 split_reductions: bool | None = None) -> None:
        self.gm = gm
        self.kind = kind
        # the inputs that are parameters and buffers; folded from only where nothing needs gradients
        self.static = list(static_inputs) if kind == "inference" else []
        self.foldable = self.static if fold_weights else []
        self.layout_option = layout  # the ``layout`` option (compiler.layout)
        self.cudagraphs = cudagraphs  # the ``cudagraphs`` option: the layout rule weighs GPU time only
        self.tuning = tuning  # the ``tuning`` option (compiler.tuning)
        self.poison = poison  # the ``poison`` option (compiler.wrapper.poisoned)
        self.huge_pages = huge_pages  # the ``huge_pages`` option (compiler.host_memory)
        self.split_reductions = split_reductions  # the ``split_reductions`` option (None: the renderer's)
        self.saved_from = saved_from  # a training forward's first output saved for the backward
        self.deferred: list[DeferredTuning] = []  # the load pass's deferred candidates, if any
        self.folded = FoldedGraph(gm)
        self.codegen = codegen
        self.extern = extern  # the ``extern`` option (compiler.templates.policy)
        self.graph_id = next(_graph_ids)
        self.device = graph_device(gm)
        self.report = GraphReport(self.graph_id, kind, _calls(gm), codegen)

    def run_pass(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            out = fn(*args)
        except Exception as why:
            self.report.failed_pass = name
            raise CompilerError(name, self.graph_id, why, self.gm.code) from why
        self.report.pass_seconds[name] = time.perf_counter() - start
        debug.after_pass(self, name, out)
        return out

    def compile(self) -> Wrapper:
        debug.graph_start(self)
        # chosen first: lowering and scheduling work within what this renderer can emit
        renderer: Renderer = self.run_pass("select_renderer", renderer_for, self.codegen, self.device)
        self.report.symbols = self.run_pass("check_dynamic", check_dynamic, self.gm)
        self.report.dynamic = bool(self.report.symbols)
        if self.device.type == "cuda":
            build_processes()  # Triton's build processes, if any, start while the graph lowers
        expanded = self.run_pass("late_decompositions", expand_late_decompositions, self.gm)
        if expanded.calls:
            self.gm = expanded.gm
            self.folded = FoldedGraph(self.gm)
            self.report.passes.append("late_decompositions")
            self.report.fx_nodes = _calls(self.gm)
        if self.foldable:
            self.folded = self.run_pass("fold_batch_norm", fold_batch_norm, self.gm, self.foldable)
            self.gm = self.folded.gm
            if self.folded.folds:
                self.report.passes.append("fold_batch_norm")
                self.report.weight_folds = [WeightFold("fold_batch_norm", f.op, f.node) for f in self.folded.folds]
            self.extern_passes()
        if self.device.type in gemm_padding.DEVICES and self.extern != "none" and not self.report.dynamic:
            self.run_rewrite("pad_gemms", gemm_padding.pad_gemms)
        self.choose_layout()
        capabilities = renderer.capabilities
        if self.split_reductions is not None:
            capabilities = dataclasses.replace(capabilities, split_reductions=self.split_reductions)
        lowered: LoweredGraph = self.run_pass("lower", lower, self.gm, self.device, capabilities,
                                                self.extern, self.report.layout, self.saved_from)
        sched: Schedule = self.run_pass("schedule", schedule, lowered, capabilities)
        kernels = [s for s in sched.steps if isinstance(s, Kernel)]
        rendered: dict[str, RenderedKernel] = self.run_pass(
            "render", render_shared, kernels, renderer.render)
        if config.gpu_build_check() and renderer.capabilities.interpreted and renderer.codegen == "triton":
            from compiler.gpu_build import check_kernels

            self.run_pass("gpu_build", check_kernels, kernels)
        launchers = self.run_pass("load", load_kernels, rendered, self.device,
                                  {k.name: k for k in kernels}, sched.buffers, self.tuning, self.deferred,
                                  self.report)
        # timing every launch (CRUCIBLE_KERNEL_TIMES) reaches extern calls through their OpOverloads
        wrapper: Wrapper = self.run_pass("wrap", generate_wrapper, sched, rendered, launchers,
                                         not config.kernel_times(), self.poison, self.huge_pages)
        self.schedule = sched
        self.fill_report(sched, rendered)
        debug.graph_done(self, wrapper, rendered)
        return wrapper

    def output_strides(self) -> list[tuple[int, ...] | None]:
        """Each output's strides as the wrapper returns it (None: not a tensor, or symbolic strides):
        what a training forward reports to AOTAutograd, which compiles the backward for the strides
        of the saved tensors it will be handed (``compiler.backend``)."""
        return [tuple(int(s) for s in v.stride) if isinstance(v, View) and all_static(v.stride) else None
                for v in self.schedule.outputs]

    def extern_passes(self) -> None:
        """``compiler.extern_passes``: their constants join the folded ones behind one guard. With
        ``extern="none"`` every GEMM is a template: epilogues fuse into it anyway, and neither an
        ``_addmm_activation`` extern nor cuBLAS's padding is wanted."""
        library = self.extern != "none"
        passes = [("merge_matmuls", merge_matmuls, (self.foldable, self.device, library))]
        if library:
            passes.insert(0, ("fuse_extern_epilogues", fuse_extern_epilogues, (self.device,)))
            passes.append(("onednn_linears", onednn_linears, (self.device,)))
        for name, fn, args in passes:
            self.run_rewrite(name, fn, *args)

    def run_rewrite(self, name: str, fn: Callable[..., RewrittenGraph], *args: Any) -> None:
        """A graph rewrite pass (``compiler.extern_passes``' form): its graph replaces the one to lower."""
        out = self.run_pass(name, fn, self.folded, *args)
        self.folded, self.gm = out.folded, out.folded.gm
        if out.rewrites:
            self.report.passes.append(name)
            self.report.weight_folds += out.rewrites

    def choose_layout(self) -> None:
        decision: LayoutDecision = self.run_pass("choose_layout", choose_layout, self.gm, self.device,
                                                 self.layout_option, self.kind, self.cudagraphs, self.codegen,
                                                 self.report.dynamic)
        self.report.layout = decision.layout
        if decision.convs or decision.forced:
            self.report.layout_reason = decision.reason
        if decision.layout != "channels_last" or not self.static or not decision.convs:
            return
        converted = self.run_pass("convert_weight_layout", convert_weight_layout, self.folded, self.static)
        if len(converted.conversions) > len(self.folded.conversions):
            self.report.passes.append("convert_weight_layout")
            self.report.weight_folds += [WeightFold("convert_weight_layout", "convolution", c.node)
                                         for c in converted.conversions]
        self.folded, self.gm = converted, converted.gm
        # the C++ codegen's graphs only: the interpreted Triton target is there to run Triton kernels
        if self.device.type == "cpu" and self.codegen == "cpp" and self.foldable and self.extern != "none":
            fused = self.run_pass("onednn_convolutions", onednn_convolutions, self.folded)
            if fused.rewrites:
                self.report.passes.append("onednn_convolutions")
                self.report.weight_folds += fused.rewrites
            self.folded, self.gm = fused.folded, fused.folded.gm

    def fill_report(self, sched: Schedule, rendered: dict[str, RenderedKernel]) -> None:
        for step in sched.steps:
            if isinstance(step, Kernel):
                r = rendered[step.name]
                kind = template_kind(step) or ("reduction" if step.is_reduction else "pointwise")
                ir_ops = sorted({e.op.value for st in step.stores for e in st.value.walk() if e.src})
                self.report.kernels.append(KernelReport(step.name, r.codegen, tuple(dict.fromkeys(step.origins)),
                                                        r.source, kind, tuple(ir_ops), r.symbol or r.name,
                                                        step.size_args, getattr(r.size_launch, "decisions", ())))
            else:
                self.report.externs.append(ExternReport(str(step.op), step.reason, step.message))
        self.report.refused_fusions = list(sched.refusals)
