"""SDPA kept as one call (``compiler.fused_attention``): which calls are rewritten, and the rewritten
op through lowering, the attention template and the extern call, against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from compiler.backend import crucible_backend
from compiler.fused_attention import OP, keep_fused_attention
from compiler.report import collect_reports


def _attend(mask_kind: str, causal: bool, gqa: bool):
    def fn(q, k, v, mask):
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if mask_kind != "none" else None,
                                           is_causal=causal, scale=0.3, enable_gqa=gqa)
        b, heads, length, d = h.shape
        return h.transpose(1, 2).reshape(b, length, heads * d) * 2
    return fn


def _inputs(mask_kind: str, gqa: bool, device: str):
    """Query, key, value and mask; masked calls are rewritten in 16-bit floats only (bfloat16 then)."""
    torch.manual_seed(0)
    dtype = torch.bfloat16 if mask_kind != "none" else torch.float32
    q = torch.randn(2, 4, 9, 16, device=device, dtype=dtype)
    kv_heads = 2 if gqa else 4
    k, v = (torch.randn(2, kv_heads, 11, 16, device=device, dtype=dtype) for _ in range(2))
    if mask_kind == "bool":  # BERT's padding mask: [B, 1, L, S], every row keeps a key
        mask = torch.rand(2, 1, 9, 11, device=device) > 0.3
        mask[..., 0] = True
    else:
        mask = torch.randn(2, 1, 9, 11, device=device, dtype=dtype)
    return q, k, v, mask


def _rewriting(devices: tuple[str, ...], seen: list[int]):
    def backend(gm, example_inputs, **kw):
        seen.append(keep_fused_attention(gm, devices))
        return crucible_backend(gm, example_inputs, **kw)
    return backend


@pytest.mark.parametrize("mask_kind,causal,gqa", [("bool", False, False), ("additive", False, False),
                                                  ("none", True, False), ("none", False, True)],
                         ids=["bool_mask", "additive_mask", "causal", "gqa"])
@pytest.mark.parametrize("extern", ["default", "none"])
def test_rewritten_attention_matches_eager(mask_kind, causal, gqa, extern, codegen, device):
    """Run on the CPU too (the test names it): the extern call (SDPA at run time) or the template."""
    if codegen == "cpp" and extern == "none":
        pytest.skip("the C++ renderer has no templates")
    fn, args = _attend(mask_kind, causal, gqa), _inputs(mask_kind, gqa, device)
    seen: list[int] = []
    compiled = torch.compile(fn, backend=_rewriting((device,), seen), dynamic=False,
                             options={"codegen": codegen, "extern": extern, "strict": True})
    with torch.no_grad():
        got, want = compiled(*args), fn(*args)
    assert seen == [1]
    tol = 2e-2 if got.dtype == torch.bfloat16 else 2e-5
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


def test_the_extern_call_is_the_runtime_choice_and_the_template_reads_a_bool_mask(device):
    """Default mode: on the GPU the rule makes masked 16-bit attention the template; interpreted
    (CPU) templates keep ATen, which is then this op's extern call."""
    fn, args = _attend("bool", False, False), _inputs("bool", False, device)
    default = (1, 0) if device == "cuda" else (0, 1)
    for extern, templates, externs in (("default", *default), ("none", 1, 0)):
        torch._dynamo.reset()
        with torch.no_grad(), collect_reports() as reports:
            torch.compile(fn, backend=_rewriting((device,), []), dynamic=False,
                          options={"codegen": "triton", "extern": extern, "strict": True})(*args)
        assert len(reports.externs) == externs, reports
        assert sum(k.kind == "template:attention" for k in reports.kernels) == templates, reports
        if externs:
            assert reports.externs[0].op.startswith("crucible.sdpa"), reports.externs


def test_only_inference_calls_on_the_named_devices_are_rewritten():
    args = _inputs("additive", False, "cpu")
    fp32 = [t.float() for t in args]
    gm = torch.fx.symbolic_trace(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m))
    for node, value in zip(gm.graph.nodes, fp32):
        node.meta["example_value"] = value
    assert keep_fused_attention(gm, ("cpu",)) == 0  # float32 with a mask: no measured rule
    gm = torch.fx.symbolic_trace(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m))
    for node, value in zip(gm.graph.nodes, args):
        node.meta["example_value"] = value
    assert keep_fused_attention(gm) == 0  # CPU graphs keep their traced flash kernel
    assert keep_fused_attention(gm, ("cpu",)) == 1
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [OP]
    torch.testing.assert_close(gm(*args), F.scaled_dot_product_attention(*args))

    grad = [t.clone().requires_grad_() for t in args[:3]] + [args[3]]
    gm = torch.fx.symbolic_trace(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, dropout_p=0.0))
    for node, value in zip(gm.graph.nodes, grad):
        node.meta["example_value"] = value
    assert keep_fused_attention(gm, ("cpu",)) == 0  # needs a backward the op has not

    gm = torch.fx.symbolic_trace(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, dropout_p=0.1))
    for node, value in zip(gm.graph.nodes, args):
        node.meta["example_value"] = value
    assert keep_fused_attention(gm, ("cpu",)) == 0  # dropout keeps ATen's random kernel


@pytest.mark.gpu
def test_a_bert_layer_on_the_gpu_keeps_one_fused_attention_call():
    """The H200 finding behind the module: BERT's traced attention was the math decomposition; its
    boolean padding mask makes it the attention template under the default rule (bf16)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=128, num_attention_heads=2, num_hidden_layers=1,
                                     intermediate_size=256, attn_implementation="sdpa")
    model = transformers.BertModel(config, add_pooling_layer=False).cuda().eval().to(torch.bfloat16)
    ids = torch.randint(0, 100, (2, 64), device="cuda")
    # a padding mask (the second sequence 40 tokens long): called without one, transformers 5 passes
    # SDPA no mask at all, and an unmasked call is the library's kernel chosen at run time
    padding = torch.ones(2, 64, dtype=torch.long, device="cuda")
    padding[1, 40:] = 0
    with torch.no_grad(), collect_reports() as reports:
        got = torch.compile(model, backend="crucible", options={"strict": True})(input_ids=ids, attention_mask=padding)[0]
        want = model(input_ids=ids, attention_mask=padding)[0]
    externs = [e.op for g in reports.graphs for e in g.externs]
    attention = [k for k in reports.kernels if k.kind == "template:attention"]
    assert len(attention) == 1 and not any("bmm" in op for op in externs), (externs, reports)
    torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=0.05)
