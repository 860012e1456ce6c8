"""PyTorch's inference fast paths for attention layers, one fused ATen op each
(``_transformer_encoder_layer_fwd``, ``_native_multi_head_attention``), decomposed by Crucible's rules
into linears, attention and norms: parity with eager's fused kernels, the fused ops gone from the
compiled graph, and a masked call kept as the op."""

from __future__ import annotations

import pytest
import torch

from compiler.report import collect_reports

FUSED = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")


def _compiled_against_eager(module, inputs, codegen, **call):
    """The module compiled, its output against eager's, and the extern ops of its graphs."""
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="crucible", options={"codegen": codegen, "strict": True})
    with torch.no_grad(), collect_reports() as report:
        got, want = compiled(*inputs, **call), module(*inputs, **call)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
    assert not report.fallbacks
    return [str(e.op) for e in report.externs]


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_an_encoder_layer_fast_path_decomposes_and_matches_eager(norm_first, activation, codegen, device):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, nhead=4, dim_feedforward=32, dropout=0.0, activation=activation,
                                             batch_first=True, norm_first=norm_first).eval().to(device)
    externs = _compiled_against_eager(layer, (torch.randn(2, 5, 16, device=device),), codegen)
    assert not [op for op in externs if any(name in op for name in FUSED)], externs


def test_a_masked_encoder_layer_keeps_the_fused_op(codegen, device):
    """A padding mask: ATen's masked softmax gives a fully masked row 0 where attention's gives NaN,
    so the rule declines and the op runs as an extern call."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, nhead=4, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval().to(device)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]], device=device)
    externs = _compiled_against_eager(layer, (torch.randn(2, 5, 16, device=device),), codegen,
                                      src_key_padding_mask=padding)
    assert any("_transformer_encoder_layer_fwd" in op for op in externs), externs


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_a_multi_head_attention_fast_path_decomposes_and_matches_eager(need_weights, average, codegen, device):
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval().to(device)
    x = torch.randn(2, 5, 16, device=device)

    class SelfAttention(torch.nn.Module):
        def forward(self, x):
            out, weights = attention(x, x, x, need_weights=need_weights, average_attn_weights=average)
            return out if weights is None else (out, weights)

    externs = _compiled_against_eager(SelfAttention(), (x,), codegen)
    assert not [op for op in externs if "_native_multi_head_attention" in op], externs


def test_the_attention_op_with_distinct_query_key_and_value(codegen, device):
    """Called directly with three tensors (the module's fast path takes self-attention only; ATen's op
    wants their shapes equal): the packed projection weights are split per input."""
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval().to(device)
    q, k, v = (torch.randn(2, n, 16, device=device) for n in (5, 5, 5))

    class CrossAttention(torch.nn.Module):
        def forward(self, q, k, v):
            return torch._native_multi_head_attention(q, k, v, 16, 4, attention.in_proj_weight,
                                                      attention.in_proj_bias, attention.out_proj.weight,
                                                      attention.out_proj.bias, None, False)[0]

    externs = _compiled_against_eager(CrossAttention(), (q, k, v), codegen)
    assert not [op for op in externs if "_native_multi_head_attention" in op], externs
