"""oneDNN's fused, prepacked convolution in channels-last CPU inference graphs (compiler.onednn_convolutions)."""

from __future__ import annotations

import pytest
import torch

from compiler import onednn_convolutions
from tests.compiler.parity import assert_close, compiled_run

pytestmark = pytest.mark.skipif(not onednn_convolutions.available(), reason="torch built without oneDNN")


class Block(torch.nn.Module):
    """resnet's basic block with a downsampling shortcut, after a stem: conv + bn + relu, conv + bn +
    residual add + relu, a strided 1x1 shortcut conv, and a conv whose result two ops read."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv1 = nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(12)
        self.conv2 = nn.Conv2d(12, 12, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(12)
        self.down = nn.Conv2d(8, 12, 1, stride=2, bias=False)
        self.bn3 = nn.BatchNorm2d(12)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2, self.bn3):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.stem(x)
        y = torch.relu(s) * torch.sigmoid(s)  # two readers: no epilogue to fuse
        z = torch.relu(self.bn1(self.conv1(y)))
        return torch.relu(self.bn2(self.conv2(z)) + self.bn3(self.down(y)))


def block() -> Block:
    torch.manual_seed(0)
    return Block().eval()


def test_convolutions_fuse_bias_relu_and_the_residual_add_and_follow_weight_updates():
    m, x = block(), torch.randn(2, 3, 10, 9)
    compiled, out, report = compiled_run(m, x, codegen="cpp", layout="channels_last")
    (graph,) = report.graphs
    assert "onednn_convolutions" in graph.passes
    fused = sorted(f.op for f in graph.weight_folds if f.pass_name == "onednn_convolutions")
    # the stem (two readers): plain; conv1: relu; conv2 or the shortcut: add + relu, the other plain
    assert fused == ["convolution_pointwise(add+relu)", "convolution_pointwise(none)",
                     "convolution_pointwise(none)", "convolution_pointwise(relu)"]
    with torch.no_grad():
        assert_close(out, m(x))
        assert out.stride() == m(x).stride()  # the graph's output keeps eager's layout
        # a packed weight is a copy: a change of the parameter it came from (in place, reassigned, or a
        # batch norm folded into it) must reach the fused call
        refills = graph.weight_refills
        m.stem.weight.mul_(-0.5)  # a converted weight
        assert_close(compiled(x), m(x))
        m.bn2.running_var.fill_(3.0)  # a folded one
        assert_close(compiled(x), m(x))
        m.down.weight = torch.nn.Parameter(torch.randn_like(m.down.weight))
        assert_close(compiled(x), m(x))
    assert graph.weight_refills == refills + 3


def test_a_shared_weight_is_packed_once():
    conv = torch.nn.Conv2d(4, 4, 3, padding=1).eval()
    x = torch.randn(1, 4, 5, 5)
    _, out, report = compiled_run(lambda t: conv(torch.relu(conv(t))), x, codegen="cpp", layout="channels_last")
    (graph,) = report.graphs
    assert graph.fold_summary().endswith("onednn_convolutions: 1 convolution_pointwise(relu), "
                                         "1 convolution_pointwise(none)")
    packed = [f for f in graph.weight_folds if f.pass_name == "onednn_convolutions"]
    assert len(packed) == 2
    with torch.no_grad():
        assert_close(out, conv(torch.relu(conv(x))))


def test_hardswish_fuses_and_a_second_reader_keeps_it_apart():
    """mobilenet_v3's conv + hardswish (decomposed: x * clamp(x + 3, 0, 6) / 6, x read twice)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, padding=1).eval()
    x = torch.randn(1, 4, 7, 6) * 3

    def net(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.nn.functional.hardswish(conv(t))
        y = conv(h[:, :4])
        return h, torch.nn.functional.hardswish(y) + y  # y has a third reader: no epilogue

    _, out, report = compiled_run(net, x, codegen="cpp", layout="channels_last")
    fused = [f.op for f in report.graphs[0].weight_folds if f.pass_name == "onednn_convolutions"]
    assert fused == ["convolution_pointwise(hardswish)", "convolution_pointwise(none)"]
    with torch.no_grad():
        for got, want in zip(out, net(x)):
            assert_close(got, want)


@pytest.mark.parametrize("options", [{"codegen": "triton", "layout": "channels_last"},
                                     {"codegen": "cpp", "layout": "contiguous"},
                                     {"codegen": "cpp", "layout": "channels_last", "fold_weights": False}])
def test_not_applied_outside_channels_last_cpp_inference_graphs(options):
    """Interpreted Triton graphs keep their relu kernels; NCHW graphs and unfolded weights keep ATen's
    convolution."""
    m, x = block(), torch.randn(2, 3, 10, 9)
    _, out, report = compiled_run(m, x, **options)
    assert "onednn_convolutions" not in report.graphs[0].passes
    with torch.no_grad():
        assert_close(out, m(x))


def test_a_convolution_onednn_cannot_pack_stays_atens(monkeypatch):
    """A packing error (a configuration oneDNN refuses) keeps ATen's convolution for that one,
    instead of failing the graph's compile (which would send the whole graph back to eager)."""
    def refuse(weight, *args):
        if weight.shape[0] == 12:
            raise RuntimeError("unsupported")
        return real(weight, *args)

    real = onednn_convolutions.pack
    monkeypatch.setattr(onednn_convolutions, "pack", refuse)
    m, x = block(), torch.randn(2, 3, 10, 9)
    _, out, report = compiled_run(m, x, codegen="cpp", layout="channels_last")
    fused = [f.op for f in report.graphs[0].weight_folds if f.pass_name == "onednn_convolutions"]
    assert fused == ["convolution_pointwise(none)"]  # the stem alone: its 8 output channels
    with torch.no_grad():
        assert_close(out, m(x))
