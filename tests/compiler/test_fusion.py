"""Fusion and memory assertions, read from the compile report (they can fail)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.graph import ComputedNode
from compiler.lowering import lower
from compiler.pipeline import GraphCompilation
from compiler.scheduler import schedule
from tests.compiler.parity import check_parity


def report_for(fn, *inputs, codegen: str) -> compiler.CompileReport:
    return compiler.inspect(fn, *inputs, codegen=codegen, strict=True)


def test_pointwise_chain_is_one_kernel(codegen: str, device: str) -> None:
    x = torch.randn(64, 33, device=device)
    y = torch.randn(33, device=device)
    report = report_for(lambda a, b: torch.sigmoid((a + b) * 2 - 1).exp().relu(), x, y, codegen=codegen)
    assert len(report.kernels) == 1 and report.kernels[0].kind == "pointwise"
    assert not report.externs


def test_softmax_last_dim_is_one_kernel(codegen: str, device: str) -> None:
    report = report_for(lambda a: torch.softmax(a, -1), torch.randn(16, 100, device=device), codegen=codegen)
    assert len(report.kernels) == 1 and report.kernels[0].kind == "reduction"


def test_layer_norm_is_one_kernel(codegen: str, device: str) -> None:
    w, b = torch.randn(64, device=device), torch.randn(64, device=device)
    report = report_for(lambda a: F.layer_norm(a, (64,), w, b), torch.randn(8, 64, device=device),
                        codegen=codegen)
    assert len(report.kernels) == 1 and report.kernels[0].kind == "reduction"


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_layer_norm_over_channels_of_an_image_is_one_kernel(channels_last: bool, codegen: str, device: str) -> None:
    """timm's LayerNorm2d (convnext): the affine output, written back through the permute, walks memory
    like its reduction and fuses into it. Regression: its loops walked the permuted (N, C, H, W)
    order, so it was a second kernel re-reading the input and the row statistics, with stores 96
    elements apart (0.67x Inductor on the H200; channels-last input 2.2x once fused)."""
    w, b = torch.randn(24, device=device), torch.randn(24, device=device)
    x = torch.randn(2, 24, 5, 7, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def fn(a):
        return F.layer_norm(a.permute(0, 2, 3, 1), (24,), w, b, 1e-6).permute(0, 3, 1, 2)
    report = check_parity(fn, (x,), codegen=codegen)
    assert len(report.kernels) == 1 and report.kernels[0].kind == "reduction", report


@pytest.mark.parametrize("pad", [(0, 0, 0, 0, 0, 0), (0, 0, 0, 1, 0, 0)], ids=["unpadded", "padded"])
def test_a_zero_pad_after_a_layer_norm_fuses_into_it(pad: tuple, codegen: str, device: str) -> None:
    """Regression (swin_tiny on an H200): timm pads every block's normed (N, H, W, C) input to a
    multiple of the window, by zero rows when it divides. The pad read its input at clamped
    indices, ``min(max(x, 0), n - 1)``, which the scheduler cannot tell from another row's, so the
    normalizing kernel did not fuse with its statistics (cross_program_read), seven kernels more
    per model. Unpadded dims now read the input as is; a real pad still clamps and masks."""
    w, b = torch.randn(16, device=device), torch.randn(16, device=device)

    def fn(a):
        return F.pad(F.layer_norm(a, (16,), w, b), pad) * 2

    report = check_parity(fn, (torch.randn(2, 6, 6, 16, device=device),), codegen=codegen)
    if not any(pad):  # a padded copy is a kernel of its own (another iteration space), but right
        assert len(report.kernels) == 1 and report.kernels[0].kind == "reduction", report
        assert not [r for g in report.graphs for r in g.refused_fusions]


def test_report_lists_every_fused_op(codegen: str, device: str) -> None:
    """Regression: a kernel whose reduction re-indexes its inlined producers (pooling) listed only
    the last view op; it lists every ATen op computed in it."""
    bn = torch.nn.BatchNorm2d(3).eval().to(device)
    model = torch.nn.Sequential(bn, torch.nn.ReLU(), torch.nn.MaxPool2d(2))
    with torch.no_grad():
        report = report_for(model, torch.randn(2, 3, 8, 8, device=device), codegen=codegen)
    assert len(report.kernels) == 1
    ops = set(report.kernels[0].ops)
    assert {"relu.default", "max_pool2d_with_indices.default", "mul.Tensor", "add.Tensor"} <= ops, ops


def test_pure_view_is_no_kernel(codegen: str, device: str) -> None:
    report = report_for(lambda a: a.transpose(0, 1)[2:].unsqueeze(-1), torch.randn(5, 6, device=device),
                        codegen=codegen)
    assert report.kernels == [] and report.externs == []


def test_producer_fuses_into_reduction(codegen: str, device: str) -> None:
    report = report_for(lambda a, b: ((a * b).exp() + 1).sum(-1), torch.randn(8, 40, device=device),
                        torch.randn(40, device=device), codegen=codegen)
    assert len(report.kernels) == 1


def test_refused_fusion_has_a_reason(codegen: str, device: str) -> None:
    # a reduction over dim 0 then a consumer at the input shape: the consumer reads the
    # reduction across rows that other programs own, so it cannot join that kernel
    x = torch.randn(6, 9, device=device)
    report = report_for(lambda a: a - a.sum(0), x, codegen=codegen)
    assert len(report.kernels) == 2
    refused = [r for g in report.graphs for r in g.refused_fusions]
    assert refused and all(r.reason for r in refused)


def _aten_graph(fn, *inputs):
    return compiler.trace_aten(fn, *inputs)


def test_dead_intermediates_are_not_stored() -> None:
    """Inside one kernel, values other kernels never read stay in registers."""
    gm = _aten_graph(lambda a: torch.softmax(a, -1), torch.randn(4, 10))
    lowered = lower(gm, torch.device("cpu"))
    sched = schedule(lowered)
    computed = [n for n in lowered.nodes if isinstance(n, ComputedNode)]
    (kernel,) = [s for s in sched.steps if hasattr(s, "stores")]
    assert len(kernel.stores) == len(computed) >= 3
    assert len(kernel.live_stores()) == 1


def test_dead_buffers_are_reused(codegen: str, device: str) -> None:
    # a chain with externs in between: each intermediate dies before the next allocation
    def chain(a, w):
        for _ in range(4):
            a = torch.relu(a @ w) * 2
        return a

    x, w = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
    report = report_for(chain, x, w, codegen=codegen)
    assert len(report.externs) == 4
    gm = _aten_graph(chain, x, w)
    wrapper = GraphCompilation(gm, codegen, "inference").compile()
    assert "# reuses" in wrapper.source
    torch.testing.assert_close(wrapper.call([x, w]), chain(x, w))


def test_inputs_and_dead_buffers_are_freed_at_their_last_use(codegen: str) -> None:
    """Regression (GPU training, issue 38): the wrapper held every input (a backward's saved
    activations) and every dead buffer until it returned, so a step's peak memory was 28-72% above
    Inductor's. An input and the first kernel's result must be gone when the last kernel runs."""
    import re
    import weakref

    def fn(x, w):
        return torch.relu(x.sin() @ w).sum(1)

    x, w = torch.randn(16, 16), torch.randn(16, 8)
    wrapper = GraphCompilation(_aten_graph(fn, x, w), codegen, "inference").compile()
    first, last = re.findall(r"launchers\['(\w+)'\]", wrapper.source)
    refs: list[weakref.ref] = []
    dead: list[bool] = []
    launch_first, launch_last = wrapper.launchers[first], wrapper.launchers[last]

    def spy_first(*args):
        refs.extend(weakref.ref(a) for a in args if isinstance(a, torch.Tensor))
        return launch_first(*args)

    def spy_last(*args):
        dead.extend(r() is None for r in refs)
        return launch_last(*args)

    wrapper.launchers[first], wrapper.launchers[last] = spy_first, spy_last
    want = fn(x, w)
    args = [x, w]
    del x
    torch.testing.assert_close(wrapper.call(args), want)
    assert args == [] and len(dead) == 2 and all(dead), wrapper.source


def test_poison_fills_every_buffer_before_its_kernels_run(codegen: str) -> None:
    """The ``poison`` option (the harness's Crucible targets): a kernel that writes nothing leaves NaN
    (floats) or the largest value (integers) in its output on every call, fresh or reused buffer alike,
    not whatever the allocator's memory held; the output is right when the kernels do write."""
    import re

    def fn(x, w):
        y = torch.relu(x.sin() @ w)  # the sin's buffer is dead after the matmul: the relu's may reuse it
        return y.cos() + 1, (y > 0).sum(1), x.argmax(1)

    x, w = torch.randn(16, 16), torch.randn(16, 16)
    wrapper = GraphCompilation(_aten_graph(fn, x, w), codegen, "inference", poison=True).compile()
    allocations = re.findall(r"^ *\w+ = (.*empty_strided\(.*|.*\.view\(.*)$", wrapper.source, re.M)
    assert allocations and all(a.startswith("uninitialized(") for a in allocations), wrapper.source
    for got, want in zip(wrapper.call([x, w]), fn(x, w), strict=True):
        torch.testing.assert_close(got, want)
    for name in wrapper.launchers:
        wrapper.launchers[name] = lambda *args, **kwargs: None  # kernels that write nothing
    cos, count, index = wrapper.call([x, w])
    assert cos.isnan().all() and (count == torch.iinfo(count.dtype).max).all(), wrapper.source
    assert (index == torch.iinfo(index.dtype).max).all()
    plain = GraphCompilation(_aten_graph(fn, x, w), codegen, "inference").compile()
    assert "uninitialized" not in plain.source


def test_dead_kernel_is_not_generated(codegen: str) -> None:
    """Regression (timm/test_vit_relpos): a realized value nobody reads produced a kernel with no
    parameters, which is not valid Python."""
    def fn(x):
        dead = x.sum(0).sin().reshape(-1, 1)  # noqa: F841  (realized by the reshape; nothing reads it)
        return x * 2

    x = torch.randn(3, 5)
    gm = _aten_graph(fn, x)
    assert any("sin" in str(n.target) for n in gm.graph.nodes)
    wrapper = GraphCompilation(gm, codegen, "inference").compile()
    torch.testing.assert_close(wrapper.call([x]), x * 2)
    assert wrapper.source.count("launchers[") == 1


def test_long_op_chains_compile(codegen: str, device: str) -> None:
    """Regression: a 1,400-op pointwise chain (an unrolled loop) hit Python's recursion limit in lowering."""
    def chain(x):
        for _ in range(700):
            x = x * 1.0001 + 0.001
        return x

    x = torch.randn(64, device=device)
    report = report_for(chain, x, codegen=codegen)
    assert 1 < len(report.kernels) < 60 and not report.externs
    compiled = torch.compile(chain, backend="crucible", options={"codegen": codegen, "strict": True})
    # 1,400 roundings: Triton on a GPU contracts each x * a + b into one FMA (one rounding instead
    # of two), so the results drift apart from eager's by a few 1e-5 over the chain
    torch.testing.assert_close(compiled(x), chain(x), rtol=1e-4, atol=1e-4)


def test_extern_arguments_get_eagers_layout(codegen: str) -> None:
    """Regression (H200 corpus run: efficient attention rejected a bias with unaligned strides and a
    query without a contiguous last dim): a computed argument of an extern call is laid out with
    the strides eager gave it (a transpose stays column-major, a slice of a padded tensor keeps the
    padded row pitch)."""
    x, y = torch.randn(6, 4), torch.randn(6, 3)

    def fn(a, b):
        padded = F.pad(a * 2, (0, 3))[:, :5]  # rows of 7, pitch kept by eager
        return torch.mm((a + 1).t(), b), torch.mm(padded.t(), b), torch.mm(padded[:, :3], (a[:3, :3] - 1))

    gm = _aten_graph(fn, x, y)
    wrapper = GraphCompilation(gm, codegen, "inference").compile()
    for got, want in zip(wrapper.call([x, y]), fn(x, y)):
        torch.testing.assert_close(got, want)
    assert "(4, 6), (1, 4)" in wrapper.source  # (a + 1).t(): eager's column-major layout
    assert "(5, 6), (1, 7)" in wrapper.source  # the transposed padded slice keeps its pitch of 7
    assert "(6, 3), (7, 1)" in wrapper.source


def test_broadcast_extern_arguments_stay_views(codegen: str) -> None:
    """Regression (H200 run, timm beitv2): an attention bias of one batch row, padded to an aligned
    pitch and expanded over the batch, was materialized densely, so its head stride lost the
    alignment efficient attention requires. Broadcast dims of an extern argument are computed once
    and viewed with stride 0, the other dims keep eager's strides."""
    x, w = torch.randn(3, 4, 6), torch.randn(4, 5)

    def fn(a, b):
        bias = F.pad(b * 2, (0, 3))[:, :5].unsqueeze(0).expand(3, -1, -1)  # pitch 8, batch stride 0
        return torch.bmm(a.transpose(1, 2), bias), torch.bmm(a[:, :, :5], (b.t() + 1).expand(3, 5, 4))

    gm = _aten_graph(fn, x, w)
    wrapper = GraphCompilation(gm, codegen, "inference").compile()
    for got, want in zip(wrapper.call([x, w]), fn(x, w)):
        torch.testing.assert_close(got, want)
    assert "(3, 4, 5), (0, 8, 1)" in wrapper.source, wrapper.source
    assert "(3, 5, 4), (0, 1, 5)" in wrapper.source, wrapper.source


def test_complex_extern_chain_keeps_its_layout(codegen: str) -> None:
    """Regression: fft2 with a size crops and pads a complex value before the extern FFT; giving
    that argument eager's layout needed a kernel, and there are none for complex values."""
    x = torch.randn(5, 6, 7)
    compiled = torch.compile(lambda t: torch.fft.fft2(t, s=(3, 10)), backend="crucible",
                             options={"codegen": codegen, "strict": True})
    torch.testing.assert_close(compiled(x), torch.fft.fft2(x, s=(3, 10)))


def test_identical_kernels_share_one_triton_function() -> None:
    """The layers of a transformer compute the same kernels on other buffers: they render to the
    same source (positional parameters, content-derived names), so Triton builds and tunes each
    once per process (on the GPU, dozens of identical layer norms each took their own builds)."""
    def two_layers(a, m, w):
        h = F.layer_norm(a, (32,), w) + 1
        return F.layer_norm(h @ m, (32,), w) + 1

    w, m = torch.randn(32), torch.randn(32, 32)
    gm = _aten_graph(two_layers, torch.randn(8, 32), m, w)
    comp = GraphCompilation(gm, "triton", "inference")
    wrapper = comp.compile()
    kernels = comp.report.kernels
    assert len(kernels) == 2 and kernels[0].name != kernels[1].name
    assert kernels[0].source == kernels[1].source
    a = torch.randn(8, 32)
    torch.testing.assert_close(wrapper.call([a, m, w]), two_layers(a, m, w))


def test_extern_results_keep_eagers_layout(codegen: str) -> None:
    """An extern result laid out non-contiguously by eager (attention's logsumexp here; on the GPU
    the attention output itself) is used in place: kernels read it with its strides instead of
    the wrapper copying it into a contiguous buffer first."""
    q = torch.randn(2, 4, 16, 8)

    def fn(q, k, v):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
        return out * 2, lse + 1

    gm = _aten_graph(fn, q, q, q)
    wrapper = GraphCompilation(gm, codegen, "inference").compile()
    assert "with_strides(" in wrapper.source and wrapper.source.count(".contiguous()") == 1
    for got, want in zip(wrapper.call([q, q, q]), fn(q, q, q)):
        torch.testing.assert_close(got, want)


def test_extern_results_nobody_reads_are_not_touched(codegen: str) -> None:
    """Regression (GPT-2, ViT and a Llama-style decoder in bfloat16 on the H200): flash attention's
    debug mask is an empty tensor in its fake result but None at run time, and the wrapper called
    ``.contiguous()`` on every result. A result nothing reads is now left as the library returned it."""
    q = torch.randn(2, 4, 16, 8)

    def fn(q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[0] * 2

    gm = _aten_graph(fn, q, q, q)
    wrapper = GraphCompilation(gm, codegen, "inference").compile()
    assert "[1]" not in wrapper.source  # the logsumexp is neither copied nor relaid out
    torch.testing.assert_close(wrapper.call([q, q, q]), fn(q, q, q))


@pytest.mark.gpu
def test_bfloat16_flash_attention_compiles() -> None:
    """Regression: a bf16 attention graph failed in strict mode with "'NoneType' object has no
    attribute 'contiguous'" raised in the generated wrapper (the unused results of the CUDA op)."""
    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16)

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    compiled = torch.compile(fn, backend="crucible", options={"strict": True}, dynamic=False)
    torch.testing.assert_close(compiled(q, q, q), fn(q, q, q), rtol=2e-2, atol=2e-2)


def test_merged_loops_keep_index_values(codegen: str, device: str) -> None:
    """Regression (timm gemma4 patch grid): merging a kernel's contiguous dims rewrote a value
    that was a bare index var (the iota of ``arange -> view -> expand -> clone``) to 0."""
    def grid(x: torch.Tensor) -> torch.Tensor:
        gy, gx = torch.meshgrid(torch.arange(6, device=x.device), torch.arange(5, device=x.device),
                                indexing="ij")
        coords = torch.stack([gy.flatten(), gx.flatten()], dim=-1).unsqueeze(0).expand(2, -1, -1)
        return coords.flip(dims=(-1,)) + x

    def rows(x: torch.Tensor) -> torch.Tensor:
        return torch.arange(3, device=x.device).view(-1, 1).expand(3, 4).reshape(12) * 1.5 + x

    check_parity(grid, (torch.tensor(0, device=device),), codegen)
    check_parity(rows, (torch.randn(12, device=device),), codegen)


def test_select_of_a_concatenation_in_an_expression(codegen: str, device: str) -> None:
    """Regression (timm deit/xcit, wrong head outputs on the C++ codegen): the class token row of a
    concatenation is a select on a constant condition; the C++ renderer embedded that select in
    its users' infix expression without parentheses, so the following adds joined its else arm."""
    def head(cls, tokens, pos):
        x = torch.cat([cls, tokens], dim=0) + pos
        return (x[0] - x.mean()) * 2 + 1

    args = (torch.randn(1, 8), torch.randn(3, 8), torch.randn(4, 8))
    check_parity(head, tuple(a.to(device) for a in args), codegen)


def test_residual_stream_is_stored_not_resummed(codegen: str) -> None:
    """A transformer's residual stream (x + branch, layer after layer) is stored once it reads more
    than a few whole buffers; inlined, each layer's kernels re-summed every earlier branch output
    (quadratic: deit_small's last layer norm read 25 buffers). Per-channel reads do not count."""
    w = [torch.randn(16, 16) for _ in range(8)]

    def layers(x, *ws):
        for m in ws:
            x = x + F.layer_norm(x, (16,)) @ m
        return x

    x = torch.randn(6, 16)
    wrapper = GraphCompilation(_aten_graph(layers, x, *w), codegen, "inference").compile()
    torch.testing.assert_close(wrapper.call([x, *w]), layers(x, *w), rtol=1e-4, atol=1e-4)
    launches = [line for line in wrapper.source.splitlines() if "launchers[" in line]
    assert max(line.count(",") + 1 for line in launches) <= 6, "\n".join(launches)


def test_a_value_returned_late_is_computed_where_its_inputs_are(codegen: str) -> None:
    """Regression (GPU training, issue 38): a value the graph returns but nothing else reads (a
    forward's saved residual) is lowered where the graph returns it, and joined the last kernel that
    could take it, so every buffer it reads lived to the end of the call: vit_base's float32 forward
    held 24 more [32, 197, 768] buffers than Inductor's at its peak (4040 MB against 3662). It joins the
    earliest kernel it can after its inputs are made, and the first GEMM's result dies before the last
    GEMM runs."""
    import re

    def fn(x, w1, w2, w3):
        a = x @ w1
        h = F.layer_norm(x + a, (16,))
        h2 = F.layer_norm(x + a + h @ w2, (16,))
        return (h2 @ w3).relu(), (x + a) * 2

    args = [torch.randn(6, 16)] + [torch.randn(16, 16) for _ in range(3)]
    want = fn(*args)
    wrapper = GraphCompilation(_aten_graph(fn, *args), codegen, "inference").compile()
    for got, expected in zip(wrapper.call(list(args)), want):
        torch.testing.assert_close(got, expected)
    lines = wrapper.source.splitlines()
    first = re.search(r"(\w+) = extern\d+\.contiguous\(\)", wrapper.source).group(1)
    freed = next(i for i, line in enumerate(lines) if line.strip().startswith("del ") and re.search(rf"\b{first}\b", line))
    last_gemm = max(i for i, line in enumerate(lines) if "torch.mm(" in line)
    assert freed < last_gemm, wrapper.source


def test_python_float_input_arriving_as_float64(codegen: str) -> None:
    """Regression (zoo/python_random on crucible-cpp: outputs of 1e34): Dynamo lifts a Python float
    into a 0-d tensor input that the graph traces as float32 but passes as float64 at run time;
    the C++ kernel read four of its eight bytes. The wrapper converts 0-d inputs to the traced dtype."""
    x, s = torch.randn(4, 8), torch.tensor(0.75)
    wrapper = GraphCompilation(_aten_graph(lambda a, b: a.sin() * b, x, s), codegen, "inference").compile()
    torch.testing.assert_close(wrapper.call([x, torch.tensor(0.75, dtype=torch.float64)]), x.sin() * 0.75)


def test_unary_op_with_extra_keyword_is_an_extern(codegen: str) -> None:
    """Regression (opinfo round-decimals: TypeError in the lowering rule): a keyword the rule does not
    implement makes the op an extern call instead of crashing the compile."""
    x = torch.randn(5, 7) * 100
    report = check_parity(lambda t: torch.round(t * 2, decimals=1) + 1, (x,), codegen, max_externs=None)
    assert len(report.externs) == 1


def test_one_element_windows_and_reductions(codegen: str, device: str) -> None:
    """Regression (timm efficientformerv2_s1: 'reduction ... used before its pass'): pooling with a
    1x1 window reduced over size-1 dims, which the scheduler drops, leaving a REDUCE in a pointwise
    kernel. A one-element reduction is now the element itself."""
    x = torch.randn(2, 4, 6, 5, device=device)
    check_parity(lambda t: F.avg_pool2d(t, 1, 2) * 2 + F.max_pool2d(t, 1, 2), (x,), codegen)
    check_parity(lambda t: t[:, :1].sum(1) + t[:, :1].argmax(1) + (t[:, :1] > 0).sum(1), (x,), codegen)


def test_empty_values_passed_to_externs_and_scalar_index_select(codegen: str) -> None:
    """Regressions (opinfo pad-circular on a (0, 3, 3) input: NameError in the wrapper, its
    0-element intermediates reached extern calls without storage; opinfo index_select on a 0-d
    tensor: IndexError in the lowering)."""
    empty = torch.randn(0, 3, 3)
    compiled = torch.compile(lambda a: F.pad(a, (1, 2), mode="circular"), backend="crucible",
                             options={"codegen": codegen, "strict": True})
    assert compiled(empty).shape == (0, 3, 6)
    check_parity(lambda a, i: torch.index_select(a, 0, i) * 2, (torch.tensor(2.5), torch.tensor([0])), codegen)


def test_a_value_returned_late_in_a_kernel_of_its_own_frees_its_inputs_early(codegen: str) -> None:
    """Regression (GPU training, issue 38): a value the graph returns late that no kernel can take
    (its shape differs from the kernels after its inputs) started a kernel at the end of the call, so
    the buffers it read last lived to the end: swin_tiny's training forward held 128.6 MB of them at
    its peak (memory history of one step, H100), Inductor none. Its kernel now runs as early as its
    inputs allow when that frees at least what it makes (and 1 MiB), and the GEMM results die before the last GEMM."""
    import re

    def fn(x, w1, w2, w3):
        a, b = x @ w1, x @ w2
        h = (a + b).relu() @ w3
        return h.sum(-1), a[:, :128] * b[:, 128:]

    args = [torch.randn(1024, 256)] + [torch.randn(256, 256) / 16 for _ in range(3)]  # 1 MiB a GEMM
    want = fn(*args)
    wrapper = GraphCompilation(_aten_graph(fn, *args), codegen, "inference").compile()
    for got, expected in zip(wrapper.call(list(args)), want):
        torch.testing.assert_close(got, expected)
    lines = wrapper.source.splitlines()
    gemms = re.findall(r"(\w+) = extern\d+\.contiguous\(\)", wrapper.source)
    last_gemm = max(i for i, line in enumerate(lines) if "torch.mm(" in line)
    for name in gemms[:2]:
        freed = next(i for i, line in enumerate(lines) if line.strip().startswith("del ") and re.search(rf"\b{name}\b", line))
        assert freed < last_gemm, wrapper.source
