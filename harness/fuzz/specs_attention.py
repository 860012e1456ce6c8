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
    kind = n.draw(st.sampled_from(["none", "causal", "bool", "float"]))
    if kind == "causal" and n.corner("optionals") and length == keys and n.draw(st.booleans()):
        # causal with more keys than queries (or fewer): the mask is the top-left triangle of L x S
        keys = n.draw(st.sampled_from([length + 3, max(0, length // 2), 2 * length + 1]))
        while math.prod(lead_kv) * keys * (dim + vdim) + math.prod(lead_q) * length * dim > n.builder.limits.max_numel:
            keys //= 2
    q = n.tensor((dtype,), shape=[*lead_q, length, dim])
    k = n.tensor((dtype,), shape=[*lead_kv, keys, dim])
    v = n.tensor((dtype,), shape=[*lead_kv, keys, vdim])
    mask = causal = None
    if kind in ("bool", "float"):
        shape = _mask_shape(n, batch, heads, length, keys)
        mask = n.tensor(("bool",) if kind == "bool" else (dtype,), shape=shape, fresh_only=True)
    elif kind == "causal":
        causal = "True"
    scale = n.draw(st.sampled_from([None, 0.125, 1.0, 3.0]))
    scale_text = None if scale is None else repr(scale)
    if not n.corner("optionals"):
        extra = [f"attn_mask={mask}"] * (mask is not None) + [f"is_causal={causal}"] * (causal is not None)
        extra += [f"scale={scale_text}"] * (scale is not None) + ["enable_gqa=True"] * gqa
        return f"aten.scaled_dot_product_attention.default({', '.join([q, k, v, *extra])})"
    if causal is None and mask is None and n.draw(st.booleans()):
        causal = "False"  # given explicitly, as models often do
    return n.call("aten.scaled_dot_product_attention.default", q, k, v, attn_mask=mask,
                  dropout_p=n.draw(st.sampled_from([None, "0.0"])), is_causal=causal, scale=scale_text,
                  enable_gqa="True" if gqa else None)
