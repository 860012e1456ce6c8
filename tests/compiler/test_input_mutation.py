"""Parameters, buffers and inputs mutated inside forward (issue #39): AOTAutograd keeps inference input
mutations in the graph, as Inductor asks it to, and the compiled graph writes the new values back into
the caller's tensors (``compiler.lowerings.mutation``).

Every pattern of the mutation zoo (``corpus.mutation``) runs compiled and in eager, twice: the outputs,
the parameters, the buffers and the inputs must match after each call. PixelCNN's masked convolution
(``self.weight.data *= self.mask``) exposed the gap: AOTAutograd refused it ("Encountered a set_ on a
graph input, but the input has other mutations that we cannot keep in the graph") unless mutations stay
in the graph. Before the writes were deferred to the end of the graph, an output computed after a
``copy_`` into a buffer read the buffer's new value (read_then_mutate, copy_buffer, running_stats)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import compiler
from compiler.cudagraphs import capture_blocker, written_inputs
from compiler.lowering import lower
from compiler.report import ExternReason, FusionReason
from compiler.scheduler import schedule
from corpus.mutation import PATTERNS

# training steps (forward and backward) of patterns that mutate state besides the gradients' path; the
# others update buffers from values that require grad, which eager rejects on a second step, or mutate
# only an input (nothing requires grad). ``.data *=`` on a parameter with grad mode on is refused by
# AOTAutograd (the set_ assertion), with Inductor as well.
TRAINING = ["data_assign", "buffer_add", "param_clamp", "swap_buffers", "batchnorm_train"]


def _state(model: torch.nn.Module, args: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone() for t in (*model.parameters(), *model.buffers(), *args)]


def _close(got: torch.Tensor | None, want: torch.Tensor | None, what: str) -> None:
    torch.testing.assert_close(got, want, msg=lambda message: f"{what}: {message}")


def _step(model, args: list[torch.Tensor], train: bool) -> tuple[torch.Tensor, list]:
    if not train:
        with torch.no_grad():
            return model(*args), []
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        out = model(*args)
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    return out.detach(), [p.grad for p in model.parameters()] + [a.grad for a in args]


def _compare_two_calls(name: str, codegen: str, train: bool = False, device: str = "cpu",
                       options: dict | None = None) -> compiler.CompileReport:
    cls, inputs = PATTERNS[name]
    eager = cls().train(train).to(device)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="crucible", options={"codegen": codegen, "strict": True, **(options or {})})
    example = [t.to(device) for t in inputs()]
    leaf = train and "input" not in name  # an input mutated in place cannot be a leaf that requires grad
    with compiler.collect_reports() as report:
        for call in (1, 2):
            want_args = [t.clone().requires_grad_(leaf) for t in example]
            got_args = [t.clone().requires_grad_(leaf) for t in example]
            want, want_grads = _step(eager, want_args, train)
            got, got_grads = _step(compiled, got_args, train)
            _close(got, want, f"{name} call {call} output")
            for i, (g, w) in enumerate(zip(_state(model, got_args), _state(eager, want_args))):
                _close(g, w, f"{name} call {call} state {i}")  # parameters, buffers, then inputs
            for i, (g, w) in enumerate(zip(got_grads, want_grads)):
                _close(g, w, f"{name} call {call} gradient {i}")
    assert all(g.fallback is None for g in report.graphs), [g.fallback_message for g in report.graphs]
    return report


def _one_write_back_kernel(report: compiler.CompileReport) -> None:
    """``buf.add_(1)`` then ``x * buf``: the write back fuses with its value (one kernel reads and writes
    the buffer, as Inductor's), no ``copy_`` extern."""
    (graph,) = report.graphs
    assert not graph.externs
    assert len([k for k in graph.kernels if "copy_.default" in k.ops]) == 1


def _second_write_apart(report: compiler.CompileReport) -> None:
    """Each buffer's new value is the other's old one: the second write may not share a kernel with the
    first (it would read the value the first just wrote)."""
    assert FusionReason.INPUT_WRITE_RACE in {r.reason for g in report.graphs for r in g.refused_fusions}


def _storage_swap_last(report: compiler.CompileReport) -> None:
    """``.data = value`` reaches the graph as ``set_``/``shallow_copy_data_``: an extern call, the last step."""
    (graph,) = report.graphs
    assert graph.externs[-1].reason is ExternReason.INPUT_STORAGE


CHECKS = {"buffer_add": _one_write_back_kernel, "swap_buffers": _second_write_apart,
          "data_assign": _storage_swap_last}


@pytest.mark.parametrize("name", list(PATTERNS))
def test_mutation_matches_eager_after_two_calls(name: str, codegen: str) -> None:
    report = _compare_two_calls(name, codegen)
    CHECKS.get(name, lambda report: None)(report)


@pytest.mark.parametrize("name", TRAINING)
def test_mutation_in_training_matches_eager(name: str, codegen: str) -> None:
    """Forward and backward through a module that mutates its state (BatchNorm's running statistics)."""
    _compare_two_calls(name, codegen, train=True)


@pytest.mark.gpu
@pytest.mark.parametrize("tuning", ["first_call", "deferred"])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_mutation_on_the_gpu_updates_once_while_configs_are_timed(name: str, tuning: str) -> None:
    """Compiled GPU kernels with several launch configs are timed on their real arguments; a kernel
    updating a buffer in place is put back after timing (``KernelLauncher.rewritten``). Before that
    every mutation entry of the smoke tier failed on crucible-triton (running statistics updated once
    per timed run)."""
    from compiler.tuning import finish_tuning

    _compare_two_calls(name, "triton", device="cuda", options={"tuning": tuning})
    finish_tuning(60)


def test_write_back_is_capturable_and_named() -> None:
    """A kernel writing into a graph input no longer blocks a CUDA graph: the runner restores what the
    capture's extra runs wrote and copies a copied input back (``compiler.cudagraphs``)."""
    gm = compiler.trace_aten(lambda buf, x: (buf.copy_(buf * 0.9 + x), x + 1)[1], torch.randn(8), torch.randn(8))
    sched = dataclasses.replace(schedule(lower(gm, torch.device("cpu"))), device=torch.device("cuda"))
    assert capture_blocker(sched) is None
    assert written_inputs(sched) == [0]


def test_ops_newer_than_the_oldest_torch_are_registered_only_where_they_exist() -> None:
    """Regression: registering ``aten.shallow_copy_data_`` unconditionally made ``import compiler``
    fail on torch 2.11, which has no such op."""
    from compiler.lowerings.mutation import existing_overloads

    aten = torch.ops.aten
    assert existing_overloads("set_.source_Tensor", "no_such_op_.default", "set_.no_such_overload") == \
        (aten.set_.source_Tensor,)
