"""--mode train and --dynamic, in process (run_entry), on small planted models and the zoo."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from corpus.entry import Built, Entry
from harness.entry_subject import run_entry
from harness.shapes import batch_size, size_variants
from harness.status import Status
from harness.targets import parse_target
from harness.training import seeded_loss, train_step


def _entry(name: str, factory, **kw) -> Entry:
    return Entry(name=f"planted/{name}", source="planted", family="planted", tier="smoke", factory=factory, **kw)


def _mlp(scale: str) -> Built:
    return Built(nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)), (torch.randn(4, 6),))


class _ScaleGrad(torch.autograd.Function):
    """Identity whose backward is off by 1%: forward parity holds, gradient parity must not."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.01


def _fake_backend_wrong_grad(gm, example_inputs, **kwargs):
    """A 'compiler' with a wrong backward: every graph output's gradient is scaled on its way in."""

    def run(*args):
        outs = gm(*args)
        return type(outs)(_ScaleGrad.apply(o) if isinstance(o, torch.Tensor) and o.requires_grad else o
                          for o in outs)

    return run


@pytest.mark.parametrize("target", ["crucible-cpp", "aot_eager"])
def test_train_mode_grades_gradients(target: str) -> None:
    result = run_entry(_entry("mlp", _mlp), parse_target(target), capture=False, mode="train")
    assert result.status == Status.PASS, result.error
    assert result.mode == "train"
    assert result.grads == 5  # the input and 4 parameters
    assert result.grad_rmse_ratio is not None and result.grad_rmse_ratio < 2.0
    assert result.grad_cosine > 0.9999
    assert result.backward_graphs == 1


def test_train_mode_catches_a_wrong_backward() -> None:
    torch._dynamo.reset()
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "test_wrong_grad" not in _BACKENDS:
        register_backend(name="test_wrong_grad")(_fake_backend_wrong_grad)
    entry = _entry("mlp", _mlp)
    inference = run_entry(entry, parse_target("test_wrong_grad"), capture=False)
    assert inference.status == Status.PASS, inference.error
    train = run_entry(entry, parse_target("test_wrong_grad"), capture=False, mode="train")
    assert train.status == Status.FAIL_ACCURACY
    assert train.error.startswith("gradient ")
    assert train.grad_rmse_ratio > 2.0


def test_train_mode_keeps_the_backward_phase_on_failure() -> None:
    class BadBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("planted backward failure")

    def factory(scale: str) -> Built:
        return Built(lambda x: BadBackward.apply(x), (torch.randn(3, 3),))

    result = run_entry(_entry("bad_bw", factory), parse_target("eager"), capture=False, mode="train")
    # eager fails in backward too: the model's fault, never the compiler's
    assert result.status == Status.EAGER_FAIL and "planted backward failure" in result.error

    class FailingGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("planted compiled-backward failure")

    def backend(gm, example_inputs, **kwargs):
        return lambda *args: type(gm(*args))(FailingGrad.apply(o) for o in gm(*args))

    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "test_failing_backward" not in _BACKENDS:
        register_backend(name="test_failing_backward")(backend)
    result = run_entry(_entry("mlp", _mlp), parse_target("test_failing_backward"), capture=False, mode="train")
    assert (result.status, result.phase) == (Status.FAIL_RUN, "backward")
    assert "planted compiled-backward failure" in result.error


def test_seeded_loss_weights_every_element() -> None:
    out = torch.zeros(3, 4, requires_grad=True)
    seeded_loss(out.softmax(-1), seed=0).backward()
    # a sum() loss would give softmax a zero gradient everywhere
    assert out.grad.abs().min() > 0
    a, b = (seeded_loss(torch.ones(5, requires_grad=True) * 1.0, seed=s) for s in (0, 1))
    assert a.item() != b.item()


def test_train_step_returns_named_gradients() -> None:
    model = nn.Linear(3, 2)
    out, grads, backward_graphs = train_step(model, (torch.randn(4, 3),), {}, seed=0)
    assert set(grads) == {"input[0]", "param.weight", "param.bias"}
    assert backward_graphs == 0 and not out.requires_grad


class _Unpicklable:
    """A config object whose ``__getattr__`` raises KeyError (as crawled models' configs do): copy.deepcopy
    looks up ``__deepcopy__``/``__reduce_ex__`` hooks on a half-built copy and fails."""

    def __init__(self) -> None:
        self.__dict__["data"] = {"width": 6}

    def __getattr__(self, key):
        return self.__dict__["data"][key]


class _ConfiguredNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = _Unpicklable()
        self.lock = threading.Lock()  # locks cannot be deepcopied either
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x).relu()


def test_model_that_cannot_be_deepcopied_is_rebuilt_not_shared() -> None:
    """Regression: crawled modules whose deepcopy fails made execute.py fall back to the original
    model; the float64 reference converted it in place and the compiled run failed with 'Input type
    (torch.float32) and weight type (torch.float64) should be the same', reported as fail_compile."""
    import copy

    with pytest.raises(Exception):  # noqa: B017 -- the premise: this model cannot be copied
        copy.deepcopy(_ConfiguredNet())
    entry = _entry("configured", lambda scale: Built(_ConfiguredNet(), (torch.randn(1, 3, 8, 8),)))
    for target in ("crucible-cpp", "aot_eager"):
        result = run_entry(entry, parse_target(target), capture=False)
        assert result.status == Status.PASS, (target, result.error)
        assert result.reference == "float64"
        assert "deepcopy failed" in result.model_copy


def test_batch_variants_cycle_rows() -> None:
    ids, mask = torch.tensor([[5, 6, 7], [8, 9, 1]]), torch.ones(2, 3)
    assert batch_size((ids,), {"attention_mask": mask}) == 2
    variants = size_variants((ids,), {"attention_mask": mask})
    assert [(v.batch, v.seq) for v in variants] == [(2, 3), (4, 3), (6, 3), (4, 6)]
    _, _, args, kwargs, _ = variants[1]
    assert torch.equal(args[0], torch.cat([ids, ids])) and kwargs["attention_mask"].shape == (4, 3)
    # no shared leading dimension (a weight and an input): one size only
    assert [v.batch for v in size_variants((torch.randn(4, 3), torch.randn(3)), {})] == [None]
    # the sequence variant cycles the columns of token ids and masks (ids stay ids, masks stay masks)
    _, _, longer, longer_kwargs, _ = variants[3]
    assert torch.equal(longer[0], torch.cat([args[0], args[0]], 1))
    assert torch.equal(longer_kwargs["attention_mask"], torch.cat([kwargs["attention_mask"]] * 2, 1))


def test_dynamic_grades_every_size_and_counts_recompiles() -> None:
    result = run_entry(_entry("mlp", _mlp), parse_target("aot_eager"), capture=False, dynamic=True)
    assert result.status == Status.PASS, result.error
    assert [s["batch"] for s in result.sizes] == [4, 8, 12]
    assert all(s["status"] == Status.PASS and s["rmse_ratio"] is not None for s in result.sizes)
    assert result.recompiles == 0 and result.guard_failures == 0


def test_dynamic_records_recompiles_of_a_shape_specializing_model() -> None:
    def factory(scale: str) -> Built:
        # branching on a size specializes it: every new batch fails a guard and recompiles
        return Built(lambda x: x * 2 if x.shape[0] < 6 else x - 1, (torch.randn(4, 3),))

    result = run_entry(_entry("branchy", factory), parse_target("aot_eager"), capture=False, dynamic=True)
    assert result.status == Status.PASS, result.error
    assert result.recompiles >= 1 and result.guard_failures >= 1


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps += 1
        return x * self.steps


def test_dynamic_further_sizes_start_from_the_state_eager_starts_from() -> None:
    """A model that updates its state in forward met each further size with the earlier calls'
    updates while eager ran that size on a fresh copy: mutation/counter_int, batchnorm_train,
    combined and swap_buffers failed with --dynamic on every target, Inductor's included."""
    entry = _entry("counter", lambda scale: Built(_Counter(), (torch.randn(4, 3),)))
    result = run_entry(entry, parse_target("aot_eager"), capture=False, dynamic=True)
    assert result.status == Status.PASS, result.error
    assert [s["status"] for s in result.sizes] == [Status.PASS] * 3
    # the float64 reference too: it ran the further sizes on one model, a step ahead at each
    assert [s["rmse_ratio"] for s in result.sizes] == [0.0] * 3


def test_dynamic_crucible_compiles_every_size_without_recompiling() -> None:
    """Issue 36: the symbolic graph compiles to size-generic kernels; later sizes compile nothing."""
    result = run_entry(_entry("mlp", _mlp), parse_target("crucible-cpp"), capture=False, dynamic=True)
    assert result.status == Status.PASS, result.error
    assert [s["batch"] for s in result.sizes] == [4, 8, 12] and result.recompiles == 0


def test_dynamic_crucible_training_compiles_every_size_without_recompiling() -> None:
    """Issue 36 stage 4: forward and backward graphs with symbolic sizes compile; gradients are
    graded at every size and later sizes compile nothing (stage 1 reported a typed fallback here)."""
    result = run_entry(_entry("mlp", _mlp), parse_target("crucible-cpp"), capture=False, dynamic=True,
                       mode="train")
    assert result.status == Status.PASS, result.error
    assert all(s["grad_rmse_ratio"] is not None for s in result.sizes) and result.recompiles == 0


def test_an_entry_with_its_own_size_schedule_runs_each_call_and_the_capture_probe_adds_no_guard() -> None:
    """A variable-length workload (``Built.sizes``) is graded at each of its calls. Regression: with
    the capture analysis on, the probe counted ops on the compile's own symbolic fakes, which added
    guards that specialized the first size, so every new sequence length recompiled on Crucible
    (``dynamic/bert_encoder_lengths``: 1 recompile, 0 with the analysis off)."""
    from corpus.dynamic_models import bert_encoder_lengths

    def factory(scale: str) -> Built:
        built = bert_encoder_lengths(scale)
        return Built(built.model, built.inputs, sizes=built.sizes[:3])

    result = run_entry(_entry("bert", factory), parse_target("crucible-cpp"), capture=True, dynamic=True)
    assert result.status == Status.PASS, result.error
    assert [s["seq"] for s in result.sizes] == [8, 12, 16] and result.recompiles == 0, result.sizes
    assert result.captured_ops > 0


def test_train_mode_without_gradients_is_skipped_and_input_mutation_grades_parameters() -> None:
    """Found on the zoo in train mode: an entry under no_grad has no backward (skipped, not an eager
    failure), and one that mutates its input in place cannot have that input require grad, so its
    parameters' gradients are graded alone."""
    no_grad = _entry("no_grad", lambda scale: Built(lambda x: x.detach() * 2, (torch.randn(3),)))
    result = run_entry(no_grad, parse_target("aot_eager"), capture=False, mode="train")
    assert result.status == Status.SKIPPED and "no floating output requires grad" in result.error

    class Mutating(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            x.add_(1)
            return self.lin(x)

    mutating = _entry("mutating", lambda scale: Built(Mutating(), (torch.randn(2, 3),)))
    result = run_entry(mutating, parse_target("aot_eager"), capture=False, mode="train")
    assert result.status == Status.PASS, result.error
    assert result.grads == 2 and "parameters only" in result.grad_note

    def mutate(x):
        x.add_(1)
        return x * 2

    no_params = _entry("mutating_fn", lambda scale: Built(mutate, (torch.randn(2, 3),)))
    result = run_entry(no_params, parse_target("aot_eager"), capture=False, mode="train")
    # no parameters to fall back on: eager cannot train it, an eager failure with eager's error
    assert result.status == Status.EAGER_FAIL and "in-place operation" in result.error


def test_dynamic_drops_a_size_eager_cannot_run() -> None:
    """Found on the opinfo smoke entries: resizing the leading dimension of cholesky's square matrix
    made eager fail at batch 2x, which was reported as the entry's eager failure."""
    a = torch.randn(4, 4)
    spd = a @ a.T + 4 * torch.eye(4)
    entry = _entry("cholesky", lambda scale: Built(torch.linalg.cholesky, (spd,)))
    result = run_entry(entry, parse_target("aot_eager"), capture=False, dynamic=True)
    assert result.status == Status.PASS, result.error
    assert "batch 8 dropped: eager fails" in result.dynamic_note


def test_train_mode_grades_complex_outputs() -> None:
    """Found on the opinfo smoke entries: fft outputs are complex, and the loss skipped them, so
    fft entries were skipped as having no gradient."""
    entry = _entry("fft", lambda scale: Built(torch.fft.fft, (torch.randn(4, 8),)))
    result = run_entry(entry, parse_target("aot_eager"), capture=False, mode="train")
    assert result.status == Status.PASS, result.error
    assert result.grads == 1 and result.grad_rmse_ratio is not None


def test_an_entry_schedule_replaces_the_generic_resizing() -> None:
    from corpus.entry import SizedInputs

    calls = (SizedInputs(2, 5, (torch.randn(2, 5),)), SizedInputs(2, 9, (torch.randn(2, 9),), label="nine"))
    variants = size_variants(calls[0].inputs, {}, calls)
    assert [(v.batch, v.seq, v.label) for v in variants] == [(2, 5, "batch 2, sequence 5"), (2, 9, "nine")]
    assert variants[1].args is calls[1].inputs


def test_the_report_totals_recompiles_and_lists_the_entries_that_recompiled() -> None:
    from harness.report import render_report
    from harness.result import Result

    def result(name: str, recompiles: int, statuses: list[str]) -> Result:
        sizes = [{"batch": 2, "seq": 8 + i, "status": s} for i, s in enumerate(statuses)]
        return Result(name=name, suite="dynamic", target="crucible-cpp", status=statuses[-1], phase="compare",
                      recompiles=recompiles, guard_failures=recompiles, sizes=sizes)

    run = {"id": "r", "suite": "dynamic", "target": "crucible-cpp", "finished": True, "metadata": {}}
    text = render_report(run, [result("dynamic/a", 0, ["pass"] * 3), result("dynamic/b", 2, ["pass", "pass"]),
                               result("dynamic/c", 0, ["pass", "fail_compile"])])
    assert "dynamic shapes: 3 entries at 7 sizes, 2 recompiles in 1 entries, 2 guard failures" in text
    listed = text.split("dynamic shapes:")[1].split("\n\n")[0]
    assert "dynamic/b" in listed and "2/9: fail_compile" in listed and "dynamic/a" not in listed
    clean = render_report(run, [result("dynamic/a", 0, ["pass"] * 3)])
    assert "every entry passed every size without recompiling" in clean


class _CopyIntoBuffer(nn.Module):
    """mutation/copy_buffer's pattern: a buffer written from a value that requires grad."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("last", torch.zeros(4, 3))

    def forward(self, x):
        y = self.lin(x)
        self.last.copy_(y * 2)
        return y + self.last


@pytest.mark.parametrize("dynamic", [False, True])
def test_train_steps_after_the_first_start_from_detached_buffers(dynamic: bool) -> None:
    """The buffer keeps the first step's autograd history; the second compiled step (and each further
    --dynamic size) backwarded into it after it was freed, "Trying to backward through the graph a
    second time", on Inductor and Crucible alike, while eager ran one step per fresh model:
    mutation/copy_buffer, index_put_buffer, running_stats and setitem_buffer failed in train mode."""
    entry = _entry("copy_buffer", lambda scale: Built(_CopyIntoBuffer(), (torch.randn(4, 3),)))
    result = run_entry(entry, parse_target("aot_eager"), capture=False, mode="train", dynamic=dynamic)
    assert result.status == Status.PASS, result.error
