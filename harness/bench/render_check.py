"""``python -m harness.bench.models --render-only``: every benchmark model through the GPU pipeline's
passes up to rendering (the late decompositions, the weight passes with the GPU's rules, the layout
rule, lowering, scheduling, the GPU Triton renderer and the wrapper), on any machine (no GPU, nothing
launched): the strict-mode compile check of the GPU issue, through Triton's build of every kernel for
an H200 (``compiler.gpu_build``: front end, GPU passes and ptxas) where the installed Triton has its
NVIDIA backend. Each model's line gives the seconds of each stage (AOTAutograd's capture, each pass,
the Triton builds): Crucible's compile time before the GPU's launches, measurable on a CPU.

Each model is traced by Dynamo and AOTAutograd on the CPU at batch 1 (sequences of 64 tokens);
shapes differ from the GPU run's (and so may the layout rule's choice), the ops do not. The graphs
still run in eager so Dynamo can finish tracing; a lowering, scheduling, rendering or wrapper error
is the model's result.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch

from harness.bench.errors import error_line
from harness.bench.zoo import MODELS


def render_graphs(model: torch.nn.Module, inputs: tuple, build: bool = True, collect: list | None = None,
                  seconds: dict[str, float] | None = None, nodes: list[int] | None = None) -> list[tuple[int, int]]:
    """(kernels, extern calls) per graph Dynamo captured, each through the GPU pipeline's passes up to
    rendering (late decompositions, weight passes, the layout rule, lowering, scheduling, the GPU
    renderer, the wrapper); ``build``: and built for an H200; ``collect`` gets (rendered kernel, its
    buffers' dtypes) for every kernel; ``seconds`` gets each stage's time, summed over graphs
    (``capture``: AOTAutograd, with the decompositions it applies); ``nodes`` gets each graph's count of
    ATen calls after the late decompositions (what lowering gets, before the weight passes)."""
    import torch._dynamo
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    from compiler import gpu_build
    from compiler.backend import gc_paused
    from compiler.codegen.registry import renderer_for
    from compiler.cudagraphs import static_input_indices
    from compiler.decompositions import capture_decomposition_table
    from compiler.kernel_sharing import render_shared
    from compiler.late_decompositions import expand_late_decompositions
    from compiler.layout import choose_layout, convert_weight_layout
    from compiler.lowering import lower
    from compiler.scheduler import schedule
    from compiler.wrapper import generate_wrapper

    counts: list[tuple[int, int]] = []
    seconds = {} if seconds is None else seconds
    cuda = torch.device("cuda")
    captured = [0.0]  # when the current graph's capture started

    def timed(stage: str, fn: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - start

    def render(gm: torch.fx.GraphModule, example_inputs: Any, dynamo_inputs: int) -> Any:
        seconds["capture"] = seconds.get("capture", 0.0) + time.perf_counter() - captured[0]
        renderer = renderer_for("triton", cuda)
        static = static_input_indices(len(example_inputs), dynamo_inputs, "inference")
        expanded = timed("late_decompositions", expand_late_decompositions, gm).gm
        if nodes is not None:
            nodes.append(sum(1 for n in expanded.graph.nodes if n.op == "call_function"))
        folded = timed("weight_passes", weight_passes, expanded, static)
        decision = timed("choose_layout", choose_layout, folded.gm, cuda, "auto", "inference")
        if decision.layout == "channels_last" and decision.convs:
            folded = timed("choose_layout", convert_weight_layout, folded, static)
        lowered = timed("lower", lower, folded.gm, torch.device("cpu"), renderer.capabilities, "default",
                        decision.layout)
        sched = timed("schedule", schedule, lowered, renderer.capabilities)
        rendered = timed("render", render_shared, sched.kernels, renderer.render)  # as the pipeline renders
        generate_wrapper(sched, rendered, {})
        if collect is not None:
            collect.extend((rendered[k.name], [k.param(a).dtype for a in rendered[k.name].args])
                           for k in sched.kernels)
        if build and gpu_build.available():  # Triton's build for an H200, front end to ptxas, without one
            timed("gpu_build", gpu_build.check_kernels, sched.kernels)
        counts.append((len(sched.kernels), len(sched.externs)))
        captured[0] = time.perf_counter()  # a later graph's capture starts after this one
        return make_boxed_func(gm.forward)

    @gc_paused()  # as the real backend compiles: a full collection walks the whole heap, more of it as graphs grow
    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        compile_fn = functools.partial(render, dynamo_inputs=len(example_inputs))
        captured[0] = time.perf_counter()
        return aot_module_simplified(gm, example_inputs, fw_compiler=compile_fn, inference_compiler=compile_fn,
                                     decompositions=capture_decomposition_table())

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, dynamic=False)(*inputs)
    return counts


def weight_passes(gm: torch.fx.GraphModule, static: list[int]) -> Any:
    """The pipeline's inference weight passes, with the GPU's rules (padding, activation epilogues):
    the rewritten graph and its constants (``folding.FoldedGraph``)."""
    from compiler.extern_passes import fuse_extern_epilogues, merge_matmuls
    from compiler.folding import fold_batch_norm

    cuda = torch.device("cuda")
    folded = fuse_extern_epilogues(fold_batch_norm(gm, static), cuda).folded
    return merge_matmuls(folded, static, cuda).folded


def cpu_model(name: str, dtype: torch.dtype, tiny: bool) -> tuple[torch.nn.Module, tuple]:
    """A benchmark model on the CPU with batch-1 inputs (sequences of 64 tokens)."""
    model, inputs = MODELS[name].build(dtype, "cpu", tiny)
    return model, tuple(t[:1, :64] if t.dim() == 2 else t[:1] for t in inputs)


def render_check(name: str, dtype: torch.dtype, tiny: bool) -> dict[str, Any]:
    started = time.perf_counter()
    model, inputs = cpu_model(name, dtype, tiny)
    seconds: dict[str, float] = {}
    try:
        counts = render_graphs(model, inputs, seconds=seconds)
    except Exception as why:  # noqa: BLE001  (a failing model is a result)
        return {"model": name, "ok": False, "error": error_line(why), "s": time.perf_counter() - started}
    return {"model": name, "ok": True, "graphs": counts, "s": time.perf_counter() - started, "stages": seconds}
