"""The GEMM template's Triton source: a tiled ``tl.dot`` loop over K with float32 accumulation,
grouped tile order (GROUP_M rows of tiles share B columns in L2), operands loaded by pointer
increments when they are strided reads and rendered as prologue expressions otherwise, and the
epilogue (the scheduled stores) rendered on the accumulator tile.

Odd sizes: rows/columns past M/N are clamped (``rm % M``) so operand loads need no mask, and only
the epilogue's stores are masked; K is masked unless the tile divides it (``EVEN_K``), prologue
operands' lanes past K zeroed as well as the loads under them. float32
operands multiply exactly (``input_precision="ieee"``) unless the template allows tf32. The
interpreter upcasts operands to float32 (numpy has no bf16 matmul) and gets one large tile.
"""

from __future__ import annotations

import math

from compiler import ir
from compiler.sizes import code
from compiler.codegen.base import RenderedKernel
from compiler.codegen.shared import compute_dtype
from compiler.codegen.triton import TL_DTYPE, TritonRenderer, past_int32
from compiler.ir import Expr, Op
from compiler.templates.launch import GemmSizeLaunch
from compiler.templates.writer import ExprWriter, finish_source
from compiler.templates.spec import GemmTemplate, TemplateKernel
from compiler.templates.tiles import bucket, fingerprint, gemm_tiles, tma_enabled


def _strided(e: Expr) -> dict | None:
    """``e``'s affine address when it is a plain load (coefficients per XVAR, None: constant)."""
    if e.op is not Op.LOAD:
        return None
    return ir.to_affine(e.src[0])


class _GemmWriter:
    def __init__(self, renderer: TritonRenderer, k: TemplateKernel) -> None:
        self.r = renderer
        self.k = k
        t = k.template
        assert isinstance(t, GemmTemplate)
        self.t = t
        self.lb = ["xb"] if t.batched else []
        out_vars = self.lb + ["rm[:, None]", "rn[None, :]"]
        self.epi = ExprWriter(renderer, k, dict(enumerate(out_vars)), "omask", acc=t.acc, prefix="e")
        # symbolic sizes (``compiler.sizes``): sizes are arguments, the tile and grid are chosen per
        # launch (``launch.GemmSizeLaunch``); int64 indices, no persistent or TMA variants
        self.generic = bool(k.size_args)
        self.sms = 1 if renderer.interpret or self.generic else _sm_count()
        self.layouts: list[str] = []  # per operand, for the tuning key
        self.tma = tma_enabled() and not self.generic  # render the TMA branch (configs with TMA=True take it)
        operands = (t.batch * t.m * t.k, t.batch * t.k * t.n, t.batch * t.m * t.n)  # symbolic ones: no max()
        self.wide = self.generic or past_int32([*(p.span for p in k.params), *operands])

    def operand(self, name: str, e: Expr, rows: str, cols: str, kdim: int) -> tuple[list[str], list[str], str]:
        """(lines before the K loop, lines inside it, the loaded tile's name) for operand ``name``.

        ``rows``/``cols`` are the tile's index vectors; the K dim is ``kdim`` (1 for A, 0 for B)."""
        lines_pre: list[str] = []
        inside: list[str] = []
        self.layouts.append(_layout(e, self.t.batched))
        kmask = "rk[None, :] < K - k0" if kdim == 1 else "rk[:, None] < K - k0"
        aff = _strided(e)
        var_count = 3 if self.t.batched else 2
        if aff is not None:
            ptr = self.epi.param(e.arg)
            coef = [aff.get(ir.xvar(d), 0) for d in range(var_count)]
            terms = [code(aff.get(None, 0), "triton")]
            names = self.lb + [rows, cols]
            # every tile dim appears (times 0 for a size-1 dim the view dropped): a full-shaped tile
            terms += [f"{n} * {code(c, 'triton')}" if c != 1 else n for n, c in zip(names, coef)
                      if c != 0 or n in (rows, cols)]
            kstride = coef[-2 + kdim]
            pointers = f"{name}_ptrs = {ptr} + ({' + '.join(terms)})"
            load = f"tl.load({name}_ptrs)"
            masked = f"tl.load({name}_ptrs, mask={kmask}, other=0.0)"
            loads = ["if EVEN_K:", f"    {name} = {load}", "else:", f"    {name} = {masked}"]
            advance = f"{name}_ptrs += BLOCK_K * {code(kstride, 'triton')}" if kstride != 0 else ""
            desc = self.descriptor(name, ptr, aff, coef, kdim) if self.tma else None
            if desc is None:
                lines_pre.append(pointers)
                inside += loads
            else:  # constexpr TMA picks the descriptor branch; the pointer one stays for the other configs
                lines_pre += ["if TMA:", f"    {desc[0]}", "else:", f"    {pointers}"]
                inside += ["if TMA:", f"    {name} = {desc[1]}", "else:"] + ["    " + line for line in loads]
                advance = f"if not TMA:\n    {advance}" if advance else ""
            tile = name
        else:  # a prologue: the operand's expression on the tile's indices
            kvar = "(k0 + rk[None, :])" if kdim == 1 else "(k0 + rk[:, None])"
            vars_ = self.lb + ([rows, kvar] if kdim == 1 else [kvar, cols])
            w = ExprWriter(self.r, self.k, dict(enumerate(vars_)), f"({kmask})", prefix=f"{name}_", shared=self.epi)
            value = w.value(e)
            inside += w.pre
            shape = "[BLOCK_M, BLOCK_K]" if kdim == 1 else "[BLOCK_K, BLOCK_N]"
            inside.append(f"{name} = tl.broadcast_to({value}, {shape})")
            # lanes past K hold the expression at masked (zero) loads: 1 for x + 1, inf for a
            # reciprocal; zero them as the strided loads' other=0.0 does, or they add to the dot
            inside += ["if not EVEN_K:", f"    {name} = tl.where({kmask}, {name}, 0.0)"]
            advance = ""
            tile = name
        want = compute_dtype(self.t.operand_dtype) if self.r.interpret else self.t.operand_dtype
        if aff is None or self.r.interpret:
            inside.append(f"{tile} = {tile}.to({TL_DTYPE[want]})")
        if advance:
            inside += advance.split("\n")
        return lines_pre, inside, tile

    def descriptor(self, name: str, ptr: str, aff: dict, coef: list[int], kdim: int) -> tuple[str, str] | None:
        """(the tensor descriptor's definition, the tile's load through it) for a strided operand, or
        None when TMA cannot read it: no unit-stride matrix dim, or an offset or stride that is not a
        multiple of 16 bytes (a size-1 dim's stride does not matter)."""
        size = self.t.operand_dtype.itemsize
        extents = [self.t.m, self.t.k] if kdim == 1 else [self.t.k, self.t.n]
        strides = coef[-2:]
        batch = coef[0] if self.t.batched else 0
        unit = [d for d in (0, 1) if strides[d] == 1 and extents[d] > 1] or \
            [d for d in (0, 1) if extents[d] == 1 or strides[d] == 1]
        if not unit:
            return None
        inner = unit[-1]
        outer = 1 - inner
        outer_stride = strides[outer] if extents[outer] > 1 else 16 // size
        if any(v * size % 16 for v in (aff.get(None, 0), outer_stride, batch)) or outer_stride == 0:
            return None
        blocks = ["BLOCK_M", "BLOCK_K"] if kdim == 1 else ["BLOCK_K", "BLOCK_N"]
        offsets = ["pid_m * BLOCK_M", "k0"] if kdim == 1 else ["k0", "pid_n * BLOCK_N"]
        order = [outer, inner]
        base = f"{ptr} + {aff.get(None, 0)}" + (f" + xb * {batch}" if batch else "")
        define = (f"{name}_desc = tl.make_tensor_descriptor({base}, shape=[{extents[outer]}, {extents[inner]}], "
                  f"strides=[{outer_stride}, 1], block_shape=[{blocks[outer]}, {blocks[inner]}])")
        load = f"{name}_desc.load([{offsets[order[0]]}, {offsets[order[1]]}])" + (".T" if order == [1, 0] else "")
        return define, load

    def write(self) -> RenderedKernel:
        t, k = self.t, self.k
        a_rows = "am"
        b_cols = "bn"
        a_pre, a_in, a = self.operand("a", t.a, a_rows, "rk[None, :]", 1)
        b_pre, b_in, b = self.operand("b", t.b, "rk[:, None]", b_cols, 0)
        epilogue = self.epi.stores(k, "[BLOCK_M, BLOCK_N]")
        ieee = t.operand_dtype.is_floating_point and compute_dtype(t.operand_dtype) == t.operand_dtype \
            and not t.allow_tf32
        precision = ', input_precision="ieee"' if ieee or self.r.interpret else ""
        head = [f"M = {code(t.m, 'triton')}", f"N = {code(t.n, 'triton')}", f"K = {code(t.k, 'triton')}"]
        body = ["grid_m = (M + BLOCK_M - 1) // BLOCK_M", "grid_n = (N + BLOCK_N - 1) // BLOCK_N",
                "width = GROUP_M * grid_n", "group_id = pid // width",
                "group_size = tl.minimum(grid_m - group_id * GROUP_M, GROUP_M)",
                "pid_m = group_id * GROUP_M + (pid % group_size)", "pid_n = (pid % width) // group_size"]
        if t.batched:
            body.append("xb = tl.program_id(1)" + (".to(tl.int64)" if self.wide else ""))
        cast = ".to(tl.int64)" if self.wide else ""
        body += [f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){cast}",
                 f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){cast}",
                 "rk = tl.arange(0, BLOCK_K)",
                 # clamped rows/columns: every operand load is in bounds, only the stores are masked
                 "if EVEN_M:", "    am = rm[:, None]", "else:", "    am = (rm % M)[:, None]",
                 "if EVEN_N:", "    bn = rn[None, :]", "else:", "    bn = (rn % N)[None, :]",
                 "acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)"]
        body += a_pre + b_pre
        # the bound as a literal: Triton's interpreter turns every assigned value (K = 27) into a tensor,
        # which 3.6's cannot convert to a range bound under numpy 2 (harness/FINDINGS.md)
        body.append(f"for k0 in range(0, {code(t.k, 'triton')}, BLOCK_K):")
        body += ["    " + line for line in a_in + b_in]
        body.append(f"    acc = tl.dot({a}, {b}, acc{precision})")
        body += ["omask = (rm[:, None] < M) & (rn[None, :] < N)"] + epilogue
        # persistent configs: NUM_PROGS programs (one per SM) walk the tiles; the others, one tile each
        # (the interpreter runs one program, self.sms = 1, and its 3.6 cannot start a range at a tensor)
        first = "0" if self.r.interpret else "tl.program_id(0)"
        if self.generic:  # one tile per program (the persistent walk needs the tile count as a constexpr)
            return self.finish_generic(head + ["pid = tl.program_id(0)"] + body)
        head += ["if PERSISTENT:", f"    for pid in range({first}, TILES, NUM_PROGS):"]
        head += ["        " + line if line else "" for line in body]
        head += ["else:", "    pid = tl.program_id(0)"] + ["    " + line if line else "" for line in body]
        body = head
        params, args = self.epi.signature()
        launches = []
        candidates = gemm_tiles(t.m, t.n, t.k, t.operand_dtype, self.r.interpret)
        for tile in candidates:
            meta = {"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": tile.block_k,
                    "GROUP_M": tile.group_m, "EVEN_M": t.m % tile.block_m == 0, "EVEN_N": t.n % tile.block_n == 0,
                    "EVEN_K": t.k % tile.block_k == 0, "num_warps": tile.warps, "num_stages": tile.stages}
            if self.tma:
                meta["TMA"] = tile.tma
            tiles = math.ceil(t.m / tile.block_m) * math.ceil(t.n / tile.block_n)
            programs = min(tiles, self.sms) if tile.persistent else tiles
            meta.update(TILES=tiles, NUM_PROGS=programs, PERSISTENT=tile.persistent)
            launches.append(((programs,) + ((t.batch,) if t.batched else ()), meta))
        consts = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_M", "EVEN_N", "EVEN_K", "TILES", "NUM_PROGS",
                  "PERSISTENT"] + (["TMA"] if self.tma else [])
        title = f"gemm {f'{t.batch} x ' if t.batched else ''}{t.m} x {t.n} x {t.k} {t.operand_dtype}"
        key = (f"gemm {t.operand_dtype} {bucket(t.batch)}x{bucket(t.m)}x{t.n}x{t.k} a {self.layouts[0]} "
               f"b {self.layouts[1]}{' tf32' if t.allow_tf32 else ''} tiles {fingerprint(candidates)}")
        return finish_source(k, params, consts, body, title, args, launches, key, self.epi.uses_libdevice())

    def finish_generic(self, body: list[str]) -> RenderedKernel:
        """The size-generic kernel: sizes are trailing arguments, the launch picks tile and grid."""
        t, k = self.t, self.k
        params, args = self.epi.signature()
        consts = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_M", "EVEN_N", "EVEN_K"]
        title = f"gemm {f'{t.batch} x ' if t.batched else ''}{t.m} x {t.n} x {t.k} {t.operand_dtype}"
        launch = GemmSizeLaunch(k.size_args, *(code(v, "python") for v in (t.batch, t.m, t.n, t.k)),
                                t.operand_dtype, t.batched, self.r.interpret)
        return finish_source(k, params + list(k.size_args), consts, body, title, args, [((), {})],
                             libdevice=self.epi.uses_libdevice(), size_launch=launch)


def _layout(e: Expr, batched: bool) -> str:
    """How an operand is read: "rows"/"cols" (which of its two matrix dims is contiguous),
    "strided" (neither), or "prologue" (an expression computed while loading)."""
    aff = _strided(e)
    if aff is None:
        return "prologue"
    first = 1 if batched else 0
    unit = [d for d in (first, first + 1) if aff.get(ir.xvar(d), 0) == 1]
    return {first: "rows", first + 1: "cols"}.get(unit[0], "strided") if unit else "strided"


H200_SMS = 132  # what the GPU build check (``compiler.gpu_build``, sm_90) renders for without a GPU


def _sm_count() -> int:
    import torch

    if not torch.cuda.is_available():  # rendered for ``gpu_build`` on a CPU-only machine
        return H200_SMS
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def write_gemm(renderer: TritonRenderer, k: TemplateKernel) -> RenderedKernel:
    return _GemmWriter(renderer, k).write()
