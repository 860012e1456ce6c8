"""Scheduling with templates: a ``TemplateNode`` starts a template kernel, and pointwise consumers
of its output join its epilogue (bias, activation, residual add, scaling, casts).

A consumer joins when it is pointwise over the template's output space, read the template's values
at the element the template stores (so the value is in the program's registers), and every other
buffer it reads exists before the template runs (the scheduler's usual placement rule). Its
iteration space may be the output's shape, the same shape with size-1 dims, or another shape of the
same row-major elements (a ``(B*S, N)`` matmul output viewed as ``(B, S, N)``); its index variables
are rewritten into the template's. Otherwise it is refused with a ``FusionReason``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy
import torch

from compiler import ir
from compiler.capabilities import ANY_RENDERER, Capabilities
from compiler.graph import Buffer, ComputedNode, ExternNode, LoweredGraph, contiguous_strides, numel
from compiler.ir import Expr
from compiler.report import FusionReason
from compiler.scheduler import (
    MAX_FUSED_DEPTH,
    Kernel,
    Level,
    Param,
    Refusal,
    Schedule,
    Scheduler,
    Store,
    _KernelBuilder,
)
from compiler.templates.spec import AttentionTemplate, Template, TemplateKernel, TemplateNode


@dataclass
class _TemplateBuilder(_KernelBuilder):
    template: Template | None = None


def _normal(index: Expr) -> Expr:
    aff = ir.to_affine(index)
    return ir.from_affine(aff) if aff is not None else index


def _row_major(shape: tuple[int, ...]) -> Expr:
    return ir.linear_index([ir.xvar(d) for d in range(len(shape))], contiguous_strides(shape))


def _same_size(a: object, b: object) -> bool:
    """Whether two sizes are equal: ints by value, symbolic ones (``compiler.sizes``) up to expansion,
    since sympy distributes a number over a sum (``16 * (f + 1)`` becomes ``16*f + 16``) in one product
    and not in another (a convolution's ``N*OH*OW*C`` built in two orders)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a == b or sympy.expand(a - b) == 0


def _var_map(consumer: tuple[int, ...], template: tuple[int, ...]) -> tuple[dict[Expr, Expr], bool] | None:
    """Consumer XVARs as expressions of the template's, and whether the map goes through the flat
    row-major position (a reshape) rather than dim by dim; None when the spaces differ."""
    if not _same_size(numel(consumer), numel(template)):
        return None
    zero = ir.const(0, ir.INDEX_DTYPE)
    if [n for n in consumer if n != 1] == [n for n in template if n != 1]:
        outer = [d for d, n in enumerate(template) if n != 1]
        it = iter(outer)
        return {ir.xvar(d): (zero if n == 1 else ir.xvar(next(it))) for d, n in enumerate(consumer)}, False
    flat = _row_major(template)
    strides = contiguous_strides(consumer)
    mapping = {}
    for d, (n, st) in enumerate(zip(consumer, strides)):
        if n == 1:
            mapping[ir.xvar(d)] = zero
            continue
        q = flat if st == 1 else ir.binary(ir.Op.DIV, flat, ir.size(st))
        mapping[ir.xvar(d)] = q if d == 0 else ir.binary(ir.Op.MOD, q, ir.size(n))
    return mapping, True


def _gather_map(consumer: tuple[int, ...], load: Expr, k: _KernelBuilder) -> dict[Expr, Expr] | None:
    """Consumer XVARs as expressions of the template's when the consumer reads a template-local buffer
    through a permutation of its dense layout (a convolution's (N*OH*OW, C) result read as (N, C, OH,
    OW)): the element stored at flat position ``p`` is the one whose consumer index has ``x_d = (p //
    coef_d) % size_d``. None unless the read's coefficients are a mixed radix covering the buffer."""
    aff = ir.to_affine(load.src[0])
    stored, _, _ = k.produced[load.arg]
    if aff is None or aff.get(None, 0) != 0:
        return None
    left = {d: (aff.get(ir.xvar(d), 0), n) for d, n in enumerate(consumer) if n != 1}
    if any(v is not None and v.op is not ir.Op.XVAR for v in aff) or len(aff) - (None in aff) != len(left):
        return None
    # the mixed radix from the fastest dim up: each coefficient the span of the faster dims, equal by
    # structure (symbolic sizes cannot be sorted; ``compiler.sizes``)
    dims, span = [], 1
    while left:
        d = next((d for d, (coef, _) in left.items() if _same_size(coef, span)), None)
        if d is None:
            return None
        coef, n = left.pop(d)
        dims.append((coef, n, d))
        span = span * n
    if not _same_size(span, numel(k.ranges)):
        return None
    zero = ir.const(0, ir.INDEX_DTYPE)
    mapping = {ir.xvar(d): zero for d, n in enumerate(consumer) if n == 1}
    for coef, n, d in sorted(dims, key=lambda t: t[2]):
        q = stored if coef == 1 else ir.binary(ir.Op.DIV, stored, ir.size(coef))
        mapping[ir.xvar(d)] = q if _same_size(coef * n, span) else ir.binary(ir.Op.MOD, q, ir.size(n))
    return mapping


class TemplateScheduler(Scheduler):
    """The scheduler, plus template kernels and their epilogues."""

    def add(self, node: ComputedNode) -> None:
        if not isinstance(node, TemplateNode):
            super().add(node)
            return
        index = sum(1 for s in self.steps if isinstance(s, _KernelBuilder))
        k = _TemplateBuilder(f"kernel{index}", node.ranges, template=node.template)
        store = node.store_index()
        k.stores.append(Store(node.name, store, node.body, Level.X))
        k.produced[node.name] = (_normal(store), node.body, Level.X)
        k.node_names.append(node.name)
        k.origins.extend(o for o in node.origins if o)
        self.steps.append(k)
        self.producer[node.name] = len(self.steps) - 1

    def try_fuse(self, k: _KernelBuilder, node: ComputedNode, outer: tuple[int, ...], red: tuple[int, ...],
                 xmap: dict[Expr, Expr], rmap: dict[Expr, Expr]) -> Refusal | None:
        if not isinstance(k, _TemplateBuilder):
            return super().try_fuse(k, node, outer, red, xmap, rmap)
        if node.buffer.kind == "input":  # the template may read the input anywhere (an operand)
            return FusionReason.INPUT_WRITE_RACE, f"{node.name} is written back into a graph input"
        return self.fuse_epilogue(k, node)

    def reads_of(self, step: _KernelBuilder | ExternNode) -> set[str]:
        reads = super().reads_of(step)
        return reads | set(operand_buffers(step.template)) if isinstance(step, _TemplateBuilder) else reads

    def fuse_epilogue(self, k: _TemplateBuilder, node: ComputedNode) -> Refusal | None:
        if node.is_reduction or isinstance(node, TemplateNode):
            return FusionReason.TEMPLATE_EPILOGUE, f"{node.name} is not pointwise; only pointwise epilogues fuse"
        local = [e for e in ir.loads(node.body) if e.arg in k.produced]
        if not local:
            return FusionReason.TEMPLATE_EPILOGUE, f"{node.name} reads no value of template {k.name}"
        found = _var_map(node.ranges, k.ranges)
        if found is None:
            return (FusionReason.ITERATION_SPACE,
                    f"iteration space {node.ranges} is not the template's output {k.ranges}")
        mapping, flat = found
        own_flat = _normal(_row_major(node.ranges))
        template_flat = _normal(_row_major(k.ranges))
        values: dict[Expr, Expr] = {}
        for e in local:
            index, value, _ = k.produced[e.arg]
            same = (_normal(e.src[0]) == own_flat and index == template_flat) if flat else \
                _normal(ir.substitute(e.src[0], mapping)) == index
            if not same:
                break
            values[e] = ir.cast(value, e.dtype)
        else:
            local = []
        if local:  # not read element for element: maybe a permutation of the stored layout
            gathered = _gather_map(node.ranges, local[0], k)
            if gathered is None or any((e.src[0], k.produced[e.arg][0]) != (local[0].src[0], k.produced[local[0].arg][0])
                                       for e in local):
                e = local[0]
                return (FusionReason.CROSS_PROGRAM_READ, f"reads {e.arg} at {ir.render_expr(e.src[0])}, "
                        f"which template {k.name} produces at {ir.render_expr(k.produced[e.arg][0])}")
            mapping, flat = gathered, False
            values = {e: ir.cast(k.produced[e.arg][1], e.dtype) for e in local}
        value = ir.substitute(node.body, {**values, **mapping})
        if value.depth > MAX_FUSED_DEPTH:
            return FusionReason.TOO_DEEP, f"fused epilogue would be {value.depth} deep (limit {MAX_FUSED_DEPTH})"
        if flat and node.buffer.is_contiguous:
            store = template_flat
        else:
            store = _normal(ir.substitute(node.store_index(), mapping))
        k.stores.append(Store(node.name, store, value, Level.X))
        k.produced[node.name] = (store, value, Level.X)
        k.node_names.append(node.name)
        k.origins.extend(o for o in node.origins if o)
        return None

    def decide_stores(self) -> None:
        """As the scheduler decides, plus: a template's operands are read from memory."""
        super().decide_stores()
        operands = {b for s in self.steps if isinstance(s, _TemplateBuilder) for b in operand_buffers(s.template)}
        for step in self.steps:
            if isinstance(step, _KernelBuilder):
                step.kept |= {s.buffer for s in step.stores if s.buffer in operands}

    def finish(self, step: _KernelBuilder, buffers: Mapping[str, Buffer]) -> Kernel:
        if isinstance(step, _TemplateBuilder):
            return freeze_template(step, buffers)
        return super().finish(step, buffers)


def freeze_template(k: _TemplateBuilder, buffers: Mapping[str, Buffer]) -> TemplateKernel:
    """The frozen template kernel; its parameters: the operands, then what the epilogue reads and
    writes (the accumulator lives in registers and is no parameter)."""
    assert k.template is not None
    found: dict[str, dict] = {}

    def touch(buffer: str, dtype: torch.dtype, write: bool) -> None:
        entry = found.setdefault(buffer, {"dtype": dtype, "read": False, "written": False})
        entry["written" if write else "read"] = True

    for name in operand_buffers(k.template):
        touch(name, buffers[name].dtype, write=False)
    for s in k.stores:
        if s.buffer not in k.kept:
            continue
        for e in ir.loads(s.value):
            if e.arg != k.template.acc:
                touch(e.arg, e.dtype, write=False)
        touch(s.buffer, s.value.dtype, write=True)
    params = tuple(Param(b, buffers[b].dtype if b in buffers else f["dtype"],
                         buffers[b].storage_size if b in buffers else 0, f["read"], f["written"])
                   for b, f in found.items())
    return TemplateKernel(k.name, tuple(k.ranges), (), tuple(k.stores), frozenset(k.kept), params,
                          tuple(k.node_names), tuple(k.origins), True, template=k.template)


def operand_buffers(template: Template) -> list[str]:
    """Buffers the template's main loop reads, in parameter order."""
    names = [e.arg for e in template.operand_loads()]
    if isinstance(template, AttentionTemplate):
        names += [v.buffer for v in (template.q, template.k, template.v, template.mask) if v is not None]
    return list(dict.fromkeys(names))


def template_kind(step: Kernel) -> str | None:
    """"template:<family>" for a template kernel (the report's kernel kind), else None."""
    return f"template:{step.family}" if isinstance(step, TemplateKernel) else None


def schedule(graph: LoweredGraph, capabilities: Capabilities = ANY_RENDERER) -> Schedule:
    """Kernels for ``graph`` under the chosen renderer's limits, template kernels included."""
    return TemplateScheduler(graph, capabilities).run()
