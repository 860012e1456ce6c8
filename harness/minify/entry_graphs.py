"""Capture the ATen graphs a target receives from a corpus entry, with the real values they ran on.

The entry is built and run exactly as ``harness.entry_subject`` runs it (seeded build, working dtype,
device, no_grad), through a recording Dynamo backend: Dynamo captures, AOTAutograd functionalizes
and decomposes with the *target's* decomposition table (Crucible's for crucible targets,
Inductor's for inductor, AOTAutograd's default otherwise), and each resulting ATen graph is kept
together with the inputs of its first call. The recording backend runs the graphs in eager, so
the model's output through it is "the decomposed graphs in eager": compared with eager and the
float64 reference it tells whether the decompositions themselves already fail parity.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from corpus.entry import Entry
from harness.model_runs import DTYPES, ModelCopies, call_seeded, cast, fresh_inputs, reference_runs
from harness.minify.case import GraphCase
from harness.oracle import ParityOracle, ParityResult, working_precision
from harness.targets import Target


@dataclass
class EntryGraphs:
    cases: list[GraphCase] = field(default_factory=list)
    decomposition: ParityResult | None = None  # decomposed graphs in eager vs eager and float64


def decomposition_table(target: Target) -> dict[Any, Callable] | None:
    if target.is_crucible:
        from compiler.decompositions import decomposition_table_for_compiler

        return decomposition_table_for_compiler()
    if target.backend == "inductor":
        from torch._inductor.decomposition import select_decomp_table

        return select_decomp_table()
    return None


def _snapshot(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _recording_backend(target: Target, entry: Entry, cases: list[GraphCase]) -> Callable:
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    table = decomposition_table(target)

    def record(aten_gm: torch.fx.GraphModule, fake_inputs: list) -> Callable:
        slot: dict[str, GraphCase] = {}
        inner = make_boxed_func(aten_gm.forward)

        def run(args: list) -> Any:
            if "case" not in slot:
                slot["case"] = GraphCase(aten_gm, [_snapshot(a) for a in args], target.name, entry.dtype,
                                         f"{entry.name} graph {len(cases)}",
                                         tolerance=entry.tolerance_for(entry.dtype))
                cases.append(slot["case"])
            return inner(args)

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        kwargs = {"decompositions": table} if table is not None else {}
        return aot_module_simplified(gm, example_inputs, fw_compiler=record, inference_compiler=record, **kwargs)

    return backend


# Modules Python itself keeps without a spec (the script being run): never hidden.
_MAIN_MODULES = ("__main__", "__mp_main__")


def prepare_capture() -> None:
    """Import Dynamo, even where a corpus module has put stand-ins for missing packages in
    ``sys.modules`` (``capture_entry`` calls it; ``crucible minify`` calls it before loading the corpus).

    Corpus modules of crawled code stand in for missing optional packages with mock modules
    (``sys.modules["tensorflow"] = MagicMock()``, or a ``types.ModuleType`` without a spec).
    Importing ``torch._dynamo`` runs ``torch._dynamo.trace_rules``, which calls
    ``importlib.util.find_spec`` on each third-party package it skips (tensorflow among them); for a
    module in ``sys.modules`` without a ``__spec__`` that raises ``ValueError: tensorflow.__spec__
    is not set``. ``crucible run``'s workers import Dynamo before they load an entry's module; the
    minimizer loads the corpus in its own process. So Dynamo's first import here runs with the
    spec-less top-level modules out of ``sys.modules``, and puts them back after it."""
    if "torch._dynamo" in sys.modules:
        return
    stand_ins = {name: module for name, module in sys.modules.items()
                 if "." not in name and name not in _MAIN_MODULES and getattr(module, "__spec__", None) is None}
    for name in stand_ins:
        del sys.modules[name]
    try:
        import torch._dynamo  # noqa: F401
    finally:
        sys.modules.update(stand_ins)


def capture_entry(entry: Entry, target: Target) -> EntryGraphs:
    """The entry's ATen graphs as ``target`` receives them (raises when the model does not build/run)."""
    prepare_capture()
    device, dtype = target.device, DTYPES.get(entry.dtype)
    scale = "full" if device == "cuda" else "small"
    built = entry.build(scale)
    models = ModelCopies(entry, scale, built.model)  # every run its own copy, as `crucible run` does
    args, kwargs = cast(built.inputs, device, dtype), cast(built.kwargs, device, dtype)
    out = EntryGraphs()
    torch._dynamo.reset()
    try:
        with torch.no_grad(), working_precision():  # as the engine runs an entry
            eager = call_seeded(models.fresh(device, dtype), *fresh_inputs(args, kwargs), entry.seed)
            (float64,) = reference_runs(models, [(None, built.inputs, built.kwargs)], entry.seed, device, "auto", {},
                                        "inference")
            reference = None if float64 is None else float64.out
            compiled = torch.compile(models.fresh(device, dtype),
                                     backend=_recording_backend(target, entry, out.cases), dynamic=False)
            decomposed = call_seeded(compiled, *fresh_inputs(args, kwargs), entry.seed)
    finally:
        torch._dynamo.reset()
    out.decomposition = ParityOracle(entry.dtype, entry.tolerance_for(entry.dtype)).compare(
        eager, decomposed, reference)
    return out
