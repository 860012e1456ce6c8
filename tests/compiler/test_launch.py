"""Bound launches: a compiled Triton kernel launched without Triton's JIT dispatch.

The CPU tests drive ``bind_launch`` with a stand-in for Triton's compiled kernel (its launcher
records what it is called with); the GPU tests check real kernels and the fallback for a
misaligned input.
"""

from __future__ import annotations

import pytest
import torch

from compiler import tuning_cache
from compiler.runtime import ALIGNMENT, bind_launch, bind_static_launch, static_launch_refusal


class FakeCompiledKernel:
    """What ``bind_launch`` uses of a Triton ``CompiledKernel``: ``run``, ``function``, ``packed_metadata``."""

    name = "k_test"
    function = 1234
    packed_metadata = ("meta",)

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def run(self, *args) -> None:
        self.calls.append(args)


def _bind(kernel: FakeCompiledKernel, fallback, checked=(0, 1), grid=(7,)):
    return bind_launch(kernel, ["p0", "p1", "XBLOCK", "RBLOCK"], grid, {"XBLOCK": 64, "RBLOCK": 8, "num_warps": 4},
                       2, checked, fallback, device_index=0, stream=lambda device: 99 + device)


def test_bound_launch_calls_the_driver_launcher_with_grid_stream_and_constexprs() -> None:
    kernel, fell_back = FakeCompiledKernel(), []
    launch = _bind(kernel, lambda *a: fell_back.append(a))
    a, b = torch.zeros(8), torch.zeros(8)
    launch(a, b)
    assert not fell_back
    assert kernel.calls == [(7, 1, 1, 99, 1234, ("meta",), None, None, None, a, b, 64, 8)]


def test_misaligned_argument_goes_through_the_dispatch() -> None:
    """A view at an odd storage offset breaks the alignment the kernel was compiled for."""
    kernel, fell_back = FakeCompiledKernel(), []
    launch = _bind(kernel, lambda *a: fell_back.append(a))
    base = torch.zeros(9)
    view = base[1:]
    assert view.data_ptr() % ALIGNMENT
    launch(view, base)
    assert not kernel.calls and len(fell_back) == 1


def test_unchecked_positions_are_not_looked_at() -> None:
    """Buffers the wrapper allocates are aligned: only the loader's ``checked`` positions are read."""
    kernel, fell_back = FakeCompiledKernel(), []
    launch = _bind(kernel, lambda *a: fell_back.append(a), checked=(1,))
    base = torch.zeros(9)
    launch(base[1:], base)
    assert len(kernel.calls) == 1 and not fell_back


def test_a_profiler_launch_hook_goes_through_the_dispatch(monkeypatch) -> None:
    import triton

    kernel, fell_back = FakeCompiledKernel(), []
    launch = _bind(kernel, lambda *a: fell_back.append(a))
    hook = triton.knobs.runtime.launch_enter_hook
    if hasattr(hook, "add"):  # triton 3.8: a chain of hooks
        monkeypatch.setattr(hook, "calls", [lambda *a: None])
    else:
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    launch(torch.zeros(4), torch.zeros(4))
    assert not kernel.calls and len(fell_back) == 1


def test_unbindable_parameters_keep_the_dispatch() -> None:
    """A constexpr the launch config does not give (a kernel with a default) is left to Triton."""
    assert bind_launch(FakeCompiledKernel(), ["p0", "XBLOCK", "EXTRA"], (1,), {"XBLOCK": 4}, 1, (0,),
                       lambda *a: None, 0, stream=lambda d: 0) is None


class FakeSource:
    signature = {"p0": "*fp32", "p1": "*bf16", "XBLOCK": "constexpr", "RBLOCK": "constexpr"}


class FakeMetadata:
    num_warps = 4
    shared = 256
    global_scratch_size = 0
    profile_scratch_size = 0


class FakeStaticKernel(FakeCompiledKernel):
    """A compiled kernel as ``bind_static_launch`` reads it: its function, metadata and signature."""

    src = FakeSource()
    metadata = FakeMetadata()


def _bind_static(kernel, fallback, launches: list, checked=(0, 1)):
    return bind_static_launch(kernel, ["p0", "p1", "XBLOCK", "RBLOCK"], (7, 2), 2, checked, fallback, 0,
                              stream=lambda device: 99 + device, launch_kernel=lambda *a: launches.append(a))


def test_static_launch_passes_data_pointers_warps_shared_memory_and_null_scratch() -> None:
    launches, fell_back = [], []
    launch = _bind_static(FakeStaticKernel(), lambda *a: fell_back.append(a), launches)
    a, b = torch.zeros(8), torch.zeros(8)
    launch(a, b)
    assert not fell_back
    assert launches == [(1234, 7, 2, 1, 4, 256, "OOOO", (a.data_ptr(), b.data_ptr(), None, None), 99)]


def test_static_launch_sends_misaligned_and_hooked_launches_to_the_fallback(monkeypatch) -> None:
    import triton

    launches, fell_back = [], []
    launch = _bind_static(FakeStaticKernel(), lambda *a: fell_back.append(a), launches)
    base = torch.zeros(9)
    launch(base[1:], base)
    assert not launches and len(fell_back) == 1
    hook = triton.knobs.runtime.launch_enter_hook
    if hasattr(hook, "add"):
        monkeypatch.setattr(hook, "calls", [lambda *a: None])
    else:
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    launch(base, base)
    assert not launches and len(fell_back) == 2


@pytest.mark.parametrize("change, reason", [
    ({"signature": {"p0": "*fp32", "p1": "i32", "XBLOCK": "constexpr", "RBLOCK": "constexpr"}}, "not a pointer"),
    ({"global_scratch_size": 64}, "scratch memory"),
    ({"launch_pdl": True}, "launch feature"),
])
def test_static_launch_refuses_what_it_cannot_launch(change, reason) -> None:
    """Such a kernel keeps Triton's launcher (``bind_launch``): refused, not launched wrongly."""
    kernel = FakeStaticKernel()
    kernel.src = type("Src", (), {"signature": change.get("signature", FakeSource.signature)})()
    kernel.metadata = type("Meta", (FakeMetadata,), {k: v for k, v in change.items() if k != "signature"})()
    assert reason in static_launch_refusal(kernel, ["p0", "p1", "XBLOCK", "RBLOCK"], 2)
    assert _bind_static(kernel, lambda *a: None, []) is None


def test_kernels_of_older_triton_without_scratch_take_only_their_pointers() -> None:
    kernel, launches = FakeStaticKernel(), []
    kernel.metadata = type("Meta", (), {"num_warps": 8, "shared": 0})()
    _bind_static(kernel, lambda *a: None, launches)(torch.zeros(4), torch.zeros(4))
    assert launches[0][4:7] == (8, 0, "OO") and len(launches[0][7]) == 2


@pytest.mark.gpu
def test_gpu_kernels_are_bound_after_the_first_launch() -> None:
    import compiler
    from compiler.pipeline import GraphCompilation
    from compiler.runtime import KernelLauncher

    x = torch.randn(1000, 33, device="cuda")
    wrapper = GraphCompilation(compiler.trace_aten(lambda a: torch.softmax(a * 2, -1) + 1, x), "triton",
                               "inference").compile()
    out = wrapper.call([x])
    torch.testing.assert_close(out, torch.softmax(x * 2, -1) + 1)
    launchers = [v for v in wrapper.launchers.values() if isinstance(v, KernelLauncher)]
    assert launchers and all(launcher.bound is not None for launcher in launchers)
    # torch's static launcher where torch has it (torch >= 2.7 builds with CUDA)
    expected = "static" if hasattr(torch._C, "_StaticCudaLauncher") else "triton"
    assert {launcher.launch_path for launcher in launchers} == {expected}
    out = wrapper.call([x])
    torch.testing.assert_close(out, torch.softmax(x * 2, -1) + 1)
    # a misaligned input: the launch falls back to the dispatch, which builds a variant for it
    base = torch.randn(1000 * 33 + 1, device="cuda")
    odd = base[1:].view(1000, 33)
    out = wrapper.call([odd])
    torch.testing.assert_close(out, torch.softmax(odd * 2, -1) + 1)


def test_identical_kernels_of_a_graph_are_tuned_once(monkeypatch) -> None:
    """Regression (GPT-2 bf16 on the H200, CRUCIBLE_KERNEL_TIMES): the twelve layers' identical GELU
    kernels were each tuned in their first launch, because a graph loads all its launchers before any
    of them tunes. The second launcher of a tuned source now takes the first one's config."""
    import triton.testing

    import compiler
    from compiler import runtime
    from compiler.codegen.triton import TritonRenderer
    from compiler.lowering import lower
    from compiler.scheduler import schedule

    x = torch.randn(64, 100_001)  # rows of an odd length: one looped reduction, several launch configs
    renderer = TritonRenderer(interpret=False)
    gm = compiler.trace_aten(lambda a: (torch.tanh(a) * 3).sum(-1), x)
    (kernel,) = schedule(lower(gm, torch.device("cpu"), renderer.capabilities), renderer.capabilities).kernels
    rendered = renderer.render(kernel)
    assert rendered.alternatives  # several launch configs: tuning would time them
    monkeypatch.setattr(runtime, "_TUNED", {})
    first, second = runtime.KernelLauncher(rendered, False), runtime.KernelLauncher(rendered, False)
    timed = []

    def fake_bench(fn, **kwargs) -> float:
        timed.append(fn)
        return float(len(timed))  # the first config is fastest

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    first.tune(())
    assert len(timed) == 1 + len(rendered.alternatives) and first.tuned
    second.tune(())
    assert len(timed) == 1 + len(rendered.alternatives)  # not timed again
    assert (second.grid, second.meta) == (first.grid, first.meta)


def test_a_tuned_launch_config_is_kept_on_disk_for_later_processes(monkeypatch, tmp_path) -> None:
    """A later process (here: an emptied in-memory table) takes the config from the cache directory
    instead of timing the candidates again; a different device kind tunes again."""
    import triton.testing

    import compiler
    from compiler import runtime
    from compiler.codegen.triton import TritonRenderer
    from compiler.lowering import lower
    from compiler.scheduler import schedule

    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path))
    x = torch.randn(64, 100_001)
    renderer = TritonRenderer(interpret=False)
    gm = compiler.trace_aten(lambda a: (torch.sigmoid(a) * 5).sum(-1), x)
    (kernel,) = schedule(lower(gm, torch.device("cpu"), renderer.capabilities), renderer.capabilities).kernels
    rendered = renderer.render(kernel)
    assert rendered.alternatives
    timed = []
    last = len(rendered.alternatives)

    def fake_bench(fn, **kwargs) -> float:
        timed.append(fn)
        return 0.0 if len(timed) == last + 1 else 1.0  # the last config is fastest

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(runtime, "_TUNED", {})
    first = runtime.KernelLauncher(rendered, False)
    first.tune(())
    assert len(timed) == last + 1 and (first.grid, first.meta) == first.configs[-1]
    monkeypatch.setattr(runtime, "_TUNED", {})
    tuning_cache.forget_loaded()  # as a new process: the file is read again
    later = runtime.KernelLauncher(rendered, False)
    later.tune(())
    assert len(timed) == last + 1 and (later.grid, later.meta) == first.configs[-1]
    key = first.tuning_key()
    assert f"kernel {first.symbol}" in key and tuning_cache.lookup(key, len(first.configs)) == last
    own = f"kernel {first.symbol} ({len(first.configs)} configs)"
    assert tuning_cache.lookup(tuning_cache.full_key(own, "another GPU", triton.__version__), len(first.configs)) is None
    assert tuning_cache.lookup(key, last) is None  # no longer a candidate


def test_a_statically_launched_kernel_is_loaded_without_tritons_launcher(monkeypatch) -> None:
    """``loaded_function`` loads the binary through the driver (no per-signature C launcher build,
    which Triton 3.6's ``_init_handles`` makes with the host compiler), once per kernel, with the
    shared-memory and thread checks ``_init_handles`` makes."""
    from types import SimpleNamespace

    from triton.runtime import driver
    from triton.runtime.errors import OutOfResources

    from compiler.runtime import loaded_function

    loads = []
    utils = SimpleNamespace(get_device_properties=lambda device: {"max_shared_mem": 1024},
                            load_binary=lambda name, binary, shared, device: loads.append(name) or
                            ("module", f"fn:{name}", 32, 0, 1024))
    fake = SimpleNamespace(utils=utils, get_current_device=lambda: 0,
                           get_current_target=lambda: SimpleNamespace(warp_size=32))
    monkeypatch.setattr(driver, "_active", fake)

    def kernel(name: str, shared: int = 256, warps: int = 4) -> SimpleNamespace:
        return SimpleNamespace(name=name, kernel=b"cubin", module=None, function=None,
                               metadata=SimpleNamespace(shared=shared, num_warps=warps))

    k = kernel("k_a")
    assert loaded_function(k) == "fn:k_a" and loaded_function(k) == "fn:k_a" and loads == ["k_a"]
    with pytest.raises(OutOfResources, match="shared memory"):
        loaded_function(kernel("k_big", shared=4096))
    with pytest.raises(OutOfResources, match="threads"):
        loaded_function(kernel("k_wide", warps=64))
    already = SimpleNamespace(module="loaded by triton", function="triton's", kernel=b"cubin")
    assert loaded_function(already) == "triton's"
