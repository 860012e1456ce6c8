"""Build generated Triton kernels for a CUDA GPU on a machine without one.

Triton's compiler needs no device: given a target (``GPUTarget("cuda", 90, 32)``: an H100/H200) it
runs its front end, its GPU passes and ptxas on any machine. The interpreter, which CPU-only runs
use, never does: it executes the kernel's Python with numpy. Errors only the GPU build raises were
found on the H200 alone (fuzz campaign, seed 7): ``(0).to(tl.float32)`` (a Python int has no
``.to``), libdevice called with a float64 tensor and a float32 literal (KeyError), a tuple reduction
over operands of two shapes. ``build_for`` brings them to the CPU: ``tests/compiler/test_gpu_build.py``
builds the kernels of such graphs in CI, ``python -m harness.bench.models --render-only`` those
of every benchmark model, and ``CRUCIBLE_GPU_BUILD_CHECK=1`` those of every interpreted graph (a
fuzz campaign on ``crucible-interpret`` then finds GPU build errors on a CPU-only machine).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from compiler.codegen.base import RenderedKernel
from compiler.scheduler import Kernel

POINTER = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64",
           torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8",
           torch.bool: "*i1"}
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas")
# a size-generic kernel (symbolic sizes) is built with the launch config its rule picks at this value of
# every size: not a multiple of any block, so the masked variants are the ones built
EXAMPLE_SIZE = 37


def available() -> bool:
    """Whether the installed Triton carries its NVIDIA backend (the pip wheel does)."""
    try:
        import triton.backends.nvidia.compiler  # noqa: F401
    except ImportError:
        return False
    return True


def build_for(rendered: RenderedKernel, dtypes: Sequence[torch.dtype], arch: int = 90) -> str | None:
    """None when ``rendered`` (a Triton kernel; ``dtypes``: its buffer parameters' element types, in
    order) builds for ``sm_{arch}`` with its first launch config; else the error, one paragraph."""
    import triton
    from triton.backends.compiler import GPUTarget

    from compiler.runtime import BUILD_OPTIONS, load_module

    symbol = rendered.symbol or rendered.name
    fn = getattr(load_module(rendered.source, symbol), symbol)
    names = list(fn.arg_names)
    meta = dict(rendered.meta)
    launch = rendered.size_launch
    if launch is not None:  # sizes are trailing int64 arguments; the launch rule picks the config
        _, meta = launch.config(*launch.numels()(*[EXAMPLE_SIZE] * len(rendered.sizes)))
    constexprs = {k: v for k, v in meta.items() if k not in LAUNCH_OPTIONS}
    if len(dtypes) + len(rendered.sizes) + len(constexprs) != len(names):
        raise ValueError(f"{symbol}: {len(names)} parameters, {len(dtypes)} buffers, sizes {rendered.sizes} "
                         f"and {sorted(constexprs)}")
    signature = {n: POINTER[d] for n, d in zip(names, dtypes)}
    signature.update({n: "i64" for n in rendered.sizes})
    signature.update({n: "constexpr" for n in constexprs})
    source = triton.compiler.ASTSource(fn, signature, constexprs={(names.index(k),): v for k, v in constexprs.items()})
    options = {k: meta[k] for k in LAUNCH_OPTIONS if k in meta} | BUILD_OPTIONS
    try:
        triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as why:  # noqa: BLE001  (any build error is the answer)
        return f"{type(why).__name__}: {why}".strip()
    return None


class GpuBuildError(RuntimeError):
    """A generated kernel that Triton cannot build for the GPU."""


def check_kernels(kernels: Sequence[Kernel], arch: int = 90) -> None:
    """Render ``kernels`` (scheduled for Triton) for the GPU and build each for ``sm_{arch}``; raises
    ``GpuBuildError`` naming the first that fails, with Triton's error."""
    from compiler.codegen.registry import renderer_for

    renderer = renderer_for("triton", torch.device("cuda"))  # the GPU renderer, templates included
    for kernel in kernels:
        rendered = renderer.render(kernel)
        error = build_for(rendered, [kernel.param(a).dtype for a in rendered.args], arch)
        if error is not None:
            raise GpuBuildError(f"{kernel.name} ({rendered.symbol}) does not build for sm_{arch}: {error}")
