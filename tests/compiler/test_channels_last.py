"""Channels-last graphs (``compiler.layout``): the decision, NHWC kernels, weights converted once."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler import ir
from compiler.codegen.registry import renderer_for
from compiler.config import Options
from compiler.graph import ExternNode
from compiler.layout import channels_last_strides, choose_layout, is_channels_last
from compiler.lowering import lower
from compiler.report import collect_reports
from compiler.scheduler import schedule
from tests.compiler.parity import assert_close, compiled_run


class SmallConvNet(torch.nn.Module):
    """Odd channel counts, a stem conv, depthwise and grouped convs, batch norms, a residual add,
    max and average pooling; returns a pooled feature map (4-d) and logits."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 10, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(10)
        self.dw = torch.nn.Conv2d(10, 10, 3, padding=1, groups=10)
        self.bn2 = torch.nn.BatchNorm2d(10)
        self.grouped = torch.nn.Conv2d(10, 15, 3, padding=1, groups=5, bias=False)
        self.pool = torch.nn.MaxPool2d(2)
        self.project = torch.nn.Conv2d(15, 7, 1)
        self.fc = torch.nn.Linear(7, 5)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.bn1(self.stem(x)))
        y = y + torch.nn.functional.hardswish(self.bn2(self.dw(y)))
        y = self.pool(torch.relu(self.grouped(y)))
        feat = torch.nn.functional.avg_pool2d(self.project(y), 2, ceil_mode=True)
        return feat, self.fc(feat.mean((2, 3)))


def model() -> SmallConvNet:
    torch.manual_seed(0)
    return SmallConvNet().eval()


def test_channels_last_matches_eager_with_eager_output_strides(codegen):
    m, x = model(), torch.randn(2, 3, 9, 11)
    _, out, report = compiled_run(m, x, layout="channels_last", codegen=codegen)
    (graph,) = report.graphs
    assert graph.layout == "channels_last" and "layout='channels_last'" in graph.layout_reason
    assert "layout: channels_last" in str(graph)
    with torch.no_grad():
        expected = m(x)
    for got, want in zip(out, expected):
        assert torch.isfinite(got).all()
        assert got.stride() == want.stride()  # outputs keep eager's layout
        assert_close(got, want)


def small_net(flatten: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
    return torch.nn.Sequential(*layers, *([torch.nn.Flatten(), torch.nn.Linear(5 * 4 * 5, 3)] if flatten else []))


def test_channels_last_input_keeps_its_layout_to_the_output():
    """A caller's NHWC input: eager returns an NHWC feature map, and so does the compiled graph."""
    m = small_net().eval()
    x = torch.randn(2, 3, 9, 11).contiguous(memory_format=torch.channels_last)
    _, out, _ = compiled_run(m, x, layout="channels_last", codegen="triton")
    with torch.no_grad():
        expected = m(x)
    assert out.stride() == expected.stride() and is_channels_last(out.shape, out.stride())
    assert_close(out, expected)


def test_forced_channels_last_training_step_matches_eager():
    """A forward graph: its saved activations are outputs, in eager's layout for the backward graph;
    the flatten before the linear needs a contiguous feature map."""
    m, x = small_net(flatten=True), torch.randn(2, 3, 9, 11)
    ref = small_net(flatten=True)
    compiled = torch.compile(m, backend="crucible", options={"strict": True, "layout": "channels_last",
                                                             "codegen": "triton"})
    with collect_reports() as report:
        compiled(x).square().sum().backward()
    ref(x).square().sum().backward()
    assert report.graphs[0].kind == "forward" and report.graphs[0].layout == "channels_last"
    for got, want in zip(m.parameters(), ref.parameters()):
        assert_close(got.grad, want.grad)


def test_channels_last_training_saves_nhwc_activations_for_an_nhwc_backward(codegen, monkeypatch):
    """Issue 38 (GPU training ran every graph contiguous): a channels-last forward returns its saved
    activations NHWC and tells AOTAutograd their strides, so the backward gets them NHWC, runs
    channels-last too (its convolution gradients NHWC), and the gradients, the user's outputs and
    their strides are eager's. Without the report the backward would read NHWC memory as NCHW."""
    import compiler.backend

    reported: list = []
    report_strides = compiler.backend.report_output_strides
    monkeypatch.setattr(compiler.backend, "report_output_strides",
                        lambda strides: (reported.append(strides), report_strides(strides)))
    torch.manual_seed(0)
    m, ref = SmallConvNet().train(), SmallConvNet().train()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 9, 11)
    compiled = torch.compile(m, backend="crucible", options={"strict": True, "layout": "channels_last",
                                                             "codegen": codegen})
    with collect_reports() as report:
        feat, logits = compiled(x)
        (feat.square().sum() + logits.sum()).backward()
    want_feat, want_logits = ref(x)
    (want_feat.square().sum() + want_logits.sum()).backward()
    forward, backward = report.graphs
    assert (forward.kind, forward.layout, backward.kind, backward.layout) == \
        ("forward", "channels_last", "backward", "channels_last"), (forward.layout_reason, backward.layout_reason)
    assert "saved activations arrive NHWC" in backward.layout_reason
    saved = [s for s in reported[0][2:] if s is not None and len(s) == 4 and s[1] == 1]
    assert len(saved) >= 4, reported  # the convolutions' and batch norms' outputs, NHWC
    assert feat.stride() == want_feat.stride()
    assert_close(feat, want_feat)
    assert_close(logits, want_logits)
    for got, want in zip(m.parameters(), ref.parameters()):
        assert_close(got.grad, want.grad)


def trace(m: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    """``m`` as an ATen graph with its parameters and buffers as inputs after ``x``."""
    state = dict(m.named_parameters()) | dict(m.named_buffers())

    def call(t: torch.Tensor, *tensors: torch.Tensor):
        return torch.func.functional_call(m, dict(zip(state, tensors)), (t,))

    with torch.no_grad():
        return compiler.trace_aten(call, x, *state.values())


def _channels_last_schedule(m: torch.nn.Module, x: torch.Tensor):
    gm = trace(m, x)
    renderer = renderer_for("triton", torch.device("cpu"))
    lowered = lower(gm, torch.device("cpu"), renderer.capabilities, layout="channels_last")
    return lowered, schedule(lowered, renderer.capabilities)


def test_fused_kernels_walk_nhwc_buffers_along_channels():
    """Every kernel storing an NHWC buffer has the channel dim as its fastest loop (stride 1)."""
    lowered, sched = _channels_last_schedule(model(), torch.randn(2, 3, 9, 11))
    buffers = lowered.buffers()
    nhwc = {name for name, b in buffers.items() if is_channels_last(b.shape, b.stride)}
    convs = [n for n in lowered.nodes if str(getattr(n, "op", "")) == "aten.convolution.default"]
    assert len(convs) == 4 and all(b.name in nhwc for c in convs for b in c.outputs)
    stored = [(k, s) for k in sched.kernels for s in k.live_stores() if s.buffer in nhwc]
    assert len(stored) >= 4  # the conv inputs: the graph's input, relu, residual add, max pool
    for k, s in stored:
        inner = ir.xvar(len(k.ranges) - 1)
        assert ir.to_affine(s.index).get(inner) == 1, f"{k.name} stores {s.buffer} at {ir.render_expr(s.index)}"
        assert k.ranges[-1] == buffers[s.buffer].shape[1]  # ... which walks the channels


def test_contiguous_layout_lowers_as_before():
    lowered = lower(trace(model(), torch.randn(2, 3, 9, 11)), torch.device("cpu"))
    assert not any(is_channels_last(b.shape, b.stride) for b in lowered.buffers().values())
    assert all(not getattr(n, "order", ()) for n in lowered.nodes)


def _pool_and_scale(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.nn.functional.max_pool2d(x, 2), torch.sigmoid(x * 2 + 1)


def test_a_contiguous_graph_walks_an_nhwc_input_along_channels(codegen):
    """A graph without convolutions stays contiguous, but a value computed from an NHWC input is laid
    out NHWC as eager lays it out, and its kernel walks the channels fastest. Before, such a graph's
    max pool walked (N, C, H, W) with stores and loads 16 channels apart: 1,033 us against eager's
    753 for a 32x16x64x64 input at 2 threads (C++), and 107 us walked along memory."""
    x = torch.randn(4, 6, 8, 10).contiguous(memory_format=torch.channels_last)
    gm = compiler.trace_aten(_pool_and_scale, x)
    renderer = renderer_for("triton", torch.device("cpu"))
    lowered = lower(gm, torch.device("cpu"), renderer.capabilities)
    buffers = lowered.buffers()
    sched = schedule(lowered, renderer.capabilities)
    stored = [(k, s) for k in sched.kernels for s in k.live_stores()]
    assert len(stored) == 2 and all(is_channels_last(buffers[s.buffer].shape, buffers[s.buffer].stride)
                                    for _, s in stored)
    for k, s in stored:
        assert ir.to_affine(s.index).get(ir.xvar(len(k.ranges) - 1)) == 1, ir.render_expr(s.index)
    pooled, scaled = compiler.compile_graph(gm, [x], codegen=codegen)(x)
    for got, want in zip((pooled, scaled), _pool_and_scale(x)):
        assert_close(got, want)
        assert got.stride() == want.stride()


def test_weights_are_converted_once_and_refilled_after_an_update():
    m, x = model(), torch.randn(2, 3, 9, 11)
    compiled, _, report = compiled_run(m, x, calls=2, layout="channels_last", codegen="triton")
    (graph,) = report.graphs
    # two convs carry a folded batch norm (made NHWC in place), two weights are copied
    assert "convert_weight_layout" in graph.passes
    assert "convert_weight_layout: 4 convolution" in graph.fold_summary()
    assert graph.weight_refills == 1
    with torch.no_grad():
        m.grouped.weight.mul_(-0.5)  # in place: the converted copy is refilled
        assert_close(compiled(x)[1], m(x)[1])
        m.project.weight = torch.nn.Parameter(torch.randn_like(m.project.weight))  # reassigned
        assert_close(compiled(x)[1], m(x)[1])
        m.stem.weight.data = torch.randn_like(m.stem.weight)  # a folded conv's source
        assert_close(compiled(x)[1], m(x)[1])
    assert graph.weight_refills >= 3


def test_shared_weight_is_converted_once():
    conv = torch.nn.Conv2d(4, 4, 3, padding=1).eval()
    x = torch.randn(1, 4, 5, 5)
    _, out, report = compiled_run(lambda t: conv(torch.relu(conv(t))), x, layout="channels_last", codegen="triton")
    assert report.graphs[0].fold_summary() == "convert_weight_layout: 1 convolution"  # triton: no oneDNN pass
    with torch.no_grad():
        assert_close(out, conv(torch.relu(conv(x))))


def _decision(m, x, device: str = "cuda", option: str = "auto", kind: str = "inference"):
    """The decision for ``m``'s graph as if it ran on ``device`` (the rule reads shapes, not data)."""
    gm = trace(m, x) if isinstance(m, torch.nn.Module) else compiler.trace_aten(m, x)
    return choose_layout(gm, torch.device(device), option, kind)


def test_rule_keeps_cpu_training_and_convolution_free_graphs_contiguous():
    gm = trace(small_net().eval(), torch.randn(2, 3, 9, 11))
    assert "C++ codegen only" in choose_layout(gm, torch.device("cpu"), "auto", "inference", codegen="triton").reason
    cpu_training = choose_layout(gm, torch.device("cpu"), "auto", "forward", codegen="cpp")
    assert cpu_training.layout == "contiguous" and "measured" in cpu_training.reason
    assert _decision(lambda t: t.relu() + 1, torch.randn(3)).reason == "no 2-d convolutions"
    forced = choose_layout(gm, torch.device("cpu"), "channels_last", "inference")
    assert forced.layout == "channels_last" and "the rule would choose contiguous" in forced.reason


def test_gpu_training_forward_stays_contiguous_and_a_backward_follows_its_forward():
    """A GPU training forward stays contiguous (measured: resnet50's NHWC batch-norm reductions lose
    more than its convolutions gain); a backward graph goes channels-last exactly when a saved
    activation arrives NHWC (a forward forced channels-last)."""
    m, x = small_net().train(), torch.randn(2, 3, 9, 11)
    gm = trace(m, x)
    cuda = torch.device("cuda")
    assert choose_layout(gm, cuda, "auto", "inference").layout == "channels_last"
    training = choose_layout(gm, cuda, "auto", "forward")
    assert training.layout == "contiguous" and "measured" in training.reason
    x.requires_grad_(True)

    def grads(t, w, b):
        out, vjp = torch.func.vjp(lambda t, w: torch.nn.functional.conv2d(t, w, b, padding=1), t, w)
        return vjp(torch.ones_like(out))

    w, b = m[0].weight.detach(), m[0].bias.detach()
    for memory_format, layout in ((torch.channels_last, "channels_last"), (torch.contiguous_format, "contiguous")):
        backward = compiler.trace_aten(grads, x.detach().contiguous(memory_format=memory_format), w, b)
        assert [n.target for n in backward.graph.nodes if n.op == "call_function"].count(
            torch.ops.aten.convolution_backward.default) == 1
        decision = choose_layout(backward, cuda, "auto", "backward")
        assert decision.layout == layout and decision.convs == 1, decision


def test_pooling_and_convolution_gradients_take_nhwc_tensors_in_a_channels_last_graph():
    """A channels-last backward hands max pooling's and a convolution's gradients NHWC tensors and
    keeps their NHWC results (before: each was converted to NCHW for the call and back after it)."""
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)  # traced NCHW: eager's layouts are NCHW

    def grads(t, w):
        out, vjp = torch.func.vjp(lambda t, w: torch.nn.functional.max_pool2d(
            torch.nn.functional.conv2d(t, w, padding=1), 2), t, w)
        return vjp(torch.ones_like(out))

    gm = compiler.trace_aten(grads, x, w)
    renderer = renderer_for("cpp", torch.device("cpu"))
    lowered = lower(gm, torch.device("cpu"), renderer.capabilities, layout="channels_last")
    calls = {n.op: n for n in lowered.nodes if isinstance(n, ExternNode)}
    aten = torch.ops.aten
    for op in (aten.max_pool2d_with_indices_backward.default, aten.convolution_backward.default):
        node = calls[op]
        views = [a for a in node.args if hasattr(a, "stride") and len(a.shape) == 4]
        assert is_channels_last(node.outputs[0].shape, node.outputs[0].stride), node
        assert sum(is_channels_last(v.shape, v.stride) for v in views) >= 2, node
    got = compiler.compile_graph(gm, [x, w], codegen="cpp")(x, w)
    for a, b in zip(got, grads(x, w)):
        assert_close(a, b)


def test_rule_runs_cpp_inference_graphs_channels_last():
    """oneDNN runs NHWC convolutions without reordering activations: resnet18 1.6x (issue 38)."""
    gm = trace(small_net().eval(), torch.randn(2, 3, 9, 11))
    decision = choose_layout(gm, torch.device("cpu"), "auto", "inference", codegen="cpp")
    assert decision.layout == "channels_last" and "oneDNN" in decision.reason
    m, x = model(), torch.randn(2, 3, 9, 11)
    _, out, report = compiled_run(m, x, codegen="cpp")
    assert [g.layout for g in report.graphs] == ["channels_last"]
    with torch.no_grad():
        for got, want in zip(out, m(x)):
            assert_close(got, want)


def test_rule_reads_a_folded_weight_by_its_shape_only(monkeypatch):
    """On the H200 every float32 convnet failed in ``choose_layout``: the rule ran an op (``weight[0]``)
    on a batch-norm fold's real weight inside the fake mode graphs are compiled under. Here the rule
    decides a CPU graph as it would a GPU one."""
    import compiler.layout

    def as_on_a_gpu(gm, device, option, kind, cudagraphs=False, codegen="", dynamic=False):
        return compiler.layout.choose_layout(gm, torch.device("cuda"), option, kind, cudagraphs, codegen, dynamic)

    monkeypatch.setattr("compiler.pipeline.choose_layout", as_on_a_gpu)
    m, x = model(), torch.randn(2, 3, 9, 11)
    _, out, report = compiled_run(m, x, codegen="triton")
    (graph,) = report.graphs
    assert "fold_batch_norm" in graph.passes and "estimated conv time" in graph.layout_reason
    with torch.no_grad():
        assert_close(out[1], m(x)[1])


def test_rule_prefers_channels_last_for_depthwise_but_not_for_1x1_convs():
    """The measured ratios: depthwise convs gain most from NHWC, 1x1 convs too little to pay for a graph."""
    depthwise = torch.nn.Conv2d(64, 64, 3, padding=1, groups=64).eval()
    pointwise = torch.nn.Conv2d(64, 64, 1).eval()
    x = torch.randn(2, 64, 16, 16)
    dw, pw = _decision(depthwise, x), _decision(pointwise, x)
    assert dw.layout == "channels_last" and "depthwise 1" in dw.reason
    assert pw.layout == "contiguous" and "pointwise 1" in pw.reason
    stem = _decision(torch.nn.Conv2d(3, 16, 3).eval().to(torch.bfloat16), x[:, :3].to(torch.bfloat16))
    assert stem.layout == "contiguous" and "stem 1" in stem.reason  # bf16 stems: no faster in NHWC


def test_rule_limit_depends_on_depthwise_and_grouped_convs():
    """resnet50 on the H200 (estimate 0.86 fp32, 0.87 bf16) ran 1.20x / 1.59x faster channels-last
    as a whole, mobilenetv3 fp32 (0.78, depthwise) 0.74x: dense graphs go channels-last up to 0.9,
    graphs with depthwise or grouped convolutions only up to 0.75."""
    x = torch.randn(2, 64, 16, 16)
    dense = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 1),
                                torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 1)).eval()
    d = _decision(dense, x)
    assert d.layout == "channels_last" and "at most 0.9" in d.reason, d.reason
    mixed = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 1), torch.nn.Conv2d(64, 64, 3, padding=1, groups=64),
                                torch.nn.Conv2d(64, 64, 1), torch.nn.Conv2d(64, 64, 1)).eval()
    m = _decision(mixed, x)
    assert "at most 0.75" in m.reason and "depthwise 1" in m.reason, m.reason
    estimate = float(m.reason.split("NCHW ")[1].split()[0])
    assert m.layout == ("channels_last" if estimate <= 0.75 else "contiguous"), m.reason


def test_under_cuda_graphs_depthwise_graphs_go_channels_last_up_to_0_8():
    """efficientnet_b0 and mobilenetv3 fp32 on the H200 (estimate 0.78): channels-last 1.28x under
    CUDA graphs, 0.88x / 0.95x without (cuDNN's NHWC depthwise kernels cost the host more). A
    depthwise and a 1x1 conv estimate 0.77 here: contiguous by default, channels-last under graphs."""
    net = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1, groups=64), torch.nn.Conv2d(64, 64, 1)).eval()
    x = torch.randn(2, 64, 16, 16)
    gm = trace(net, x)
    plain = choose_layout(gm, torch.device("cuda"), "auto", "inference")
    graphed = choose_layout(gm, torch.device("cuda"), "auto", "inference", cudagraphs=True)
    estimate = float(plain.reason.split("NCHW ")[1].split()[0])
    assert 0.75 < estimate <= 0.8, plain.reason
    assert plain.layout == "contiguous" and "at most 0.75)" in plain.reason
    assert graphed.layout == "channels_last" and "at most 0.8, CUDA graphs" in graphed.reason
    dense = trace(torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.Conv2d(64, 64, 1)).eval(), x)
    assert "at most 0.9)" in choose_layout(dense, torch.device("cuda"), "auto", "inference", cudagraphs=True).reason


def test_rule_skips_a_lone_convolution_in_a_big_graph(monkeypatch):
    """A ViT-like graph: one patch-embedding conv, many other nodes (fewer here, with a lower limit)."""
    monkeypatch.setattr("compiler.layout.MAX_NODES_PER_CONV", 20)
    class VitLike(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Conv2d(3, 8, 4, stride=4)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            y = self.embed(t).flatten(2)
            for _ in range(8):
                y = torch.tanh(y) * 0.5 + y
            return y

    decision = _decision(VitLike().eval(), torch.randn(1, 3, 16, 16))
    assert decision.layout == "contiguous" and "too few" in decision.reason


def test_layout_option_is_checked():
    assert Options.parse({}).layout == "auto"
    assert Options.parse({"layout": "channels_last"}).layout == "channels_last"
    with pytest.raises(ValueError, match="layout must be one of"):
        Options.parse({"layout": "nhwc"})


def test_channels_last_strides():
    assert channels_last_strides((2, 3, 4, 5)) == (60, 1, 15, 3)
    assert is_channels_last((2, 3, 4, 5), (60, 1, 15, 3))
    assert not is_channels_last((2, 3, 1, 1), (3, 1, 3, 3))  # same memory as row-major


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_channels_last_matches_eager_and_auto_decides(dtype):
    """float32 without TF32: cuDNN may pick a TF32 algorithm for one layout and not the other
    (``harness.oracle.working_precision``)."""
    from harness.oracle import working_precision

    m, x = model().to("cuda", dtype), torch.randn(4, 3, 17, 19, device="cuda", dtype=dtype)
    with torch.no_grad(), working_precision():
        expected = m(x)
    for layout in ("channels_last", "auto"):
        torch._dynamo.reset()
        with working_precision():
            _, out, report = compiled_run(m, x, layout=layout)
        (graph,) = report.graphs
        assert "estimated conv time" in graph.layout_reason  # the rule ran on this GPU graph
        for got, want in zip(out, expected):
            assert got.stride() == want.stride()
            assert_close(got, want)


def test_layout_benchmark_runs_its_help_and_formats_rows_anywhere(capsys):
    from harness.bench import layout as bench

    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0 and "--convs" in capsys.readouterr().out
    row = {"model": "m", "dtype": "bf16", "eager_ms": 5.0, "contiguous_ms": 2.0, "channels_last_ms": 1.6,
           "contiguous_err": 0.0, "channels_last_err": 1e-3, "rule": "channels_last (...)"}
    assert "channels-last speedup 1.25x" in bench.model_line(row)
    assert "FAILED channels_last_error: boom" in bench.model_line(row | {"channels_last_error": "boom"})
    assert "CUDA graphs" not in bench.model_line(row)
    graphed = bench.model_line(row | {"contiguous_cg_ms": 1.5, "channels_last_cg_ms": 1.0})
    assert "CUDA graphs: contiguous 1.500 ms, channels_last 1.000 ms (channels-last speedup 1.50x)" in graphed


class ConvNeXtBlock(torch.nn.Module):
    """convnext's block: a depthwise conv, then a layer norm over channels of the (N, H, W, C) view."""

    def __init__(self, c: int = 12) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc = torch.nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        return x + self.fc(y).permute(0, 3, 1, 2)


def test_a_layer_norm_over_a_permuted_nhwc_conv_output_is_one_kernel(codegen):
    """Regression (convnext_tiny bf16 on an H200, 1.0 ms of 3.2 ms in its layer norms): the row
    statistics of the (N, H, W, C) view got NHWC strides for their (N, H, W, 1) shape, so H and W
    were transposed in memory, the normalizing kernel could not fuse with its reduction
    (cross_program_read) and every norm was two kernels through four float32 buffers."""
    torch.manual_seed(0)
    m, x = ConvNeXtBlock().eval(), torch.randn(2, 12, 9, 11)
    _, out, report = compiled_run(m, x, layout="channels_last", codegen=codegen)
    (graph,) = report.graphs
    assert graph.layout == "channels_last"
    assert not [r for r in graph.refused_fusions if r.reason.value == "cross_program_read"], graph.refused_fusions
    norms = [k for k in graph.kernels if {"native_layer_norm.default", "mean.dim", "sum.dim_IntList"} & set(k.ops)]
    assert len(norms) == 1 and norms[0].kind == "reduction", [k.ops for k in graph.kernels]
    with torch.no_grad():
        assert_close(out, m(x))


class PatchEmbed(torch.nn.Module):
    """swin's patch embedding: a strided conv, its (N, H, W, C) view, a layer norm over channels."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 16, 4, stride=4)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


def _patch_embed_conv(gm, device: str):
    """The lowered conv's result buffer and the layer norm kernel's reads of it."""
    renderer = renderer_for("triton", torch.device("cuda"))
    lowered = lower(gm, torch.device(device), renderer.capabilities)  # contiguous, as swin's graph is
    (conv,) = [n for n in lowered.nodes if isinstance(n, ExternNode) and n.op is torch.ops.aten.convolution.default]
    out = conv.outputs[0]
    norm = [k for k in schedule(lowered, renderer.capabilities).kernels if k.is_reduction]
    return out, [e.src[0] for k in norm for st in k.stores for e in ir.loads(st.value) if e.arg == out.name]


def test_a_gpu_conv_whose_users_permute_it_to_nhwc_produces_nhwc(monkeypatch):
    """Regression (swin_tiny bf16 on the H200, 0.2 ms of its 3.4 ms in one kernel): in a contiguous
    graph the patch embedding's NCHW result made the layer norm's rows reads 3136 elements apart.
    On a GPU a 16-bit conv like it now produces NHWC, so the norm reads its rows contiguously; on the
    CPU, and in float32 (TF32 NHWC kernels round unlike eager's NCHW one), nothing changes."""
    torch.manual_seed(0)
    m, x = PatchEmbed().eval(), torch.randn(2, 3, 16, 20)
    for device, dtype, nhwc in (("cuda", torch.bfloat16, True), ("cpu", torch.bfloat16, False),
                                ("cuda", torch.float32, False)):
        out, _ = _patch_embed_conv(trace(m.to(dtype), x.to(dtype)), device)
        assert is_channels_last(out.shape, out.stride) == nhwc, (device, dtype, out.stride)
    m = m.float()
    # the norm's reads, in float32 (a bfloat16 graph traced on this CPU casts through the CPU)
    monkeypatch.setattr("compiler.layout.PERMUTED_NHWC_DTYPES", (torch.float32,))
    for device, stride in (("cuda", 1), ("cpu", 20)):
        out, reads = _patch_embed_conv(trace(m, x), device)
        assert reads and all(ir.to_affine(r).get(ir.rvar(0)) == stride for r in reads), reads
    _, got, _ = compiled_run(m, x, codegen="triton")
    with torch.no_grad():
        assert_close(got, m(x))


def test_a_stacked_gemm_weight_among_the_folds_is_left_to_its_own_refill():
    """H200 (cudagraphs GPU test, conv + batch norm + a linear): the CUDA GEMM pass's stacked weight
    sits in the folds beside the batch norm's, has no ``folded_weight``, and the lookup of folded conv
    weights read it from every fold: AttributeError, the graph failed to compile."""
    from compiler.extern_passes import StackedWeight
    from compiler.folding import BatchNormFold, FoldedGraph
    from compiler.layout import convert_weight_layout

    weight = torch.randn(8, 3, 3, 3)
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm.register_buffer("_folded0_weight", weight)
    x = gm.graph.placeholder("x")
    x.meta["val"] = torch.empty(2, 3, 8, 8)
    w = gm.graph.get_attr("_folded0_weight")
    w.meta["val"] = weight
    conv = gm.graph.call_function(torch.ops.aten.convolution.default, (x, w, None, [1, 1], [0, 0], [1, 1], False,
                                                                       [0, 0], 1))
    conv.meta["val"] = torch.empty(2, 8, 6, 6)
    gm.graph.output(conv)
    gm.recompile()
    fold = BatchNormFold("convolution", conv.name, 1, None, 2, 3, None, None, 1e-5, 0, weight, torch.zeros(8))
    stack = StackedWeight([4, 5], 0, torch.zeros(16, 4))
    converted = convert_weight_layout(FoldedGraph(gm, [stack, fold]), [1, 2, 3, 4, 5])
    assert is_channels_last(fold.folded_weight.shape, fold.folded_weight.stride())
    assert converted.folds[0] is stack


def test_layout_benchmark_times_training_steps_in_both_layouts(monkeypatch):
    """``python -m harness.bench.layout --train``: eager and Crucible forced to each layout, their steps
    interleaved (the measurement behind the rule's training branch); a CPU smoke check of the row."""
    from harness.bench import layout as bench

    def tiny(name, dtype, device, train=False):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))
        return m.train(train), (torch.randn(4, 3, 8, 8),)

    monkeypatch.setattr(bench, "_model", tiny)
    monkeypatch.setattr(bench, "TRAIN_VARIANTS", ("eager", "contiguous", "channels_last"))  # no Inductor compile
    row = bench.measure_training("tiny", "fp32", "cpu", rounds=2)
    assert not [k for k in row if k.endswith("_error")], row
    assert all(row[f"{v}_ms"] > 0 for v in ("eager", "contiguous", "channels_last"))
    line = bench.model_line(row)
    assert line.startswith("tiny fp32 training step: eager") and "channels-last speedup" in line, line
    assert "contiguous" in row["rule"]  # the rule's own choice for a CPU training forward


def test_layout_benchmark_training_line_gives_each_variant_s_gpu_time_and_kernels():
    """On a GPU the training row adds each variant's GPU time a step and its longest kernels: on a slow
    host the wall times wait on it (the forty-third session), and which layout does less GPU work decides."""
    from harness.bench import layout as bench

    row = {"model": "m", "dtype": "bf16", "train": True, "rule": "r", **{f"{v}_ms": 10.0 for v in bench.TRAIN_VARIANTS},
           "inductor_gpu_ms": 6.0, "inductor_top": [["triton_red", 1.0]], "contiguous_gpu_ms": 8.0,
           "contiguous_top": [["nchwToNhwcKernel", 2.0]], "channels_last_gpu_ms": 5.0,
           "channels_last_top": [["k_sum", 1.5], ["sm90_xmma", 1.25]]}
    line = bench.model_line(row)
    assert "Inductor 10.000 ms" in line and "(channels-last speedup 1.00x, in GPU time 1.60x)" in line
    assert "\n  contiguous: GPU 8.000 ms a step: nchwToNhwcKernel 2.000" in line
    assert "\n  channels_last: GPU 5.000 ms a step: k_sum 1.500; sm90_xmma 1.250" in line
