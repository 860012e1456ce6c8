"""Module-level parity: small real models, with and without gradients, per codegen."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.compiler.parity import check_parity


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 8))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4)).eval()


MODELS = {
    "mlp": (mlp, (4, 16)),
    "cnn": (cnn, (2, 3, 12, 12)),
    "transformer_block": (TransformerBlock, (2, 6, 32)),
}


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", list(MODELS))
def test_module_parity(name: str, grad: bool, codegen: str, device: str) -> None:
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().to(device)
    x = torch.randn(shape, device=device, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        report = check_parity(model, (x,), codegen, loosen=10, max_externs=None, backward=grad)
    kinds = {g.kind for g in report.graphs}
    assert kinds == ({"forward", "backward"} if grad else {"inference"})
    assert report.kernels, "the model's pointwise and normalization work must become generated kernels"
    reasons = {e.reason.value for e in report.externs}
    assert reasons <= {"library_kernel", "randomness"}, report.externs


def test_parameter_gradients_match(codegen: str, device: str) -> None:
    torch.manual_seed(0)
    model = mlp().to(device)
    ref = mlp().to(device)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 16, device=device)
    compiled = torch.compile(model, backend="crucible", options={"codegen": codegen, "strict": True})
    compiled(x).square().sum().backward()
    ref(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_saved_outputs_keep_eagers_strides(codegen: str, device: str) -> None:
    """Regression (opinfo linalg.cholesky, cholesky_ex and linalg.cond in `crucible run --mode train`):
    the forward graph returned the Cholesky factor's alias row-major where eager's is column-major, and
    the backward graph, compiled for eager's strides, computed the gradient from its transpose (grad
    RMSE 0.33 against eager's 4e-8)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, 4, generator=g, dtype=torch.float64)
    a = (a @ a.mT + 4 * torch.eye(4, dtype=torch.float64)).float().to(device)
    w = torch.randn(3, 4, 4, generator=g).to(device)
    grads = []
    for fn in (torch.linalg.cholesky,
               torch.compile(torch.linalg.cholesky, backend="crucible", options={"codegen": codegen, "strict": True})):
        x = a.clone().requires_grad_()
        (fn(x) * w).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-4)

    def transposed_copy(x: torch.Tensor) -> torch.Tensor:
        return x.mT.clone() * 2  # eager keeps the transposed layout

    got = torch.compile(transposed_copy, backend="crucible", options={"codegen": codegen, "strict": True})(a)
    assert got.stride() == transposed_copy(a).stride()


@pytest.mark.gpu
def test_cpu_scalar_tensor_in_a_cuda_graph() -> None:
    """Regression (transformers/speech_to_text): a CPU tensor input of a CUDA graph reached a kernel."""
    x = torch.randn(4, 8, device="cuda")
    scale = torch.tensor(3.0)
    check_parity(lambda a, s: a * s + 1, (x, scale), "triton")


def test_an_extern_result_of_another_dtype_than_traced_is_converted(codegen: str) -> None:
    """Regression (training benchmark, test_resnet under bfloat16 autocast: NaN weights after one
    step): the CPU batch norm of bfloat16 input with float32 weights returns float32 saved
    statistics where the trace (torch's decomposition) says bfloat16; the backward kernels read the
    float32 bytes as bfloat16 (weight gradients -inf and -3e31). The wrapper converts such results."""
    import compiler  # noqa: F401  (registers the backend)

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return nn.functional.batch_norm(x, torch.zeros(4), torch.ones(4), w, b, training=True)

    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0)).bfloat16()
    g = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(1)).bfloat16()
    grads = []
    for fn in (f, torch.compile(f, backend="crucible", dynamic=False, options={"codegen": codegen})):
        xi, w, b = x.clone().requires_grad_(), torch.ones(4, requires_grad=True), torch.zeros(4, requires_grad=True)
        fn(xi, w, b).backward(g)
        grads.append((xi.grad.float(), w.grad))
    (x_ref, w_ref), (x_got, w_got) = grads
    torch.testing.assert_close(w_got, w_ref, atol=0.1, rtol=0.02)  # statistics rounded to bfloat16, as traced
    torch.testing.assert_close(x_got, x_ref, atol=0.1, rtol=0.05)


def test_a_saved_output_keeps_its_traced_strides(codegen: str) -> None:
    """Regression (the dynamic corpus's decoder in train mode: every weight gradient off by up to
    100%): ``q @ cat([cache, k]).transpose(-1, -2)`` realized the transposed operand row-major for the
    extern bmm and returned that buffer as the saved tensor, strides (144, 9, 1) where the trace says
    (144, 1, 16); the backward's kernels, compiled for the traced strides, computed q's gradient from
    the wrong elements. A forward output is returned in the layout its trace gives it."""
    import compiler  # noqa: F401  (registers the backend)

    def f(cache: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ torch.cat([cache, k], 2).transpose(-1, -2)

    gen = torch.Generator().manual_seed(0)
    cache, q, k, g = (torch.randn(*s, generator=gen) for s in ((2, 2, 3, 16), (2, 2, 6, 16), (2, 2, 6, 16), (2, 2, 6, 9)))
    grads = []
    for fn in (f, torch.compile(f, backend="crucible", dynamic=False, options={"codegen": codegen})):
        qi, ki = q.clone().requires_grad_(), k.clone().requires_grad_()
        fn(cache, qi, ki).backward(g)
        grads.append((qi.grad, ki.grad))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-4)
