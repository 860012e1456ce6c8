"""Triton renderer: a scheduled Kernel -> the source of one ``@triton.jit`` function.

The generated code is interpreter-safe on every path: it calls only Triton
builtins (``tl.load``, ``tl.where``, ``tl.exp``, ...) and ``tl.reduce`` with the
standard combine functions, never ``@triton.jit`` helpers such as ``tl.sum`` or
``tl.max`` (those fail when a kernel is interpreted in a process that imported
Triton in compiled mode). fp16/bf16 values are computed in fp32; NaN propagation
of max/min/argmax follows ATen explicitly because Triton's reductions ignore NaN.

Block shapes come from the kernel's sizes and the mode (``triton_tiles``). A size-generic kernel
(symbolic sizes, ``compiler.sizes``) takes its sizes as trailing arguments and its block sizes and
grid are chosen at each launch from the actual sizes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

import torch

from compiler.capabilities import MAX_PERSISTENT_RNUMEL, Capabilities
from compiler.codegen.base import RenderedKernel, Renderer
from compiler.codegen.load_guards import load_guards
from compiler.codegen.shared import (
    INT_ARITHMETIC,
    ExprLevels,
    int_bound,
    size_code,
    Parameters,
    affine_index_code,
    compute_dtype,
    leaf,
)
from compiler.codegen.shared import unravel as unravel_codes
from compiler.codegen.triton_bf16 import f32_rounded_to_bf16, interpreted_bf16_store, widened
from compiler.codegen.triton_tiles import SizeLaunch, tiles
from compiler.codegen.triton_literals import (TL_DTYPE, c_fmod, libdevice_operands, literal, literal_operands,
                                              typed_operands)
from compiler.codegen.triton_ops import (
    BINARY_INFIX,
    COMBINE,
    INTERPRETED_VIA_FP64,
    PRECISE_FP32,
    UNARY_CALL,
    interpreted_fma,
    reduce_identity,
)
from compiler.index_terms import nonnegative, positive_divisor
from compiler.ir import Expr, Op, ReduceOp
from compiler.kernel_names import kernel_symbol
from compiler.scheduler import Kernel
from compiler.sizes import is_static, size_of

INT32_LIMIT = 2**31 - 1


def past_int32(values: Iterable) -> bool:
    """Whether an index over these spans or element counts can pass int32: any above the limit, or
    any symbolic (a static kernel over a slice of an input of symbolic size: its span is not known)."""
    return any(not is_static(v) or v > INT32_LIMIT for v in map(size_of, values))  # sympy's numbers as ints


SYMBOL_PLACEHOLDER = "__crucible_kernel__"


class TritonRenderer(Renderer):
    codegen = "triton"
    OPS = frozenset(Op)

    def __init__(self, interpret: bool) -> None:
        self.interpret = interpret
        if interpret:  # the interpreter has no libdevice.pow or log10: lowering writes them as formulas
            self.OPS = frozenset(Op) - {Op.POW, Op.LOG10}

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(self.codegen, self.OPS, MAX_PERSISTENT_RNUMEL, interpreted=self.interpret,
                            symbolic_persistent=self.interpret, ordered_zeros=not self.interpret,
                            split_reductions=not self.interpret)

    def tiles(self, k: Kernel) -> list[tuple[int, int, int]]:
        """Candidate (XBLOCK, RBLOCK, num_warps), best guess first (``triton_tiles.tiles``)."""
        return tiles(k, self.interpret)

    def render(self, k: Kernel) -> RenderedKernel:
        self.check_ops(k)
        return _KernelWriter(self, k).write()


class _KernelWriter:
    def __init__(self, renderer: TritonRenderer, k: Kernel) -> None:
        self.r = renderer
        self.k = k
        self.generic = bool(k.size_args)  # symbolic sizes: arguments, launch config chosen per call
        self.configs = [] if self.generic else renderer.tiles(k)
        self.looped = k.is_reduction and not k.persistent
        self.pre: list[str] = []
        self.loop: list[str] = []
        self.post: list[str] = []
        self.names: dict[Expr, str] = {}
        # positional names: kernels that compute the same thing on other buffers (the layers of a
        # transformer) render to the same source, so Triton builds and tunes them once
        self.params = Parameters(k, lambda position, buffer: f"p{position}")
        self.levels = ExprLevels()
        self.counter = 0
        self.libdevice = False  # set when an expression calls triton.language.extra.libdevice
        self.in_index = False  # rendering an address (``index_code``): loop indices stay int32
        self.widen = False  # rendering the operands of int64 arithmetic that may pass int32 (``wide``)
        self.guards = load_guards([e for s in k.live_stores() for e in (s.value, s.index)])

    # --- helpers --------------------------------------------------------------------
    def is_xr(self, e: Expr) -> bool:
        return self.levels.is_xr(e)

    def after_reduce(self, e: Expr) -> bool:
        return self.levels.after_reduce(e)

    def section(self, e: Expr) -> list[str]:
        return (self.pre, self.loop, self.post)[self.rank(e)]

    def rank(self, e: Expr) -> int:
        """Where ``e`` is computed in the kernel: before (0), inside (1) or after (2) the reduction loop."""
        if not self.looped:
            return 0
        if self.is_xr(e):
            return 1
        return 2 if self.after_reduce(e) else 0

    def tmp(self, e: Expr, code: str, section: list[str] | None = None) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        (section if section is not None else self.section(e)).append(f"{name} = {code}")
        self.names[e] = name
        return name

    def uses(self, e: Expr) -> tuple[bool, bool]:
        ops = {s.op for s in e.walk()}
        return Op.XVAR in ops, Op.RVAR in ops

    def mask_for(self, e: Expr) -> str | None:
        ux, ur = self.uses(e)
        if self.k.is_reduction:
            masks = (["xmask"] if ux else []) + (["rmask"] if ur else [])
        else:
            masks = ["xmask"] if ux else []
        return " & ".join(masks) or None

    # --- expressions --------------------------------------------------------------
    def index_code(self, e: Expr) -> str:
        saved, self.in_index = self.in_index, True
        try:
            code = affine_index_code(e, self.expr, "triton")
            return code if code is not None else self.expr(e)
        finally:
            self.in_index = saved

    def expr(self, e: Expr) -> str:
        hit = self.names.get(e)
        if hit is not None:
            return hit
        code = leaf(e, literal, "triton")
        if code is not None:
            if e.op in (Op.XVAR, Op.RVAR) and self.widen and not self.in_index:
                return f"{code}.to(tl.int64)"
            return code
        op = e.op
        if op is Op.LOAD:
            return self.load(e)
        if op is Op.REDUCE:
            return self.reduce(e)
        if (not self.widen and not self.in_index and e.dtype == torch.int64 and e.op in INT_ARITHMETIC
                and int_bound(e, self.k) >= 1 << 31):
            # Triton's loop indices are int32: int64 arithmetic on them wrapped (arange(11) << 52 was 0)
            # or refused a constant past int32; widened where int32 might not hold it, addresses never
            self.widen = True
            try:
                return self.expr(e)
            finally:
                self.widen = False
        a = [self.expr(s) for s in e.src]
        cdt = compute_dtype(e.dtype)
        if op is Op.CAST:
            return self.tmp(e, self.cast(a[0], e.src[0].dtype, e.dtype))
        if cdt in (torch.int64, torch.float64) and not self.in_index:  # (an address's constants fit int32)
            a = literal_operands(e, a)
        if op is Op.BITCAST:  # at the operand's own width first (an int64 from an index may be int32)
            return self.tmp(e, f"({a[0]}).to({TL_DTYPE[e.src[0].dtype]}).to({TL_DTYPE[e.dtype]}, bitcast=True)")
        if op in (Op.AND, Op.OR):
            # Logical and/or as selects: Triton 3.8's interpreter gives a comparison of two 0-d
            # values (a 1-element input loads as a scalar) float32 data, which `block & c`
            # refuses (numpy bitwise_and TypeError); tl.where takes it, and compiles to and/or.
            picked = f"{a[1]}, False" if op is Op.AND else f"True, {a[1]}"
            return self.tmp(e, f"tl.where({a[0]}, {picked})")
        if op in BINARY_INFIX:
            # (two float64 literals, typed above: as Python floats Triton made an empty float64 mean's
            # 0.0 * nan float32, which then met a float64 operand in libdevice.fmod, which has no
            # mixed overload: KeyError; fuzzer, crucible-triton on the H200, seed 9)
            return self.tmp(e, f"{a[0]} {BINARY_INFIX[op]} {a[1]}")
        if op in PRECISE_FP32 and e.dtype == torch.float32 and not self.r.interpret:
            fn = PRECISE_FP32[op]
            self.libdevice |= fn.startswith("libdevice.")
            return self.tmp(e, f"{fn}({a[0]})")
        if op in PRECISE_FP32 and op is not Op.SQRT and e.dtype == torch.float64 and not self.r.interpret:
            # libdevice's float64 functions are CUDA's (exp, log, ...), the ones ATen's kernels call,
            # rather than whatever Triton lowers its own float64 math to (CUDA's float64 log2 is within
            # an ulp but not exact at powers of two: both renderings missed log2(2.0**k) == k on the H200)
            self.libdevice = True
            (x,) = typed_operands(e, a, torch.float64)
            return self.tmp(e, f"{PRECISE_FP32[op]}({x})")
        if op in INTERPRETED_VIA_FP64 and e.dtype == torch.float32 and self.r.interpret:
            # numpy's float32 exp, log, sin and cos are ~3 ulps off (exp's RMSE against float64 2x
            # ATen's); in float64 and rounded once they are within half an ulp
            x = f"tl.full([], {a[0]}, tl.float64)" if e.src[0].op is Op.CONST else f"({a[0]}).to(tl.float64)"
            return self.tmp(e, f"{UNARY_CALL[op]}({x}).to(tl.float32)")  # a literal has no .to
        if op in UNARY_CALL:
            return self.tmp(e, f"{UNARY_CALL[op]}({a[0]})")
        if op is Op.LOG10:  # Triton has no log10 of its own: CUDA's (16-bit results, computed in float32)
            self.libdevice = True
            return self.tmp(e, f"libdevice.log10({a[0]})")
        if op is Op.NEG:
            if cdt.is_floating_point:
                # Triton before 3.7 compiles unary minus to 0 - x: -(+0.0) came out +0.0 (atan2 of a
                # result that underflows kept the wrong sign on the GPU); a product by -1 is exact
                return self.tmp(e, f"{a[0]} * -1.0")
            return self.tmp(e, f"-{a[0]}")
        if op is Op.NOT:
            return self.tmp(e, f"{a[0]} == 0")
        if op is Op.BITNOT:
            return self.tmp(e, f"~{a[0]}")
        if op is Op.ISNAN:
            return self.tmp(e, f"{a[0]} != {a[0]}")
        if op is Op.DIV:
            divisor = e.src[1]
            if cdt.is_floating_point and divisor.op is Op.CONST and divisor.arg == 0:
                # x / +-0.0 is x * +-inf for every x (NaN, zeros and infinities included). A -0.0 literal
                # loses its sign in Triton (3.6 on the H200 and 3.8's interpreter: x / -0.0 gave +inf
                # for x > 0, harness/FINDINGS.md); an infinite one keeps it
                inf = math.copysign(math.inf, float(divisor.arg))
                return self.tmp(e, f"{a[0]} * {literal(inf, cdt)}")
            if cdt == torch.float32 and not self.r.interpret:
                # Triton's fp32 `/` is PTX div.full.f32: approximate (2 ulp) and flushing subnormals,
                # so 1e-3 / 1e-40 is inf where ATen's CUDA division (IEEE div.rn) gives 1e37
                return self.tmp(e, f"tl.math.div_rn({a[0]}, {a[1]})")
            return self.tmp(e, f"{a[0]} / {a[1]}" if cdt.is_floating_point else f"{a[0]} // {a[1]}")
        if op is Op.MOD:
            if cdt.is_floating_point and all(s.op is Op.CONST for s in e.src):  # two literals: its value
                return self.tmp(e, literal(c_fmod(float(e.src[0].arg), float(e.src[1].arg)), cdt))
            if cdt.is_floating_point and not self.r.interpret:
                # Triton's float `%` is LLVM's frem, which NVPTX expands to x - trunc(x / y) * y: off
                # by whole multiples of y once x / y is large (fmod(1e300, 3.0)); libdevice's is C's
                self.libdevice = True
                # libdevice picks its function by both operands' types: a literal is float32 to Triton
                # (fmod(float64, 2.0) raised KeyError (float64, float32) on the H200)
                x, y = libdevice_operands(e, a, cdt)
                return self.tmp(e, f"libdevice.fmod({x}, {y})")
            return self.tmp(e, f"{a[0]} % {a[1]}")
        if op is Op.POW:  # CUDA's pow, literals typed (see fmod)
            self.libdevice = True
            if cdt == torch.float32:
                # in float64, rounded once: CUDA's float32 powf as Triton links it was more than an ulp
                # off where ATen's was within one (H200, tests/compiler/test_fuzz_regressions.py)
                x, y = (f"({code}).to(tl.float64)" if operand.op is not Op.CONST else code
                        for operand, code in zip(e.src, typed_operands(e, a, torch.float64)))
                return self.tmp(e, f"libdevice.pow({x}, {y}).to(tl.float32)")
            x, y = libdevice_operands(e, a, cdt)
            return self.tmp(e, f"libdevice.pow({x}, {y})")
        if op is Op.FLOORDIV:
            if positive_divisor(e) and nonnegative(e.src[0]):  # truncation is the floor: no sign fix
                return self.tmp(e, f"{a[0]} // {a[1]}")
            q = self.tmp(e, f"{a[0]} // {a[1]}")
            fix = f"(({a[0]} % {a[1]}) != 0) & (({a[0]} < 0) != ({a[1]} < 0))"
            return self.tmp(e, f"tl.where({fix}, {q} - 1, {q})")
        if op in (Op.MAX, Op.MIN):
            cmp = ">" if op is Op.MAX else "<"
            if cdt.is_floating_point and not self.r.interpret:
                # NaN from either operand, -0.0 below +0.0: ATen's CUDA maximum, minimum and clamp
                # (the select form below gave clamp_max(+0.0, -0.0) = +0.0 where ATen gives -0.0)
                fn = "tl.maximum" if op is Op.MAX else "tl.minimum"
                return self.tmp(e, f"{fn}({a[0]}, {a[1]}, propagate_nan=tl.PropagateNan.ALL)")
            if cdt.is_floating_point:
                # NaN propagates; nested selects, not `(a > b) | (a != a)`: a 1-element input loads as a
                # scalar, and the interpreter's `block | (scalar != scalar)` raises (as for and/or above)
                return self.tmp(e, f"tl.where({a[0]} != {a[0]}, {a[0]}, tl.where({a[0]} {cmp} {a[1]}, {a[0]}, {a[1]}))")
            return self.tmp(e, f"tl.where({a[0]} {cmp} {a[1]}, {a[0]}, {a[1]})")
        if op is Op.WHERE:
            if cdt in (torch.int64, torch.float64) and all(s.op is Op.CONST for s in e.src[1:]):
                # Triton types Python ints as int32 and floats as float32: a select of two literals
                # (sign's where(x < 0, -1, 0)) computed in int32 what the graph computes in int64
                # (wrapped sums; an int64 identity out of range; fuzzer, crucible-interpret, seed 23),
                # and a float64 sign(x) was float32 (see ``libdevice_operands``)
                a = [a[0], *typed_operands(e, a, cdt)[1:]]
            return self.tmp(e, f"tl.where({a[0]}, {a[1]}, {a[2]})")
        if op is Op.FMA:
            x, y, z = typed_operands(e, a, cdt)
            if self.r.interpret and cdt in (torch.float32, torch.float64):
                return interpreted_fma(lambda code: self.tmp(e, code), x, y, z, cdt)
            return self.tmp(e, f"tl.fma({x}, {y}, {z})")
        raise ValueError(f"triton renderer: no code for {op}")

    def cast(self, code: str, src: torch.dtype, dst: torch.dtype) -> str:
        if dst == torch.bool:
            return f"{code} != 0"
        if dst == torch.bfloat16 and self.r.interpret:  # the interpreter's own conversion is wrong
            return f32_rounded_to_bf16(code)
        if dst in (torch.float16, torch.bfloat16):
            # round like a 16-bit tensor would; via fp32 (the interpreter's fp64->bf16 is wrong)
            via = ".to(tl.float32)" if src == torch.float64 else ""
            return f"({code}){via}.to({TL_DTYPE[dst]}).to(tl.float32)"
        return f"({code}).to({TL_DTYPE[dst]})"

    def load(self, e: Expr) -> str:
        buf = self.params.name(e.arg)
        index = self.index_code(e.src[0])
        mask = self.mask_for(e.src[0])
        masked = f", mask={' & '.join([mask, *self.guard_masks(e)])}, other=0" if mask else ""
        code = f"tl.load({buf} + ({index}){masked})"
        return self.tmp(e, widened(code, e.dtype, self.r.interpret))

    def guard_masks(self, e: Expr) -> list[str]:
        """The select conditions a load's value is used under (``load_guards``) that are computed
        already where the load is and vary no more than its address: the load skips memory there."""
        ux, ur = self.uses(e.src[0])
        masks = []
        for cond, value in self.guards.get(e, ()):
            name = self.names.get(cond)
            cx, cr = self.uses(cond)
            if name is not None and (cx or cr) and cx <= ux and cr <= ur and self.rank(cond) <= self.rank(e):
                masks.append((int(name[1:]), name if value else f"({name} == 0)"))
        return [code for _, code in sorted(masks)]

    def reduce(self, e: Expr) -> str:
        op: ReduceOp = e.arg
        value = e.src[0]
        v = self.expr(value)
        dtype = value.dtype
        ident = reduce_identity(op, compute_dtype(dtype))
        if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            return self.arg_reduce(e, v, dtype, op)
        masked = self.tmp(e, f"tl.where(rmask, {v}, {ident})", self.loop if self.looped else None)
        self.names.pop(e)
        src = masked
        if self.looped:
            acc = f"acc{self.counter}"
            self.counter += 1
            self.pre.append(f"{acc} = tl.full([XBLOCK, RBLOCK], {ident}, {TL_DTYPE[compute_dtype(dtype)]})")
            if op is ReduceOp.SUM:
                update = f"{acc} + {masked}"
            elif op is ReduceOp.PROD:
                update = f"{acc} * {masked}"
            else:
                cmp = ">" if op is ReduceOp.MAX else "<"
                nan = f" | ({acc} != {acc})" if dtype.is_floating_point else ""
                update = f"tl.where(({acc} {cmp} {masked}){nan}, {acc}, {masked})"
            self.loop.append(f"{acc} = {update}")
            src = acc
        out_section = self.post if self.looped else self.pre
        result = self.tmp(e, f"tl.reduce({src}, 1, {COMBINE[op]}, keep_dims=True)", out_section)
        if op in (ReduceOp.MAX, ReduceOp.MIN) and dtype.is_floating_point:
            # Triton's max/min drop NaN; ATen's propagate it.
            nan = f"tl.reduce(({src} != {src}).to(tl.int32), 1, tl.standard._elementwise_max, keep_dims=True)"
            has_nan = self.tmp(e, nan, out_section)
            result = self.tmp(e, f"tl.where({has_nan} > 0, float('nan'), {result})", out_section)
        return result

    def arg_reduce(self, e: Expr, v: str, dtype: torch.dtype, op: ReduceOp) -> str:
        if self.looped:
            raise ValueError("argmax/argmin need a persistent reduction")
        ident = reduce_identity(op, compute_dtype(dtype))
        pre = self.pre
        # The tuple reduction's operands: both in the full block shape (a value read without the x
        # index, an input expanded along x, is [1, RBLOCK]: "all reduction inputs must have the same
        # shape" on the H200), and without NaNs, which first_nan below decides (Triton's interpreter
        # runs the reduction as numpy's nanargmax: ValueError on a row of NaNs, FINDINGS.md).
        value = f"tl.where({v} != {v}, {ident}, {v})" if dtype.is_floating_point else v
        masked = self.tmp(e, f"tl.broadcast_to(tl.where(rmask, {value}, {ident}), [XBLOCK, RBLOCK])", pre)
        idx = self.tmp(e, "tl.broadcast_to(rindex, [XBLOCK, RBLOCK])", pre)
        combine = ("tl.standard._argmax_combine_tie_break_left" if op is ReduceOp.ARGMAX
                   else "tl.standard._argmin_combine_tie_break_left")
        # one statement: the interpreter rewrites assignments and cannot hold a tuple
        result = self.tmp(e, f"tl.reduce(({masked}, {idx}), 1, {combine}, keep_dims=True)[1].to(tl.int64)", pre)
        if dtype.is_floating_point:  # ATen: the first NaN wins
            # where(rmask, v != v, False), not rmask & (v != v): Triton 3.8's interpreter raises
            # TypeError on `block & scalar comparison` (a 0-d load of a stride-0 input)
            first_nan = self.tmp(e, f"tl.reduce(tl.where(tl.where(rmask, {v} != {v}, False), {idx}, RBLOCK), 1, "
                                    "tl.standard._elementwise_min, keep_dims=True)", pre)
            result = self.tmp(e, f"tl.where({first_nan} < RBLOCK, {first_nan}.to(tl.int64), {result})", pre)
        return result

    # --- kernel ------------------------------------------------------------------
    def write(self) -> RenderedKernel:
        k = self.k
        for store in k.stores:
            if store.buffer not in k.kept:
                continue
            value = self.expr(store.value)
            if not self.looped:
                section = self.pre
            elif store.level == "xr":
                section = self.loop
            else:
                section = self.post if self.after_reduce(store.value) else self.pre
            ptr = self.params.name(store.buffer)
            index = self.index_code(store.index)
            # a store whose address ignores a loop dim still needs a pointer block of the full shape
            ux, ur = self.uses(store.index)
            if not ux:
                index += " + 0 * xindex"
            if store.level == "xr" and not ur:
                index += " + 0 * rindex"
            mask = "xmask & rmask" if store.level == "xr" else "xmask"
            shape = "[XBLOCK, RBLOCK]" if store.level == "xr" else ("[XBLOCK, 1]" if k.is_reduction else "[XBLOCK]")
            if store.value.op is Op.CONST:
                value = f"tl.full({shape}, {value}, {TL_DTYPE[compute_dtype(store.value.dtype)]})"
            elif not any(s.op in (Op.XVAR, Op.RVAR) for s in store.value.walk()):
                value = f"tl.broadcast_to({value}, {shape})"
            out_dtype = store.value.dtype
            stored = (interpreted_bf16_store(value, out_dtype, self.r.interpret, section)
                      or f"({value}).to({TL_DTYPE[out_dtype]})")
            section.append(f"tl.store({ptr} + ({index}), {stored}, {mask})")
        return self.assemble()

    def header(self) -> list[str]:
        k = self.k
        wide = self.needs_int64()
        pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
        lines = [f"xnumel = {size_code(k.xnumel, 'triton')}", f"xoffset = {pid} * XBLOCK"]
        if k.is_reduction:
            lines += ["xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "xmask = xindex < xnumel",
                      f"rnumel = {size_code(k.rnumel, 'triton')}"]
        else:
            lines += ["xindex = xoffset + tl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        lines += unravel("x", "xindex", k.ranges)
        if k.is_reduction and not self.looped:
            lines += ["rindex = tl.arange(0, RBLOCK)[None, :]", "rmask = rindex < rnumel"]
            lines += unravel("r", "rindex", k.rranges)
        return lines

    def needs_int64(self) -> bool:
        """int64 offsets when any index this kernel computes can pass int32."""
        if self.generic:
            return True  # sizes unknown until the launch
        touched = [param.span for param, _ in self.params.signature()]
        return past_int32([self.k.xnumel * max(self.k.rnumel, 1), *touched])

    def assemble(self) -> RenderedKernel:
        k = self.k
        params = ", ".join([name for _, name in self.params.signature()] + list(k.size_args))
        consts = "XBLOCK: tl.constexpr" + (", RBLOCK: tl.constexpr" if k.is_reduction else "")
        body = self.header() + self.pre
        if self.looped:
            # The bound is a literal: Triton 3.6's interpreter cannot loop to an assigned bound (FINDINGS.md).
            body.append(f"for roffset in range(0, {size_code(k.rnumel, 'triton')}, RBLOCK):")
            loop_head = ["rindex = roffset + tl.arange(0, RBLOCK)[None, :]", "rmask = rindex < rnumel"]
            loop_head += unravel("r", "rindex", k.rranges)
            body += ["    " + line for line in loop_head + self.loop]
            body += self.post
        origins = ", ".join(dict.fromkeys(k.origins))
        src = [
            "import triton",
            "import triton.language as tl",
            *(["from triton.language.extra import libdevice"] if self.libdevice else []),
            "",
            "",
            "@triton.jit",
            f"def {SYMBOL_PLACEHOLDER}({params}, {consts}):",
            f"    # fused: {origins}" if origins else "    # fused: (none)",
        ]
        src += ["    " + line for line in body]
        launches = []
        for xblock, rblock, warps in self.configs:
            meta = {"XBLOCK": xblock, "num_warps": warps}
            if k.is_reduction:
                meta["RBLOCK"] = rblock
            launches.append(((math.ceil(k.xnumel / xblock),), meta))
        grid, meta = launches[0] if launches else ((), {})
        text = "\n".join(src) + "\n"
        # named by the ops it fuses and its content: the same kernel body is one Triton function (one
        # build, one tuning)
        symbol = kernel_symbol(k.origins, hashlib.sha256(text.encode()).hexdigest())
        size_launch = SizeLaunch(k.size_args, size_code(k.xnumel, "python"), size_code(k.rnumel, "python")
                                 if k.is_reduction else "", not self.looped, self.r.interpret) if self.generic else None
        return RenderedKernel(k.name, "triton", text.replace(SYMBOL_PLACEHOLDER, symbol), self.params.buffers, grid,
                              meta, tuple(launches[1:]), symbol, sizes=k.size_args, size_launch=size_launch,
                              work=() if self.generic else (k.xnumel, k.rnumel if k.is_reduction else 1))


def unravel(prefix: str, flat: str, sizes: tuple[int, ...]) -> list[str]:
    """``{prefix}0 = ...``: the per-dim indices of the flat index ``flat``."""
    return [f"{prefix}{i} = {code}" for i, code in enumerate(unravel_codes(flat, sizes, "//"))]
