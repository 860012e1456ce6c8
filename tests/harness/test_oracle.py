"""The parity oracle passes right results and fails wrong ones, per dtype."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from corpus.entry import ToleranceOverride
from harness.oracle import ParityOracle, flatten_outputs, outputs_identical

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w).softmax(-1)


def _runs(dtype: torch.dtype):
    gen = torch.Generator().manual_seed(0)
    x64 = torch.randn(16, 32, generator=gen, dtype=torch.float64)
    w64 = torch.randn(32, 32, generator=gen, dtype=torch.float64) / 4
    reference = _model(x64, w64)
    eager = _model(x64.to(dtype), w64.to(dtype))
    # "Compiled": the same math in another order (transposed matmul, fp32 accumulation):
    # different rounding, equally correct.
    compiled = torch.tanh((w64.to(dtype).t() @ x64.to(dtype).t()).t().float()).softmax(-1).to(dtype)
    return reference, eager, compiled


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_right_result_passes(dtype: torch.dtype) -> None:
    reference, eager, compiled = _runs(dtype)
    result = ParityOracle(str(dtype).split(".")[1]).compare(eager, compiled, reference)
    assert result.passed, result.reason
    assert result.cosine > 0.99 and result.rmse_ratio is not None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("wrong", ["perturbed", "swapped", "one_element"])
def test_wrong_result_fails(dtype: torch.dtype, wrong: str) -> None:
    reference, eager, compiled = _runs(dtype)
    if wrong == "perturbed":  # a relative error everywhere, ~10x what the dtype's eager makes
        scale = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
        compiled = (compiled.double() * (1 + scale)).to(dtype)
    elif wrong == "swapped":  # a wrong index: two rows exchanged
        compiled = compiled[[1, 0, *range(2, compiled.shape[0])]]
    else:  # a single wrong element
        compiled = compiled.clone()
        compiled[3, 5] += 0.25
    result = ParityOracle(str(dtype).split(".")[1]).compare(eager, compiled, reference)
    assert not result.passed
    assert "RMSE" in result.reason or "cosine" in result.reason


def test_bit_exact_eager_does_not_demand_bit_exact_compiled() -> None:
    x = torch.randn(64, dtype=torch.float64)
    eager = x.float()  # exact vs the reference up to float32 rounding
    compiled = eager * (1 + 1e-7)  # last-bit differences, as from the Triton interpreter
    assert ParityOracle("float32").compare(eager, compiled, x).passed


def test_nan_and_inf_positions_must_match() -> None:
    eager = torch.tensor([1.0, math.nan, math.inf, -math.inf, 2.0])
    assert ParityOracle().compare(eager, eager.clone(), eager.double()).passed
    moved_nan = torch.tensor([math.nan, 1.0, math.inf, -math.inf, 2.0])
    assert "NaN" in ParityOracle().compare(eager, moved_nan, eager.double()).reason
    flipped_inf = torch.tensor([1.0, math.nan, -math.inf, math.inf, 2.0])
    assert "Inf" in ParityOracle().compare(eager, flipped_inf, eager.double()).reason
    finite_wrong = torch.tensor([1.0, math.nan, math.inf, -math.inf, 3.0])
    assert not ParityOracle().compare(eager, finite_wrong, eager.double()).passed


def test_eagers_own_overflow_is_not_held_against_a_result_equal_to_float64() -> None:
    """Fuzzing GEMM templates with finfo.max: eager's bmm rounded each product (inf + -inf = NaN),
    the template fused them into the accumulation and gave inf, the float64 result rounded."""
    a = torch.tensor([[-0.7730, -1.5952]])
    b = torch.tensor([[-math.inf], [3.4028e38]])
    # eager as a kernel that rounds each product before adding (ATen's CPU bmm did here)
    eager, reference = (a.flatten() * b.flatten()).sum().reshape(1, 1), a.double() @ b.double()
    assert math.isnan(eager.item()) and reference.item() == math.inf
    fused = torch.tensor([[math.inf]])
    result = ParityOracle().compare(eager, fused, reference)
    assert result.passed and result.excused_positions == 1, result.reason
    # the truth is inf here: -inf is an overflow too (eager's NaN is no better), a finite value is wrong
    assert ParityOracle().compare(eager, torch.tensor([[-math.inf]]), reference).passed
    assert "NaN" in ParityOracle().compare(eager, torch.tensor([[1.0]]), reference).reason
    # a finite truth that eager missed by overflowing: another overflow, or the truth, passes
    a2 = torch.tensor([[3.0e38, -3.0e38, 1.0e36]])
    b2 = torch.tensor([[2.0], [2.0], [1.0]])
    eager_nan = (a2.flatten() * b2.flatten()).sum().reshape(1, 1)
    truth = a2.double() @ b2.double()
    assert math.isnan(eager_nan.item()) and truth.item() == pytest.approx(1.0e36)
    for ok in (math.inf, -math.inf, 1.0e36):
        assert ParityOracle().compare(eager_nan, torch.tensor([[ok]]), truth).passed, ok
    assert "NaN" in ParityOracle().compare(eager_nan, torch.tensor([[5.0]]), truth).reason
    # where eager agrees with float64, its NaN/inf positions stay binding
    agreed = torch.tensor([math.inf, 2.0])
    assert "NaN positions" in ParityOracle().compare(agreed, torch.tensor([math.nan, 2.0]), agreed.double()).reason
    # the other positions are still judged: an excused position does not hide a wrong value
    eager2, reference2 = torch.cat([eager.flatten(), torch.tensor([1.0])]), torch.cat(
        [reference.flatten(), torch.tensor([1.0], dtype=torch.float64)])
    assert not ParityOracle().compare(eager2, torch.tensor([math.inf, 5.0]), reference2).passed
    assert ParityOracle().compare(eager2, torch.tensor([math.inf, 1.0]), reference2).passed


def test_positions_where_float64_has_no_value_leave_the_others_judged_against_it() -> None:
    """Fuzzer, crucible-interpret, seed 304: asin of a bfloat16 layer norm whose eager kernel had
    overflowed to 0 everywhere, the compiled one within 0.007 of float64; one value rounded onto
    asin's domain in bfloat16 and past it in float64 (NaN). That one NaN made the whole output fall
    back to cosine against eager's zeros. Now the positions float64 has a value for are judged
    against it, and a value farther from it than eager's still fails."""
    truth = torch.linspace(-0.9, 0.9, 64, dtype=torch.float64)
    truth[5] = math.nan  # float64 past the domain edge; the working dtype's value landed on it
    right = truth.to(torch.bfloat16).nan_to_num(1.5708)
    wrong_eager = torch.zeros(64, dtype=torch.bfloat16)
    assert ParityOracle().compare(wrong_eager, right, truth).passed
    # judged as any output is: as close to float64 as eager's (here far off) is, not closer
    assert "RMSE" in ParityOracle().compare(wrong_eager, right * 4, truth).reason
    # with float64 agreeing with eager, the compiled output must too
    assert not ParityOracle().compare(right, right * 0.5, truth).passed
    # and where float64 has no value at all, the fallback is as before (cosine against eager)
    nothing = torch.full((64,), math.nan, dtype=torch.float64)
    assert "cosine" in ParityOracle().compare(wrong_eager, right, nothing).reason


@dataclasses.dataclass
class _Output:
    logits: torch.Tensor
    extra: tuple


def test_nested_outputs_are_flattened_and_every_leaf_checked() -> None:
    t = torch.randn(3, 4)
    out = _Output(t, ({"a": t * 2, "skip": None}, [t + 1, 7]))
    paths = [p for p, _ in flatten_outputs(out)]
    assert paths == ["out.logits", "out.extra[0].a", "out.extra[1][0]", "out.extra[1][1]"]
    good = _Output(t.clone(), ({"a": t * 2, "skip": None}, [t + 1, 7]))
    assert ParityOracle().compare(out, good).passed
    bad_leaf = _Output(t.clone(), ({"a": t * 2, "skip": None}, [t + 1.5, 7]))
    assert "out.extra[1][0]" in ParityOracle().compare(out, bad_leaf).reason
    bad_int = _Output(t.clone(), ({"a": t * 2, "skip": None}, [t + 1, 8]))
    assert not ParityOracle().compare(out, bad_int).passed
    assert "structure" in ParityOracle().compare(out, (t,)).reason


def test_integer_outputs_compare_exactly_and_shapes_are_checked() -> None:
    idx = torch.arange(10)
    assert ParityOracle().compare(idx, idx.clone()).passed
    assert not ParityOracle().compare(idx, idx.flip(0)).passed
    assert "shape" in ParityOracle().compare(torch.zeros(2, 3), torch.zeros(3, 2)).reason


def test_without_reference_cosine_fallback() -> None:
    eager = torch.randn(1000)
    assert ParityOracle().compare(eager, eager + 1e-6 * torch.randn(1000)).passed
    assert not ParityOracle().compare(eager, torch.randn(1000)).passed


def test_outputs_near_the_smallest_normal_are_compared_without_a_crash() -> None:
    """Fuzzer, aot_eager, seed 1: ``aten.sin.default(x0)`` of a float64 0-d 2.2e-308 crashed the
    worker (ZeroDivisionError): the cosine's norm product underflowed to 0."""
    tiny = torch.tensor(torch.finfo(torch.float64).tiny, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        x = tiny.to(dtype) * 3
        result = ParityOracle(str(dtype).split(".")[1]).compare(x, x.clone(), x.double())
        assert result.passed and result.cosine == pytest.approx(1.0), result
    assert ParityOracle("float64").compare(tiny.expand(4), -tiny.expand(4)).cosine == pytest.approx(-1.0)


def test_tolerance_override_loosens_with_a_reason() -> None:
    reference, eager, compiled = _runs(torch.float32)
    compiled = compiled * 1.02
    assert not ParityOracle("float32").compare(eager, compiled, reference).passed
    loose = ToleranceOverride(reason="test: known 2% error", rmse_ratio=1e6)
    assert ParityOracle("float32", loose).compare(eager, compiled, reference).passed
    with pytest.raises(ValueError):
        ToleranceOverride(reason=" ")


def test_outputs_identical_detects_nondeterminism() -> None:
    a = torch.tensor([1.0, math.nan])
    assert outputs_identical((a, {"k": 1}), (a.clone(), {"k": 1}))
    assert not outputs_identical(a, torch.tensor([1.0 + 1e-7, math.nan]))
    assert not outputs_identical((a,), (a, a))


def test_lazily_conjugated_complex_outputs_are_compared() -> None:
    """Regression (opinfo fft.ihfft crashed the harness): ihfft returns a conjugate view, which
    view_as_real refuses; the oracle resolves it and compares values."""
    x = torch.randn(16, dtype=torch.float64)
    reference = torch.fft.ihfft(x)
    eager = torch.fft.ihfft(x.float())
    assert eager.is_conj()
    oracle = ParityOracle("float32")
    assert oracle.compare(eager, eager.resolve_conj().clone(), reference).passed
    assert not oracle.compare(eager, eager.conj_physical(), reference).passed


_FLAGS_SEEN: list[tuple[bool, bool]] = []  # module level: every run gets its own copy of the model


class _FlagRecorder(torch.nn.Module):
    """Records torch's TF32 flags each time it runs (eager, reference and compiled runs alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _FLAGS_SEEN.append((torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32))
        return self.lin(x)


def test_entries_are_graded_at_full_float32_precision() -> None:
    """Regression: on an H200 Inductor failed parity on the ViT-family entries (beit, deit, ijepa,
    vitdet: RMSE 15-27x eager's) because cuDNN, allowed TF32 by torch's default, ran Inductor's
    channels-last patch-embedding conv in TF32 and eager's NCHW one in float32. Every run of an
    entry now has TF32 off (harness.oracle.working_precision); allow_tf32 keeps torch's flags."""
    from corpus.entry import Built, Entry
    from harness.entry_subject import run_entry
    from harness.targets import parse_target

    entry = Entry(name="t/flags", source="t", family="mlp", tier="smoke",
                  factory=lambda scale: Built(_FlagRecorder(), (torch.randn(2, 4),)))
    _FLAGS_SEEN.clear()
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    assert run_entry(entry, parse_target("eager"), capture=False).status == "pass"
    assert len(_FLAGS_SEEN) >= 3 and set(_FLAGS_SEEN) == {(False, False)}  # eager twice, reference, "compiled"
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before  # restored
    _FLAGS_SEEN.clear()
    run_entry(entry, parse_target("eager"), capture=False, allow_tf32=True)
    assert _FLAGS_SEEN and set(_FLAGS_SEEN) == {before}


def test_full_precision_works_with_frozen_backend_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: importing torch's OpInfo test utilities (the opinfo corpus entries do) freezes
    torch.backends flags, and setting cudnn.allow_tf32 then raised, which made every opinfo entry of
    the smoke suite a harness crash."""
    from harness.oracle import working_precision

    # what torch.backends.disable_global_flags() sets, undone after the test
    monkeypatch.setitem(torch.backends.flags_frozen.__globals__, "__allow_nonbracketed_mutation_flag", False)
    assert torch.backends.flags_frozen()
    before = torch.backends.cudnn.allow_tf32
    with working_precision():
        assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is before


@pytest.mark.gpu
def test_channels_last_conv_of_a_vit_patch_embedding_passes_under_inductor() -> None:
    """The ViT patch embedding (3 -> 32 channels, 16x16 patches of a 224x224 image) compiled by
    Inductor, whose layout optimization makes the conv channels-last: float32 parity against eager."""
    from corpus.entry import Built, Entry
    from harness.entry_subject import run_entry
    from harness.targets import parse_target

    def patch_embedding(scale: str) -> Built:
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 16, stride=16), torch.nn.Flatten(2),
                                    torch.nn.LayerNorm(196), torch.nn.Linear(196, 32))
        return Built(model, (torch.randn(2, 3, 224, 224),))

    entry = Entry(name="t/patch_embedding", source="t", family="vit", tier="smoke", factory=patch_embedding)
    result = run_entry(entry, parse_target("inductor", "cuda"), capture=False)
    assert result.status == "pass", result.error
