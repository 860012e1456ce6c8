"""Lowering: an ATen FX graph -> a LoweredGraph of loop nodes and extern calls.

``GraphLowering`` walks the graph once. Every FX value is a ``TensorValue`` (``Lazy``: an
unrealized pointwise expression consumers inline; ``Strided``: a window onto a buffer), see
``compiler.lowerings.rules``; the rules themselves live in ``compiler.lowerings``. A rule
raises ``Unsupported`` to have the op run as an extern call instead. Lowering emits only the
IR ops the chosen renderer can emit (its ``Capabilities``).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from compiler import ir
from compiler.capabilities import ANY_RENDERER, Capabilities
from compiler.graph import Buffer, ComputedNode, ExternNode, LoweredGraph, View, contiguous_strides, same_layout
from compiler.ir import Expr, Op
from compiler.layout import channels_last_strides, is_channels_last, nhwc_arguments, strides_like_reads
from compiler.lowerings.rules import (LOWERINGS, Lazy, Strided, TensorValue, Unsupported, as_expr, broadcast_read, whole_reads,
                                      costly_broadcast, count_ops, find_rule, identity_index, library_reads, read, register)
from compiler.lowerings.library import bias_apart, extern_without_bias
from compiler.lowerings.mutation import InputMutation, write_back
from compiler.lowerings.symbolic import DynamicUnsupported, dense_order, has_symbolic_sizes, plain_strides
from compiler.report import ExternReason
from compiler.split_reductions import split_reduction
from compiler.sizes import all_static, at_least, shape_of, size_of

aten = torch.ops.aten

# A realized expression with more operations than this is not inlined twice.
MAX_INLINE_OPS = 64
# ... nor one reading more whole buffers (not broadcast ones like per-channel parameters) than
# this: a transformer's residual stream (x + attn, then + mlp, ...) was otherwise re-summed from
# every earlier branch output by each later layer (deit_small's last layer norm read 25 buffers in
# each of its three passes).
MAX_INLINE_READS = 4
# Lazy values deeper than this are realized: the IR's passes recurse over expressions, and a
# long op chain (a loop unrolled by Dynamo) must not reach Python's recursion limit.
MAX_LAZY_DEPTH = 64


class GraphLowering:
    """Walks an ATen FX graph once, building a LoweredGraph."""

    def __init__(self, gm: torch.fx.GraphModule, device: torch.device,
                 capabilities: Capabilities = ANY_RENDERER, extern_mode: str = "default",
                 layout: str = "contiguous", saved_from: int | None = None) -> None:
        self.gm = gm
        # a training forward's first output saved for the backward: from there on a channels-last
        # graph returns its own layout, which the backend reports to AOTAutograd (backend.py)
        self.saved_from = saved_from
        self.capabilities = capabilities  # the chosen renderer's: its op table and limits
        self.extern_mode = extern_mode  # the ``extern`` option: which matmuls/attentions are templates
        # the graph's layout decision (``compiler.layout``); in a channels-last graph, the buffers
        # laid out NHWC, whose 4-d consumers are realized NHWC too
        self.channels_last = layout == "channels_last"
        self.nhwc_buffers: set[str] = set()
        # the storage offsets of inputs and constants that have one: a Strided offset counts from a
        # buffer's first element (what its pointer is), as_strided's from its storage's
        self.storage_offsets: dict[str, Any] = {}
        self.graph = LoweredGraph(inputs=[], device=device)
        # writes into graph inputs, emitted after the outputs (``compiler.lowerings.mutation``)
        self.mutations: list[InputMutation] = []
        self._counter = 0
        # each lazy value's buffer per layout: a value an extern call reads and the graph also returns
        # (a training forward's saved activation) was computed twice, in two kernels
        self._realized: dict[tuple, Strided] = {}
        self._first_buffer: dict[tuple, Strided] = {}  # the same, in the first layout realized
        self.origin: str = ""
        # ATen ops whose computation is inlined in the node being lowered (its own op and the
        # lazy inputs' ops), and the same for the top expression of each lazy result
        self.pending: tuple[str, ...] = ()
        self.node_origins: dict[torch.fx.Node, tuple[str, ...]] = {}
        self.expr_origins: dict[Expr, tuple[str, ...]] = {}

    # --- naming and realization --------------------------------------------
    def new_name(self, prefix: str = "buf") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def realize(self, value: TensorValue, stride: tuple[int, ...] | None = None) -> Strided:
        """``value`` in a buffer (a Strided value stays as it is); new buffers are contiguous
        unless ``stride`` is given, or NHWC when they read an NHWC buffer (``natural_strides``)."""
        if isinstance(value, Strided):
            return value
        shape = value.shape
        stride = stride or self.natural_strides(shape, value.expr)
        key = (value.expr, shape, value.dtype, stride)
        if key in self._realized:
            return self._realized[key]
        buf = Buffer(self.new_name(), value.dtype, shape, stride, "computed")
        self.compute_into(buf, value.expr)
        self.note_layout(buf)
        self._realized[key] = Strided(buf.name, shape, buf.stride, 0, value.dtype)
        self._first_buffer.setdefault(key[:3], self._realized[key])
        return self._realized[key]

    def settled(self, value: Any, node: torch.fx.Node) -> Any:
        """A node's value as ``node`` reads it: a lazy value realized already (for a library
        call, as a residual block's sum is for the next convolution) is read from its buffer where
        recomputing it would read two whole buffers or more (resnet50's last residual sum of a stage
        re-added every earlier block's branch: four reads where two do); a small costly one that it
        reads broadcast is realized first (``rules.costly_broadcast``)."""
        if costly_broadcast(value, node.meta.get("val")):
            return self.realize(value)
        hit = self._first_buffer.get((value.expr, value.shape, value.dtype)) if isinstance(value, Lazy) else None
        return hit if hit is not None and whole_reads(value) > 1 else value

    def compute_into(self, buf: Buffer, body: Expr, origin: str = "") -> None:
        """A pointwise node storing ``body`` (over ``buf``'s dims) into ``buf``, walked along memory;
        ``origin``: the ATen op storing it, when not the op that computed ``body``."""
        order = self.loop_order(buf)
        origins = self.origins_of(body)
        if origin and origin not in origins:
            origins = (*origins, origin)
        self.graph.nodes.append(ComputedNode(buf, (), ir.permute_xvars(body, order), origins, order))

    def natural_strides(self, shape: tuple[int, ...], body: Expr) -> tuple[int, ...]:
        """Row-major, except for a 4-d value read from an NHWC buffer, as eager's TensorIterator lays a result
        out like its inputs: a channels-last graph's buffers, and a contiguous graph's NHWC inputs (a max
        pool over one walked (N, C, H, W), loads and stores 16 channels apart: 10x slower, 2 threads)."""
        reads = [e.src[0] for e in ir.loads(body) if e.arg in self.nhwc_buffers] if len(shape) == 4 else []
        return strides_like_reads(shape, reads) if reads else contiguous_strides(shape)

    def loop_order(self, buf: Buffer) -> tuple[int, ...]:
        """The dims of a new buffer from the largest stride to the smallest, so a kernel stores along
        memory (and a node written through a permute matches the loops of the nodes it fuses with, as
        a layer norm's affine output over a permuted input does its reduction's); () for in order."""
        if buf.stride == contiguous_strides(buf.shape):  # what the sort below gives (and symbolic-safe)
            return ()
        if all_static(buf.stride):
            order = tuple(sorted(range(len(buf.shape)), key=lambda d: -buf.stride[d]))
        else:  # symbolic strides cannot be sorted: a dense layout's order by structure, else as laid out
            order = dense_order(buf.shape, buf.stride) or ()
        return () if order == tuple(range(len(order))) else order

    def note_layout(self, buf: Buffer) -> None:
        if is_channels_last(buf.shape, buf.stride):
            self.nhwc_buffers.add(buf.name)

    def origins_of(self, body: Expr) -> tuple[str, ...]:
        """ATen ops computed by a node holding ``body``, in program order: those of a lazy result
        realized as is, else those inlined into the node being lowered."""
        if body in self.expr_origins:
            return self.expr_origins[body]
        found = [o for e in body.walk() if e in self.expr_origins for o in self.expr_origins[e]]
        return tuple(dict.fromkeys([*found, *self.pending]))

    def realize_contiguous(self, value: TensorValue) -> Strided:
        """A dense row-major buffer holding ``value`` (copies non-contiguous views)."""
        if isinstance(value, Strided) and value.stride == contiguous_strides(value.shape):
            return value
        if isinstance(value, Strided):
            value = Lazy(value.shape, value.dtype, as_expr(value))
        return self.realize(value, contiguous_strides(value.shape))

    def reduction(self, value: TensorValue, dims: list[int], keepdim: bool, op: ir.ReduceOp,
                  acc_dtype: torch.dtype, out_dtype: torch.dtype) -> Strided:
        """Reduce ``value`` over ``dims``: one realized reduction node."""
        shape = value.shape
        dims = sorted({d % len(shape) for d in dims}) if shape else []
        out_shape: list[int] = []
        index: list[Expr] = []
        rranges: list[int] = []
        for d, n in enumerate(shape):
            if d in dims:
                index.append(ir.rvar(len(rranges)) if n != 1 else ir.const(0, ir.INDEX_DTYPE))
                rranges.append(n)
                if keepdim:
                    out_shape.append(1)
            else:
                index.append(ir.xvar(len(out_shape)) if n != 1 else ir.const(0, ir.INDEX_DTYPE))
                out_shape.append(n)
        split = split_reduction(self, value, index, tuple(out_shape), tuple(rranges), op, acc_dtype, out_dtype)
        return split or self.reduce_body(tuple(out_shape), tuple(rranges), read(value, index), op, acc_dtype,
                                         out_dtype)

    def reduce_body(self, out_shape: tuple[int, ...], rranges: tuple[int, ...], body: Expr, op: ir.ReduceOp,
                    acc_dtype: torch.dtype, out_dtype: torch.dtype) -> Strided:
        """A reduction node: ``body`` over XVAR(out dims) and RVAR(reduced dims), reduced over the RVARs
        (windowed reductions such as pooling build their own body)."""
        buf = Buffer(self.new_name(), out_dtype, out_shape, self.natural_strides(out_shape, body), "computed")
        self.note_layout(buf)
        order = self.loop_order(buf)
        origins = self.origins_of(body)
        body = ir.permute_xvars(body, order)
        is_arg = op in (ir.ReduceOp.ARGMAX, ir.ReduceOp.ARGMIN)
        if math.prod(rranges) == 1:
            # a window of one element (pooling with kernel 1): the element itself, a pointwise node
            # (the scheduler drops size-1 dims, which left a REDUCE in a kernel without reduced dims)
            one = ir.substitute(body, {ir.rvar(j): ir.const(0, ir.INDEX_DTYPE) for j in range(len(rranges))})
            value = ir.const(0, out_dtype) if is_arg else ir.cast(ir.cast(one, acc_dtype), out_dtype)
            self.graph.nodes.append(ComputedNode(buf, (), value, origins, order))
            return Strided(buf.name, out_shape, buf.stride, 0, out_dtype)
        reduced = ir.reduce(op, body if is_arg else ir.cast(body, acc_dtype), acc_dtype)
        self.graph.nodes.append(ComputedNode(buf, rranges, ir.cast(reduced, out_dtype), origins, order))
        return Strided(buf.name, out_shape, buf.stride, 0, out_dtype)

    # --- the walk ------------------------------------------------------------
    def run(self) -> LoweredGraph:
        env: dict[torch.fx.Node, Any] = {}
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = self.lower_placeholder(node)
            elif node.op == "call_function":
                self.origin = str(getattr(node.target, "__name__", node.target))
                inlined = [o for a in node.all_input_nodes for o in self.node_origins.get(a, ())]
                self.pending = tuple(dict.fromkeys([*inlined, self.origin]))
                args = torch.fx.node.map_arg(node.args, lambda n, at=node: self.settled(env[n], at))
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n, at=node: self.settled(env[n], at))
                value = self.maybe_realize(node, self.lower_call(node, args, kwargs))
                lazy = [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, Lazy)]
                for v in lazy:
                    self.expr_origins.setdefault(v.expr, self.pending)
                if lazy:
                    self.node_origins[node] = self.pending
                env[node] = value
            elif node.op == "get_attr":
                env[node] = self.lower_constant(node)
            elif node.op == "output":
                outs = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
                vals = torch.fx.node.map_arg(node.args[0], lambda n: n.meta.get("val"))
                self.graph.single_output = not isinstance(outs, (list, tuple))
                if self.graph.single_output:
                    outs, vals = [outs], [vals]
                saved = len(outs) if self.saved_from is None else self.saved_from
                self.graph.outputs = []
                for i, (v, val) in enumerate(zip(outs, vals)):
                    out = self.saved_value(v) if i >= saved and self.channels_last else self.output_value(v, val)
                    if isinstance(out, Strided) and isinstance(v, Lazy) and any(
                            isinstance(o, Strided) and o.buffer == out.buffer for o in self.graph.outputs):
                        self._realized.clear()  # two outputs never share a buffer eager does not share
                        out = self.output_value(v, val)
                    self.graph.outputs.append(out)
                write_back(self)
            else:
                raise NotImplementedError(f"FX node kind {node.op!r} ({node.name}) is not supported")
        return self.graph

    def lower_placeholder(self, node: torch.fx.Node) -> Any:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            self.graph.inputs.append(None)
            if isinstance(val, torch.SymInt):  # a size Dynamo passes (its value names a symbol)
                size = size_of(val)
                if getattr(size, "is_Symbol", False):
                    self.graph.size_inputs[len(self.graph.inputs) - 1] = size.name
                return size
            if val is None or isinstance(val, (torch.SymFloat, torch.SymBool)):
                raise DynamicUnsupported("symbolic_scalar", f"input {node.name} is a symbolic scalar ({val!r})")
            return val
        name = f"arg{len(self.graph.inputs)}"
        if val.storage_offset() != 0:  # a slice (a decode loop's last token): kernels get its pointer
            self.storage_offsets[name] = size_of(val.storage_offset())
        buf = Buffer(name, val.dtype, shape_of(val.shape), shape_of(val.stride()), "input")
        self.graph.inputs.append(buf)
        self.note_layout(buf)
        if val.device != self.graph.device:
            # e.g. a CPU scalar tensor in a CUDA graph: kernels need it on the graph's device
            self.graph.moved_inputs.append(name)
        # offsets are relative to the tensor's first element (what data_ptr points at)
        return Strided(name, buf.shape, buf.stride, 0, val.dtype)

    def lower_constant(self, node: torch.fx.Node) -> Any:
        """A tensor attribute of the graph module (e.g. a lifted ``torch.tensor([...])``)."""
        value = self.gm
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            return value  # a library's opaque tensor (a packed oneDNN weight): passed to its call as it is
        name = f"const{len(self.graph.constants)}"
        if value.device != self.graph.device:  # a real copy (at offset 0), whatever fake mode the caller runs under
            with unset_fake_temporarily():
                value = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                            device=self.graph.device).copy_(value)
        if value.storage_offset() != 0:
            self.storage_offsets[name] = value.storage_offset()
        self.graph.constants[name] = value
        if is_channels_last(value.shape, value.stride()):
            self.nhwc_buffers.add(name)
        return Strided(name, tuple(value.shape), tuple(value.stride()), 0, value.dtype)

    def lower_call(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):  # sym_size, size arithmetic: the size expression itself
            return size_of(val)
        if isinstance(val, torch.SymFloat):  # a number of sizes (1 / numel): its expression, or a constant
            return float(val.node.expr) if val.node.expr.is_number else val.node.expr
        if isinstance(val, torch.SymBool):
            raise DynamicUnsupported("symbolic_scalar", f"{node.name} computes a symbolic scalar ({val!r})")
        if node.target is operator.getitem:
            return args[0][args[1]]
        rule = find_rule(node.target)
        if any(t.dtype.is_complex for t in _tensors(val) + _tensors(list(args))):
            return self.extern(node, args, kwargs, ExternReason.UNSUPPORTED_DTYPE, "complex tensors")
        if rule is None:
            return self.extern(node, args, kwargs, ExternReason.NO_LOWERING, "no lowering rule")
        first_new = len(self.graph.nodes)
        try:
            value = rule(self, node, *args, **kwargs)
        except Unsupported as why:
            return self.extern(node, args, kwargs, why.reason, why.message)
        except (TypeError, ValueError) as why:  # a rule treating a symbolic size as a number
            if not (has_symbolic_sizes(val) or has_symbolic_sizes([a.meta.get("val") for a in node.all_input_nodes])):
                raise
            del self.graph.nodes[first_new:]
            return self.extern(node, args, kwargs, ExternReason.SYMBOLIC_SIZE,
                               f"the {getattr(rule, '__name__', rule)} rule needs static sizes: {why}")
        if self.capabilities.ops == ANY_RENDERER.ops:
            return value
        value, missing = self.fit_to_renderer(value, first_new)
        if missing:
            del self.graph.nodes[first_new:]  # only the discarded value refers to them
            names = ", ".join(sorted(op.value for op in missing))
            return self.extern(node, args, kwargs, ExternReason.RENDERER_OP,
                               f"the {self.capabilities.codegen} renderer cannot emit {names}")
        return value

    def fit_to_renderer(self, value: Any, first_new: int) -> tuple[Any, set[Op]]:
        """``value`` and the nodes this call added, rewritten into the renderer's op table
        (``compiler.ir_rewrites``); the ops no rule could replace."""
        from compiler.ir_rewrites import rewrite_for

        ops, missing = self.capabilities.ops, set()
        for node in self.graph.nodes[first_new:]:
            if isinstance(node, ComputedNode) and self.capabilities.missing(node.body):
                node.body = rewrite_for(node.body, ops)
                missing |= self.capabilities.missing(node.body)

        def fit(v: Any) -> Any:
            if isinstance(v, Lazy) and self.capabilities.missing(v.expr):
                v = Lazy(v.shape, v.dtype, rewrite_for(v.expr, ops))
                missing.update(self.capabilities.missing(v.expr))
            elif isinstance(v, (list, tuple)):
                return type(v)(fit(x) for x in v)
            return v

        return fit(value), missing

    def maybe_realize(self, node: torch.fx.Node, value: Any) -> Any:
        """Realize big lazy expressions that several users would otherwise recompute, and one that two
        GEMMs or convolutions read (each would copy it into a buffer of its own: the backward's ``g @ W``
        and ``g.T @ x``; GPT-2's padded logits gradient was computed twice, 785 MB each at 8 x 512)."""
        if isinstance(value, Lazy) and len(node.users) > 1 and (
                count_ops(value.expr) > MAX_INLINE_OPS
                or whole_reads(value) > MAX_INLINE_READS or library_reads(node) > 1):
            return self.realize(value)
        if isinstance(value, Lazy) and value.expr.depth > MAX_LAZY_DEPTH:
            return self.realize(value)
        return value

    def extern(self, node: torch.fx.Node, args: tuple, kwargs: dict, reason: ExternReason,
               message: str, target: Any = None, fx_args: tuple | None = None) -> Any:
        """A library call of ``node``'s op (or ``target``, over ``fx_args``: the FX arguments ``args``
        stand for, whose eager layouts the call gets)."""
        if target is None and bias_apart(node, args, self.graph.device):
            return extern_without_bias(self, node, args, kwargs, reason, message)
        def to_arg(v: Any, fx_arg: Any) -> Any:
            if isinstance(v, (Lazy, Strided)):
                val = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else None
                return self.realize_for_extern(v, val)
            if isinstance(v, (list, tuple)):
                fx_args = fx_arg if isinstance(fx_arg, (list, tuple)) and len(fx_arg) == len(v) else [None] * len(v)
                return type(v)(to_arg(x, a) for x, a in zip(v, fx_args))
            if isinstance(v, dict):
                fx_kw = fx_arg if isinstance(fx_arg, dict) else {}
                return {k: to_arg(x, fx_kw.get(k)) for k, x in v.items()}
            return v

        val = node.meta.get("val")
        target = node.target if target is None else target
        fx_args = tuple(node.args) if fx_args is None else fx_args
        nhwc = nhwc_arguments(node, target, val, args, self.channels_last, self.graph.device)
        if nhwc:  # realized here, so to_arg keeps them
            args = tuple(self.realize_strided(a, channels_last_strides(a.shape)) if i in nhwc else a
                         for i, a in enumerate(args))
            fx_args = tuple(None if i in nhwc else a for i, a in enumerate(fx_args))
        flat = list(val) if isinstance(val, (list, tuple)) else [val]
        outputs: list[Buffer | None] = []
        for t in flat:
            if isinstance(t, torch.Tensor):
                # the layout eager's op returns (attention outputs are transposed views): kept as is
                # instead of copied into a contiguous buffer
                shape = shape_of(t.shape)
                stride = channels_last_strides(shape) if nhwc and len(shape) == 4 else \
                    plain_strides(t, shape) or contiguous_strides(shape)
                outputs.append(Buffer(self.new_name(), t.dtype, shape, stride, "extern"))
                self.note_layout(outputs[-1])
            else:
                outputs.append(None)
        name = self.new_name("extern")
        self.graph.nodes.append(ExternNode(name, target, to_arg(tuple(args), fx_args),
                                           to_arg(kwargs, dict(node.kwargs)),
                                           outputs, isinstance(val, (list, tuple)), reason, message))
        values = [Strided(b.name, b.shape, b.stride, 0, b.dtype) if b is not None else None for b in outputs]
        return values if isinstance(val, (list, tuple)) else values[0]

    def realize_for_extern(self, value: TensorValue, val: Any) -> Strided:
        """An extern call's tensor argument laid out as eager laid it out (``val``, the FX
        argument's meta value) whenever that layout is a plain one: library kernels check
        layouts (efficient attention wants a contiguous last dim and aligned bias strides,
        which eager got from padding and slicing) and are tuned for what eager passes."""
        return self.realize_strided(value, plain_strides(val, value.shape))

    def realize_strided(self, value: TensorValue, want: tuple[int, ...] | None) -> Strided:
        """``value`` in a buffer laid out with strides ``want`` (0: a broadcast dim); None: any layout."""
        if want is None or value.dtype.is_complex:  # no kernels for complex values: keep the layout
            return self.realize_viewable(value)
        if isinstance(value, Strided) and same_layout(value.shape, value.stride, want):
            return value
        # broadcast dims (stride 0 in eager, like an attention bias expanded over the batch):
        # compute one slice and view it expanded, as eager does
        broadcast = {d for d, (n, st) in enumerate(zip(value.shape, want)) if at_least(n, 2) and st == 0}
        index = [ir.const(0, ir.INDEX_DTYPE) if n == 1 or d in broadcast else ir.xvar(d)
                 for d, n in enumerate(value.shape)]
        shape = tuple(1 if d in broadcast else n for d, n in enumerate(value.shape))
        slice_ = self.realize(Lazy(shape, value.dtype, read(value, index)),
                              tuple(st or 1 for st in want))
        return Strided(slice_.buffer, value.shape, want, slice_.offset, value.dtype)

    def realize_viewable(self, value: TensorValue) -> Strided:
        """A buffer view torch can express (as_strided takes no negative strides)."""
        out = self.realize(value)
        # (a symbolic stride is a product of sizes: never negative)
        return self.realize_contiguous(out) if any(isinstance(s, int) and s < 0 for s in out.stride) else out

    def output_value(self, value: Any, val: Any) -> Any:
        """A graph output, computed into the layout eager's graph returns (``val``, the FX meta value)
        where that is a plain dense one: AOTAutograd hands outputs saved for the backward to a backward
        graph compiled for exactly those strides (a transposed Cholesky factor came back row-major,
        and its gradient was computed from the transpose)."""
        if isinstance(value, Lazy) and not value.dtype.is_complex:
            want = plain_strides(val, value.shape)
            if want is not None and 0 not in want and want != contiguous_strides(value.shape):
                return self.realize(value, want)
        if isinstance(value, Strided) and not value.dtype.is_complex and not self.channels_last:
            # a buffer laid out for its consumer (a transposed operand realized row-major for an
            # extern bmm): saved for the backward as q @ k.T's k.T, it came back (144, 9, 1) where the
            # backward's kernels read (144, 1, 16), and q's gradient was computed from garbage
            want = plain_strides(val, value.shape)
            if want is not None and 0 not in want and not same_layout(value.shape, value.stride, want):
                return self.realize(Lazy(value.shape, value.dtype, as_expr(value)), want)
        if self.channels_last and isinstance(value, (Lazy, Strided)) and not value.dtype.is_complex:
            return self.eager_layout_output(value, val)
        if isinstance(value, (Lazy, Strided)):
            return self.realize_viewable(value)
        if isinstance(value, (list, tuple)):
            vals = val if isinstance(val, (list, tuple)) and len(val) == len(value) else [None] * len(value)
            return type(value)(self.output_value(v, m) for v, m in zip(value, vals))
        return value

    def saved_value(self, value: Any) -> Any:
        """A channels-last training forward's output saved for the backward, in the layout computed:
        the backward is compiled for the strides reported (an NHWC activation converted back to NCHW
        for it cost a copy in the forward and another in the backward)."""
        return self.realize_viewable(value) if isinstance(value, (Lazy, Strided)) else value

    def eager_layout_output(self, value: TensorValue, val: Any) -> Strided:
        """A channels-last graph's output in the strides eager gives it (Inductor's keep_output_stride):
        an NHWC buffer, or a view of one, is copied into eager's layout, and a lazy value is realized in it."""
        want = plain_strides(val, value.shape)
        if isinstance(value, Lazy):
            dense = want is not None and 0 not in want
            return self.realize_viewable(self.realize(value, want if dense else contiguous_strides(value.shape)))
        if value.buffer in self.nhwc_buffers and want is not None and 0 not in want \
                and not same_layout(value.shape, value.stride, want):
            return self.realize(Lazy(value.shape, value.dtype, as_expr(value)), want)
        return self.realize_viewable(value)


def _tensors(val: Any) -> list:
    """Tensors (or lowering values, which carry a dtype too) in a nested structure."""
    if isinstance(val, (torch.Tensor, Lazy, View)):
        return [val]
    if isinstance(val, (list, tuple)):
        return [t for v in val for t in _tensors(v)]
    return []


def lower(gm: torch.fx.GraphModule, device: torch.device, capabilities: Capabilities = ANY_RENDERER,
          extern_mode: str = "default", layout: str = "contiguous", saved_from: int | None = None) -> LoweredGraph:
    """The loop IR of ``gm``, in the ops the chosen renderer can emit; ``layout``: the graph's layout
    decision (``compiler.layout.choose_layout``); ``saved_from``: a training forward's first output
    saved for the backward."""
    import compiler.lowerings  # noqa: F401  (registers the rules)
    import compiler.templates.rules  # noqa: F401  (matmul/attention template rules, over the library ones)
    from compiler.replay.record import observe

    observe(gm)  # records the graph while ``python -m compiler.replay --capture`` runs the tests
    return GraphLowering(gm, device, capabilities, extern_mode, layout, saved_from).run()


__all__ = ["LOWERINGS", "GraphLowering", "Lazy", "Op", "Strided", "DynamicUnsupported", "TensorValue", "Unsupported",
           "as_expr", "broadcast_read", "identity_index", "lower", "read", "register"]
