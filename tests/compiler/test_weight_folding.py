"""Batch norm folded into the convolution or linear before it (``compiler.folding``)."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.config import Options
from compiler.report import collect_reports
from tests.compiler.parity import Reference, assert_close, compiled_run


def conv_bn(relu: bool = True, bias: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 8, 3, padding=1, bias=bias), torch.nn.BatchNorm2d(8)]
    with torch.no_grad():  # statistics away from the defaults (0 and 1) so that folding shows
        layers[1].running_mean.uniform_(-1, 1)
        layers[1].running_var.uniform_(0.1, 3)
        layers[1].weight.uniform_(0.5, 2)
        layers[1].bias.uniform_(-1, 1)
    return torch.nn.Sequential(*layers, *([torch.nn.ReLU()] if relu else [])).eval()


def test_conv_bn_relu_folds_and_matches_eager(codegen):
    model, x = conv_bn(), torch.randn(2, 3, 8, 8)
    _, out, report = compiled_run(model, x, codegen=codegen)
    (graph,) = report.graphs
    # the C++ codegen runs CPU inference graphs channels-last (compiler.layout): the folded weight converted too
    # and the conv + relu is oneDNN's fused convolution over a packed weight (compiler.onednn_convolutions)
    layout = [("convert_weight_layout", "convolution"),
              ("onednn_convolutions", "convolution_pointwise(relu)")] if codegen == "cpp" else []
    assert [(f.pass_name, f.op) for f in graph.weight_folds] == [("fold_batch_norm", "convolution"), *layout]
    assert "fold_batch_norm" in graph.passes and "fold_batch_norm: 1 convolution" in str(graph)
    # what is left after the convolution is the relu: the batch norm's arithmetic is gone (channels-last:
    # the relu fused into oneDNN's convolution, whose NHWC input and output are copied from and to NCHW)
    expected = [("_convolution_pointwise.default",)] * 2 if codegen == "cpp" else [("relu.default",)]
    assert [k.ops for k in graph.kernels] == expected
    with torch.no_grad():
        assert_close(out, model(x))


def test_folding_removes_the_batch_norm_kernel_and_off_keeps_it():
    model, x = conv_bn(relu=False, bias=False), torch.randn(2, 3, 8, 8)
    _, folded, on = compiled_run(model, x, codegen="triton")
    _, unfolded, off = compiled_run(model, x, codegen="triton", fold_weights=False)
    assert (len(on.kernels), len(on.externs)) == (0, 1)
    assert len(off.kernels) == 1 and "rsqrt.default" in off.kernels[0].ops
    assert off.graphs[0].weight_folds == [] and "fold_batch_norm" not in off.graphs[0].passes
    with torch.no_grad():
        assert_close(folded, model(x))
        assert_close(unfolded, model(x))


def test_training_mode_and_gradients_are_not_folded():
    model, x = conv_bn(), torch.randn(2, 3, 8, 8)
    model.train()  # batch statistics: nothing to fold
    _, _, report = compiled_run(model, x, codegen="triton")
    assert all(g.weight_folds == [] for g in report.graphs)
    model.eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="crucible", options={"codegen": "triton", "strict": True})
    with collect_reports() as report:  # grad enabled, parameters require grad: a forward graph
        out = compiled(x)
    assert [g.kind for g in report.graphs] == ["forward"] and report.graphs[0].weight_folds == []
    out.sum().backward()
    assert model[0].weight.grad is not None


def test_mutated_buffers_and_parameters_after_compile_are_honoured():
    """A user who changes a batch norm buffer or a weight after compiling gets results from the new values."""
    model, x = conv_bn(), torch.randn(2, 3, 8, 8)
    compiled, _, report = compiled_run(model, x, calls=3, codegen="triton")
    (graph,) = report.graphs
    assert graph.weight_refills == 1  # folded on the first call only: nothing changed since
    with torch.no_grad():
        model[1].running_var.fill_(2)
        assert_close(compiled(x), model(x))
        model[0].weight.mul_(-0.5)
        assert_close(compiled(x), model(x))
        assert_close(compiled(x), model(x))
    assert graph.weight_refills == 3


def test_linear_batch_norm_folds_into_the_matmul():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.BatchNorm1d(12), torch.nn.Tanh(),
                                torch.nn.Linear(12, 6, bias=False), torch.nn.BatchNorm1d(6, affine=False)).eval()
    with torch.no_grad():
        for bn in (model[1], model[4]):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.1, 3)
    x = torch.randn(5, 16)
    _, out, report = compiled_run(model, x, codegen="triton")
    assert [f.op for f in report.graphs[0].weight_folds] == ["addmm", "mm"]
    with torch.no_grad():
        assert_close(out, model(x))


class ConvAlsoReturned(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = conv_bn(relu=False)

    def forward(self, x: torch.Tensor):
        y = self.inner[0](x)
        return y, self.inner[1](y)


def test_a_convolution_read_elsewhere_is_not_folded():
    model, x = ConvAlsoReturned().eval(), torch.randn(2, 3, 8, 8)
    _, out, report = compiled_run(model, x, codegen="triton")
    assert report.graphs[0].weight_folds == []
    with torch.no_grad():
        assert_close(out, model(x))


def test_fold_weights_option_must_be_a_bool():
    assert Options.parse(None).fold_weights is True
    assert Options.parse({"fold_weights": False}).fold_weights is False
    with pytest.raises(ValueError, match="option fold_weights must be True or False"):
        Options.parse({"fold_weights": "no"})


def test_inspect_reports_the_folds():
    model, x = conv_bn(), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        report = compiler.inspect(model, x, codegen="triton")
    assert report.graphs[0].fold_summary() == "fold_batch_norm: 1 convolution"


def test_replaced_tensors_are_refolded():
    """``param.data = ...`` keeps the tensor and its version (only the storage changes); a reassigned
    buffer is a new tensor: both are seen."""
    model, x = conv_bn(), torch.randn(2, 3, 8, 8)
    compiled, _, report = compiled_run(model, x, codegen="triton")
    with torch.no_grad():
        model[0].weight.data = torch.randn_like(model[0].weight)
        assert_close(compiled(x), model(x))
        model[1].running_mean = torch.randn(8)
        assert_close(compiled(x), model(x))


def test_low_precision_batch_norm_is_not_folded():
    model, x = conv_bn().to(torch.bfloat16), torch.randn(2, 3, 8, 8, dtype=torch.bfloat16)
    _, out, report = compiled_run(model, x, codegen="triton")
    assert report.graphs[0].weight_folds == []
    with torch.no_grad():
        assert_close(out, model(x), reference=Reference(model.double()(x.double()), torch.bfloat16))


def test_folded_weights_feed_generated_templates():
    """Under ``extern="none"`` the folded convolution is a generated template kernel reading the folded
    constants (and, refilled in place, their new values)."""
    model, x = conv_bn(), torch.randn(2, 3, 8, 8)
    compiled, out, report = compiled_run(model, x, codegen="triton", extern="none")
    assert [k.kind for k in report.kernels] == ["template:gemm"] and report.externs == []
    assert report.graphs[0].fold_summary() == "fold_batch_norm: 1 convolution"
    with torch.no_grad():
        assert_close(out, model(x))
        model[1].bias.add_(1)
        assert_close(compiled(x), model(x))


@pytest.mark.parametrize("conv", [torch.nn.Conv1d(4, 6, 3, bias=False), torch.nn.Conv2d(4, 8, 3, groups=4)],
                         ids=["conv1d", "depthwise"])
def test_other_convolutions_fold_per_output_channel(conv):
    torch.manual_seed(0)
    bn = (torch.nn.BatchNorm1d if isinstance(conv, torch.nn.Conv1d) else torch.nn.BatchNorm2d)(conv.out_channels)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.1, 3)
        bn.weight.uniform_(0.5, 2)
    model = torch.nn.Sequential(conv, bn).eval()
    x = torch.randn(2, 4, *([9] if isinstance(conv, torch.nn.Conv1d) else [7, 7]))
    _, out, report = compiled_run(model, x, codegen="triton")
    assert report.graphs[0].fold_summary() == "fold_batch_norm: 1 convolution"
    with torch.no_grad():
        assert_close(out, model(x))


def test_dump_dir_shows_the_folded_graph_before_lowering(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folded graph's dump sorted after the wrapper (unknown passes were numbered 9)."""
    monkeypatch.setenv("CRUCIBLE_DUMP_DIR", str(tmp_path))
    compiled_run(conv_bn(), torch.randn(2, 3, 8, 8), codegen="cpp")
    (folded,) = tmp_path.glob("*/00_fold_batch_norm.txt")
    assert "1 batch norms folded" in folded.read_text()
    names = sorted(p.name for p in folded.parent.iterdir())
    assert names.index("00_fold_batch_norm.txt") < names.index("01_lower.txt")


def test_pass_modules_generate_their_code_when_read_and_run_like_graph_modules() -> None:
    """``folding.graph_module``: the rewritten graphs' modules skip code generation until it is read
    or they are run, and then behave as ``torch.fx.GraphModule`` does."""
    from compiler.folding import graph_module

    traced = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()))
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(traced.graph, {}))
    lazy = graph_module(traced, graph)
    for node in graph.nodes:  # rewritten after construction, as the passes do
        if node.op == "call_module" and node.target == "1":
            with graph.inserting_after(node):
                doubled = graph.call_function(torch.mul, (node, 2.0))
            node.replace_all_uses_with(doubled, delete_user_cb=lambda user, new=doubled: user is not new)
    lazy.recompile()
    x = torch.randn(5, 3)
    torch.testing.assert_close(lazy(x), traced(x) * 2)
    assert "torch.mul" in lazy.code and lazy.code == torch.fx.GraphModule(traced, graph).code
