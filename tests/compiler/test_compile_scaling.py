"""Compile-time scaling regressions: passes that did per-node work over the whole graph.
``harness/bench/compile_scaling.py`` measures the slopes; these tests count the work instead."""

from __future__ import annotations

import dataclasses

import torch

import compiler
from compiler.codegen.registry import renderer_for
from compiler.kernel_sharing import render_shared
from compiler.lowering import lower
from compiler.scheduler import Kernel, schedule
from compiler.wrapper import generate_wrapper


class _CountingBuffers(dict):
    """A schedule's buffers that count their lookups."""

    gets = 0

    def get(self, key, default=None):
        type(self).gets += 1
        return super().get(key, default)


def test_wrapper_frees_buffers_in_one_pass() -> None:
    """Regression: the wrapper looked every buffer up after every step to find the ones that step
    read last (quadratic: 0.47 s of a 4,000-node graph's wrap); now each buffer once."""
    def chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(24):
            x = torch.sigmoid(x * 2.0 + 1.0) @ w
        return x

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    caps = renderer_for("cpp", torch.device("cpu")).capabilities
    sched = schedule(lower(compiler.trace_aten(chain, x, w), torch.device("cpu"), caps), caps)
    counting = dataclasses.replace(sched, buffers=_CountingBuffers(sched.buffers))
    kernels = [s for s in sched.steps if isinstance(s, Kernel)]
    rendered = render_shared(kernels, renderer_for("cpp", torch.device("cpu")).render)
    _CountingBuffers.gets = 0
    source = generate_wrapper(counting, rendered, {}).source
    assert len(sched.steps) >= 48 and len(sched.buffers) >= 48
    assert _CountingBuffers.gets <= 2 * (len(sched.buffers) + len(sched.steps)), _CountingBuffers.gets
    assert "reuses" in source  # the pools still hand freed buffers to later allocations
