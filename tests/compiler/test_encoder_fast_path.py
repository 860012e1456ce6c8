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


class _Attention(torch.nn.Module):
    """``torch._native_multi_head_attention`` called as ``nn.MultiheadAttention``'s fast path calls it
    (Dynamo traces the module's other path, so the op only reaches a graph called directly or from
    the encoder layer's op)."""

    def __init__(self, need_weights: bool, average: bool) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
        self.need_weights, self.average = need_weights, average

    def forward(self, q, k, v):
        a = self.attention
        out, weights = torch._native_multi_head_attention(q, k, v, 16, 4, a.in_proj_weight, a.in_proj_bias,
                                                          a.out_proj.weight, a.out_proj.bias, None,
                                                          self.need_weights, self.average)
        return (out, weights) if self.need_weights else out


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("self_attention", [True, False], ids=["self", "distinct_qkv"])
def test_the_attention_op_decomposes_and_matches_eager(need_weights, average, self_attention, codegen, device):
    """Self-attention projects q, k and v in one GEMM; three tensors (ATen wants their shapes equal)
    split the packed weights per input. With the weights: the softmax, averaged over heads or not."""
    torch.manual_seed(0)
    module = _Attention(need_weights, average).to(device)
    x = torch.randn(2, 5, 16, device=device)
    inputs = (x, x, x) if self_attention else tuple(torch.randn(2, 5, 16, device=device) for _ in range(3))
    externs = _compiled_against_eager(module, inputs, codegen)
    assert not [op for op in externs if "_native_multi_head_attention" in op], externs


def test_without_the_rule_the_attention_op_is_an_extern_call(monkeypatch) -> None:
    """The check above can fail: the op reaches the graph and, without its rule, runs as ATen's."""
    from compiler import decompositions

    monkeypatch.delitem(decompositions.RULES, "crucible:native_multi_head_attention")
    x = torch.randn(2, 5, 16)
    externs = _compiled_against_eager(_Attention(False, True), (x, x, x), "cpp")
    assert any("_native_multi_head_attention" in op for op in externs), externs
