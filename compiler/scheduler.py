"""Scheduling: group computed nodes into kernels, decide stores, merge loops.

A kernel iterates over outer dims ``ranges`` (XVARs) and, for reductions, the
reduced dims ``rranges`` (RVARs). Size-1 dims never appear. Nodes join the open
kernel in program order when their iteration space fits:

* pointwise at "xr" level: shape == ranges + rranges (a reduction's input side),
* pointwise at "x" level: shape == ranges (a reduction's output side / epilogue),
* a reduction with the same ranges and rranges.

Spaces that differ only by merged or split dims (a node over (56, 56, 96), a kernel over
(3136,)|(96,)) match after re-expressing one side's vars in the other's, and so does a consumer
that reads a kernel-local value through a dense permutation (a window partition): it is computed
where each element is produced (``compiler.reshapes``).

A node reading a buffer produced inside the kernel gets the producer's value
directly when it reads the element the producer stores at the same iteration
point (structural equality of index expressions); any other read of a
kernel-local buffer would cross programs, so the fusion is refused with a reason.
A buffer is stored only if something outside its kernel reads it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler import ir, reshapes, sizes
from compiler.capabilities import ANY_RENDERER, MAX_KERNEL_BUFFERS, MAX_PERSISTENT_RNUMEL, Capabilities, persistent
from compiler.graph import Buffer, ComputedNode, ExternNode, LoweredGraph, numel, view_buffers
from compiler.input_writes import input_write_race
from compiler.ir import Expr, Op
from compiler.loop_merging import _resite, merge_loops
from compiler.report import FusionReason, FusionRefusal

# Fusion forwards a producer's value into its consumer's expression; past this depth the
# consumer starts a new kernel instead (renderers recurse over expressions).
MAX_FUSED_DEPTH = 192
EARLY_MIN_BYTES = 1 << 20  # Scheduler.placement: below, a kernel stays last, where a node of its shape may join


class Level(str, enum.Enum):
    """Where a fused node's values live in a kernel."""

    X = "x"  # one value per outer point
    XR = "xr"  # one value per outer x reduced point (a reduction's input side)


@dataclass(frozen=True)
class Store:
    buffer: str
    index: Expr
    value: Expr
    level: Level


@dataclass(frozen=True)
class Param:
    """A buffer a kernel touches: everything a renderer, the runtime and the wrapper need of it."""

    buffer: str
    dtype: torch.dtype
    span: int  # elements addressed from the buffer's first element (decides index width)
    read: bool
    written: bool


@dataclass(frozen=True)
class Kernel:
    """One scheduled kernel, the hand-off to renderers, runtime and wrapper (nothing after
    scheduling reads the lowered graph). ``stores`` holds every fused node in program order;
    those in ``kept`` are written to memory, the others live in registers."""

    name: str
    ranges: tuple[int, ...]  # outer dims (XVARs), size-1 dims dropped, adjacent ones merged
    rranges: tuple[int, ...] = ()  # reduced dims (RVARs)
    stores: tuple[Store, ...] = ()
    kept: frozenset[str] = frozenset()
    params: tuple[Param, ...] = ()  # every buffer the kept stores read or write, in first-use order
    node_names: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()  # ATen ops computed here, in program order
    persistent: bool = True  # a reduction's whole row fits one block (the renderer's limit)

    @property
    def is_reduction(self) -> bool:
        return bool(self.rranges)

    @property
    def xnumel(self) -> int:
        return numel(self.ranges)

    @property
    def rnumel(self) -> int:
        return numel(self.rranges)

    def live_stores(self) -> list[Store]:
        return [s for s in self.stores if s.buffer in self.kept]

    @property
    def size_args(self) -> tuple[str, ...]:
        """The size symbols this kernel reads (``compiler.sizes``): its trailing int64 arguments; ()
        for a kernel over static sizes. A kernel with some is size-generic."""
        leaves = [e.arg for s in self.live_stores() for x in (s.index, s.value) for e in x.walk() if e.op is Op.SIZE]
        return sizes.ordered(sizes.symbols(self.ranges, self.rranges, leaves))

    def param(self, buffer: str) -> Param:
        for p in self.params:
            if p.buffer == buffer:
                return p
        raise KeyError(f"{buffer} is not a parameter of {self.name}")

    def __str__(self) -> str:
        head = f"kernel {self.name} ranges={list(self.ranges)} rranges={list(self.rranges)}"
        # subexpressions shared within or across stores are listed once, before the stores
        definitions, texts = ir.expr_listing([e for s in self.stores for e in (s.index, s.value)])
        lines = [head, *(f"  {d}" for d in definitions)]
        for i, s in enumerate(self.stores):
            mark = "store" if s.buffer in self.kept else "local"
            lines.append(f"  {mark} {s.buffer}[{texts[2 * i]}] ({s.level.value}) = {texts[2 * i + 1]}")
        return "\n".join(lines)


def make_kernel(name: str, ranges: tuple[int, ...], stores: Sequence[Store], kept: Iterable[str],
                rranges: tuple[int, ...] = (), node_names: Sequence[str] = (), origins: Sequence[str] = (),
                buffers: Mapping[str, Buffer] | None = None,
                max_persistent_rnumel: int = MAX_PERSISTENT_RNUMEL, symbolic_persistent: bool = False) -> Kernel:
    """A frozen kernel with its parameter list derived from its stores. Without ``buffers`` (hand-built
    IR in tests) a parameter's dtype is the one it is loaded or stored as and its span is unknown (0)."""
    kept = frozenset(kept)
    found: dict[str, dict] = {}

    def touch(buffer: str, dtype: torch.dtype, write: bool) -> None:
        entry = found.setdefault(buffer, {"dtype": dtype, "read": False, "written": False})
        entry["written" if write else "read"] = True

    for s in stores:
        if s.buffer not in kept:
            continue
        for e in ir.loads(s.value):
            touch(e.arg, e.dtype, write=False)
        touch(s.buffer, s.value.dtype, write=True)
    params = []
    for buffer, entry in found.items():
        buf = buffers.get(buffer) if buffers is not None else None
        params.append(Param(buffer, buf.dtype if buf is not None else entry["dtype"],
                            buf.storage_size if buf is not None else 0, entry["read"], entry["written"]))
    return Kernel(name, tuple(ranges), tuple(rranges), tuple(stores), kept, tuple(params), tuple(node_names),
                  tuple(origins), persistent(numel(tuple(rranges)), max_persistent_rnumel, symbolic_persistent))


Step = Kernel | ExternNode
Refusal = tuple[FusionReason, str]


@dataclass
class Schedule:
    """Everything the wrapper needs (kernels and extern calls in order, the graph's interface)."""

    steps: list[Step]
    refusals: list[FusionRefusal]
    buffers: dict[str, Buffer] = field(default_factory=dict)  # every buffer of the graph, by name
    inputs: list[Buffer | None] = field(default_factory=list)  # one per placeholder; None: not a tensor
    outputs: list[Any] = field(default_factory=list)  # View | python value, per graph output
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    constants: dict[str, torch.Tensor] = field(default_factory=dict)  # tensors the graph module holds
    single_output: bool = False  # the FX graph returns one value, not a tuple
    moved_inputs: list[str] = field(default_factory=list)  # inputs on another device, copied first
    size_inputs: dict[int, str] = field(default_factory=dict)  # placeholder position -> size symbol

    @property
    def kernels(self) -> list[Kernel]:
        return [s for s in self.steps if isinstance(s, Kernel)]

    @property
    def externs(self) -> list[ExternNode]:
        return [s for s in self.steps if isinstance(s, ExternNode)]


@dataclass
class _KernelBuilder:
    """A kernel while the scheduler fills it; frozen into a ``Kernel`` once scheduling is done."""

    name: str
    ranges: tuple[int, ...]
    rranges: tuple[int, ...] = ()
    stores: list[Store] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    # produced buffer -> (store index, value, level), for register reuse inside the kernel
    produced: dict[str, tuple[Expr, Expr, Level]] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)
    buffers: set[str] = field(default_factory=set)  # read or written (parameters, at most)
    written_inputs: set[str] = field(default_factory=set)  # graph inputs a store writes back into
    max_persistent_rnumel: int = MAX_PERSISTENT_RNUMEL
    symbolic_persistent: bool = False  # ``Capabilities.symbolic_persistent``

    is_reduction = Kernel.is_reduction
    rnumel = Kernel.rnumel

    @property
    def persistent(self) -> bool:
        return persistent(self.rnumel, self.max_persistent_rnumel, self.symbolic_persistent)

    def freeze(self, buffers: Mapping[str, Buffer]) -> Kernel:
        return make_kernel(self.name, self.ranges, self.stores, self.kept, self.rranges, self.node_names,
                           self.origins, buffers, self.max_persistent_rnumel, self.symbolic_persistent)


def _canonical(node: ComputedNode) -> tuple[tuple[int, ...], tuple[int, ...], dict[Expr, Expr], dict[Expr, Expr]]:
    """Non-unit outer dims, non-unit reduced dims, and the var renumbering into them."""
    outer, xmap = [], {}
    for d, n in enumerate(node.ranges):
        xmap[ir.xvar(d)] = len(outer) if n != 1 else None
        if n != 1:
            outer.append(n)
    red, rmap = [], {}
    for j, n in enumerate(node.rranges):
        rmap[ir.rvar(j)] = len(red) if n != 1 else None
        if n != 1:
            red.append(n)
    return tuple(outer), tuple(red), xmap, rmap


def _var(make, i: int | None) -> Expr:
    return ir.const(0, ir.INDEX_DTYPE) if i is None else make(i)


class Scheduler:
    """Greedy fusion. A node may join any kernel placed after the last producer of
    its inputs (not only the newest), so work that an extern call separates in
    program order, like a saved activation recomputed after a matmul, still fuses."""

    def __init__(self, graph: LoweredGraph, capabilities: Capabilities = ANY_RENDERER) -> None:
        self.graph = graph
        self.max_persistent_rnumel = capabilities.max_persistent_rnumel
        self.capabilities = capabilities
        self.steps: list[_KernelBuilder | ExternNode] = []
        self.refusals: list[FusionRefusal] = []
        self.producer: dict[str, int] = {}  # buffer -> index of the step that makes it

    def run(self) -> Schedule:
        self.last_read, self.made = self.graph.last_readers(), self.graph.made_buffers()
        for node in self.graph.nodes:
            if isinstance(node, ExternNode):
                self.steps.append(node)
                for b in node.outputs:
                    if b is not None:
                        self.producer[b.name] = len(self.steps) - 1
            elif numel(node.ranges) == 0:
                continue  # nothing to compute; the wrapper allocates the empty buffer
            else:
                self.add(node)
        self.decide_stores()
        buffers = self.graph.buffers()
        steps: list[Step] = []
        for step in self.steps:
            if isinstance(step, ExternNode):
                steps.append(step)
            elif step.kept:  # a kernel whose values nobody reads (dead code the graph kept) is dropped
                steps.append(self.finish(step, buffers))
        g = self.graph
        return Schedule(steps, self.refusals, buffers, list(g.inputs), list(g.outputs), g.device,
                        dict(g.constants), g.single_output, list(g.moved_inputs), dict(g.size_inputs))

    def finish(self, step: _KernelBuilder, buffers: Mapping[str, Buffer]) -> Kernel:
        """The frozen kernel (template kernels override: their loops are the template's)."""
        merge_loops(step)
        return step.freeze(buffers)

    def new_kernel(self, ranges: tuple[int, ...], rranges: tuple[int, ...]) -> _KernelBuilder:
        index = sum(1 for s in self.steps if isinstance(s, _KernelBuilder))
        return _KernelBuilder(f"kernel{index}", ranges, rranges, max_persistent_rnumel=self.max_persistent_rnumel,
                              symbolic_persistent=self.capabilities.symbolic_persistent)

    def add(self, node: ComputedNode) -> None:
        outer, red, xmap, rmap = _canonical(node)
        deps = {e.arg for e in ir.loads(node.body)}
        earliest = max((self.producer.get(d, -1) for d in deps), default=-1)
        if node.buffer.kind == "input":  # a write back into an input: after every step that reads it
            earliest = max(earliest, self.last_reader(node.name))
        # the earliest kernel it can join after its inputs are made: joining a later one would keep
        # those inputs alive until then (a forward's saved values, realized where the graph returns
        # them, all joined its last kernel and held every buffer they read to the end of the call)
        last_refusal = None
        for pos in range(max(earliest, 0), len(self.steps)):
            k = self.steps[pos]
            if not isinstance(k, _KernelBuilder):
                continue
            why = self.try_fuse(k, node, outer, red, xmap, rmap)
            if why is None:
                self.producer[node.name] = pos
                return
            last_refusal = FusionRefusal(k.node_names[-1], node.name, *why)
        if last_refusal is not None:  # the refusal of the kernel open last, the one reports name
            self.refusals.append(last_refusal)
        k = self.new_kernel(outer, red)
        why = self.try_fuse(k, node, outer, red, xmap, rmap)
        assert why is None, why
        self.steps.insert(pos := self.placement(node, deps, earliest), k)
        if pos < len(self.steps) - 1:  # placed before other steps: theirs move on by one
            self.producer = {name: p + (p >= pos) for name, p in self.producer.items()}
        self.producer[node.name] = pos

    def placement(self, node: ComputedNode, deps: set[str], earliest: int) -> int:
        """A node no kernel takes starts one last, or as early as its inputs allow when its last reads free what it makes
        (no point between holds more): a saved residual the graph returns late held them to the end (swin_tiny: 128.6 MB)."""
        end, size = len(self.steps), node.buffer.nbytes
        last = [d for d in deps if d in self.made and self.last_read.get(d) is node]  # not a template's acc
        freed = [self.made[d].nbytes for d in last]
        if node.buffer.kind == "input" or size is None or None in freed or sum(freed) < max(size, EARLY_MIN_BYTES):
            return end
        return min(end, max([earliest, *map(self.last_reader, last)]) + 1)  # after every step reading them

    def last_reader(self, name: str) -> int:
        """The position of the last step that reads buffer ``name`` (-1: none)."""
        for pos in range(len(self.steps) - 1, -1, -1):
            if name in self.reads_of(self.steps[pos]):
                return pos
        return -1

    def reads_of(self, step: _KernelBuilder | ExternNode) -> set[str]:
        return step.buffers if isinstance(step, _KernelBuilder) else view_buffers((step.args, step.kwargs))

    def try_fuse(self, k: _KernelBuilder, node: ComputedNode, outer: tuple[int, ...], red: tuple[int, ...],
                 xmap: dict[Expr, Expr], rmap: dict[Expr, Expr]) -> Refusal | None:
        """Add ``node`` to kernel ``k`` and return None, or return why it cannot join."""
        touched = k.buffers | {e.arg for e in ir.loads(node.body)} | {node.name}
        if len(touched) > MAX_KERNEL_BUFFERS:
            return FusionReason.TOO_MANY_BUFFERS, f"{len(touched)} buffers, past {MAX_KERNEL_BUFFERS}"
        upgrade = False
        if red:  # a reduction
            if k.is_reduction:
                if (outer, red) != (k.ranges, k.rranges):
                    return (FusionReason.REDUCTION_MISMATCH,
                            f"reduction space {outer}|{red} differs from kernel {k.ranges}|{k.rranges}")
            elif k.stores and k.ranges not in (outer, outer + red):
                return self.try_fuse_reshaped_kernel(k, node, outer, red, xmap, rmap, (
                    FusionReason.PROLOGUE_SHAPE,
                    f"reduction {outer}|{red} cannot absorb a pointwise kernel over {k.ranges}"))
            elif k.stores and k.ranges == outer + red and not self.capabilities.persistent(numel(red)):
                return (FusionReason.ROW_TOO_LARGE, f"rows of {numel(red)} elements (persistent up to "
                        f"{self.max_persistent_rnumel}) do not fit one block; producers are not fused")
            upgrade = not k.is_reduction
            level = Level.X
            mapping = {v: _var(ir.xvar, i) for v, i in xmap.items()} | {v: _var(ir.rvar, i) for v, i in rmap.items()}
        elif not k.stores or outer == k.ranges:
            level = Level.X
            mapping = {v: _var(ir.xvar, i) for v, i in xmap.items()}
        elif k.is_reduction and outer == k.ranges + k.rranges:
            if not k.persistent:
                return (FusionReason.NEEDS_PERSISTENT,
                        f"consumer over {outer} needs the reduction's rows of {k.rnumel} elements in one "
                        f"block (persistent up to {self.max_persistent_rnumel})")
            level = Level.XR
            nx = len(k.ranges)
            mapping = {v: (_var(ir.xvar, i) if i is None or i < nx else ir.rvar(i - nx)) for v, i in xmap.items()}
        elif (matched := reshapes.node_mapping(k.ranges, k.rranges, outer, xmap)
              or self.viewed_node(k, node)) is not None:
            xr, mapping = matched  # a reshape of the kernel's space, or a permuted view of its values
            level = Level.XR if xr else Level.X
            if xr and not k.persistent:
                return FusionReason.NEEDS_PERSISTENT, f"consumer over {outer} needs whole rows in one block"
        else:
            return (FusionReason.ITERATION_SPACE,
                    f"iteration space {outer} does not match kernel {k.ranges}|{k.rranges}")
        if red and k.is_reduction and not k.persistent and self.reads_local(k, node):
            return (FusionReason.LOOPED_REDUCTION_CHAIN,
                    "a looped reduction cannot consume another reduction of the same kernel")
        value = ir.substitute(node.body, mapping)
        index = ir.substitute(node.store_index(), mapping)
        if any(e.op is Op.FLOORDIV for e in mapping.values()):  # a reshaped node (split dims)
            index, value = reshapes.fold_divmod(index), reshapes.fold_load_indices(value)
        value, why = self.forward_locals(k, value)
        if why:
            return why
        index = ir.affine_normal(index)
        if why := input_write_race([s.value for s in k.stores], k.written_inputs, node, index, value):
            return why
        if upgrade and k.stores:
            self.upgrade(k, outer, red)
        if red:
            k.ranges, k.rranges = outer, red
        elif not k.stores:
            k.ranges = outer
        k.stores.append(Store(node.name, index, value, level))
        k.buffers = touched
        if node.buffer.kind == "input":
            k.written_inputs.add(node.name)
        k.produced[node.name] = (index, value, level)
        k.node_names.append(node.name)
        k.origins.extend(o for o in node.origins if o)
        return None

    @staticmethod
    def viewed_node(k: _KernelBuilder, node: ComputedNode) -> tuple[bool, dict[Expr, Expr]] | None:
        """(at the xr level, var mapping) for a pointwise node whose first read of a value produced
        in ``k`` is a permuted view of it (``compiler.reshapes.view_mapping``), else None."""
        for e in ir.loads(node.body):
            hit = k.produced.get(e.arg)
            if hit is None:
                continue
            index, _, level = hit
            sizes = dict(zip(map(ir.xvar, range(len(k.ranges))), k.ranges))
            if level is Level.XR:
                sizes |= dict(zip(map(ir.rvar, range(len(k.rranges))), k.rranges))
            node_sizes = {ir.xvar(d): n for d, n in enumerate(node.ranges)}
            mapping = reshapes.view_mapping(e.src[0], index, node_sizes, sizes)
            if mapping is None or any(n > 1 and v not in mapping for v, n in node_sizes.items()):
                return None
            return level is Level.XR, {v: mapping.get(v, ir.const(0, ir.INDEX_DTYPE)) for v in node_sizes}
        return None

    def try_fuse_reshaped_kernel(self, k: _KernelBuilder, node: ComputedNode, outer: tuple[int, ...],
                                 red: tuple[int, ...], xmap: dict[Expr, Expr], rmap: dict[Expr, Expr],
                                 refused: Refusal) -> Refusal | None:
        """A reduction over a reshape of pointwise kernel ``k``'s space (swin's layer norm over
        (3136,)|(96,) after a residual add over (56, 56, 96)): ``k`` re-expressed over the reduction's
        outer and reduced dims takes the reduction as usual. ``k`` is left as it was unless the
        reduction joins it (None); ``refused`` where the spaces are not reshapes of each other."""
        exprs = reshapes.reshape_vars(k.ranges, outer + red, [ir.xvar(i) for i in range(len(outer + red))])
        if exprs is None:
            return refused
        mapping = {ir.xvar(i): e for i, e in enumerate(exprs)}
        trial = dataclasses.replace(k, ranges=outer + red, stores=[
            Store(s.buffer, *reshapes.remap(s.index, s.value, mapping), s.level) for s in k.stores])
        self.upgrade(trial, outer, red)  # before the reduction's reads of k's values are matched
        why = self.try_fuse(trial, node, outer, red, xmap, rmap)
        if why is None:
            k.__dict__.update(trial.__dict__)
        return why

    @staticmethod
    def upgrade(k: _KernelBuilder, outer: tuple[int, ...], red: tuple[int, ...]) -> None:
        """Turn a pointwise kernel into a reduction kernel's x or xr level."""
        if k.ranges == outer:
            level, mapping = Level.X, {}
        else:
            nx = len(outer)
            level = Level.XR
            mapping = {ir.xvar(i): ir.rvar(i - nx) for i in range(nx, nx + len(red))}

        def move(e: Expr) -> Expr:
            return _resite(e, mapping) if mapping else e

        k.stores = [Store(s.buffer, move(s.index), ir.substitute(s.value, mapping), level) for s in k.stores]
        k.produced = {s.buffer: (s.index, s.value, level) for s in k.stores}

    def reads_local(self, k: _KernelBuilder, node: ComputedNode) -> bool:
        return any(e.arg in k.produced for e in ir.loads(node.body))

    def forward_locals(self, k: _KernelBuilder, value: Expr) -> tuple[Expr, Refusal | None]:
        """Replace loads of kernel-local buffers with the producer's value."""
        mapping: dict[Expr, Expr] = {}
        for e in ir.loads(value):
            hit = k.produced.get(e.arg)
            if hit is None:
                continue
            index, produced_value, _level = hit
            if e.src[0] != index:
                return value, (FusionReason.CROSS_PROGRAM_READ, f"reads kernel-local {e.arg} at "
                               f"{ir.render_expr(e.src[0])}, produced at {ir.render_expr(index)}")
            mapping[e] = ir.cast(produced_value, e.dtype)
        if not mapping:
            return value, None
        fused = ir.substitute(value, mapping)
        if fused.depth > MAX_FUSED_DEPTH:
            return value, (FusionReason.TOO_DEEP,
                           f"fused expression would be {fused.depth} deep (limit {MAX_FUSED_DEPTH})")
        return fused, None

    def decide_stores(self) -> None:
        needed: set[str] = set()
        owner: dict[str, _KernelBuilder] = {}
        for step in self.steps:
            if isinstance(step, _KernelBuilder):
                for s in step.stores:
                    owner[s.buffer] = step
        for step in self.steps:
            if isinstance(step, _KernelBuilder):
                for s in step.stores:
                    for e in ir.loads(s.value):
                        if owner.get(e.arg) is not step:
                            needed.add(e.arg)
            else:
                needed.update(view_buffers((step.args, step.kwargs)))
        needed.update(view_buffers(self.graph.outputs))
        needed.update(b.name for b in self.graph.inputs if b is not None)  # written back into an input
        for step in self.steps:
            if isinstance(step, _KernelBuilder):
                step.kept = {s.buffer for s in step.stores if s.buffer in needed}


def schedule(graph: LoweredGraph, capabilities: Capabilities = ANY_RENDERER) -> Schedule:
    """Kernels for ``graph`` under the chosen renderer's limits."""
    return Scheduler(graph, capabilities).run()
