"""Crucible: a torch.compile backend that lowers to fused Triton and C++ kernels.

Public API:

* ``torch.compile(model, backend="crucible", options={"codegen": ..., "strict": ...})``
* ``compiler.inspect(fn_or_module, *example_inputs, **options) -> CompileReport``
* ``compiler.compile_graph(gm, example_inputs, codegen=..., **options)``: compile a bare FX graph
  of ATen ops with any backend option (what fuzzers and repro scripts use)
* ``compiler.collect_reports()``: gather the reports of graphs compiled in a block
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from compiler.backend import crucible_backend, register
from compiler.report import CompileReport, GraphReport, collect_reports
from compiler.tuning import finish_tuning

register()


def inspect(fn: Callable, *example_inputs: Any, dynamic: bool = False, **options: Any) -> CompileReport:
    """Compile ``fn`` on ``example_inputs`` and report kernels, fused ops and extern calls.

    Runs the compiled function once (so every graph, backward excluded, is compiled). ``dynamic=True``
    compiles with symbolic sizes: each graph's report then lists its size symbols, the guards the
    compiler added and which kernels are size-generic (``KernelReport.size_args``).
    """
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="crucible", options=options or None, dynamic=dynamic or None)
    with collect_reports() as report:
        compiled(*example_inputs)
    return report


def trace_aten(fn: Callable, *example_inputs: Any) -> torch.fx.GraphModule:
    """``fn`` as a bare FX graph of ATen ops after Crucible's decompositions (with shape metadata)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.decompositions import decomposition_table_for_compiler

    return make_fx(fn, decomposition_table=decomposition_table_for_compiler(), tracing_mode="fake")(
        *example_inputs)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list, codegen: str | None = "triton",
                  strict: bool = True, extern: str = "default", **options: Any) -> Callable:
    """Compile a bare FX graph of ATen ops; returns ``fn(*inputs)``.

    Takes every backend option of ``torch.compile(..., options=...)`` (``compiler.config.Options``:
    ``tuning``, ``layout``, ``fold_weights``, ``cudagraphs`` besides these three), validated the same
    way: an unknown option or value is a ValueError. So a graph compiled here is compiled as a
    model with the same options is (the fuzzer and the minimizer rely on it).
    Shapes/dtypes come from ``node.meta["val"]`` or, when missing, from running
    the graph on fake copies of ``example_inputs``.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from compiler.backend import compile_aten_graph
    from compiler.config import Options

    parsed = Options.parse({"codegen": codegen, "strict": strict, "extern": extern, **options})
    if any("val" not in n.meta for n in gm.graph.nodes if n.op in ("placeholder", "call_function")):
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(
            *[mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs])
    boxed = compile_aten_graph(gm, example_inputs, options=parsed, kind="inference")

    def run(*args: Any) -> Any:
        return boxed(list(args))

    return run


__all__ = ["CompileReport", "GraphReport", "collect_reports", "compile_graph", "crucible_backend", "finish_tuning",
           "inspect"]
