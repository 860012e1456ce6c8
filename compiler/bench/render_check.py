"""``python -m compiler.bench.models --render-only``: every benchmark model through the weight passes
(with the GPU's rules), lowering, scheduling, the GPU Triton renderer and the wrapper, on any machine
(no GPU, nothing launched): the strict-mode compile check of the GPU issue, through Triton's
build of every kernel for an H200 (``compiler.gpu_build``: front end, GPU passes and ptxas) where
the installed Triton has its NVIDIA backend.

Each model is traced by Dynamo and AOTAutograd on the CPU at batch 1 (sequences of 64 tokens);
shapes differ from the GPU run's, the ops do not. The graphs still run in eager so Dynamo can
finish tracing; a lowering, scheduling, rendering or wrapper error is the model's result.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch

from compiler.bench.errors import error_line
from compiler.bench.zoo import MODELS


def render_graphs(model: torch.nn.Module, inputs: tuple, build: bool = True,
                  collect: list | None = None) -> list[tuple[int, int]]:
    """(kernels, extern calls) per graph Dynamo captured, each rendered for the GPU; ``build``: and
    built for an H200; ``collect`` gets (rendered kernel, its buffers' dtypes) for every kernel."""
    import torch._dynamo
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    from compiler import gpu_build
    from compiler.codegen.registry import renderer_for
    from compiler.cudagraphs import static_input_indices
    from compiler.decompositions import decomposition_table_for_compiler
    from compiler.lowering import lower
    from compiler.scheduler import schedule
    from compiler.wrapper import generate_wrapper

    counts: list[tuple[int, int]] = []

    def render(gm: torch.fx.GraphModule, example_inputs: Any, dynamo_inputs: int) -> Any:
        renderer = renderer_for("triton", torch.device("cuda"))
        rewritten = weight_passes(gm, static_input_indices(len(example_inputs), dynamo_inputs, "inference"))
        sched = schedule(lower(rewritten, torch.device("cpu"), renderer.capabilities), renderer.capabilities)
        rendered = {k.name: renderer.render(k) for k in sched.kernels}
        generate_wrapper(sched, rendered, {})
        if collect is not None:
            collect.extend((rendered[k.name], [k.param(a).dtype for a in rendered[k.name].args])
                           for k in sched.kernels)
        if build and gpu_build.available():  # Triton's build for an H200, front end to ptxas, without one
            gpu_build.check_kernels(sched.kernels)
        counts.append((len(sched.kernels), len(sched.externs)))
        return make_boxed_func(gm.forward)

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        compile_fn = functools.partial(render, dynamo_inputs=len(example_inputs))
        return aot_module_simplified(gm, example_inputs, fw_compiler=compile_fn, inference_compiler=compile_fn,
                                     decompositions=decomposition_table_for_compiler())

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, dynamic=False)(*inputs)
    return counts


def weight_passes(gm: torch.fx.GraphModule, static: list[int]) -> torch.fx.GraphModule:
    """The pipeline's inference weight passes, with the GPU's rules (padding, activation epilogues)."""
    from compiler.extern_passes import fuse_extern_epilogues, merge_matmuls
    from compiler.folding import fold_batch_norm

    cuda = torch.device("cuda")
    folded = fuse_extern_epilogues(fold_batch_norm(gm, static), cuda).folded
    return merge_matmuls(folded, static, cuda).folded.gm


def cpu_model(name: str, dtype: torch.dtype, tiny: bool) -> tuple[torch.nn.Module, tuple]:
    """A benchmark model on the CPU with batch-1 inputs (sequences of 64 tokens)."""
    model, inputs = MODELS[name].build(dtype, "cpu", tiny)
    return model, tuple(t[:1, :64] if t.dim() == 2 else t[:1] for t in inputs)


def render_check(name: str, dtype: torch.dtype, tiny: bool) -> dict[str, Any]:
    started = time.perf_counter()
    model, inputs = cpu_model(name, dtype, tiny)
    try:
        counts = render_graphs(model, inputs)
    except Exception as why:  # noqa: BLE001  (a failing model is a result)
        return {"model": name, "ok": False, "error": error_line(why), "s": time.perf_counter() - started}
    return {"model": name, "ok": True, "graphs": counts, "s": time.perf_counter() - started}
