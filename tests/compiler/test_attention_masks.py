"""The ``attention_masks`` pass (``compiler.attention_masks``): constant causal / all-true SDPA masks
become ``is_causal`` / no mask, every other mask is left as it is, and results match eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from compiler.attention_masks import simplify_attention_masks
from compiler.backend import crucible_backend
from compiler.fused_attention import SDPA_TARGETS, bound_sdpa_args
from compiler.report import collect_reports

B, H, L, S, D = 2, 2, 8, 8, 16


def _causal_bool(x):
    i = torch.arange(L, device=x.device)
    return i[None, :] <= i[:, None]


def _causal_float_inplace(x):  # transformers 4.x: finfo.min filled, the allowed part zeroed in place
    mask = torch.full((L, S), torch.finfo(x.dtype).min, device=x.device)
    cond = torch.arange(S, device=x.device)
    mask.masked_fill_(cond < (cond + 1).view(L, 1), 0)
    return mask[None, None].expand(B, 1, L, S)


def _causal_neg_inf(x):
    i = torch.arange(L, device=x.device)
    return torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))


def _causal_packed(x):  # transformers 5.x: causal & the same packed-sequence id, gathered per batch
    pos = torch.arange(L, device=x.device)[None].expand(B, -1)
    packed = (torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1).cumsum(-1)
    b = torch.arange(B, device=x.device)[:, None, None, None]
    q, kv = pos[0][None, None, :, None], pos[0][None, None, None, :]
    return (kv <= q) & (packed[b, q] == packed[b, kv])


def _all_true(x):
    return torch.ones(B, 1, 1, S, dtype=torch.bool, device=x.device)


def _from_input(x):
    return x[:, :1, :, :S] > -100  # all true at run time, but read from an input


def _random(x):
    return torch.rand(L, S, device=x.device) > 0.5


def _band(x):  # a sliding window of 3 keys: constant, neither pattern
    i = torch.arange(L, device=x.device)
    return (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 3)


def _mutated_by_input(x):
    mask = _causal_bool(x).clone()
    mask.logical_and_(x[0, 0, :, :S] > -100)  # the same values at run time, but input-dependent
    return mask


def _soft_float(x):  # a float bias with finite penalties is not a mask of allowed keys
    i = torch.arange(L, device=x.device)
    return torch.where(i[None, :] <= i[:, None], 0.0, -1.0)


REWRITTEN = {"causal_bool": (_causal_bool, True), "causal_float_inplace": (_causal_float_inplace, True),
             "causal_neg_inf": (_causal_neg_inf, True), "causal_packed": (_causal_packed, True),
             "all_true": (_all_true, False)}
KEPT = {"from_input": _from_input, "random": _random, "band": _band, "mutated_by_input": _mutated_by_input,
        "soft_float": _soft_float}


def _attend(make_mask):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=make_mask(q), scale=0.3) * 2
    return fn


def _compile(fn, seen: list, codegen: str = "cpp"):
    def backend(gm, example_inputs, **kw):
        seen.append(simplify_attention_masks(gm))
        seen.append([bound_sdpa_args(n) for n in gm.graph.nodes if n.target in SDPA_TARGETS])
        return crucible_backend(gm, example_inputs, **kw)
    return torch.compile(fn, backend=backend, dynamic=False, options={"codegen": codegen, "strict": True})


def _inputs(device: str):
    torch.manual_seed(0)
    return tuple(torch.randn(B, H, L, D, device=device) for _ in range(3))


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_a_constant_causal_or_all_true_mask_is_rewritten(name, codegen, device):
    make_mask, causal = REWRITTEN[name]
    fn, args = _attend(make_mask), _inputs(device)
    seen: list = []
    with torch.no_grad():
        got = _compile(fn, seen, codegen)(*args)
    count, calls = seen
    assert count == 1
    assert calls[0]["attn_mask"] is None and calls[0]["is_causal"] is causal, calls
    torch.testing.assert_close(got, fn(*args), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("name", sorted(KEPT))
def test_other_masks_are_left_as_they_are(name, device):
    fn, args = _attend(KEPT[name]), _inputs(device)
    seen: list = []
    with torch.no_grad():
        torch.manual_seed(1)
        got = _compile(fn, seen)(*args)
        torch.manual_seed(1)
        want = fn(*args)
    count, calls = seen
    assert count == 0 and isinstance(calls[0]["attn_mask"], torch.fx.Node), calls
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


def test_evaluating_a_random_mask_leaves_the_generator_alone():
    seen: list = []
    fn, args = _attend(_random), _inputs("cpu")
    torch.manual_seed(3)
    with torch.no_grad():
        _compile(fn, seen)(*args)
    after_compile = torch.rand(4)
    torch.manual_seed(3)
    torch.rand(L, S)  # what the graph itself draws
    assert seen[0] == 0
    torch.testing.assert_close(after_compile, torch.rand(4))


def test_bottom_right_causal_is_not_sdpas_causal():
    """With fewer queries than keys SDPA's is_causal is top-left aligned; a decoder's cache mask (the
    last query sees every key) is another pattern and stays a mask."""
    def fn(q, k, v):
        qi, ki = torch.arange(4), torch.arange(S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=ki[None, :] <= qi[:, None] + (S - 4))
    seen: list = []
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, 4, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    with torch.no_grad():
        got = _compile(fn, seen)(q, k, v)
    assert seen[0] == 0
    torch.testing.assert_close(got, fn(q, k, v), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama_1b"])
def test_a_decoders_mask_becomes_is_causal_and_the_report_names_the_pass(family):
    from harness.bench.zoo import MODELS

    model, inputs = MODELS[family].build(torch.float32, "cpu", True)
    with torch.no_grad(), collect_reports() as reports:
        got = torch.compile(model, backend="crucible", options={"strict": True})(*inputs)
        want = model(*inputs)
    assert any("attention_masks" in g.passes for g in reports.graphs), [g.passes for g in reports.graphs]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
