"""IR-level reference evaluator: a scheduled kernel run with torch ops on real tensors.

A generated kernel can be wrong in two places: the IR it was given (lowering chose the wrong
index or op, scheduling fused or merged loops wrongly) or the text a renderer made of correct
IR. This module runs the IR itself, with no renderer, so the two can be told apart:

* ``evaluate_kernel(kernel, tensors)`` performs a kernel's stores on real tensors; a template
  kernel's core op (GEMM, attention) is computed with torch from its data description first
  (``simulator.reference_templates``), then its epilogue stores like any other kernel's;
* ``reference_graph(gm, inputs)`` runs a whole ATen graph as Crucible lowers and schedules it,
  kernels by this evaluator and extern calls by ATen (through the generated wrapper);
  ``run_schedule(lowered, schedule, inputs)`` does the same for a hand-built lowered graph;
* ``localize(gm, inputs, codegen)`` compares eager, the IR and the generated code kernel by
  kernel and says which stage is at fault (for tests and the minimizer).

Expressions are evaluated by ``simulator.ir_semantics`` (the renderers' contract for the IR, see
there), which the template semantics share. Every load and store is
bounds-checked against the tensor it addresses (``ReferenceFault``): real kernels do not check
(and Triton's interpreter hides such reads), so an out-of-range index shows up here first. A
kernel reads every value before it writes any, which is what a kernel does when no program
reads what another writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from compiler.ir import Expr, Op
from simulator.ir_semantics import (
    POINTS_PER_CHUNK,
    ChunkEvaluator,
    KernelFacts,
    KernelStore,
    ReferenceFault,
    ReferenceUnsupported,
    flat_elements,
    numel,
)
from simulator.reference_templates import template_accumulator


# --- what the evaluator reads of a scheduled kernel --------------------------------------------

def kernel_facts(kernel: Any) -> KernelFacts:
    """The one place that reads ``compiler.scheduler.Kernel`` fields (adapt here when it changes)."""
    stores = tuple(KernelStore(s.buffer, s.index, s.value, s.level) for s in kernel.live_stores())
    template = getattr(kernel, "template", None)
    names: dict[str, None] = {}
    if template is not None:
        from compiler.templates.scheduling import operand_buffers

        names.update((b, None) for b in operand_buffers(template))
    for s in stores:
        names.update((e.arg, None) for e in s.value.walk() if e.op is Op.LOAD)
        names.update((e.arg, None) for e in s.index.walk() if e.op is Op.LOAD)
        names[s.buffer] = None
    if template is not None:  # the accumulator lives in registers: the evaluator makes it, no caller passes it
        names.pop(template.acc, None)
    return KernelFacts(kernel.name, tuple(kernel.ranges), tuple(kernel.rranges), stores, tuple(names), template)


def evaluate_kernel(kernel: Any, tensors: Mapping[str, torch.Tensor]) -> None:
    """Perform ``kernel``'s stores on ``tensors`` (buffer name -> tensor, any strides), in place.

    Raises ``ReferenceFault`` for an access outside a buffer or a buffer without a tensor."""
    facts = kernel if isinstance(kernel, KernelFacts) else kernel_facts(kernel)
    device = next((t.device for t in tensors.values()), torch.device("cpu"))
    if facts.template is not None:  # the core op first; its epilogue reads the accumulator as a buffer
        tensors = {**tensors, facts.template.acc: template_accumulator(facts, tensors, device)}
    xnumel, rnumel = numel(facts.ranges), max(1, numel(facts.rranges))
    chunk = max(1, POINTS_PER_CHUNK // rnumel)
    writes: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    for start in range(0, xnumel, chunk):
        ev = ChunkEvaluator(facts, tensors, torch.arange(start, min(xnumel, start + chunk), device=device), device)
        computed = ev.values([e for store in facts.stores for e in (store.value, store.index)])
        for i, store in enumerate(facts.stores):
            shape = ev.points if store.level == "xr" else (ev.points[0], 1)
            value = computed[2 * i]
            if value.shape[1] != shape[1]:
                raise ReferenceFault(f"kernel {facts.name}: the one-per-outer-point store of {store.buffer} "
                                     f"varies along the reduced dims")
            value = value.expand(*shape)
            index = ev.check(store.buffer, computed[2 * i + 1].expand(*shape), "store")
            writes.append((store.buffer, index.reshape(-1), value.reshape(-1)))
    for buffer, index, value in writes:
        flat = flat_elements(tensors[buffer])
        flat[index] = value.to(flat.dtype)


def evaluate_expr(expr: Expr, ranges: tuple[int, ...], rranges: tuple[int, ...] = (),
                  tensors: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """``expr`` at every iteration point of a loop nest: a tensor of shape ``ranges + rranges``."""
    facts = KernelFacts("<expr>", tuple(ranges), tuple(rranges), (), ())
    ev = ChunkEvaluator(facts, tensors or {}, torch.arange(numel(ranges)), torch.device("cpu"))
    return ev.values([expr])[0].expand(*ev.points).reshape(*ranges, *rranges)


# --- whole graphs ----------------------------------------------------------------------------------

def _with_metadata(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """Shapes and dtypes on every node (as ``compiler.compile_graph`` needs them)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    if any("val" not in n.meta for n in gm.graph.nodes if n.op in ("placeholder", "call_function")):
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(
            *[mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs])
    return gm


def lower_and_schedule(gm: torch.fx.GraphModule, inputs: Sequence[Any], codegen: str | None = None,
                        extern: str = "default") -> tuple[Any, Any, list[Any]]:
    """Lowered and scheduled as the compiler does for ``codegen`` (its renderer's op table and
    template families, the ``extern`` option); no codegen: every op, no templates."""
    from compiler.capabilities import ANY_RENDERER
    from compiler.codegen.registry import renderer_for
    from compiler.lowering import lower
    from compiler.pipeline import graph_device
    from compiler.scheduler import Kernel
    from compiler.templates.scheduling import schedule

    gm = _with_metadata(gm, inputs)
    device = graph_device(gm)
    capabilities = renderer_for(codegen, device).capabilities if codegen is not None else ANY_RENDERER
    lowered = lower(gm, device, capabilities, extern)
    sched = schedule(lowered, capabilities)
    return lowered, sched, [s for s in sched.steps if isinstance(s, Kernel)]


class ReferenceLauncher:
    """Runs one kernel through the evaluator, called like a generated kernel's launcher."""

    def __init__(self, facts: KernelFacts) -> None:
        self.facts = facts

    def __call__(self, *tensors: torch.Tensor) -> None:
        evaluate_kernel(self.facts, dict(zip(self.facts.buffers, tensors)))


def _wrap(lowered: Any, sched: Any, args: Mapping[str, tuple[str, ...]], launchers: Mapping[str, Any]) -> Any:
    """The generated wrapper around ``launchers`` (kernel name -> callable taking the tensors of
    ``args[name]``, in that order): allocation, extern calls and outputs exactly as compiled."""
    from compiler.codegen.base import RenderedKernel
    from compiler.wrapper import generate_wrapper

    rendered = {name: RenderedKernel(name, "reference", "", names, ()) for name, names in args.items()}
    return generate_wrapper(sched, rendered, dict(launchers))


def run_schedule(lowered: Any, sched: Any, inputs: Sequence[Any]) -> Any:
    """Run a lowered graph's schedule (hand-built or from ``compiler.scheduler.schedule``): every
    kernel by the IR evaluator, every extern call by ATen; returns the graph's outputs."""
    from compiler.scheduler import Kernel

    facts = {s.name: kernel_facts(s) for s in sched.steps if isinstance(s, Kernel)}
    wrapper = _wrap(lowered, sched, {n: f.buffers for n, f in facts.items()},
                    {n: ReferenceLauncher(f) for n, f in facts.items()})
    return wrapper.call(list(inputs))


def reference_graph(gm: torch.fx.GraphModule, inputs: Sequence[Any], codegen: str | None = None,
                    extern: str = "default") -> Any:
    """Run an ATen graph as Crucible lowers and schedules it for ``codegen`` with the ``extern``
    option (``extern="none"``: matmuls, attention and convolutions as template kernels where the
    renderer has templates), every kernel by the IR evaluator and every extern call by ATen;
    returns what the compiled graph would return."""
    lowered, sched, _ = lower_and_schedule(gm, inputs, codegen, extern)
    return run_schedule(lowered, sched, inputs)


@dataclass(frozen=True)
class Localization:
    """Which stage is at fault for a graph: ``"none"`` (the IR and the generated code both match
    eager); ``"lowering"`` (lowering or scheduling raised, the IR differs from eager, or the IR
    addresses memory outside a buffer); ``"renderer"`` (the IR matches eager; the kernel ``kernel``
    made from it does not build, fails to launch or stores other values than its IR);
    ``"wrapper"`` (every kernel matches its IR, the graph's outputs still differ)."""

    stage: str
    kernel: str | None = None
    message: str = ""


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _mismatch(got: Any, want: Any, rtol: float | None, atol: float | None) -> str | None:
    got_leaves, want_leaves = _leaves(got), _leaves(want)
    if len(got_leaves) != len(want_leaves):
        return f"{len(got_leaves)} outputs, expected {len(want_leaves)}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        if not isinstance(w, torch.Tensor):
            continue
        try:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        except AssertionError as error:
            return f"output {i}: {' '.join(str(error).split())[:300]}"
    return None


class _CheckedLauncher:
    """A real kernel launcher that first runs the IR on copies of the arguments and, after the
    launch, compares every buffer the kernel stores with what the IR stored."""

    def __init__(self, launcher: Any, args: tuple[str, ...], facts: KernelFacts, rtol: float | None,
                 atol: float | None, found: list[Localization]) -> None:
        self.launcher, self.args, self.facts = launcher, args, facts
        self.rtol, self.atol, self.found = rtol, atol, found

    def __call__(self, *tensors: torch.Tensor) -> None:
        actual = dict(zip(self.args, tensors))
        copies = {name: actual[name].clone() for name in self.facts.buffers}
        evaluate_kernel(self.facts, copies)
        try:
            self.launcher(*tensors)
        except Exception as error:
            self.found.append(Localization("renderer", self.facts.name, f"launch failed: {_first_line(error)}"))
            raise
        if self.found:  # the first faulty kernel is the one to report
            return
        for name in dict.fromkeys(s.buffer for s in self.facts.stores):
            why = _mismatch(actual[name], copies[name], self.rtol, self.atol)
            if why is not None:
                self.found.append(Localization("renderer", self.facts.name,
                                               f"buffer {name} differs from the IR's: {why}"))
                return


def _compiled_launchers(lowered: Any, kernels: list[Any], codegen: str) -> tuple[dict, dict, Localization | None]:
    """Render and load ``kernels`` with ``codegen`` one by one: (kernel name -> launcher, kernel
    name -> argument names, the first kernel that failed to render or load, if any)."""
    from compiler.codegen.registry import renderer_for
    from compiler.pipeline import load_kernels

    renderer = renderer_for(codegen, lowered.device)
    launchers, args = {}, {}
    for k in kernels:
        try:
            rendered = renderer.render(k)
            launchers.update(load_kernels({k.name: rendered}, lowered.device, {k.name: k}))
        except Exception as error:  # noqa: BLE001 -- any failure here is the renderer's (or its compiler's)
            return launchers, args, Localization("renderer", k.name, f"{codegen} kernel does not build: "
                                                                     f"{_first_line(error)}")
        args[k.name] = rendered.args
    return launchers, args, None


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}"


def _fresh(inputs: Sequence[Any]) -> list[Any]:
    # every run gets its own copy: a graph may write into its inputs
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def localize(gm: torch.fx.GraphModule, inputs: Sequence[Any], codegen: str = "triton",
             rtol: float | None = None, atol: float | None = None, extern: str = "default") -> Localization:
    """Run ``gm`` in eager, through the IR evaluator and as generated ``codegen`` kernels (lowered
    with the ``extern`` option, template kernels included), and say which stage first disagrees or
    fails (see ``Localization``); tolerances as ``torch.testing.assert_close``. Raises
    ``ReferenceUnsupported`` when the evaluator cannot run a kernel (no stage is to blame)."""
    expected = gm(*_fresh(inputs))
    try:
        reference = reference_graph(gm, _fresh(inputs), codegen, extern)
    except ReferenceUnsupported:
        raise
    except ReferenceFault as fault:
        return Localization("lowering", None, str(fault))
    except Exception as error:  # noqa: BLE001 -- lowering or scheduling raised: that stage failed
        return Localization("lowering", None, f"lowering or scheduling failed: {_first_line(error)}")
    why = _mismatch(reference, expected, rtol, atol)
    if why is not None:
        return Localization("lowering", None, f"the IR differs from eager: {why}")
    lowered, sched, kernels = lower_and_schedule(gm, inputs, codegen, extern)
    launchers, args, failed = _compiled_launchers(lowered, kernels, codegen)
    if failed is not None:
        return failed
    found: list[Localization] = []
    checked = {}
    for k in kernels:
        facts = kernel_facts(k)
        if set(args[k.name]) != set(facts.buffers):
            return Localization("renderer", k.name, f"the {codegen} kernel takes {sorted(args[k.name])}, "
                                                    f"the IR touches {sorted(facts.buffers)}")
        checked[k.name] = _CheckedLauncher(launchers[k.name], args[k.name], facts, rtol, atol, found)
    try:
        out = _wrap(lowered, sched, args, checked).call(_fresh(inputs))
    except Exception:
        if found:  # a kernel's launch failed
            return found[0]
        raise
    if found:
        return found[0]
    why = _mismatch(out, expected, rtol, atol)
    if why is not None:  # every kernel matched its IR, yet the outputs differ
        return Localization("wrapper", None, f"kernels match the IR but the outputs differ: {why}")
    return Localization("none")
