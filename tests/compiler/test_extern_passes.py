"""Matmul rewrites before lowering (``compiler.extern_passes``): shared-input GEMMs concatenated,
unaligned GPU weights padded, bias and activation epilogues moved into the extern."""

from __future__ import annotations

import math

import pytest
import torch

import compiler
from compiler.codegen.triton import TritonRenderer
from compiler.extern_passes import fuse_extern_epilogues, merge_matmuls, onednn_available
from compiler.folding import FoldedGraph, FoldedWeights
from compiler.graph import ComputedNode, ExternNode
from compiler.ir import Op
from compiler.lowering import lower
from compiler.report import GraphReport, collect_reports
from tests.compiler.parity import Reference, assert_close, compiled_run

aten = torch.ops.aten
CUDA = torch.device("cuda")  # the passes' device rule only: the graphs below stay on the CPU
GPU_RENDERER = TritonRenderer(interpret=False).capabilities  # no templates: every matmul a library call


class Attention(torch.nn.Module):
    """BERT's (bias) or Llama's (no bias, narrower K/V) projections of one input, and Llama's MLP."""

    def __init__(self, bias: bool = True, kv: int = 16) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(16, n, bias=bias) for n in (16, kv, kv))
        self.gate, self.up = torch.nn.Linear(16, 24, bias=False), torch.nn.Linear(16, 24, bias=False)
        self.out = torch.nn.Linear(16 + 2 * kv + 24, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mlp = torch.nn.functional.silu(self.gate(x)) * self.up(x)
        return self.out(torch.cat([self.q(x), self.k(x).tanh(), self.v(x), mlp], -1))


class Conv1DPair(torch.nn.Module):
    """GPT-2's ``Conv1D``: ``addmm(b, x, W)`` with a [K, N] weight."""

    def __init__(self) -> None:
        super().__init__()
        self.w1, self.w2 = torch.nn.Parameter(torch.randn(16, 12)), torch.nn.Parameter(torch.randn(16, 20))
        self.b1, self.b2 = torch.nn.Parameter(torch.randn(12)), torch.nn.Parameter(torch.randn(20))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.view(-1, 16)
        return torch.addmm(self.b1, flat, self.w1).sum(-1) + torch.addmm(self.b2, flat, self.w2).amax(-1)


def run(model: torch.nn.Module, x: torch.Tensor, calls: int = 1, **options):
    return compiled_run(model.eval().requires_grad_(False), x, calls, **options)


def rewrites(report) -> list[tuple[str, str]]:
    return [(f.pass_name, f.op) for g in report.graphs for f in g.weight_folds]


@pytest.mark.parametrize("bias", [True, False], ids=["bert", "llama"])
def test_projections_of_one_input_become_one_gemm(codegen, bias):
    torch.manual_seed(0)
    model, x = Attention(bias=bias, kv=8 if not bias else 16), torch.randn(2, 5, 16)
    _, out, report = run(model, x, codegen=codegen)
    # q, k, v one group, gate and up another; without biases all five are one
    expected = [("concat_matmuls", "addmm"), ("concat_matmuls", "mm")] if bias else [("concat_matmuls", "mm")]
    assert sorted(rewrites(report)) == expected
    matmuls = [e.op for e in report.externs if "mm" in e.op]
    assert len(matmuls) == (2 if not bias else 3)  # merged ones + the output projection
    with torch.no_grad():
        assert_close(out, model(x))


def test_bf16_projections_stay_as_close_to_float64_as_eager():
    torch.manual_seed(0)
    model, x = Attention(bias=False, kv=8), torch.randn(4, 33, 16)
    reference = model.double()(x.double()).detach()
    model = model.to(torch.bfloat16)
    _, out, report = run(model, x.to(torch.bfloat16), codegen="triton")
    assert rewrites(report) == [("concat_matmuls", "mm")]
    with torch.no_grad():
        assert_close(out, model(x.to(torch.bfloat16)), reference=Reference(reference, torch.bfloat16))


def test_conv1d_weights_concatenate_along_their_columns(codegen):
    torch.manual_seed(0)
    model, x = Conv1DPair(), torch.randn(3, 4, 16)
    _, out, report = run(model, x, codegen=codegen)
    assert rewrites(report) == [("concat_matmuls", "addmm")]
    with torch.no_grad():
        assert_close(out, model(x))


def test_concatenated_weights_follow_parameter_updates():
    torch.manual_seed(0)
    model, x = Attention(), torch.randn(2, 5, 16)
    compiled, _, report = run(model, x, calls=2, codegen="triton")
    assert report.graphs[0].weight_refills == 1
    with torch.no_grad():
        model.k.weight.mul_(-2)  # in place: a version change
        assert_close(compiled(x), model(x))
        model.v.bias.data = torch.randn(16)  # new storage, same tensor and version
        assert_close(compiled(x), model(x))
    assert report.graphs[0].weight_refills == 3


def test_no_rewrite_without_static_weights_or_with_the_option_off():
    torch.manual_seed(0)
    model, x = Attention(), torch.randn(2, 5, 16)
    _, _, off = run(model, x, codegen="triton", fold_weights=False)
    assert rewrites(off) == []
    torch._dynamo.reset()
    compiled = torch.compile(model.train().requires_grad_(True), backend="crucible",
                             options={"strict": True, "codegen": "triton"})
    with collect_reports() as report:  # a forward graph for training: weights are not constants
        compiled(x).sum().backward()
    assert rewrites(report) == []


def test_dynamic_shapes_compile_without_the_static_rewrites():
    """A graph with symbolic sizes compiles (issue 36) but takes neither merged nor padded GEMMs:
    both rewrites are written for static shapes (``extern_passes._symbolic``)."""
    model = Attention().eval().requires_grad_(False)
    compiled = torch.compile(model, backend="crucible", options={"codegen": "triton"}, dynamic=True)
    x = torch.randn(2, 5, 16)
    with torch.no_grad(), collect_reports() as report:
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert not report.fallbacks and report.graphs[-1].dynamic
    assert rewrites(report) == []


class FlattenedProjection(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 6), torch.nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a view eager can take of a dense result but not of a column slice
        return self.a(x).view(-1) + self.b(x).view(-1)


def test_a_consumer_that_cannot_view_a_column_slice_keeps_the_gemms_apart():
    torch.manual_seed(0)
    model, x = FlattenedProjection(), torch.randn(4, 8)
    _, out, report = run(model, x, codegen="triton")
    assert rewrites(report) == []
    with torch.no_grad():
        assert_close(out, model(x))


# --- the GPU rules, applied to CPU graphs ---------------------------------------------------

def traced(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.fx.GraphModule, list[torch.Tensor], list[int]]:
    """The module's ATen graph with its parameters as leading inputs (as AOTAutograd passes them)."""
    params = dict(model.named_parameters())
    names = list(params)

    def fn(*args: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(names, args[:-1])), (args[-1],))

    args = [*params.values(), x]
    return compiler.trace_aten(fn, *args), args, list(range(len(names)))


def checked(folded: FoldedGraph, gm: torch.fx.GraphModule, args: list[torch.Tensor]) -> None:
    """The rewritten graph, its constants filled by the guard, computes what the original does."""
    guard = FoldedWeights(lambda a: folded.gm(*a), folded.folds, GraphReport(0, "inference", 0, "triton"))
    assert_close(guard(list(args)), gm(*args))


def test_an_unaligned_gpu_weight_is_padded_to_16_bytes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 50), torch.nn.Linear(50, 13, bias=False)).to(torch.bfloat16)
    gm, args, static = traced(model.requires_grad_(False), torch.randn(4, 16, dtype=torch.bfloat16))
    out = merge_matmuls(FoldedGraph(gm), static, CUDA)
    assert [(r.pass_name, r.op) for r in out.rewrites] == [("pad_matmul_weights", "addmm"),
                                                           ("pad_matmul_weights", "mm")]
    assert sorted(tuple(f.target.shape) for f in out.folded.folds) == [(16, 50), (56,), (56, 16)]
    checked(out.folded, gm, args)
    assert merge_matmuls(FoldedGraph(gm), static, torch.device("cpu")).rewrites == []  # CPU: no padding


class TwoHeads(torch.nn.Module):
    """Two projections of one input returned as graph outputs (13 float32 columns: padded on the GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 13), torch.nn.Linear(16, 7)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x)


@pytest.mark.parametrize("device", [CUDA, torch.device("cpu")], ids=["gpu-rules", "cpu-rules"])
def test_graph_outputs_of_a_merged_gemm_keep_eager_strides(device):
    """A column slice of the merged (or padded) result is strided like the merged matrix: as a graph
    output it is copied dense, the strides eager returns (found by the channels-last GPU test, whose
    5-class head came back with stride (8, 1))."""
    torch.manual_seed(0)
    model = TwoHeads().requires_grad_(False)
    gm, args, static = traced(model, torch.randn(4, 16))
    out = merge_matmuls(FoldedGraph(gm), static, device)
    assert [r.pass_name for r in out.rewrites] == ["concat_matmuls"]
    guard = FoldedWeights(lambda a: out.folded.gm(*a), out.folded.folds, GraphReport(0, "inference", 0, "triton"))
    for got, want in zip(guard(list(args)), gm(*args)):
        assert got.stride() == want.stride() == (want.shape[1], 1)
        assert_close(got, want)


def test_a_concatenated_weight_is_padded_once_as_a_whole():
    torch.manual_seed(0)
    gm, args, static = traced(Attention(kv=3).requires_grad_(False), torch.randn(2, 5, 16))
    out = merge_matmuls(FoldedGraph(gm), static, CUDA)
    shapes = sorted(tuple(f.target.shape) for f in out.folded.folds)
    assert (24, 16) in shapes and (48, 16) in shapes  # q, k, v: 16 + 3 + 3 float32 rows -> 24; gate/up: 48
    checked(out.folded, gm, args)


def gpt2_gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MLP(torch.nn.Module):
    def __init__(self, act) -> None:
        super().__init__()
        self.fc, self.proj, self.act = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


@pytest.mark.parametrize("act,gelu", [(torch.relu, False), (gpt2_gelu, True),
                                      (lambda t: torch.nn.functional.gelu(t, approximate="tanh"), True)],
                         ids=["relu", "gpt2_gelu", "torch_tanh_gelu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activations_join_the_addmm_on_the_gpu(act, gelu, dtype):
    torch.manual_seed(0)
    gm, args, _ = traced(MLP(act).to(dtype).requires_grad_(False), torch.randn(3, 40, 16, dtype=dtype))
    out = fuse_extern_epilogues(FoldedGraph(gm), CUDA)
    assert [(r.pass_name, r.op) for r in out.rewrites] == [("fuse_extern_epilogues", "_addmm_activation")]
    (fused,) = [n for n in out.folded.gm.graph.nodes if n.target is aten._addmm_activation.default]
    assert fused.kwargs == {"use_gelu": gelu}
    assert not any(n.target in (aten.relu.default, aten.tanh.default) for n in out.folded.gm.graph.nodes)
    fused.target = cuda_addmm_activation  # ATen's CPU kernel of the op is the erf GELU (FINDINGS)
    out.folded.gm.recompile()
    assert_close(out.folded.gm(*args), gm(*args))
    assert fuse_extern_epilogues(FoldedGraph(gm), torch.device("cpu")).rewrites == []  # no gain on the CPU


def cuda_addmm_activation(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor, use_gelu: bool) -> torch.Tensor:
    """What ``aten._addmm_activation`` computes on CUDA (cuBLASLt's epilogue or its fallback): the
    activation of the float32 GEMM result, rounded once."""
    out = torch.addmm(bias.float(), x.float(), w.float())
    act = torch.nn.functional.gelu(out, approximate="tanh") if use_gelu else out.relu()
    return act.to(x.dtype)


class ReadsPreActivation(MLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return self.proj(self.act(h)) + h.sum(-1, keepdim=True)


@pytest.mark.parametrize("model,rows", [(MLP(lambda t: torch.nn.functional.gelu(t)), 120),  # erf GELU
                                        (ReadsPreActivation(torch.relu), 120),
                                        (MLP(torch.relu), 8)],  # decode rows: the template's
                         ids=["erf_gelu", "pre_activation_read", "decode"])
def test_activations_that_stay_out_of_the_extern(model, rows):
    gm, _, _ = traced(model.requires_grad_(False), torch.randn(rows, 16))
    assert fuse_extern_epilogues(FoldedGraph(gm), CUDA).rewrites == []


class MatmulPlusBias(torch.nn.Module):
    def __init__(self, then_relu: bool) -> None:
        super().__init__()
        self.w, self.b = torch.nn.Parameter(torch.randn(16, 12)), torch.nn.Parameter(torch.randn(12))
        self.w2 = torch.nn.Parameter(torch.randn(12, 4))
        self.then_relu = then_relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w + self.b
        return (h.relu() if self.then_relu else h) @ self.w2


def test_a_bias_added_after_a_matmul_joins_it_as_addmm(codegen):
    torch.manual_seed(0)
    model, x = MatmulPlusBias(then_relu=False), torch.randn(2, 7, 16)
    _, out, report = run(model, x, codegen=codegen)
    assert rewrites(report) == [("fuse_extern_epilogues", "addmm")]
    assert [e.op for e in report.externs] == ["aten.addmm.default", "aten.mm.default"]
    assert report.kernels == []  # the add was the only generated kernel
    with torch.no_grad():
        assert_close(out, model(x))


def test_a_bias_add_that_fuses_into_a_kernel_anyway_stays_there():
    """On the CPU the relu stays a generated kernel, which takes the bias add for free."""
    torch.manual_seed(0)
    model, x = MatmulPlusBias(then_relu=True), torch.randn(2, 7, 16)
    _, out, report = run(model, x, codegen="cpp")
    assert rewrites(report) == []
    with torch.no_grad():
        assert_close(out, model(x))
    gm, _, _ = traced(model.requires_grad_(False), torch.randn(40, 16))
    assert [r.op for r in fuse_extern_epilogues(FoldedGraph(gm), CUDA).rewrites] == ["addmm", "_addmm_activation"]


def test_inspect_lists_the_rewrites():
    torch.manual_seed(0)
    model = Attention().eval().requires_grad_(False)
    with torch.no_grad():
        report = compiler.inspect(model, torch.randn(2, 5, 16), codegen="triton", strict=True)
    assert "merge_matmuls" in report.graphs[0].passes
    assert "folded weights: concat_matmuls: 1 mm, 1 addmm" in str(report.graphs[0])  # gate/up; q, k, v


@pytest.mark.gpu
def test_gpt2_shaped_block_on_the_gpu():
    """An unaligned LM head and a tanh-GELU MLP, compiled for the GPU: padded, fused, same results."""
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp, self.head = MLP(gpt2_gelu), torch.nn.Linear(16, 1001, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(x + self.mlp(x))

    model, x = Block().cuda().to(torch.bfloat16), torch.randn(4, 64, 16, device="cuda", dtype=torch.bfloat16)
    _, out, report = run(model, x)
    assert sorted(rewrites(report)) == [("fuse_extern_epilogues", "_addmm_activation"),
                                        ("pad_matmul_weights", "mm")]
    with torch.no_grad():
        assert_close(out, model(x))


@pytest.mark.parametrize("extern,passes", [("default", ["fuse_extern_epilogues", "merge_matmuls"]),
                                           ("none", [])])
def test_cuda_free_graphs_get_neither_padding_nor_library_epilogues(extern, passes):
    """The H200 run of the template tests: with extern="none" an MLP's 10-column head was padded
    for cuBLAS (then copied back out of the slice: three kernels, not two) and on the GPU relu or
    GELU after a prefill GEMM would have become an ``_addmm_activation`` extern. With every GEMM a
    template, both library passes stay out (the GPU rules, on a CPU graph)."""
    from compiler.codegen.registry import default_codegen
    from compiler.pipeline import GraphCompilation

    model = torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10))
    gm, args, static = traced(model.requires_grad_(False), torch.randn(40, 16))
    comp = GraphCompilation(gm, default_codegen("cpu"), "inference", extern, static, True, "auto")
    comp.device = CUDA
    comp.extern_passes()
    assert comp.report.passes == passes
    if passes:
        checked(comp.folded, gm, args)
    else:
        assert comp.folded.gm is gm and not comp.folded.folds


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_convolution_bias_joins_the_consumer_kernel(dtype):
    """H200 profile of resnet50 (fp32): ATen's cuDNN path adds a convolution's bias in a kernel of its
    own (1.06 ms of 3.84 ms of GPU time once batch norm was folded into biases). A CUDA graph's
    convolution is called without its bias; the add joins the relu's kernel, rounded to the result's
    dtype before the relu as ATen rounds it. A CPU graph keeps the bias in the call (oneDNN fuses it)."""
    x, w, b = torch.randn(2, 3, 8, 8, dtype=dtype), torch.randn(4, 3, 3, 3, dtype=dtype), torch.randn(4, dtype=dtype)
    gm = compiler.trace_aten(lambda x, w, b: aten.relu.default(aten.convolution.default(
        x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)), x, w, b)
    for device, apart in ((torch.device("cuda"), True), (torch.device("cpu"), False)):
        graph = lower(gm, device, GPU_RENDERER)
        (conv,) = [n for n in graph.nodes if isinstance(n, ExternNode)]
        assert (conv.args[2] is None) == apart, conv.args
        kernels = [n for n in graph.nodes if isinstance(n, ComputedNode)]
        assert len(kernels) == 1
        loads = {e.arg for e in kernels[0].body.walk() if e.op is Op.LOAD}
        assert ("arg2" in loads) == apart, kernels[0].body
        if apart and dtype == torch.bfloat16:  # conv + bias rounded to bf16, then the relu
            assert "bfloat16(add(" in str(kernels[0].body), kernels[0].body


@pytest.mark.parametrize("dtype,apart", [(torch.float32, True), (torch.bfloat16, False)])
def test_a_float32_gpu_addmm_read_by_a_kernel_leaves_its_bias_to_that_kernel(dtype, apart):
    """H200 profile of BERT-base (fp32): cuBLASLt's bias epilogue ran the [4096, 3072] x [3072, 768]
    addmm in 0.50 ms where the plain GEMM took 0.41. A float32 CUDA addmm that a pointwise op reads
    is an ``mm``, its bias added in that op's kernel; 16-bit ones keep the epilogue (one rounding, as
    eager), and an addmm nothing pointwise reads keeps its bias (no kernel to join), as does one the
    graph returns too (a training forward saving an MLP's up-projection for its GELU's backward: the
    sum is written whole anyway, and apart it took a second buffer and a pass writing it)."""
    x, w, b, r = (torch.randn(8, 16, dtype=dtype), torch.randn(12, 16, dtype=dtype), torch.randn(12, dtype=dtype),
                  torch.randn(8, 12, dtype=dtype))
    linear = lambda x, w, b, r: aten.add.Tensor(aten.addmm.default(b, x, aten.permute.default(w, [1, 0])), r)  # noqa: E731
    alone = lambda x, w, b, r: aten.mm.default(aten.addmm.default(b, x, aten.permute.default(w, [1, 0])), w)  # noqa: E731
    saved = lambda x, w, b, r: (aten.gelu.default(y := aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))), y)  # noqa: E731
    for fn, expect in ((linear, apart), (alone, False), (saved, False)):
        graph = lower(compiler.trace_aten(fn, x, w, b, r), CUDA, GPU_RENDERER)
        first = [n for n in graph.nodes if isinstance(n, ExternNode)][0]
        assert (first.op is aten.mm.default) == expect, first
        if expect:
            (kernel,) = [n for n in graph.nodes if isinstance(n, ComputedNode)]
            assert {"arg2", "arg3"} <= {e.arg for e in kernel.body.walk() if e.op is Op.LOAD}, kernel.body
    cpu = lower(compiler.trace_aten(linear, x, w, b, r), torch.device("cpu"), GPU_RENDERER)
    assert [n for n in cpu.nodes if isinstance(n, ExternNode)][0].op is aten.addmm.default


def test_a_split_view_of_the_gemm_result_keeps_the_bias_add_in_its_consumer():
    """The H200's first table with the bias rule: 12 more kernels per 12-layer float32 transformer
    (BERT 90 -> 121): nn.Linear views the GEMM's [B*L, N] result as [B, L, N], and that reshape
    realized the lazy bias add into a kernel of its own. A view that only splits dims keeps a lazy
    value over a library result lazy, so the add joins the residual add's kernel."""
    x, w, b, r = torch.randn(8, 16), torch.randn(12, 16), torch.randn(12), torch.randn(2, 4, 12)

    def linear_residual(x, w, b, r):
        y = aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))
        return aten.add.Tensor(aten.view.default(y, [2, 4, 12]), r)

    graph = lower(compiler.trace_aten(linear_residual, x, w, b, r), CUDA, GPU_RENDERER)
    assert [n.op for n in graph.nodes if isinstance(n, ExternNode)] == [aten.mm.default]
    (kernel,) = [n for n in graph.nodes if isinstance(n, ComputedNode)]
    assert {"arg2", "arg3"} <= {e.arg for e in kernel.body.walk() if e.op is Op.LOAD}, kernel.body
    # the same graph on the CPU (where the bias stays in the addmm) runs as eager does
    got = compiler.compile_graph(compiler.trace_aten(linear_residual, x, w, b, r), [x, w, b, r],
                                 codegen="triton")(x, w, b, r)
    torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, linear_residual(x, w, b, r))


@pytest.mark.parametrize("shape", [[2, 4, 12], [2, 1, 4, 3, 4], [8, 12, 1], [1, 8, 2, 6]])
def test_split_views_of_a_lazy_value_over_a_library_result_match_eager(codegen, shape):
    """The split view's index map (``views._split_groups``), on the CPU: mm + bias viewed as ``shape``
    and read by a pointwise op, unit dims in between and at the end included."""
    from compiler.lowerings.views import _split_groups

    x, w, b = torch.randn(8, 16), torch.randn(16, 12), torch.randn(12)
    r = torch.randn(shape)

    def fn(x, w, b, r):
        return aten.mul.Tensor(aten.view.default(aten.add.Tensor(aten.mm.default(x, w), b), shape), r)

    assert _split_groups((8, 12), tuple(shape)) is not None
    gm = compiler.trace_aten(fn, x, w, b, r)
    lowered = lower(gm, torch.device("cpu"), GPU_RENDERER)
    assert len([n for n in lowered.nodes if isinstance(n, ComputedNode)]) == 1  # add, view, mul: one kernel
    got = compiler.compile_graph(gm, [x, w, b, r], codegen=codegen)(x, w, b, r)
    torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, fn(x, w, b, r))


def test_split_groups_accept_only_splits():
    from compiler.lowerings.views import _split_groups

    assert _split_groups((8, 12), (2, 4, 12)) == [[0, 1], [2]]
    assert _split_groups((8, 12), (8, 12, 1)) == [[0], [1, 2]]
    assert _split_groups((2, 4, 12), (8, 12)) is None  # a merge
    assert _split_groups((8, 12), (4, 24)) is None  # neither
    assert _split_groups((0, 12), (0, 3, 4)) is None


class WideMLP(torch.nn.Module):
    """Two linears of 2^24 multiply-adds at 64 rows: oneDNN's size on the CPU (``ONEDNN_MIN_MACS``)."""

    def __init__(self, act, bias: bool = True, read_pre_activation: bool = False) -> None:
        super().__init__()
        self.fc, self.proj, self.act = torch.nn.Linear(256, 1024, bias=bias), torch.nn.Linear(1024, 256), act
        self.read_pre_activation = read_pre_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        out = self.proj(self.act(h))
        return out + h.sum(-1, keepdim=True) if self.read_pre_activation else out


onednn = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")


@onednn
@pytest.mark.parametrize("act,attr", [(torch.relu, "relu"), (torch.nn.functional.gelu, "gelu"),
                                      (lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "gelu"),
                                      (gpt2_gelu, "gelu"), (torch.sigmoid, None)],
                         ids=["relu", "erf_gelu", "tanh_gelu", "gpt2_gelu", "sigmoid"])
@pytest.mark.parametrize("bias", [True, False], ids=["addmm", "mm"])
def test_large_cpu_linears_go_to_onednn_with_their_activation(act, attr, bias):
    """A relu or GELU reading a linear alone joins oneDNN's call as its post-op (no kernel left); any
    other activation stays a generated kernel after a plain oneDNN linear."""
    torch.manual_seed(0)
    model, x = WideMLP(act, bias).eval(), torch.randn(4, 16, 256)
    _, out, report = run(model, x, codegen="cpp")
    first = f"linear_pointwise({attr or 'none'})"
    assert rewrites(report) == [("onednn_linears", first), ("onednn_linears", "linear_pointwise(none)")]
    assert [e.op for e in report.externs] == ["mkldnn._linear_pointwise.default"] * 2
    assert (report.kernels == []) == (attr is not None)
    with torch.no_grad():
        assert_close(out, model(x))


@onednn
def test_onednn_linears_leave_small_gemms_and_read_pre_activations_alone():
    torch.manual_seed(0)
    _, _, small = run(MLP(torch.relu), torch.randn(64, 16), codegen="cpp")  # 32K multiply-adds: addmm's
    assert not any(name == "onednn_linears" for name, _ in rewrites(small))
    model, x = WideMLP(torch.relu, read_pre_activation=True).eval(), torch.randn(64, 256)
    _, out, report = run(model, x, codegen="cpp")
    assert rewrites(report) == [("onednn_linears", "linear_pointwise(none)")] * 2  # the relu stays a kernel
    with torch.no_grad():
        assert_close(out, model(x))
