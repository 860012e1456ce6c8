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

Semantics follow the renderers' contract for the IR (``compiler/ir.py``): 16-bit floats are
computed in float32 and rounded only where the IR casts; ``DIV`` truncates integers, ``MOD``
keeps the dividend's sign, ``MAX``/``MIN``/reductions propagate NaN, ``ARGMAX``/``ARGMIN``
return the first extreme (the first NaN when there is one). Index expressions address a
buffer's elements from its first element, as kernel pointers do. Every load and store is
bounds-checked against the tensor it addresses (``ReferenceFault``): real kernels do not check
(and Triton's interpreter hides such reads), so an out-of-range index shows up here first. A
kernel reads every value before it writes any, which is what a kernel does when no program
reads what another writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from compiler.ir import Expr, Op, ReduceOp

# Iteration points evaluated at once (a whole reduction row is always one chunk, however long).
# Each torch call costs ~15 ms on a loaded 2-core machine whatever its size (thread-pool waits),
# so chunks are large; a value is freed after its last use, so memory follows the expression's
# width, not its depth.
POINTS_PER_CHUNK = 1 << 18


class ReferenceFault(RuntimeError):
    """The IR addresses memory outside a buffer: a lowering or scheduling fault."""


class ReferenceUnsupported(NotImplementedError):
    """The evaluator has no semantics for an IR op or a template kind: its own limit, nobody's fault."""


# --- what the evaluator reads of a scheduled kernel --------------------------------------------

@dataclass(frozen=True)
class KernelStore:
    buffer: str
    index: Expr
    value: Expr
    level: str  # "x": one value per outer point; "xr": one per outer x reduction point


@dataclass(frozen=True)
class KernelFacts:
    name: str
    ranges: tuple[int, ...]
    rranges: tuple[int, ...]
    stores: tuple[KernelStore, ...]  # the stores that reach memory
    buffers: tuple[str, ...]  # every buffer loaded or stored, in first-use order (a template's operands first)
    template: Any = None  # a template kernel's core op as data (``compiler.templates.spec``), else None


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


# --- evaluation ----------------------------------------------------------------------------------

def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value is computed in (16-bit floats in float32, as every renderer does)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _span(t: torch.Tensor) -> int:
    """Elements addressable from ``t``'s first element: what its strides reach."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _flat(t: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(t, (_span(t),), (1,), t.storage_offset())


def _unravel(flat: torch.Tensor, sizes: tuple[int, ...]) -> list[torch.Tensor]:
    out, stride = [], 1
    strides = []
    for n in reversed(sizes):
        strides.append(stride)
        stride *= n
    for n, st in zip(sizes, reversed(strides)):
        out.append((flat // st) % n)
    return out


_UNARY: dict[Op, Callable[[torch.Tensor], torch.Tensor]] = {
    Op.NEG: torch.neg, Op.ABS: torch.abs, Op.EXP: torch.exp, Op.EXP2: torch.exp2, Op.LOG2: torch.log2, Op.LOG: torch.log, Op.SQRT: torch.sqrt,
    Op.RSQRT: torch.rsqrt, Op.SIN: torch.sin, Op.COS: torch.cos, Op.ERF: torch.erf, Op.FLOOR: torch.floor,
    Op.CEIL: torch.ceil,
}
_BINARY: dict[Op, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Op.ADD: torch.add, Op.SUB: torch.sub, Op.MUL: torch.mul, Op.MOD: torch.fmod, Op.MAX: torch.maximum,
    Op.MIN: torch.minimum, Op.BITAND: torch.bitwise_and, Op.BITOR: torch.bitwise_or,
    Op.BITXOR: torch.bitwise_xor, Op.SHL: torch.bitwise_left_shift, Op.SHR: torch.bitwise_right_shift,
}
_COMPARE: dict[Op, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Op.EQ: torch.eq, Op.NE: torch.ne, Op.LT: torch.lt, Op.LE: torch.le, Op.GT: torch.gt, Op.GE: torch.ge,
    Op.AND: torch.logical_and, Op.OR: torch.logical_or,
}


class _Evaluator:
    """Values of expressions over one chunk of iteration points: tensors of shape [C, 1] (per outer
    point) or [C, R] (per outer x reduction point), memoized per expression."""

    def __init__(self, facts: KernelFacts, tensors: Mapping[str, torch.Tensor], xflat: torch.Tensor,
                 device: torch.device) -> None:
        self.facts, self.tensors, self.device = facts, tensors, device
        self.xs = [v[:, None] for v in _unravel(xflat, facts.ranges)]
        rflat = torch.arange(max(1, _numel(facts.rranges)), device=device)
        self.rs = [v[None, :] for v in _unravel(rflat, facts.rranges)] if facts.rranges else []
        self.points = (xflat.numel(), rflat.numel())

    def values(self, roots: Sequence[Expr]) -> list[torch.Tensor]:
        """The values of ``roots``, sharing common sub-expressions, each freed after its last use."""
        order: dict[Expr, None] = {}
        for root in roots:
            order.update((e, None) for e in root.walk() if e not in order)  # operands before users
        users = Counter(s for e in order for s in e.src)
        done: dict[Expr, torch.Tensor] = {}
        for e in order:
            done[e] = self.apply(e, [done[s] for s in e.src])
            for s in e.src:
                users[s] -= 1
                if users[s] == 0 and s not in roots:
                    done.pop(s, None)
        return [done[r] for r in roots]

    def apply(self, e: Expr, a: list[torch.Tensor]) -> torch.Tensor:
        op, cd = e.op, compute_dtype(e.dtype)
        if op is Op.CONST:
            return torch.tensor(e.arg, dtype=cd, device=self.device).reshape(1, 1)
        if op is Op.XVAR:
            return self.xs[e.arg]
        if op is Op.RVAR:
            return self.rs[e.arg]
        if op is Op.LOAD:
            return self.load(e.arg, a[0]).to(cd)
        if op is Op.CAST:
            return _cast(a[0], e.dtype)
        if op is Op.REDUCE:
            return _reduce(e.arg, a[0].expand(*self.points), cd)
        if op in _COMPARE:
            return _COMPARE[op](a[0], a[1])
        if op is Op.NOT:
            return torch.logical_not(a[0])
        if op is Op.ISNAN:
            return torch.isnan(a[0])
        if op is Op.WHERE:
            return torch.where(a[0].bool(), a[1].to(cd), a[2].to(cd))
        a = [t.to(cd) for t in a]
        if op in _UNARY:
            return _UNARY[op](a[0])
        if op is Op.BITNOT:
            return torch.logical_not(a[0]) if cd == torch.bool else torch.bitwise_not(a[0])
        if op in _BINARY:
            return _BINARY[op](a[0], a[1])
        if op is Op.DIV:
            return a[0] / a[1] if cd.is_floating_point else torch.div(a[0], a[1], rounding_mode="trunc")
        if op is Op.FLOORDIV:
            return torch.div(a[0], a[1], rounding_mode="floor")
        if op is Op.POW:
            return torch.pow(a[0], a[1])
        if op is Op.FMA:  # float64 for float32 operands: the product is exact, the sum rounds once more
            wide = torch.float64 if cd == torch.float32 else cd
            return torch.addcmul(a[2].to(wide), a[0].to(wide), a[1].to(wide)).to(cd)
        raise ReferenceUnsupported(f"reference evaluator: no semantics for {op}")

    def check(self, buffer: str, index: torch.Tensor, what: str) -> torch.Tensor:
        return checked_index(self.facts.name, self.tensors, buffer, index, what)

    def load(self, buffer: str, index: torch.Tensor) -> torch.Tensor:
        return checked_load(self.facts.name, self.tensors, buffer, index)


def checked_index(kernel: str, tensors: Mapping[str, torch.Tensor], buffer: str, index: torch.Tensor,
                  what: str) -> torch.Tensor:
    """``index`` (elements from ``buffer``'s first) as int64, or ``ReferenceFault`` when it leaves the buffer."""
    tensor = tensors.get(buffer)
    if tensor is None:
        raise ReferenceFault(f"kernel {kernel}: {what} of {buffer}, which no tensor was given for")
    span = _span(tensor)
    index = index.to(torch.int64)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= span):
        raise ReferenceFault(f"kernel {kernel}: {what} of {buffer} at index "
                             f"{int(index.min())}..{int(index.max())}, outside its {span} elements")
    return index


def checked_load(kernel: str, tensors: Mapping[str, torch.Tensor], buffer: str, index: torch.Tensor) -> torch.Tensor:
    """The elements of ``buffer`` at ``index`` (any shape), bounds-checked like every load of the IR."""
    return _flat(tensors[buffer])[checked_index(kernel, tensors, buffer, index, "load")]


def _numel(shape: Sequence[int]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def _cast(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return value != 0
    if dtype in (torch.float16, torch.bfloat16):  # round to the 16-bit type, keep computing in fp32
        return value.to(torch.float32).to(dtype).to(torch.float32)
    return value.to(dtype)


def _reduce(op: ReduceOp, v: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    v = v.to(compute_dtype(v.dtype)) if v.dtype != torch.bool else v.to(torch.int64)
    if op is ReduceOp.SUM:
        return v.sum(1, keepdim=True).to(out)
    if op is ReduceOp.PROD:
        return v.prod(1, keepdim=True).to(out)
    if op is ReduceOp.MAX:
        return v.amax(1, keepdim=True).to(out)
    if op is ReduceOp.MIN:
        return v.amin(1, keepdim=True).to(out)
    position = torch.arange(v.shape[1], device=v.device).expand_as(v)
    best = v.amax(1, keepdim=True) if op is ReduceOp.ARGMAX else v.amin(1, keepdim=True)
    # the first position holding the extreme; NaN is the extreme when a row has one
    hit = (v == best) | (torch.isnan(v) if v.is_floating_point() else torch.zeros_like(v, dtype=torch.bool))
    first = torch.where(hit, position, v.shape[1]).amin(1, keepdim=True)
    return first.to(out)


def evaluate_kernel(kernel: Any, tensors: Mapping[str, torch.Tensor]) -> None:
    """Perform ``kernel``'s stores on ``tensors`` (buffer name -> tensor, any strides), in place.

    Raises ``ReferenceFault`` for an access outside a buffer or a buffer without a tensor."""
    facts = kernel if isinstance(kernel, KernelFacts) else kernel_facts(kernel)
    device = next((t.device for t in tensors.values()), torch.device("cpu"))
    if facts.template is not None:  # the core op first; its epilogue reads the accumulator as a buffer
        from simulator.reference_templates import template_accumulator

        tensors = {**tensors, facts.template.acc: template_accumulator(facts, tensors, device)}
    xnumel, rnumel = _numel(facts.ranges), max(1, _numel(facts.rranges))
    chunk = max(1, POINTS_PER_CHUNK // rnumel)
    writes: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    for start in range(0, xnumel, chunk):
        ev = _Evaluator(facts, tensors, torch.arange(start, min(xnumel, start + chunk), device=device), device)
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
        flat = _flat(tensors[buffer])
        flat[index] = value.to(flat.dtype)


def evaluate_expr(expr: Expr, ranges: tuple[int, ...], rranges: tuple[int, ...] = (),
                  tensors: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """``expr`` at every iteration point of a loop nest: a tensor of shape ``ranges + rranges``."""
    facts = KernelFacts("<expr>", tuple(ranges), tuple(rranges), (), ())
    ev = _Evaluator(facts, tensors or {}, torch.arange(_numel(ranges)), torch.device("cpu"))
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
