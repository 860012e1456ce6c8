"""Dynamic shapes, stage 3 of issue 36: the CUDA-free templates (``extern="none"``: GEMM, implicit-GEMM
convolution, attention) over symbolic sizes compile to size-generic template kernels (sizes as
arguments, tile, masks and grid chosen per launch), match eager at several sizes per symbol (not
multiples of the interpreter's blocks, which are chosen per launch from the size: 15 and 17 around
16, 63 and 65 around 64) and compile once; what they still cannot do is an extern call with a typed
reason. Run in Triton's interpreter on CPU tensors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sympy
import torch

import compiler
from compiler.backend import crucible_backend
from compiler.capabilities import Capabilities
from compiler.report import CompileReport
from compiler.templates import policy, tiles
from tests.compiler.test_dynamic_shapes import run_sizes

F = torch.nn.functional
r = torch.randn
OPTIONS = {"codegen": "triton", "extern": "none", "strict": True}


def check_sizes(fn: Callable, make: Callable[..., tuple], shapes: list[tuple], family: str,
                tol: float = 1e-4) -> CompileReport:
    """``fn`` against eager at each of ``shapes`` (``make(*shape)`` builds the inputs): every graph is
    compiled on the first call and none after it, nothing falls back or is an extern call, and every
    template kernel (one at least, of ``family``) is size-generic."""
    graphs: list = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return crucible_backend(gm, example_inputs, options=OPTIONS)

    compiled = torch.compile(fn, backend=backend, dynamic=True)
    report = run_sizes(compiled, graphs, fn, make, shapes, tol)
    assert not report.externs, [(e.op, e.reason, e.message) for e in report.externs]
    templates = [k for k in report.kernels if k.kind.startswith("template:")]
    assert templates and all(k.kind == f"template:{family}" for k in templates), [k.kind for k in report.kernels]
    assert all(k.size_args for k in report.kernels), [k.name for k in report.kernels if not k.size_args]
    return report


def test_the_issue_example_compiles_to_one_generic_gemm_with_its_epilogue() -> None:
    """Regression (issue 36): the render pass compared symbolic sizes (``TypeError: cannot determine
    truth value of Relational``) and the graph fell back with an untyped compiler_error."""
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b) + 1

    report = compiler.inspect(f, r(33, 64), r(64, 48), dynamic=True, codegen="triton", extern="none")
    assert not report.fallbacks, [g.fallback_message for g in report.fallbacks]
    (kernel,) = report.kernels
    assert kernel.kind == "template:gemm" and len(kernel.size_args) == 3
    assert {"mm.default", "relu.default", "add.Tensor"} <= set(kernel.ops)
    # the compile report says what the kernel decides per launch and what it fixed without the sizes
    assert kernel.size_decisions[0].startswith("per launch: tile (tuned per size bucket), grid, EVEN_M/N/K masks")
    assert "size-independent" in kernel.size_decisions[1] and "sizes in template:gemm" in str(report)


# (m, k, n) per call: 15/17 around the interpreter's 16-row block, 33 past 32, 129 one past its largest
# block (128: a second program of one row, a second K step of one), multiples (no masks)
GEMM_SIZES = [(15, 17, 33), (17, 129, 15), (129, 33, 64), (64, 32, 128)]
GEMMS = {
    "mm": (lambda a, b: torch.relu(a @ b) + 1, lambda m, k, n: (r(m, k), r(k, n))),
    "mm_transposed": (lambda a, b: a.t() @ b, lambda m, k, n: (r(k, m), r(k, n))),
    "bmm": (lambda a, b: torch.bmm(a, b) * 2, lambda m, k, n: (r(3, m, k), r(3, k, n))),
    "addmm": (lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=2), lambda m, k, n: (r(n), r(m, k), r(k, n))),
}


@pytest.mark.parametrize("op", sorted(GEMMS))
def test_gemm_templates_over_symbolic_m_n_k(op: str) -> None:
    fn, make = GEMMS[op]
    report = check_sizes(fn, make, GEMM_SIZES, "gemm")
    assert len(report.kernels) == 1  # the epilogue (relu + 1, * 2, alpha/beta and bias) fused into it


def test_linear_over_a_symbolic_batch_and_sequence_fuses_its_gelu() -> None:
    """``nn.Linear`` on (B, S, 16): ``addmm`` over B*S rows, the GELU read through the (B, S, N) view."""
    lin = torch.nn.Linear(16, 24).eval()
    report = check_sizes(lambda x: F.gelu(lin(x)), lambda b, s: (r(b, s, 16),), [(2, 7), (3, 17), (5, 13)], "gemm")
    assert len(report.kernels) == 1


def test_a_size_of_one_is_dynamos_specialization_and_still_a_template() -> None:
    """Dynamo specializes sizes 0 and 1 (one more graph, as for any backend): that graph's GEMM is a
    template too, generic over the sizes still symbolic."""
    graphs: list = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return crucible_backend(gm, example_inputs, options=OPTIONS)

    fn = torch.compile(lambda a, b: (a @ b) - 1, backend=backend, dynamic=True)
    with torch.no_grad(), compiler.collect_reports() as report:
        for m in (5, 1, 17):
            a, b = r(m, 9), r(9, 15)
            torch.testing.assert_close(fn(a, b), a @ b - 1, rtol=1e-4, atol=1e-4)
    assert len(graphs) == 2 and not report.fallbacks and not report.externs
    assert [k.kind for k in report.kernels] == ["template:gemm"] * 2


def test_convolutions_over_symbolic_batch_and_image() -> None:
    """Padding, stride, groups (the batch dim of the GEMM) and a depthwise convolution; the relu after
    the plain convolution reads its channels-last result through the NCHW view and fuses."""
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).eval()
    grouped = torch.nn.Conv2d(4, 8, 3, stride=2, groups=2).eval()
    depthwise = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4).eval()
    check_sizes(lambda x: torch.relu(conv(x)), lambda n, h, w: (r(n, 3, h, w),), [(2, 5, 7), (3, 9, 6)], "gemm")
    check_sizes(lambda x: (grouped(x), depthwise(x) * 2), lambda n, h: (r(n, 4, h, h + 2),), [(2, 5), (3, 9)], "gemm")


def test_a_strided_convolutions_epilogue_fuses_at_batch_one_and_more() -> None:
    """Regression (timm/test_resnet under --dynamic): with stride 2 the output side is
    ``(h - 1) // 2 + 1``, and sympy distributes the channel count over that sum in one product of the
    sizes and not in the other (``16*f + 16`` against ``16*(f + 1)``), so the relu's iteration space
    (batch 1) or its read of the channels-last result (batch 2) did not match the template's by
    structure and ran as a second kernel."""
    conv = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False).eval()
    for batch in (1, 2):
        report = check_sizes(lambda x: torch.relu(conv(x)), lambda h, b=batch: (r(b, 3, h, h),), [(9,), (6,)], "gemm")
        assert len(report.kernels) == 1, [k.ops for k in report.kernels]


def test_batch_norm_folds_into_a_convolution_template_over_symbolic_sizes() -> None:
    """The fold reads only the weights, so it holds for every size; the relu joins the template."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
    report = check_sizes(net, lambda n, h: (r(n, 3, h, h - 1),), [(2, 5), (3, 9)], "gemm")
    assert len(report.kernels) == 1 and "fold_batch_norm" in report.graphs[0].passes


def test_training_an_mlp_compiles_forward_and_backward_gemms_once() -> None:
    """The backward's GEMMs read transposed operands and the saved symbolic batch."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    graphs: list = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return crucible_backend(gm, example_inputs, options=OPTIONS)

    compiled = torch.compile(mlp, backend=backend, dynamic=True)
    with compiler.collect_reports() as report:
        for n in (3, 17, 33):
            x = torch.randn(n, 8)
            grads = []
            for model in (compiled, mlp):
                mlp.zero_grad()
                model(x).square().sum().backward()
                grads.append([p.grad.clone() for p in mlp.parameters()])
            for ours, eager in zip(*grads):
                torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)
    assert len(graphs) == 1 and not report.fallbacks and not report.externs
    assert sum(k.kind == "template:gemm" for k in report.kernels) == 5  # 2 forward, 3 backward
    assert all(k.size_args for k in report.kernels)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, L, heads * 8) as (B, heads, L, 8): head counts static, as in a model's attention."""
    return x.unflatten(-1, (heads, 8)).transpose(1, 2)


# (batch, query length, keys) per call: L != S, rows of 5, 17 and 65 around the interpreter's 16- and 64-row blocks
ATTENTION_SIZES = [(2, 5, 7), (3, 17, 9), (5, 65, 63)]
ATTENTIONS = {
    "plain": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2,
              lambda b, n, s: (r(b, 4, n, 8), r(b, 4, s, 8), r(b, 4, s, 8))),
    "causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
               lambda b, n, s: (r(b, 4, n, 8), r(b, 4, s, 8), r(b, 4, s, 8))),
    "additive_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                      lambda b, n, s: (r(b, 4, n, 8), r(b, 4, s, 8), r(b, 4, s, 8), r(n, s))),
    "grouped_query_causal": (lambda q, k, v: F.scaled_dot_product_attention(
        _heads(q, 4), _heads(k, 2), _heads(v, 2), is_causal=True, enable_gqa=True) + 1,
        lambda b, n, s: (r(b, n, 32), r(b, s, 16), r(b, s, 16))),
}


@pytest.mark.parametrize("case", sorted(ATTENTIONS))
def test_attention_template_over_symbolic_batch_and_lengths(case: str) -> None:
    """The symbolic head dim of the plain cases (every input size is a symbol under ``dynamic=True``)
    gets its blocks and SDPA's default scale per launch."""
    fn, make = ATTENTIONS[case]
    report = check_sizes(fn, make, ATTENTION_SIZES, "attention")
    assert len(report.kernels) == 1


def test_a_boolean_mask_over_symbolic_lengths() -> None:
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
    check_sizes(fn, lambda b, n, s: (r(b, 4, n, 8), r(b, 4, s, 8), r(b, 4, s, 8), r(b, 1, n, s) > -1),
                ATTENTION_SIZES[:2], "attention")


def test_symbolic_head_counts_take_the_group_size_at_run_time() -> None:
    """Grouped-query heads as symbols (H and Hkv of the inputs): SDPA's check makes Dynamo guard
    ``H % Hkv == 0``, so the kernel computes the group size from its size arguments; one compile serves
    groups of 2 and 4."""
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True) * 2  # noqa: E731
    check_sizes(fn, lambda b, h, g, n, s: (r(b, h * g, n, 4), r(b, h, s, 4), r(b, h, s, 4)),
                [(2, 3, 2, 5, 7), (5, 2, 4, 17, 9)], "attention")


def test_unguarded_symbolic_head_counts_are_a_typed_extern_call() -> None:
    """Without Dynamo's divisibility guard the group size is unknown: the rule refuses with
    ``symbolic_size`` (read from the shape environment's guards; none is added)."""
    from types import SimpleNamespace

    from compiler.templates import rules

    h, g = sympy.Symbol("s1", positive=True, integer=True), sympy.Symbol("s2", positive=True, integer=True)
    guarded = SimpleNamespace(fake_mode=SimpleNamespace(shape_env=SimpleNamespace(
        guards=[SimpleNamespace(expr=sympy.Eq(sympy.Mod(h, g), 0))])))
    unguarded = SimpleNamespace(fake_mode=SimpleNamespace(shape_env=SimpleNamespace(guards=[])))
    assert rules._guarded_divisible(guarded, h, g)
    assert not rules._guarded_divisible(unguarded, h, g) and not rules._guarded_divisible(torch.empty(1), h, g)


def test_size_dependent_template_decisions_take_the_size_independent_choice() -> None:
    """The default rule's decode-row limit and split-K compare sizes: a symbolic size is not known to
    be within the limit, so no comparison raises and no guard is needed (docs: "Decisions that depend
    on sizes")."""
    s0 = sympy.Symbol("s0", positive=True, integer=True)
    gpu = Capabilities("triton", frozenset(), 1024, interpreted=False, templates=frozenset({"gemm", "attention"}))
    choice = policy.choose("gemm", "default", gpu, None, (1, s0, 64, 64), torch.bfloat16, epilogue=True)
    assert not choice.template and "symbolic rows" in choice.message
    assert policy.choose("gemm", "default", gpu, None, (1, 8, 64, 64), torch.bfloat16, epilogue=True).template
    assert policy.choose("attention", "default", gpu, None, (s0, 4, s0, s0, 64), torch.bfloat16, masked=True).template
    assert tiles.gemm_split_k(1, 2048, 8192, interpret=False) == 4
    assert tiles.gemm_split_k(s0, 2048, 8192, interpret=False) == 1
    with tiles.forced_split_k(2):
        assert tiles.gemm_split_k(4, 16, 2 * s0, interpret=True) == 1


def test_the_gpu_build_check_builds_template_kernels_static_and_size_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CRUCIBLE_GPU_BUILD_CHECK=1`` builds every interpreted graph's kernels for sm_90 without a GPU.
    Regression: it rendered template kernels with the plain Triton renderer (``KeyError: 'acc1 is not a
    parameter of kernel0'``, static sizes too), and a size-generic kernel's parameters did not count its
    size arguments; the GEMM template asked CUDA for its SM count."""
    from compiler import gpu_build

    if not gpu_build.available():
        pytest.skip("Triton without its NVIDIA backend")
    monkeypatch.setenv("CRUCIBLE_GPU_BUILD_CHECK", "1")
    fn = lambda a, b: torch.relu(a @ b) + 1  # noqa: E731
    attention = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    static = compiler.inspect(fn, r(33, 64), r(64, 48), codegen="triton", extern="none")
    generic = compiler.inspect(attention, r(2, 4, 5, 8), r(2, 4, 7, 8), r(2, 4, 7, 8), dynamic=True,
                               codegen="triton", extern="none")
    for report, kind in ((static, "template:gemm"), (generic, "template:attention")):
        assert not report.fallbacks, [g.fallback_message for g in report.fallbacks]
        assert "gpu_build" in report.graphs[0].pass_seconds and [k.kind for k in report.kernels] == [kind]
