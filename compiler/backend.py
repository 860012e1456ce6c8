"""The ``torch.compile`` backend: Dynamo graph -> AOTAutograd -> Crucible pipeline.

``torch.compile(model, backend="crucible", options={...})`` finds this function
through the ``torch_dynamo_backends`` entry point (and ``import compiler``
registers it too). AOTAutograd decomposes with our table and hands us the
inference graph, or the forward and the backward graphs when gradients are
needed; each goes through ``GraphCompilation``, whose first pass applies the rules left out of
capture (``compiler.late_decompositions``). Inference input mutations (a buffer's ``add_``,
``self.weight.data *= mask``) stay in the graph, as Inductor asks for them, and the compiled graph
writes them back (``compiler.lowerings.mutation``).

Failure policy: an internal compiler error (or a graph we do not support, such
as a training graph with symbolic sizes) is reported on the graph's ``GraphReport`` and that
graph runs in eager; with ``strict=True`` it raises instead.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx

from compiler import config
from compiler.codegen.registry import default_codegen
from compiler.config import Options
from compiler.decompositions import capture_decomposition_table, decomposition_table_for_compiler
from compiler.attention_masks import PASS_NAME as ATTENTION_MASKS, simplify_attention_masks
from compiler.fused_attention import keep_fused_attention
from compiler.interpreter import on_one_aten_thread
from compiler.lowerings.symbolic import DynamicUnsupported, has_symbolic_sizes
from compiler.partition import partition_fn
from compiler.pipeline import CompilerError, GraphCompilation, graph_device
from compiler.report import FallbackReason, GraphReport, publish
from compiler.tuning import tuned_call


_GC_LOCK = threading.Lock()
_GC_PAUSE = {"depth": 0, "was_enabled": False}  # compiles under way (any thread); what to restore


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block or the decorated call (``config.pause_gc``;
    nested and concurrent compiles: on again when the last one ends, and only if it was on before).
    A compile allocates millions of short-lived objects (fake tensors, FX nodes, IR expressions),
    and every full collection meanwhile walks the whole heap: the model, its weights' Python
    objects, Dynamo's and any earlier compile's state. Measured on the 2-core CPU (batch-4 traces,
    AOTAutograd's capture to rendering): 0.3-0.4 s of a 2.8-3.8 s compile of convnext_tiny, vit_base
    or GPT-2 was the collector's. What a compile leaves in reference cycles is collected once it
    ends (the objects it made are the youngest: the next collection looks at them first)."""
    if not config.pause_gc():
        yield
        return
    with _GC_LOCK:
        if _GC_PAUSE["depth"] == 0:
            _GC_PAUSE["was_enabled"] = gc.isenabled()
            gc.disable()
        _GC_PAUSE["depth"] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSE["depth"] -= 1
            if _GC_PAUSE["depth"] == 0 and _GC_PAUSE["was_enabled"]:
                gc.enable()


@gc_paused()
def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: Any, *, options: Options, kind: str,
                       dynamo_inputs: int | None = None, passes: tuple[str, ...] = ()) -> Callable:
    """Compile one ATen graph (boxed calling convention: ``fn(list_of_args)``). ``dynamo_inputs``:
    how many inputs the Dynamo graph had (the ones before them are parameters AOTAutograd lifted);
    ``passes``: the Dynamo-graph rewrites that changed it, for its report."""
    from torch._functorch.aot_autograd import make_boxed_func

    from compiler.cudagraphs import saved_outputs_start, static_input_indices

    codegen = options.codegen or default_codegen(graph_device(gm).type)
    static = static_input_indices(len(example_inputs), dynamo_inputs, kind)
    saved_from = saved_outputs_start(kind)
    if kind == "backward":
        restride_placeholders(gm, example_inputs)
    comp = GraphCompilation(gm, codegen, kind, options.extern, static, options.fold_weights, options.layout,
                             options.cudagraphs, options.tuning, options.poison, saved_from, options.huge_pages,
                             options.split_reductions)
    comp.report.passes.extend(passes)
    try:
        wrapper = comp.compile()
    except CompilerError as err:
        cause = err.__cause__
        reason = FallbackReason.DYNAMIC_UNSUPPORTED if isinstance(cause, DynamicUnsupported) else \
            FallbackReason.COMPILER_ERROR
        _fallback(comp.report, reason, err)
        if options.strict:
            raise
        warnings.warn(f"crucible: graph {comp.graph_id} falls back to eager ({reason.value}): {err}",
                      stacklevel=2)
        return make_boxed_func(gm.forward)
    report_output_strides(comp.output_strides())
    call = wrapper.call
    if config.kernel_times():
        from compiler.kernel_times import instrument

        call = instrument(call, wrapper.launchers, wrapper.consts, comp.report, comp.device)
    tuning = comp.deferred[0] if comp.deferred else None
    call = tuned_call(call, tuning)
    if options.cudagraphs:
        from compiler.cudagraphs import with_cudagraphs

        call = with_cudagraphs(call, comp.schedule, comp.report, static, tuning, saved_from)
    # outermost: folded weights are refilled (in place) before a CUDA graph replays reading them
    call = comp.folded.guard(call, comp.report)
    if any(getattr(launcher, "interpret", False) for launcher in wrapper.launchers.values()):
        call = on_one_aten_thread(call)  # ATen between interpreted kernels: no OpenMP wake-ups
    publish(comp.report)
    return _boxed(call, comp.report)


def report_output_strides(strides: list[tuple[int, ...] | None]) -> None:
    """Tell AOTAutograd the strides a training forward returns (as Inductor does): it compiles the
    backward for them, so saved activations a channels-last forward computed NHWC stay NHWC. Outside
    AOTAutograd's forward compile (``TracingContext.output_strides`` None) there is no one to tell.

    The forward's first outputs are its effect tokens (a ``with_effects`` op such as cholesky's
    error check), which AOTAutograd leaves out when it reads the list: reported with them, every
    saved tensor took the strides of the output before it, and the gradient of
    ``linalg.cholesky(a, upper=True)`` was computed from a transposed factor (``crucible run --mode
    train``, opinfo). Inductor has AOTAutograd remove the tokens from the graph instead."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    if context is not None and context.output_strides is not None:
        tokens = len(getattr(getattr(context, "fw_metadata", None), "tokens", None) or ())
        context.output_strides.extend(strides[tokens:])


def restride_placeholders(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """A backward graph's inputs with the strides AOTAutograd hands over (the forward's reported
    ones, ``report_output_strides``) where its trace recorded others: the lowering reads a
    placeholder's layout from its meta value."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and isinstance(example, torch.Tensor) and val.shape == example.shape \
                and val.stride() != example.stride():
            node.meta["val"] = example


def _boxed(call: Callable[[list], Any], report: GraphReport | None = None) -> Callable:
    """``call`` in AOTAutograd's boxed convention; the first call's host time goes on ``report``."""
    current = [call]

    def first(args: list) -> Any:
        current[0] = call
        start = time.perf_counter()
        try:
            return call(args)
        finally:
            report.first_call_seconds = time.perf_counter() - start

    if report is not None:
        current[0] = first

    def run(args: list) -> Any:
        return current[0](args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _fallback(report: GraphReport, reason: FallbackReason, err: CompilerError) -> None:
    report.fallback = reason
    cause = err.__cause__ or err
    report.fallback_message = f"{type(cause).__name__}: {cause}".splitlines()[0]
    report.failed_pass = err.pass_name
    publish(report)


@gc_paused()
def crucible_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None,
                     **unused: Any) -> Callable:
    """The Dynamo backend entry point."""
    from torch._functorch.aot_autograd import aot_module_simplified

    opts = Options.parse(options)
    # constant causal / all-true SDPA masks: is_causal or no mask (before the trace picks kernels)
    passes = (ATTENTION_MASKS,) if simplify_attention_masks(gm) else ()
    keep_fused_attention(gm)  # CUDA SDPA calls: the kernel chosen at run time, not by the fake trace
    n = len(example_inputs)
    fw = functools.partial(compile_aten_graph, options=opts, kind="forward", dynamo_inputs=n, passes=passes)
    bw = _untraced(functools.partial(compile_aten_graph, options=opts, kind="backward"))
    inference = functools.partial(compile_aten_graph, options=opts, kind="inference", dynamo_inputs=n,
                                  passes=passes)
    return aot_module_simplified(gm, example_inputs, fw_compiler=fw, bw_compiler=bw,
                                 inference_compiler=inference, keep_inference_input_mutations=True,
                                 decompositions=_capture_table(gm, example_inputs),
                                 partition_fn=partition_fn(opts.partition))



def _untraced(compile_backward: Callable) -> Callable:
    """``compile_backward``, and the backward it returns, with Dynamo off. AOTAutograd compiles a
    backward at its first call, inside ``loss.backward()``: in a compiled step function (or any frame
    Dynamo runs, where the backward runs on the calling thread, as on the CPU) Dynamo's frame hook is
    still set there, and it traced the compiler's own Python (a RecursionError in the lowering, graphs
    of the lowering's frames compiled) and then the backward's wrapper. Dynamo's ``aot_autograd``
    helper does the same for the backends built on it."""
    from torch._dynamo import disable

    def compile_untraced(*args: Any, **kwargs: Any) -> Callable:
        compiled = disable(compile_backward, reason="crucible compiles a backward")(*args, **kwargs)
        return disable(compiled, reason="crucible's compiled backward")

    return compile_untraced


def _capture_table(gm: torch.fx.GraphModule, example_inputs: list) -> dict:
    """The decompositions AOTAutograd applies while capturing. An inference graph leaves the rules
    of ``compiler.late_decompositions`` to the pipeline's first pass (the same graph, captured
    faster); a graph that needs gradients (AOTAutograd's test: grad mode on and an input or
    parameter requiring grad) takes every rule in capture, so its backward is still the derivative
    of the decomposed forward rather than torch's rule for, e.g., ``native_layer_norm_backward``."""
    tensors = [*(t for t in example_inputs if isinstance(t, torch.Tensor)), *gm.parameters()]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return decomposition_table_for_compiler()
    if any(has_symbolic_sizes(n.meta.get("example_value")) for n in gm.graph.nodes if n.op == "placeholder"):
        # symbolic sizes: the late pass traces each call on its static layouts, so capture takes every rule
        return decomposition_table_for_compiler()
    return capture_decomposition_table()


def register() -> None:
    """Register "crucible" with Dynamo (idempotent; the entry point does the same)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "crucible" not in _BACKENDS:
        register_backend(name="crucible")(crucible_backend)
