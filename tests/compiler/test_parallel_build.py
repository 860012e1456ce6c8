"""Kernels of a graph build several at once (C++ libraries; on the GPU every Triton launch config)."""

from __future__ import annotations

import threading

import pytest
import torch

import compiler
from compiler import config, cpp_build
from compiler.pipeline import GraphCompilation
from compiler.runtime import parallel_map


def three_kernels(a, b):
    s = (a * 2).sum(0)  # a reduction, a pointwise kernel and a second reduction
    return s + b, (a.exp() - 1).amax(1)


def test_parallel_map_keeps_order_and_raises_the_first_failure() -> None:
    assert parallel_map(lambda x: x * x, list(range(20)), threads=4) == [x * x for x in range(20)]

    def fail(x: int) -> int:
        if x in (3, 7):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 3"):
        parallel_map(fail, list(range(10)), threads=4)


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_bad_compile_threads_is_a_clear_error(value, monkeypatch) -> None:
    monkeypatch.setenv("CRUCIBLE_COMPILE_THREADS", value)
    with pytest.raises(ValueError, match="CRUCIBLE_COMPILE_THREADS.*positive integer"):
        config.compile_threads()


def _graph(fn, *inputs):
    return compiler.trace_aten(fn, *inputs)


def test_cpp_kernels_of_a_graph_build_concurrently(monkeypatch) -> None:
    """Two builds meet at a barrier: it breaks (and the graph fails to compile) unless they overlap."""
    real_build = cpp_build.build_library
    meet = threading.Barrier(2, timeout=30)

    def build(*args, **kwargs):
        try:
            meet.wait()
        except threading.BrokenBarrierError:
            pass  # the third kernel arrives after the first two met
        return real_build(*args, **kwargs)

    monkeypatch.setattr(cpp_build, "build_library", build)
    monkeypatch.setenv("CRUCIBLE_COMPILE_THREADS", "4")
    a, b = torch.randn(6, 5), torch.randn(5)
    comp = GraphCompilation(_graph(three_kernels, a, b), "cpp", "inference")
    wrapper = comp.compile()
    assert len(comp.report.kernels) >= 2 and not meet.broken
    for got, want in zip(wrapper.call([a, b]), three_kernels(a, b)):
        torch.testing.assert_close(got, want)


def test_one_compile_thread_builds_one_by_one(monkeypatch) -> None:
    real_build = cpp_build.build_library
    active, most = [0], [0]
    lock = threading.Lock()

    def build(*args, **kwargs):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            return real_build(*args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(cpp_build, "build_library", build)
    monkeypatch.setenv("CRUCIBLE_COMPILE_THREADS", "1")
    a, b = torch.randn(6, 5), torch.randn(5)
    GraphCompilation(_graph(three_kernels, a, b), "cpp", "inference").compile()
    assert most[0] == 1


@pytest.mark.gpu
def test_triton_launch_configs_build_before_the_first_call() -> None:
    """On the GPU every launch config is built in the load pass (in parallel), so the graph's
    first call (which times the configs) builds nothing."""
    a, b = torch.randn(4096, 300, device="cuda"), torch.randn(300, device="cuda")
    comp = GraphCompilation(_graph(three_kernels, a, b), "triton", "inference")
    wrapper = comp.compile()
    launchers = list(wrapper.call.__globals__["launchers"].values())
    if not all(hasattr(launcher.fn, "compile") for launcher in launchers):
        pytest.skip("this Triton's JITFunction builds through no patchable compile attribute")
    builds, real = [], {id(launcher.fn): launcher.fn.compile for launcher in launchers}
    for launcher in launchers:
        launcher.fn.compile = lambda *args, real=launcher.fn.compile, **kw: builds.append(1) or real(*args, **kw)
    try:
        for got, want in zip(wrapper.call([a, b]), three_kernels(a, b)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # a sum over 4096 rows
    finally:
        for launcher in launchers:
            launcher.fn.compile = real[id(launcher.fn)]
    assert not builds


@pytest.mark.parametrize("value", ["-1", "some"])
def test_bad_compile_processes_is_a_clear_error(value, monkeypatch) -> None:
    monkeypatch.setenv("CRUCIBLE_COMPILE_PROCESSES", value)
    with pytest.raises(ValueError, match="CRUCIBLE_COMPILE_PROCESSES.*build processes"):
        config.compile_processes()


def test_build_processes_do_not_rerun_a_script_without_a_main_guard(tmp_path) -> None:
    """A spawned process imports its parent's ``__main__``: a script that compiles at import would
    compile again in every build process (and recurse into starting pools). The pool keeps it out."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "compile_at_import.py"
    script.write_text("import os\n"
                      "print('script body ran', flush=True)\n"
                      "os.environ['CRUCIBLE_COMPILE_PROCESSES'] = '1'\n"
                      "from compiler import runtime\n"
                      "pool = runtime.build_processes()\n"
                      "print('built in another process:', pool.submit(os.getpid).result() != os.getpid())\n")
    root = str(Path(compiler.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("script body ran") == 1 and "built in another process: True" in done.stdout


@pytest.mark.gpu
def test_gpu_kernels_build_in_worker_processes(monkeypatch, tmp_path) -> None:
    """CRUCIBLE_COMPILE_PROCESSES: every launch config is built by a worker process (into Triton's
    disk cache, then loaded here), and the graph computes what eager does."""
    from compiler import runtime

    monkeypatch.setenv("CRUCIBLE_COMPILE_PROCESSES", "2")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path / "crucible"))
    real = runtime.build_processes()
    submitted = []

    class Spy:
        def submit(self, fn, *args):
            submitted.append(args[1])
            return real.submit(fn, *args)

    monkeypatch.setattr(runtime, "build_processes", lambda: Spy())
    a, b = torch.randn(300, 70, device="cuda"), torch.randn(70, device="cuda")
    comp = GraphCompilation(_graph(three_kernels, a, b), "triton", "inference")
    wrapper = comp.compile()
    assert {k.symbol for k in comp.report.kernels} <= set(submitted) and submitted
    for got, want in zip(wrapper.call([a, b]), three_kernels(a, b)):
        torch.testing.assert_close(got, want)
