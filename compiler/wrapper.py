"""The generated Python wrapper: allocate buffers, launch kernels, call externs.

The wrapper is Python source (readable, dumpable, runnable as a repro) whose
globals hold the kernel launchers, the extern ops and the non-tensor constants.
Buffers that die are handed to later allocations of the same dtype and size.
"""

from __future__ import annotations

import hashlib
import linecache
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from compiler import fused_attention, host_memory, sizes
from compiler.codegen.base import RenderedKernel
from compiler.graph import Buffer, ExternNode, View, same_layout, view_buffers
from compiler.interpreter import allocation_hook
from compiler.lowerings.symbolic import DynamicUnsupported
from compiler.layout import is_channels_last
from compiler.scheduler import Kernel, Schedule


@dataclass
class Wrapper:
    source: str
    call: Callable[[list], Any]
    launchers: dict[str, Any] = field(default_factory=dict)  # kernel name -> what the source launches
    consts: list[Any] = field(default_factory=list)  # what ``consts[i]`` in the source is: extern ops, values


def source_name(source: str) -> str:
    """The file name a wrapper's code runs under, its source registered with ``linecache`` under it:
    tracebacks, profilers and CUDA memory snapshots through a compiled graph show the wrapper's
    line (which buffer, which kernel or extern call) rather than a nameless ``<crucible-wrapper>``.
    Named by the source's digest, so equal wrappers share one entry."""
    name = f"<crucible-wrapper {hashlib.sha1(source.encode()).hexdigest()[:12]}>"
    if name not in linecache.cache:
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    return name


_REUSED = "# (a pooled buffer taken by a later allocation)"  # placeholder line, dropped


class _WrapperWriter:
    def __init__(self, schedule: Schedule, rendered: dict[str, RenderedKernel],
                 launchers: dict[str, Any], fast_externs: bool = True, poison: bool = False,
                 huge_pages: bool = True) -> None:
        self.fast_externs = fast_externs
        # large CPU buffers advised to use huge pages before their first write (compiler.host_memory;
        # whether this machine can is asked at run time, so the source is the same on every machine)
        self.huge_pages = huge_pages and schedule.device.type == "cpu"
        self.schedule = schedule
        self.rendered = rendered
        self.buffers = schedule.buffers
        self.globals: dict[str, Any] = {"torch": torch, "launchers": launchers, "device": schedule.device,
                                        "with_strides": with_strides, "empty_strided": allocator(schedule.device),
                                        "reinterpret": reinterpret, **schedule.constants}
        # checked interpreter runs: a fresh or reused buffer's bytes count as unwritten (compiler.kernel_checks)
        self.fresh = checked_allocation(schedule.device, self.globals, poison)
        self.lines: list[str] = []
        self.consts: list[Any] = []
        self.globals["consts"] = self.consts
        self.free: dict[tuple, list[str]] = {}
        self.pooled: dict[str, int] = {}  # a pooled buffer's name -> the line that frees it if never reused
        self.no_reuse: set[str] = set()

    def const(self, value: Any) -> str:
        self.consts.append(value)
        return f"consts[{len(self.consts) - 1}]"

    def view_code(self, v: View) -> str:
        buf = self.buffers[v.buffer]
        if (v.shape, v.stride, v.offset) == (buf.shape, buf.stride, 0):
            return v.buffer
        # offsets are relative to the buffer's first element, which need not start its storage
        return f"reinterpret({v.buffer}, {sizes_code(v.shape)}, {sizes_code(v.stride)}, {sizes_code(v.offset)})"

    def arg_code(self, a: Any) -> str:
        if isinstance(a, View):
            return self.view_code(a)
        if isinstance(a, (list, tuple)) and any(isinstance(x, View) for x in a):
            inner = ", ".join(self.arg_code(x) for x in a)
            return f"[{inner}]"
        if isinstance(a, (list, tuple, sympy.Expr)) and sizes.symbols(a):
            return sizes_code(a)  # symbolic sizes (a view's shape): computed from this call's sizes
        return self.const(a)

    def allocate(self, buf: Buffer) -> None:
        key = (buf.dtype, buf.numel)
        pool = self.free.get(key) if buf.is_contiguous else None
        if pool:
            old = pool.pop()
            del self.pooled[old]
            self.lines.append(f"{buf.name} = {self.checked(f'{old}.view({sizes_code(buf.shape)})')}  # reuses {old}")
            self.lines.append(f"del {old}")
            return
        allocation = f"empty_strided({sizes_code(buf.shape)}, {sizes_code(buf.stride)}, {buf.dtype})"
        if self.huge_pages and self.may_be_huge(buf):
            self.globals["huge"] = host_memory.huge
            allocation = f"huge({allocation})"
        self.lines.append(f"{buf.name} = " + self.checked(allocation))

    @staticmethod
    def may_be_huge(buf: Buffer) -> bool:
        """Whether ``buf`` can reach ``host_memory.MIN_BYTES``: statically, or whatever its symbolic size."""
        if isinstance(buf.numel, sympy.Expr) and sizes.symbols(buf.numel):
            return True
        return int(buf.numel) * buf.dtype.itemsize >= host_memory.MIN_BYTES

    def release(self, name: str, outputs: set[str]) -> None:
        """``name`` is read for the last time: a contiguous computed buffer goes to the pool of its
        size (its line becomes ``del`` unless a later allocation takes it), anything else is freed
        now. Holding dead buffers to the end of the call had a training step's peak memory 28-72%
        above Inductor's (GPU, resnet50 and bert_base)."""
        buf = self.buffers.get(name)
        if buf is None or buf.kind == "constant" or name in outputs:  # constants: the module's globals
            return
        if buf.kind in ("computed", "extern") and name not in self.no_reuse and buf.is_contiguous:
            self.free.setdefault((buf.dtype, buf.numel), []).append(name)
            self.pooled[name] = len(self.lines)
            self.lines.append(_REUSED)
        else:
            self.lines.append(f"del {name}")

    def checked(self, allocation: str) -> str:
        return f"{self.fresh}({allocation})" if self.fresh else allocation

    def last_uses(self) -> dict[str, int]:
        last: dict[str, int] = {}
        for i, step in enumerate(self.schedule.steps):
            if isinstance(step, Kernel):
                for name in self.rendered[step.name].args:
                    last[name] = i
            else:
                for name in sorted(view_buffers((step.args, step.kwargs)), key=_natural):  # one order every run
                    last[name] = i
                    if _may_alias(step.op):
                        self.no_reuse.add(name)  # its result may be a view of this buffer
                if _may_alias(step.op):
                    self.no_reuse.update(b.name for b in step.outputs if b is not None)
        return last

    def write(self) -> Wrapper:
        inputs = [b.name if b is not None else f"_unused{i}" for i, b in enumerate(self.schedule.inputs)]
        outputs = view_buffers(self.schedule.outputs)
        last = self.last_uses()
        self.lines.append(f"{', '.join(inputs)}{',' if len(inputs) == 1 else ''} = args" if inputs else "pass")
        # the boxed convention: the caller's list is ours to empty, so each input (a training backward's
        # saved activations) is freed at its last use below, not when the call returns
        self.lines.append("args.clear()")
        for buf in self.schedule.inputs:
            if buf is not None and buf.shape == ():
                # a Python float the graph takes as a 0-d tensor: traced as float32, Dynamo passes the
                # value as float64 (kernels would read 4 of its 8 bytes)
                self.lines.append(f"{buf.name} = {buf.name} if {buf.name}.dtype == {buf.dtype} "
                                  f"else {buf.name}.to({buf.dtype})")
        self.lines += size_bindings(self.schedule, inputs)
        unused = [name for name in inputs if name.startswith("_unused")]
        if unused:  # read for their sizes at most
            self.lines.append(f"del {', '.join(unused)}")
        for name in self.schedule.moved_inputs:
            self.lines.append(f"{name} = torch.empty_strided({name}.size(), {name}.stride(), dtype={name}.dtype, "
                              f"device=device).copy_({name})")
        # buffers no kernel ever computes (0-element values, unused results) still need storage when
        # an output, an extern call or a kernel refers to them (a GEMM over an empty K takes its
        # 0-element operands as arguments)
        stored = {s.buffer for st in self.schedule.steps if isinstance(st, Kernel) for s in st.live_stores()}
        referenced = outputs.union(*[set(self.rendered[st.name].args) if isinstance(st, Kernel)
                                     else view_buffers((st.args, st.kwargs)) for st in self.schedule.steps])
        for name in sorted(referenced - stored, key=_natural):
            buf = self.buffers.get(name)
            if buf is not None and buf.kind == "computed":
                self.allocate(buf)
        read = set(last) | outputs
        # the buffers each step reads last, in the order of ``last`` (freed into the pools in that
        # order): scanning every buffer after every step was quadratic (0.47 s of a 4,000-node graph)
        dying: dict[int, list[str]] = {}
        for name, at in last.items():
            dying.setdefault(at, []).append(name)
        for i, step in enumerate(self.schedule.steps):
            if isinstance(step, Kernel):
                for s in step.live_stores():
                    if self.buffers[s.buffer].kind != "input":  # a write back into the caller's tensor
                        self.allocate(self.buffers[s.buffer])
                r = self.rendered[step.name]
                self.lines.append(f"launchers[{step.name!r}]({', '.join(r.args + r.sizes)})")
            else:
                self.extern(step, read)
            for name in dying.get(i, ()):
                self.release(name, outputs)
        for name, at in self.pooled.items():  # never reused: freed where it died
            self.lines[at] = f"del {name}"
        self.lines = _merged_dels([line for line in self.lines if line is not _REUSED])
        outs = ", ".join(self.output_code(o) for o in self.schedule.outputs)
        if self.schedule.single_output:
            self.lines.append(f"return {outs}")
        else:
            self.lines.append(f"return ({outs}{',' if len(self.schedule.outputs) == 1 else ''})")
        body = "\n".join("    " + line for line in self.lines)
        source = f"def call(args):\n{body}\n"
        namespace = dict(self.globals)
        exec(compile(source, source_name(source), "exec"), namespace)  # noqa: S102  (our own generated code)
        return Wrapper(source, namespace["call"], self.globals["launchers"], self.consts)

    def output_code(self, o: Any) -> str:
        if isinstance(o, View):
            return self.view_code(o)
        if isinstance(o, sympy.Expr):  # a size the graph returns
            return sizes_code(o)
        if isinstance(o, (list, tuple)):
            return "(" + "".join(self.output_code(x) + ", " for x in o) + ")"
        return self.const(o)

    def extern(self, node: ExternNode, read: set[str]) -> None:
        """The call, and each result something reads in the layout it was compiled for. Results
        nothing reads are left alone: the library may not return them at all (flash attention's
        debug mask is None at run time where its fake tensor says an empty tensor)."""
        op = (FAST_EXTERNS.get(node.op) if self.fast_externs else None) or self.const(node.op)
        args = ", ".join(self.arg_code(a) for a in node.args)
        kwargs = ", ".join(f"**{{{k!r}: {self.arg_code(v)}}}" for k, v in node.kwargs.items())
        call = f"{op}({args}{', ' if args and kwargs else ''}{kwargs})"
        self.lines.append(f"{node.name} = {call}  # {node.reason.value}")
        for i, buf in enumerate(node.outputs):
            if buf is None or buf.name not in read:
                continue
            src = f"{node.name}[{i}]" if node.result_is_sequence else node.name
            if node.op not in FAST_EXTERNS:
                # an ATen kernel may return another dtype than its fake tensor traced: the CPU batch
                # norm of bfloat16 input with float32 weights saves float32 statistics where the trace
                # says bfloat16; kernels reading them as traced read garbage (-3e31 gradients)
                src = f"{src}.to({buf.dtype})"
            if buf.is_contiguous:
                self.lines.append(f"{buf.name} = {src}.contiguous()")
            elif is_channels_last(buf.shape, buf.stride):
                # a channels-last graph's convolutions: a C check, no Python stride comparison per call
                self.lines.append(f"{buf.name} = {src}.contiguous(memory_format=torch.channels_last)")
            else:
                self.lines.append(f"{buf.name} = with_strides({src}, {sizes_code(buf.stride)})")
        if all(buf is None or buf.name != node.name for buf in node.outputs):
            # the library's result (a tuple, or the tensor before a layout copy) holds results nothing
            # reads, such as a convolution backward's unused gradients
            self.lines.append(f"del {node.name}")


def _merged_dels(lines: list[str]) -> list[str]:
    """Consecutive ``del`` lines as one."""
    out: list[str] = []
    for line in lines:
        if line.startswith("del ") and out and out[-1].startswith("del "):
            out[-1] += ", " + line[4:]
        else:
            out.append(line)
    return out


# Extern ops called through torch's Python bindings instead of their OpOverload: the same ATen op
# (same schema, positional arguments as the graph gives them), without the OpOverload's boxed call
# (a 1x1 convolution: 11 us through the overload, 5 us through torch.convolution, on a 2-core CPU).
FAST_EXTERNS = {torch.ops.aten.convolution.default: "torch.convolution", torch.ops.aten.mm.default: "torch.mm",
                torch.ops.aten.addmm.default: "torch.addmm", torch.ops.aten.bmm.default: "torch.bmm",
                torch.ops.aten.baddbmm.default: "torch.baddbmm",
                fused_attention.OP: "torch.nn.functional.scaled_dot_product_attention"}


def allocator(device: torch.device) -> Callable[[tuple, tuple, torch.dtype], torch.Tensor]:
    """``empty_strided(size, stride, dtype)`` on ``device``: the C++ fast path Inductor's wrappers use
    (1.4 us against 3.0 us for ``torch.empty_strided(..., device=)`` on a 2-core CPU) where torch has
    it and the device is the current one (it allocates on the current device); else the plain call."""
    guards = getattr(torch._C, "_dynamo", None) and getattr(torch._C._dynamo, "guards", None)
    fast = getattr(guards, f"_empty_strided_{device.type}", None) if guards is not None else None
    current = device.type != "cuda" or device.index in (None, torch.cuda.current_device())
    if fast is not None and device.type in ("cpu", "cuda") and current:
        return fast

    def empty_strided(size: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(size, stride, dtype=dtype, device=device)

    return empty_strided


def reinterpret(base: torch.Tensor, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """``base`` viewed with ``size``/``stride`` at ``offset`` elements past its own first element."""
    return torch.as_strided(base, size, stride, base.storage_offset() + offset)


_fast_reinterpret = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None), "_reinterpret_tensor", None)
if _fast_reinterpret is not None:  # the same in C++ (1.8 us against 2.8 us for as_strided, 2-core CPU)
    reinterpret = _fast_reinterpret  # noqa: F811


def checked_allocation(device: Any, globals_: dict[str, Any], poison: bool = False) -> str:
    """The wrapper's name for the call around each allocation: "" normally; under kernel checks (CPU,
    ``compiler.kernel_checks``), the checker's allocation hook (the simulator's marks the buffer's bytes
    unwritten, so kernels reading them before any write are reported); else with the ``poison`` option,
    ``poisoned``."""
    hook = allocation_hook(device) or (poisoned if poison else None)
    if hook is None:
        return ""
    globals_["uninitialized"] = hook
    return "uninitialized"


def poisoned(t: torch.Tensor) -> torch.Tensor:
    """``t`` filled with what no correct kernel leaves behind: NaN (floating and complex), the largest
    value (integers), True (bool). The ``poison`` option (the harness's Crucible targets) calls it on
    each buffer the wrapper allocates or reuses, so a kernel that leaves part of its output unwritten
    gives the same wrong values on every run, not whatever the allocator's memory held (which can be
    the right values: an earlier call's result of the same size)."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.fill_(math.nan)
    return t.fill_(True if t.dtype == torch.bool else torch.iinfo(t.dtype).max)


def with_strides(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``t`` when it has ``stride`` (dims of size 1 aside), else a copy laid out so: an extern call's
    result in the layout the kernels reading it were compiled for."""
    if same_layout(t.shape, t.stride(), stride):
        return t
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def sizes_code(value: Any) -> str:
    """Python code of a size, or a tuple or list of sizes: ``repr`` when static (the source of a static
    graph's wrapper is unchanged), else with each symbolic size spelled by ``compiler.sizes.code``."""
    if isinstance(value, (list, tuple)):
        if not sizes.symbols(value):
            return repr(tuple(value)) if isinstance(value, tuple) else repr(value)
        inner = ", ".join(sizes_code(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner}{',' if len(value) == 1 else ''})"
    return sizes.code(value, "python") if isinstance(value, sympy.Expr) else repr(value)


def size_bindings(schedule: Schedule, inputs: list[str]) -> list[str]:
    """Lines binding each size symbol the wrapper or a kernel reads to its value in this call: the
    size argument Dynamo passes (``Schedule.size_inputs``), else a tensor input's size or stride that
    is the bare symbol. Empty for a static graph."""
    wanted = sizes.symbols(*[(b.shape, b.stride) for b in schedule.buffers.values()])
    wanted |= {name for k in schedule.kernels for name in k.size_args}
    # a graph may return a size (``x.size(0) * x.size(1)``) and pass one to an extern call
    wanted |= _symbols_in([schedule.outputs, *[(e.args, e.kwargs) for e in schedule.externs]])
    if not wanted:
        return []
    lines, bound = [], set()
    for position, name in schedule.size_inputs.items():
        if name in wanted and name not in bound:
            lines.append(f"{name} = {inputs[position]}")
            bound.add(name)
    for buf in schedule.inputs:
        for method, values in (("size", buf.shape), ("stride", buf.stride)) if buf is not None else ():
            for d, v in enumerate(values):
                if isinstance(v, sympy.Symbol) and v.name in wanted and v.name not in bound:
                    lines.append(f"{v.name} = {buf.name}.{method}({d})")
                    bound.add(v.name)
    missing = wanted - bound
    if missing:
        raise DynamicUnsupported("unbound_symbol", f"size symbols {sorted(missing)} are neither a size input "
                                 "nor a tensor input's size or stride")
    return lines


def _symbols_in(value: Any) -> set[str]:
    """The size symbols of graph outputs or extern arguments: views, nested lists, tuples and dict values."""
    if isinstance(value, View):
        return sizes.symbols(value.shape, value.stride, value.offset)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return set().union(*map(_symbols_in, value))
    return sizes.symbols(value)


def _may_alias(op: Any) -> bool:
    """Whether an extern op's result may share storage with an argument (schema alias info)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return True
    return any(r.alias_info is not None for r in schema.returns)


def _natural(name: str) -> tuple:
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits or 0))


def generate_wrapper(schedule: Schedule, rendered: dict[str, RenderedKernel], launchers: dict[str, Any],
                     fast_externs: bool = True, poison: bool = False, huge_pages: bool = True) -> Wrapper:
    """The wrapper of a scheduled graph: it reads the schedule, the rendered kernels' argument lists
    and the loaded launchers, never the lowered graph. ``fast_externs=False`` calls every extern op
    through ``consts`` (its OpOverload), where per-kernel timing can reach it. ``poison``: every buffer
    allocated or reused is filled first (``poisoned``). ``huge_pages``: large CPU buffers are advised to
    use huge pages (``compiler.host_memory``)."""
    return _WrapperWriter(schedule, rendered, launchers, fast_externs, poison, huge_pages).write()
