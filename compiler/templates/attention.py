"""The attention template's Triton source: flash attention forward (online softmax in base 2,
float32 statistics and accumulator), causal (top-left aligned, as SDPA's ``is_causal``) or not,
with an optional additive mask, for any head dim up to 256 (padded to a power of two).

Grouped-query heads share their key/value loads: a program owns a block of *rows* of one kv head,
where row ``r`` is query position ``r % L`` of query head ``kv_head * G + r // L`` (``G`` query heads
per kv head). So decoding (one query token) puts the G heads of a group in one tile instead of
padding a single row to the tile's 16, and every key/value tile is read once per group.

Symbolic sizes (``compiler.sizes``): the sizes, strides and offsets are kernel arguments, and the
tile, the grid, the head-dim blocks and (a symbolic head dim) the softmax scale are chosen at each
launch (``launch.AttentionSizeLaunch``); every key and row edge is masked already.
"""

from __future__ import annotations

import math

from compiler.codegen.base import RenderedKernel
from compiler.codegen.shared import compute_dtype
from compiler.codegen.triton import TL_DTYPE, TritonRenderer, past_int32
from compiler.graph import View
from compiler.sizes import code
from compiler.templates.launch import AttentionSizeLaunch
from compiler.templates.writer import ExprWriter, finish_source
from compiler.templates.spec import AttentionTemplate, TemplateKernel
from compiler.templates.tiles import attention_tiles, bucket, fingerprint, next_pow2

LOG2E = 1.4426950408889634


def _address(ptr: str, view: View, names: list[str]) -> str:
    terms = [code(view.offset, "triton")] + [f"{n} * {code(st, 'triton')}" if st != 1 else n
                                             for n, st in zip(names, view.stride) if st != 0]
    return f"{ptr} + ({' + '.join(terms)})"


def write_attention(renderer: TritonRenderer, k: TemplateKernel) -> RenderedKernel:
    t = k.template
    assert isinstance(t, AttentionTemplate)
    batch, heads, length, dim = t.q.shape
    kv_heads, keys, dim_v = t.k.shape[1], t.k.shape[2], t.v.shape[3]
    group = t.group
    interpret = renderer.interpret
    generic = bool(k.size_args)
    out_vars = {0: "xb", 1: "qh[:, None]", 2: "ql[:, None]", 3: "rdv[None, :]"}
    epi = ExprWriter(renderer, k, out_vars, "omask", acc=t.acc, prefix="e")
    pq, pk, pv = epi.param(t.q.buffer), epi.param(t.k.buffer), epi.param(t.v.buffer)
    pm = epi.param(t.mask.buffer) if t.mask is not None else None
    epilogue = epi.stores(k, "[BLOCK_M, BLOCK_DV]")
    wide = generic or past_int32(p.span for p in k.params)
    i64 = ".to(tl.int64)" if wide else ""
    up = ".to(tl.float32)" if interpret else ""
    # fp32 inputs: exact products (as the math path); the interpreter computes in fp32 throughout
    exact = ', input_precision="ieee"' if interpret or compute_dtype(t.q.dtype) == t.q.dtype else ""
    body = [f"L = {code(length, 'triton')}", f"S = {code(keys, 'triton')}", f"D = {code(dim, 'triton')}",
            f"DV = {code(dim_v, 'triton')}", f"G = {code(group, 'triton')}", f"HKV = {code(kv_heads, 'triton')}",
            f"pid_bh = tl.program_id(1){i64}", "xb = pid_bh // HKV", "hk = pid_bh % HKV",
            "rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)",
            "rvalid = rows < G * L", "rows = tl.where(rvalid, rows, 0)",
            f"ql = (rows % L){i64}", f"qh = (hk * G + rows // L){i64}",
            "rd = tl.arange(0, BLOCK_D)", "rdv = tl.arange(0, BLOCK_DV)",
            "q = tl.load(" + _address(pq, t.q, ["xb", "qh[:, None]", "ql[:, None]", "rd[None, :]"])
            + f", mask=rd[None, :] < D, other=0.0){up}",
            "m_i = tl.full([BLOCK_M], float('-inf'), tl.float32)",
            "l_i = tl.full([BLOCK_M], 0.0, tl.float32)",
            "acc = tl.full([BLOCK_M, BLOCK_DV], 0.0, tl.float32)",
            f"qk_scale = {'QK_SCALE' if generic else repr(t.scale * LOG2E)}"]
    if t.causal and not interpret:  # keys past the block's last row are all masked: skip them
        body.append("hi = tl.minimum(S, tl.reduce(tl.where(rvalid, ql, 0), 0, "
                    "tl.standard._elementwise_max) + 1)")
    # else every key block (masking alone is exact): the interpreter's loop bound must be a Python int,
    # written as a literal (an assigned one is a tensor there, which 3.6's cannot use: harness/FINDINGS.md)
    loop = ["cols = n0 + tl.arange(0, BLOCK_N)", "cvalid = cols < S", "cols = tl.where(cvalid, cols, 0)",
            "kt = tl.load(" + _address(pk, t.k, ["xb", "hk", "cols[None, :]", "rd[:, None]"])
            + f", mask=rd[:, None] < D, other=0.0){up}",
            f"s = tl.dot(q, kt{exact}) * qk_scale"]
    if t.mask is not None:
        loop.append("s = s + tl.load(" + _address(pm, t.mask, ["xb", "qh[:, None]", "ql[:, None]", "cols[None, :]"])
                    + f").to(tl.float32) * {LOG2E!r}")
    valid = "cvalid[None, :]" + (" & (cols[None, :] <= ql[:, None])" if t.causal else "")
    loop += [f"s = tl.where({valid}, s, float('-inf'))",
             "m_new = tl.maximum(m_i, tl.reduce(s, 1, tl.standard._elementwise_max))",
             "m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)",  # a fully masked row so far
             "alpha = tl.exp2(m_i - m_safe)",
             "p = tl.exp2(s - m_safe[:, None])",
             "l_i = l_i * alpha + tl.reduce(p, 1, tl.standard._sum_combine)",
             "v = tl.load(" + _address(pv, t.v, ["xb", "hk", "cols[:, None]", "rdv[None, :]"])
             # keys past S read key 0's row: zero them, or p = 0 times an inf there is NaN
             + f", mask=cvalid[:, None] & (rdv[None, :] < DV), other=0.0){up}",
             f"acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v{exact})",
             "m_i = m_new"]
    body.append(f"for n0 in range(0, {'hi' if t.causal and not interpret else code(keys, 'triton')}, BLOCK_N):")
    body += ["    " + line for line in loop]
    body += ["acc = acc / l_i[:, None]", "omask = rvalid[:, None] & (rdv[None, :] < DV)"] + epilogue
    rows = group * length
    params, args = epi.signature()
    title = (f"attention {batch}x{heads}x{length}x{dim} over {kv_heads} kv heads x {keys} keys "
             f"{TL_DTYPE[t.q.dtype]}{' causal' if t.causal else ''}{' masked' if t.mask is not None else ''}")
    if generic:
        launch = AttentionSizeLaunch(k.size_args, *(code(v, "python") for v in (rows, batch * kv_heads, keys, dim, dim_v)),
                                     t.scale, interpret)
        return finish_source(k, params + list(k.size_args), ["BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_DV", "QK_SCALE"],
                             body, title, args, [((), {})], libdevice=epi.uses_libdevice(), size_launch=launch)
    launches = []
    candidates = attention_tiles(rows, keys, dim, interpret)
    for tile in candidates:
        meta = {"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_D": max(16, next_pow2(dim)),
                "BLOCK_DV": max(16, next_pow2(dim_v)), "num_warps": tile.warps, "num_stages": tile.stages}
        launches.append(((math.ceil(rows / tile.block_m), batch * kv_heads), meta))
    key = (f"attention {t.q.dtype} {bucket(batch * kv_heads)}x{bucket(rows)}x{bucket(keys)} d{dim}/{dim_v}"
           f"{' causal' if t.causal else ''}{' masked' if t.mask is not None else ''} tiles {fingerprint(candidates)}")
    return finish_source(k, params, ["BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_DV"], body, title, args, launches, key,
                         epi.uses_libdevice())
