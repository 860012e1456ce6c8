"""Launch functions bound to one compiled Triton kernel at load (``KernelLauncher.bind``): Triton's
driver launcher with the grid, constexprs and handles fixed, or torch's static CUDA launcher on the
kernel's function loaded without Triton's launcher; and the checks that decide which applies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def _aligned(t: Any) -> bool:
    return not isinstance(t, torch.Tensor) or t.data_ptr() % ALIGNMENT == 0


# Triton specializes a pointer argument on 16-byte alignment (vectorized loads); a kernel compiled
# for aligned arguments must not be launched on a misaligned one (a view at an odd storage offset).
ALIGNMENT = 16


def bind_launch(kernel: Any, arg_names: Sequence[str], grid: tuple[int, ...], meta: dict, nargs: int,
                checked: Sequence[int], fallback: Callable[..., None], device_index: int,
                stream: Callable[[int], int] | None = None) -> Callable[..., None] | None:
    """A launch function for one compiled Triton kernel with its grid, constexprs and launch handles
    bound at load: each launch is one call of Triton's driver launcher, as the JIT dispatch makes it
    last (``kernel.run(grid, stream, function, metadata, hooks, *args, *constexprs)``) but without
    the dispatch's per-call binding, specialization key and cache lookup (~11 us a launch on the
    H200). It still checks what that kernel was specialized on that can change between calls: the
    alignment of the ``checked`` arguments; and profiler launch hooks, which need the dispatch's
    launch metadata. Either sends that launch through ``fallback``. None when the kernel takes
    parameters this cannot bind (then every launch dispatches)."""
    import triton

    runtime_knobs = triton.knobs.runtime
    if len(arg_names) < nargs or any(n not in meta for n in arg_names[nargs:]):
        return None
    tail = tuple(meta[n] for n in arg_names[nargs:])
    grid3 = tuple(grid) + (1,) * (3 - len(grid))
    params = ", ".join(f"a{i}" for i in range(nargs))
    check = " | ".join(f"a{i}.data_ptr()" for i in checked)
    misaligned = f"({check}) % {ALIGNMENT} or " if check else ""
    # an active launch hook: a non-empty HookChain (triton 3.8), or any hook at all (3.6, None when unset)
    hooked = ("knobs.launch_enter_hook.calls" if hasattr(runtime_knobs.launch_enter_hook, "calls")
              else "knobs.launch_enter_hook is not None")
    source = (f"def launch({params}):\n"
              f"    if {misaligned}{hooked}:\n"
              f"        return fallback({params})\n"
              f"    run({grid3[0]}, {grid3[1]}, {grid3[2]}, stream({device_index}), function, metadata, None, "
              f"None, None, {params}{', ' if params else ''}*tail)\n")
    namespace = {"knobs": runtime_knobs, "fallback": fallback, "run": kernel.run, "function": kernel.function,
                 "metadata": kernel.packed_metadata, "tail": tail,
                 "stream": stream or torch._C._cuda_getCurrentRawStream}
    exec(compile(source, f"<crucible-launch {getattr(kernel, 'name', '')}>", "exec"), namespace)  # noqa: S102
    return namespace["launch"]


def static_launch_refusal(kernel: Any, arg_names: Sequence[str], nargs: int) -> str | None:
    """Why torch's static launcher cannot launch this compiled kernel (None: it can). It calls
    ``cuLaunchKernel`` with 32 * num_warps threads and the kernel's shared memory, nothing more:
    pointer parameters only (Crucible's kernels take buffers and constexprs), no scratch memory to
    allocate, one CTA per program, no cooperative or programmatic-dependent launch, no
    instrumentation."""
    meta = kernel.metadata
    signature = getattr(getattr(kernel, "src", None), "signature", None)
    if not isinstance(signature, dict):
        return "no signature"
    types = [signature.get(name) for name in arg_names]
    if any(not (isinstance(t, str) and t.startswith("*")) for t in types[:nargs]):
        return "a parameter that is not a pointer"
    if any(t != "constexpr" for t in types[nargs:]):
        return "a runtime parameter after the bound ones"
    if getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0):
        return "scratch memory"
    if getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_cooperative_grid", False) \
            or getattr(meta, "launch_pdl", False) or getattr(meta, "tensordesc_meta", None) \
            or getattr(meta, "instrumentation_mode", ""):
        return "a launch feature the static launcher lacks"
    return None


def loaded_function(kernel: Any) -> Any:
    """The compiled kernel's GPU function, loaded from its binary without Triton's launcher: Triton
    3.6 builds a C launcher per kernel signature with the host compiler when it first loads a kernel
    (``CompiledKernel._init_handles``), ~0.3 s each and one at a time in a graph's first call (27
    builds, 5.8 s of convnext_tiny's cold first call on the H200, in its tuning), and a static
    launch does not need it. The resource checks ``_init_handles`` makes are made here too
    (Triton's ``OutOfResources``: the tuner skips such a config). Kept on the kernel object."""
    function = getattr(kernel, "_crucible_function", None)
    if function is not None:
        return function
    if getattr(kernel, "module", None) is not None or not isinstance(getattr(kernel, "kernel", None), bytes):
        return kernel.function  # loaded by Triton already (or a stand-in without a binary)
    from triton.runtime import driver
    from triton.runtime.errors import OutOfResources

    utils, meta = driver.active.utils, kernel.metadata
    device = driver.active.get_current_device()
    max_shared = utils.get_device_properties(device)["max_shared_mem"]
    if meta.shared > max_shared:
        raise OutOfResources(meta.shared, max_shared, "shared memory")
    _, function, _, _, max_threads = utils.load_binary(kernel.name, kernel.kernel, meta.shared, device)
    threads = meta.num_warps * driver.active.get_current_target().warp_size
    if threads > max_threads:
        raise OutOfResources(threads, max_threads, "threads")
    kernel._crucible_function = function
    return function


def bind_static_launch(kernel: Any, arg_names: Sequence[str], grid: tuple[int, ...], nargs: int,
                       checked: Sequence[int], fallback: Callable[..., None], device_index: int,
                       stream: Callable[[int], int] | None = None,
                       launch_kernel: Callable[..., None] | None = None) -> Callable[..., None] | None:
    """A launch function calling torch's static CUDA launcher (``torch._C._StaticCudaLauncher``, what
    Inductor launches its kernels with) on the compiled kernel's already loaded function: one C call
    that takes the data pointers as integers and calls ``cuLaunchKernel``, instead of Triton's Python
    launcher and its C launcher (which calls each tensor's ``data_ptr`` again and checks hooks). The
    pointers are read once in Python, where the alignment check needs them anyway; launch hooks send
    a launch through ``fallback`` as in ``bind_launch``. None where torch lacks the launcher or the
    kernel needs what it does not do (``static_launch_refusal``)."""
    import triton

    if launch_kernel is None:
        static = getattr(torch._C, "_StaticCudaLauncher", None)
        if static is None or torch.version.hip:
            return None
        launch_kernel = static._launch_kernel
    if len(arg_names) < nargs or static_launch_refusal(kernel, arg_names, nargs) is not None:
        return None
    meta = kernel.metadata
    # Triton appends a global and a profile scratch pointer to the parameters of kernels built by
    # versions that know them (both null here: ``static_launch_refusal`` refused scratch sizes)
    scratch = sum(hasattr(meta, n) for n in ("global_scratch_size", "profile_scratch_size"))
    types = "O" * (nargs + scratch)
    grid3 = tuple(grid) + (1,) * (3 - len(grid))
    params = ", ".join(f"a{i}" for i in range(nargs))
    pointers = "".join(f"    p{i} = a{i}.data_ptr()\n" for i in range(nargs))
    check = " | ".join(f"p{i}" for i in checked)
    misaligned = f"({check}) % {ALIGNMENT} or " if check else ""
    runtime_knobs = triton.knobs.runtime
    hooked = ("knobs.launch_enter_hook.calls" if hasattr(runtime_knobs.launch_enter_hook, "calls")
              else "knobs.launch_enter_hook is not None")
    values = "".join(f"p{i}, " for i in range(nargs)) + "None, " * scratch
    source = (f"def launch({params}):\n{pointers}"
              f"    if {misaligned}{hooked}:\n"
              f"        return fallback({params})\n"
              f"    launch_kernel(function, {grid3[0]}, {grid3[1]}, {grid3[2]}, {meta.num_warps}, {meta.shared}, "
              f"{types!r}, ({values}), stream({device_index}))\n")
    namespace = {"knobs": runtime_knobs, "fallback": fallback, "launch_kernel": launch_kernel,
                 "function": loaded_function(kernel), "stream": stream or torch._C._cuda_getCurrentRawStream}
    exec(compile(source, f"<crucible-static-launch {getattr(kernel, 'name', '')}>", "exec"), namespace)  # noqa: S102
    return namespace["launch"]
