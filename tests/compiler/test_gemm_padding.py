"""Unaligned library GEMMs padded inside the graph (``compiler.gemm_padding``): the rewrite run end to
end on the CPU (the pipeline pads GPU graphs only), in inference without weight folding and in
training, where the backward's two GEMMs over the output gradient share one padded copy."""

from __future__ import annotations

import re

import pytest
import torch

from compiler import gemm_padding
from compiler.gemm_padding import aligned
from compiler.report import collect_reports
from tests.compiler.parity import assert_close


@pytest.fixture
def cpu_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm_padding, "DEVICES", ("cuda", "cpu"))


class Head(torch.nn.Module):
    """An LM head of an odd vocabulary (N = 1001) over an odd hidden size (K = 301)."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(301, 1001, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def padded(report) -> list[tuple[str, str]]:
    return [(f.pass_name, f.op) for g in report.graphs for f in g.weight_folds if f.pass_name == "pad_gemms"]


def test_aligned_rounds_up_to_16_bytes():
    assert [aligned(n, torch.bfloat16) for n in (50257, 50264, 1)] == [50264, 50264, 8]
    assert [aligned(n, torch.float32) for n in (1001, 1000)] == [1004, 1000]


@pytest.mark.parametrize("bias", [True, False])
def test_an_unaligned_linear_computes_what_eager_does_padded(cpu_padding, bias):
    torch.manual_seed(0)
    model, x = Head(bias).eval(), torch.randn(4, 128, 301)
    compiled = torch.compile(model, backend="crucible", options={"strict": True, "fold_weights": False})
    with torch.no_grad(), collect_reports() as report:
        got = compiled(x)
    assert padded(report) == [("pad_gemms", "addmm" if bias else "mm")]
    assert got.shape == (4, 128, 1001) and got.is_contiguous()  # eager's layout, not the padded slice's
    assert_close(got, model(x))


def test_training_pads_the_forward_and_both_backward_gemms(cpu_padding):
    torch.manual_seed(0)
    model = Head(bias=True)
    x = torch.randn(4, 128, 301, requires_grad=True)
    twin = Head(bias=True)
    twin.load_state_dict(model.state_dict())
    x_twin = x.detach().clone().requires_grad_(True)
    compiled = torch.compile(model, backend="crucible", options={"strict": True})
    with collect_reports() as report:
        out = compiled(x)
        out.square().sum().backward()
    twin(x_twin).square().sum().backward()
    assert_close(out, twin(x_twin))
    assert_close(x.grad, x_twin.grad)
    assert_close(model.proj.weight.grad, twin.proj.weight.grad)
    assert_close(model.proj.bias.grad, twin.proj.bias.grad)
    kinds = {g.kind: [(f.pass_name, f.op) for f in g.weight_folds] for g in report.graphs}
    assert kinds["forward"] == [("pad_gemms", "addmm")]
    assert kinds["backward"] == [("pad_gemms", "mm"), ("pad_gemms", "mm")]
    # the shared padded gradient is computed into one buffer, the transposed GEMM reading a view of
    # it (each GEMM realized its own copy: GPT-2's 785 MB logits gradient twice at 8 x 512, fp32)
    (backward,) = [g for g in report.graphs if g.kind == "backward"]
    (pad,) = [k for k in backward.kernels if "ranges [512, 1004]" in k.source]  # the output gradient's
    signature = next(line for line in pad.source.splitlines() if line.startswith('extern "C"'))
    assert len(re.findall(r"(?<!const )float\* __restrict__", signature)) == 1, pad.source  # one output


def test_small_or_aligned_gemms_are_left_alone(cpu_padding):
    # too little work; every dim aligned (float32: 4); only M unaligned, which leads no matrix of x @ W.T
    for shape, n in (((4, 8, 301), 1001), ((64, 40, 300), 1000), ((1001, 300), 1000)):
        model = torch.nn.Linear(shape[-1], n)
        compiled = torch.compile(model, backend="crucible", options={"strict": True, "fold_weights": False})
        with torch.no_grad(), collect_reports() as report:
            compiled(torch.randn(*shape))
        assert padded(report) == []
