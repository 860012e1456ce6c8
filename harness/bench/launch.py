"""Host time per kernel launch: Crucible's bound launcher (through torch's static CUDA launcher, and
through Triton's driver launcher) against Triton's JIT dispatch and against a whole compiled
one-kernel graph (Crucible's and Inductor's, Dynamo's guards included).

    python -m harness.bench.launch [--compiled crucible inductor]

The kernel is ``x + 1`` over 1024 floats (one program), so the GPU keeps up with the host and the
figure is the host's cost of one launch: the mean of ``calls`` back-to-back launches, no sync in
between, best of ``rounds``; the launchers' rounds take turns (``host_us_each``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def host_us(launch: Callable[[], object], calls: int = 2000, rounds: int = 5) -> float:
    return host_us_each([launch], calls, rounds)[0]


def host_us_each(launches: list[Callable[[], object]], calls: int = 1000, rounds: int = 15) -> list[float]:
    """Host us per launch of each of ``launches``: the mean of ``calls`` back-to-back launches (no
    sync in between), best of ``rounds``. The rounds take turns (one of each launch path, then the
    next round), so a noisy stretch of the host's time falls on every path alike and the best round
    of each is measured under the same conditions."""
    for launch in launches:
        for _ in range(100):
            launch()
    torch.cuda.synchronize()
    best = [float("inf")] * len(launches)
    for _ in range(rounds):
        for i, launch in enumerate(launches):
            start = time.perf_counter()
            for _ in range(calls):
                launch()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
            torch.cuda.synchronize()
    return [b * 1e6 for b in best]


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


def _checked(launch: Callable[[], object], args: tuple[torch.Tensor, ...], x: torch.Tensor) -> Callable[[], object]:
    """``launch``, after checking that it computes ``x + 1`` into its output (a launch path that is
    fast but wrong must not make the table)."""
    outputs = [t for t in args if t is not x]
    for t in outputs:
        t.zero_()
    launch()
    torch.cuda.synchronize()
    if not any(torch.equal(t, x + 1) for t in outputs):
        raise RuntimeError("harness.bench.launch: a launch path did not compute x + 1")
    return launch


def launch_table(compiled: tuple[str, ...] = ("crucible", "inductor")) -> list[tuple[str, float]]:
    """(what, host us per launch) rows; CUDA only. ``compiled``: the backends whose whole one-kernel
    graphs are also timed."""
    import torch._dynamo

    import compiler  # noqa: F401  (registers the backend)
    from compiler.runtime import bind_launch

    x = torch.randn(1024, device="cuda")

    def add_one(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    launcher, args = crucible_launcher(add_one, x)
    launcher(*args)  # tunes, builds and binds
    paths = [(f"crucible launcher (bound at load, {launcher.launch_path})",
              _checked(lambda: launcher(*args), args, x))]
    jit = launcher.fn
    grid, meta = launcher.grid, launcher.meta
    kernel = jit.run(*args, grid=grid, warmup=False, **meta)
    via_triton = bind_launch(kernel, jit.arg_names, grid, meta, len(args), launcher.checked, launcher.dispatch,
                             torch.cuda.current_device())
    if via_triton is not None and launcher.launch_path != "triton":
        paths.append(("crucible launcher (bound at load, triton's driver launcher)",
                      _checked(lambda: via_triton(*args), args, x)))
    paths.append(("triton JIT dispatch fn[grid](...)", _checked(lambda: jit[grid](*args, **meta), args, x)))
    rows = list(zip([what for what, _ in paths], host_us_each([launch for _, launch in paths])))
    for backend in compiled:
        torch._dynamo.reset()
        compiled = torch.compile(add_one, backend=backend, dynamic=False)
        compiled(x)
        rows.append((f"{backend}: compiled one-kernel graph (guards + wrapper + launch)",
                     host_us(lambda compiled=compiled: compiled(x), calls=1000)))
    torch._dynamo.reset()
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.bench.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--compiled", nargs="*", default=["crucible", "inductor"], choices=("crucible", "inductor"),
                        help="backends whose compiled one-kernel graph is timed too (default both; none: skip)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("harness.bench.launch needs a CUDA GPU")
        return 2
    for what, us in launch_table(tuple(args.compiled)):
        print(f"host time per launch: {what}: {us:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
