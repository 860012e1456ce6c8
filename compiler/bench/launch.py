"""Host time per kernel launch: Crucible's launcher against Triton's JIT dispatch and against a
whole compiled one-kernel graph (Crucible's and Inductor's, Dynamo's guards included).

The kernel is ``x + 1`` over 1024 floats (one program), so the GPU keeps up with the host and the
figure is the host's cost of one launch: the mean of ``calls`` back-to-back launches, no sync in
between, best of ``rounds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def host_us(launch: Callable[[], object], calls: int = 2000, rounds: int = 5) -> float:
    for _ in range(100):
        launch()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            launch()
        best = min(best, (time.perf_counter() - start) / calls)
        torch.cuda.synchronize()
    return best * 1e6


def crucible_launcher(fn: Callable, *inputs: torch.Tensor) -> tuple[object, tuple[torch.Tensor, ...]]:
    """The loaded launcher of ``fn``'s single Triton kernel and the tensors it takes, in order."""
    from compiler import trace_aten
    from compiler.codegen.registry import renderer_for
    from compiler.lowering import lower
    from compiler.runtime import launcher_for
    from compiler.scheduler import schedule

    device = inputs[0].device
    renderer = renderer_for("triton", device)
    sched = schedule(lower(trace_aten(fn, *inputs), device, renderer.capabilities), renderer.capabilities)
    (kernel,) = sched.kernels
    rendered = renderer.render(kernel)
    given = {b.name: t for b, t in zip(sched.inputs, inputs) if b is not None}
    args = tuple(given.get(name) if name in given else
                 torch.empty_strided(sched.buffers[name].shape, sched.buffers[name].stride,
                                     dtype=sched.buffers[name].dtype, device=device)
                 for name in rendered.args)
    return launcher_for(rendered, device), args


def launch_table() -> list[tuple[str, float]]:
    """(what, host us per launch) rows; CUDA only."""
    import torch._dynamo

    import compiler  # noqa: F401  (registers the backend)

    x = torch.randn(1024, device="cuda")

    def add_one(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    launcher, args = crucible_launcher(add_one, x)
    launcher(*args)  # tunes and builds
    rows = [("crucible launcher (bound at load)", host_us(lambda: launcher(*args)))]
    jit = launcher.fn
    grid, meta = launcher.grid, launcher.meta
    rows.append(("triton JIT dispatch fn[grid](...)", host_us(lambda: jit[grid](*args, **meta))))
    for backend in ("crucible", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(add_one, backend=backend, dynamic=False)
        compiled(x)
        rows.append((f"{backend}: compiled one-kernel graph (guards + wrapper + launch)",
                     host_us(lambda compiled=compiled: compiled(x), calls=1000)))
    torch._dynamo.reset()
    return rows
