"""Each fusion refusal pinned to its typed reason, on small ATen graphs (no kernel is built)."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.lowering import lower
from compiler.report import FusionReason
from compiler.scheduler import MAX_PERSISTENT_RNUMEL, schedule

BIG = MAX_PERSISTENT_RNUMEL + 8  # a row too long for one block: the reduction loops


def _deep_chain(a: torch.Tensor) -> torch.Tensor:
    for _ in range(80):
        a = (a * 1.01 + 0.5).sin()
    return a


def _realized(*xs: torch.Tensor) -> torch.Tensor:
    """A sum of five whole inputs: lowering realizes it when read twice (MAX_INLINE_READS), so its
    kernel exists before the node that is refused."""
    return xs[0] + xs[1] + xs[2] + xs[3] + xs[4]


def _swap(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Two inputs exchange values in place: the second write may not join the first's kernel."""
    old = a.clone()
    a.copy_(b)
    b.copy_(old * 2)
    return x * a + b


CASES = {
    FusionReason.REDUCTION_MISMATCH: (lambda a: (a.sum(0), a.sum(1)), [(6, 9)]),
    FusionReason.PROLOGUE_SHAPE: (lambda *x: (y := _realized(*x[:5]), y * 2, x[5].sum(-1)),
                                  [(6, 9)] * 5 + [(4, 5)]),
    FusionReason.ROW_TOO_LARGE: (lambda *x: (y := _realized(*x), y.sum(-1)), [(2, BIG)] * 5),
    FusionReason.NEEDS_PERSISTENT: (lambda a: a - a.sum(-1, keepdim=True), [(2, BIG)]),
    FusionReason.ITERATION_SPACE: (lambda a, b: (a * 2, b * 3), [(6, 9), (4, 5)]),
    FusionReason.LOOPED_REDUCTION_CHAIN: (
        lambda a: (a - a.mean(-1, keepdim=True)).pow(2).sum(-1), [(2, BIG)]),
    FusionReason.CROSS_PROGRAM_READ: (lambda *x: (y := _realized(*x), y.flip(0) + 1), [(6, 9)] * 5),
    FusionReason.TOO_DEEP: (_deep_chain, [(4, 4)]),
    # a reduction of a GEMM template's output (extern="none") cannot join its epilogue
    FusionReason.TEMPLATE_EPILOGUE: (lambda a, b: (a @ b).sum(-1), [(6, 9), (9, 4)], "none"),
    # 300 outputs of one pointwise value: a kernel takes MAX_KERNEL_BUFFERS buffers at most
    FusionReason.TOO_MANY_BUFFERS: (lambda a: (a.exp() * 2).split(1), [(300,)]),
    FusionReason.INPUT_WRITE_RACE: (_swap, [(8,)] * 3),
}


def refusals_of(fn, shapes: list[tuple[int, ...]], extern: str = "default") -> list:
    gm = compiler.trace_aten(fn, *[torch.randn(s) for s in shapes])
    if extern == "default":
        return schedule(lower(gm, torch.device("cpu"))).refusals
    from compiler.codegen.registry import capabilities_for
    from compiler.templates.scheduling import schedule as schedule_with_templates

    caps = capabilities_for("triton", torch.device("cpu"))
    return schedule_with_templates(lower(gm, torch.device("cpu"), caps, extern), caps).refusals


@pytest.mark.parametrize("reason", list(FusionReason), ids=lambda r: r.value)
def test_each_refusal_reports_its_reason(reason: FusionReason) -> None:
    refused = refusals_of(*CASES[reason])
    assert reason in {r.reason for r in refused}, [str(r) for r in refused]
    assert all(r.message and r.producer and r.consumer for r in refused)


def test_fused_program_has_no_refusals() -> None:
    assert refusals_of(lambda a: torch.softmax(a * 2, -1), [(4, 10)]) == []


def test_refusal_prints_reason_and_message() -> None:
    (refusal,) = [r for r in refusals_of(*CASES[FusionReason.ITERATION_SPACE])
                  if r.reason is FusionReason.ITERATION_SPACE]
    assert str(refusal).startswith(f"{refusal.producer} -> {refusal.consumer}: iteration_space: ")
