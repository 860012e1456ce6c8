"""Deferred tuning (compiler/tuning.py): the first call waits for one launch config per kernel;
the other candidates build in the background and a later call times them.

The launchers here are GPU launchers (not interpreted) whose builds are replaced by counters, so
the bookkeeping runs on any machine; the GPU test at the end runs the real thing."""

from __future__ import annotations

import functools
import threading

import pytest
import torch

from compiler import runtime, tuning
from compiler.codegen.triton import TritonRenderer
from compiler.config import Options
from compiler.report import GraphReport


def _rendered(fn, *inputs):
    import compiler
    from compiler.lowering import lower
    from compiler.scheduler import schedule

    renderer = TritonRenderer(interpret=False)
    gm = compiler.trace_aten(fn, *inputs)
    sched = schedule(lower(gm, torch.device("cpu"), renderer.capabilities), renderer.capabilities)
    return {k.name: renderer.render(k) for k in sched.kernels}, {k.name: k for k in sched.kernels}


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty tuning cache and in-process table."""
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "_TUNED", {})
    from compiler import tuning_cache

    tuning_cache.forget_loaded()


def _reduction():
    # rows of an odd length: not split (compiler.split_reductions), one looped reduction
    (rendered,) = _rendered(lambda a: a.sum(-1), torch.randn(64, 100_001))[0].values()
    assert rendered.alternatives  # a looped reduction: several candidates
    return rendered


def test_each_mode_decides_what_the_load_pass_builds(fresh) -> None:
    rendered = _reduction()
    deferred = runtime.KernelLauncher(rendered, False)
    later = deferred.defer_tuning("deferred")
    assert later == deferred.configs[1:] and deferred.tuned
    assert deferred.configs_to_build() == [deferred.configs[0]]  # the first call waits for one config
    deferred.retune()
    assert not deferred.tuned and deferred.bound is None  # the next launch times the candidates

    off = runtime.KernelLauncher(rendered, False)
    assert off.defer_tuning("off") == [] and off.configs_to_build() == [off.configs[0]]

    first_call = runtime.KernelLauncher(rendered, False)
    assert first_call.defer_tuning("first_call") == [] and first_call.configs_to_build() == first_call.configs


def test_a_known_config_is_the_only_one_built_in_every_mode(fresh) -> None:
    rendered = _reduction()
    picked = runtime.KernelLauncher(rendered, False).configs[2]
    runtime._TUNED[rendered.symbol] = picked  # tuned earlier in this process (or found in the tuning cache)
    for mode in tuning.MODES:
        launcher = runtime.KernelLauncher(rendered, False)
        assert launcher.defer_tuning(mode) == [] and launcher.configs_to_build() == [picked]


def test_a_first_candidate_that_fails_on_this_gpu_has_every_candidate_timed(fresh, monkeypatch) -> None:
    """Deferred tuning runs the first candidate untimed; where it cannot build or launch (out of
    shared memory on a smaller GPU), the launch times every candidate at once, skipping failures."""
    import triton.testing

    rendered = _reduction()
    launcher = runtime.KernelLauncher(rendered, False)
    launcher.defer_tuning("deferred")
    ran = []

    class Fn:  # Triton's JITFunction, as far as the launcher uses it here
        arg_names = launcher.fn.arg_names

        def run(self, *args, grid, warmup, **meta):
            if meta["XBLOCK"] == launcher.configs[0][1]["XBLOCK"] and meta["RBLOCK"] == launcher.configs[0][1]["RBLOCK"]:
                raise RuntimeError("out of resources: shared memory")
            ran.append(dict(meta))

        def __getitem__(self, grid):
            return lambda *args, **meta: self.run(*args, grid=grid, warmup=False, **meta)

    launcher.fn = Fn()
    timed = []

    def fake_bench(fn, **kwargs) -> float:
        fn()  # the first candidate raises: tuning skips it
        timed.append(1)
        return float(len(timed))

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    launcher()
    assert (launcher.grid, launcher.meta) == launcher.configs[1] and launcher.tuned and not launcher.untimed
    assert ran[-1] == launcher.configs[1][1]


def test_timing_puts_back_what_the_kernel_updates_in_place(fresh, monkeypatch) -> None:
    """A kernel that reads and writes a buffer (a running statistic or a step counter kept in the
    graph) runs many times while its configs are timed: the load pass marks that buffer, timing puts
    it back, and the launch after it updates it once (GPU, crucible-triton: the smoke tier's mutation
    entries were off by the repeated updates of their running statistics)."""
    import dataclasses

    import triton.testing

    from compiler.pipeline import load_kernels
    from compiler.scheduler import Param

    rendered = _reduction()
    kernel = _rendered(lambda a: a.sum(-1), torch.randn(64, 100_001))[1][rendered.name]
    in_place = dataclasses.replace(kernel, params=tuple(
        Param(p.buffer, p.dtype, p.span, True, True) if i == len(rendered.args) - 1 else p
        for i, p in enumerate(kernel.params)))
    monkeypatch.setattr(runtime.KernelLauncher, "build_jobs", lambda self, dtypes, configs: [])
    monkeypatch.setitem(runtime.LOADERS, "triton", lambda r, device: runtime.KernelLauncher(r, interpret=False))
    launchers = load_kernels({rendered.name: rendered}, torch.device("cpu"), {rendered.name: in_place},
                             None, "first_call", [], None)
    launcher = launchers[rendered.name]
    assert launcher.rewritten == (len(rendered.args) - 1,) and not launcher.tuned

    class Fn:  # each launch adds 1 to its last argument, as ``total += x.sum(0)`` would
        arg_names = launcher.fn.arg_names

        def run(self, *args, grid, warmup, **meta):
            if not warmup:
                args[-1].add_(1)

        def __getitem__(self, grid):
            return lambda *args, **meta: self.run(*args, grid=grid, warmup=False, **meta)

    launcher.fn = Fn()
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: [fn() for _ in range(3)] and 1.0)
    total = torch.zeros(64)
    launcher(torch.zeros(64, 100_001), total)
    assert launcher.tuned and torch.equal(total, torch.ones(64))  # timed 3 times per config, applied once
    launcher._time_configs((torch.zeros(64, 100_001), total), [])  # timing alone, nothing put back
    assert total[0].item() == 1 + 3 * len(launcher.configs)  # what the launch would have met unmarked


def test_the_tuning_cache_decides_before_the_load_pass(fresh) -> None:
    from compiler import tuning_cache

    rendered = _reduction()
    launcher = runtime.KernelLauncher(rendered, False)
    tuning_cache.store(launcher.tuning_key(), 1, str(launcher.configs[1][1]), 1.0, [])
    runtime._TUNED.clear()
    later = runtime.KernelLauncher(rendered, False)
    assert later.defer_tuning("deferred") == [] and later.configs_to_build() == [later.configs[1]]


def test_the_graph_retunes_in_its_first_call_after_the_background_builds(fresh, monkeypatch) -> None:
    """The load pass builds each first config once (identical kernels of two layers share it), the
    rest in the background; calls run untuned until those are built, then one call retunes."""
    from compiler.pipeline import load_kernels

    def layers(a, q):  # the second sum reads a matmul of the first: two kernels of the same source
        first = a.sum(-1)
        return torch.mm(first[:, None].expand(64, 16).contiguous(), q).sum(-1)

    rendered, kernels = _rendered(layers, torch.randn(64, 100_001), torch.randn(16, 100_001))
    assert len({r.symbol for r in rendered.values()}) < len(rendered)  # two kernels are the same source
    built: list[tuple] = []
    gate = threading.Event()

    def build_jobs(self, dtypes, configs):
        def job(config):
            if config != self.configs[0]:
                gate.wait(10)  # the background builds wait until the test lets them go
            built.append((self.symbol, repr(config)))
        return [lambda c=c: job(c) for c in configs]

    monkeypatch.setattr(runtime.KernelLauncher, "build_jobs", build_jobs)
    monkeypatch.setitem(runtime.LOADERS, "triton", lambda r, device: runtime.KernelLauncher(r, interpret=False))
    plans: list[tuning.DeferredTuning] = []
    report = GraphReport(0, "inference", 3, "triton")
    launchers = load_kernels(rendered, torch.device("cpu"), kernels, None, "deferred", plans, report)
    symbols = {r.symbol for r in rendered.values()}
    assert sorted(built) == sorted({(launchers[n].symbol, repr(launchers[n].configs[0])) for n in rendered})
    assert len(built) == len(symbols)
    (plan,) = plans
    retuned = []
    for launcher in launchers.values():
        monkeypatch.setattr(launcher, "retune", lambda launcher=launcher: retuned.append(launcher))
    calls = []
    call = tuning.tuned_call(lambda args: calls.append(args), plan)
    call([1])
    assert retuned == [] and plan.pending  # still building
    assert "2 kernels run their first launch config until" in str(report)  # compiler.inspect shows it
    gate.set()
    assert tuning.finish_tuning(10)
    call([2])
    call([3])
    several = [launcher for launcher in launchers.values() if len(launcher.configs) > 1]
    assert len(several) == 2 and sorted(map(id, retuned)) == sorted(map(id, several))  # once each
    assert not plan.pending and "2 kernels' candidates built and timed" in report.deferred_tuning
    assert calls == [[1], [2], [3]]
    alternatives = {(launchers[n].symbol, repr(c)) for n in rendered for c in launchers[n].configs[1:]}
    assert len(built) == len(symbols) + len(alternatives)  # each alternative built once


def test_builds_left_at_exit_are_dropped_and_the_running_one_finishes(monkeypatch) -> None:
    """What the interpreter's exit does (``stop``): pending builds are dropped, so a process that
    ends before its graphs tune does not wait for them."""
    monkeypatch.setenv("CRUCIBLE_COMPILE_THREADS", "1")  # one build thread: the others wait behind it
    builder = tuning._Builder()
    started, release, ran = threading.Event(), threading.Event(), []

    def blocking() -> None:
        started.set()
        release.wait(10)
        ran.append("first")

    builder.submit([blocking] + [lambda i=i: ran.append(i) for i in range(50)])
    assert started.wait(10)
    builder.stop()
    release.set()
    for thread in builder.threads:
        thread.join(10)
    assert ran == ["first"] and not builder.pending
    builder.submit([lambda: ran.append("late")])  # refused once stopped
    assert "late" not in ran and builder.wait(1)


def test_nothing_to_defer_gives_the_call_unchanged() -> None:
    call = lambda args: args  # noqa: E731
    assert tuning.tuned_call(call, None) is call
    assert tuning.tuned_call(call, tuning.DeferredTuning([], [])) is call


def test_the_tuning_option_is_checked() -> None:
    assert Options.parse(None).tuning == "deferred"
    assert Options.parse({"tuning": "off"}).tuning == "off"
    with pytest.raises(ValueError, match="tuning must be one of"):
        Options.parse({"tuning": "later"})


@pytest.mark.gpu
def test_deferred_tuning_on_the_gpu_tunes_after_the_first_call(fresh, monkeypatch, tmp_path) -> None:
    """The first call runs first candidates; after ``finish_tuning`` the next call times the rest
    (the tuning clock moves) and results stay the same; a CUDA graph is captured after that."""
    import compiler
    from compiler import tuning_cache
    from compiler.report import CudaGraphStatus

    for cudagraphs in (False, True):
        torch._dynamo.reset()
        runtime._TUNED.clear()
        monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path / str(cudagraphs)))  # nothing tuned yet
        tuning_cache.forget_loaded()
        x = torch.randn(512, 3001, device="cuda")
        fn = torch.compile(lambda a: torch.softmax(a, -1).sum(-1) + a.sum(-1), backend="crucible",
                           options={"strict": True, "cudagraphs": cudagraphs})
        expected = torch.softmax(x, -1).sum(-1) + x.sum(-1)
        close = functools.partial(torch.testing.assert_close, expected=expected, rtol=1e-4, atol=1e-4)
        before = runtime.TUNING_SECONDS[0]
        with compiler.collect_reports() as report:
            close(fn(x))
        assert runtime.TUNING_SECONDS[0] == before  # nothing timed in the first call
        assert compiler.finish_tuning(120)
        close(fn(x))  # with CUDA graphs: tuned, then captured
        assert runtime.TUNING_SECONDS[0] > before
        close(fn(x))
        (graph,) = report.graphs
        assert graph.cudagraph == (CudaGraphStatus.CAPTURED if cudagraphs else None)
