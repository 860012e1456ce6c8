"""Op spec for scaled dot-product attention (``aten.scaled_dot_product_attention``), registered
into ``harness.fuzz.opspec.OP_SPECS`` on import (``harness.fuzz.specs`` imports this module).

The composite op is what models call; tracing turns it into the backend's fused kernel
(``_scaled_dot_product_flash_attention_for_cpu`` on CPU, flash/efficient/cuDNN or the math path
on CUDA), so one spec reaches every attention lowering, Crucible's attention template included.
Valid by construction: q is (batch, heads, L, E) (or (batch, L, E)), k and v share its batch and
a key count S (0 and odd sizes too), the value head dim may differ from E, a mask is bool or q's
dtype and broadcasts to (batch, heads, L, S), ``is_causal`` never comes with a mask (ATen
refuses both), and grouped-query attention (fewer key/value heads) only where the installed
torch has ``enable_gqa``.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from harness.fuzz.builder import NodeDraw
from harness.fuzz.opspec import spec

ATTENTION_DTYPES = ("float32", "float16", "bfloat16", "float64")
HEAD_DIMS = (8, 5, 1, 16, 3, 64)  # odd and 1 too; 64 is a common real one
KEYS = (4, 1, 7, 0, 17, 65)
HAS_GQA = "enable_gqa" in str(torch.ops.aten.scaled_dot_product_attention.default._schema)


def _mask_shape(n: NodeDraw, batch: list[int], heads: int | None, length: int, keys: int) -> list[int]:
    # no 1-d [S] mask: it broadcasts, and meta tensors accept it, but ATen's CPU kernel indexes the
    # mask's dim -2 (IndexError), so such graphs would not run in eager
    lead = [*batch, heads] if heads is not None else batch
    choices = [[length, keys], [*[1] * len(lead), length, keys], [*lead, length, keys]]
    if heads is not None:
        choices.append([batch[0], 1, 1, keys])
    return n.draw(st.sampled_from(choices))


@spec("aten.scaled_dot_product_attention.default", "nn")
def _sdpa(n: NodeDraw) -> str:
    rank = n.draw(st.sampled_from([4, 3]))
    dtype = n.draw(st.sampled_from(ATTENTION_DTYPES))
    batch = [n.draw(st.sampled_from([1, 2, 3]))]
    heads = n.draw(st.sampled_from([2, 1, 4, 3])) if rank == 4 else None
    length = n.draw(st.sampled_from([3, 1, 8, 0, 17, 65]))
    keys, dim = n.draw(st.sampled_from(KEYS)), n.draw(st.sampled_from(HEAD_DIMS))
    vdim = n.draw(st.sampled_from([dim, 4, 7]))
    kv_heads, gqa = heads, False
    if heads is not None and HAS_GQA and heads > 1 and n.draw(st.booleans()):
        kv_heads, gqa = n.draw(st.sampled_from([h for h in (1, 2) if heads % h == 0 and h < heads])), True
    lead_q = [*batch, heads] if heads is not None else batch
    lead_kv = [*batch, kv_heads] if heads is not None else batch
    while (math.prod(lead_q) * length * dim + math.prod(lead_kv) * keys * (dim + vdim)
           > n.builder.limits.max_numel):  # deterministic, like draw_shape: the longer sequence halves
        length, keys = (length // 2, keys) if length >= keys else (length, keys // 2)
    q = n.tensor((dtype,), shape=[*lead_q, length, dim])
    k = n.tensor((dtype,), shape=[*lead_kv, keys, dim])
    v = n.tensor((dtype,), shape=[*lead_kv, keys, vdim])
    args = [q, k, v]
    kind = n.draw(st.sampled_from(["none", "causal", "bool", "float"]))
    if kind in ("bool", "float"):
        shape = _mask_shape(n, batch, heads, length, keys)
        mask = n.tensor(("bool",) if kind == "bool" else (dtype,), shape=shape, fresh_only=True)
        args.append(f"attn_mask={mask}")
    elif kind == "causal":
        args.append("is_causal=True")
    scale = n.draw(st.sampled_from([None, 0.125, 1.0, 3.0]))
    if scale is not None:
        args.append(f"scale={scale!r}")
    if gqa:
        args.append("enable_gqa=True")
    return f"aten.scaled_dot_product_attention.default({', '.join(args)})"
