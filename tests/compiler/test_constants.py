"""Tensors a graph holds as attributes (``torch.tensor(...)`` in traced code, lifted by Dynamo)."""

from __future__ import annotations

import torch

import compiler  # noqa: F401  (registers the backend)


def _table_with_a_zeroed_row(x: torch.Tensor) -> torch.Tensor:
    """speech_to_text's sinusoidal table: computed on the CPU, one row set from ``torch.tensor(0.0)``,
    moved to the input's device."""
    steps = torch.arange(8).float()
    table = torch.cat([torch.sin(steps[:, None] * torch.arange(4).float()[None]),
                       torch.cos(steps[:, None] * torch.arange(4).float()[None])], 1)
    table[1] = torch.tensor(0.0)
    return x + table.to(x.device)


def test_a_cpu_constant_of_a_graph_on_another_device(device: str) -> None:
    """On CUDA the graph's CPU constant is copied to the GPU while lowering, under the fake mode
    AOTAutograd compiles in (H100, smoke tier, transformers/speech_to_text: copy_ into a fake tensor
    refused the real constant, fail_compile)."""
    x = torch.randn(8, 8, device=device)
    torch._dynamo.reset()
    compiled = torch.compile(_table_with_a_zeroed_row, backend="crucible", options={"strict": True})
    torch.testing.assert_close(compiled(x), _table_with_a_zeroed_row(x))
