"""Per-size-bucket launch configs of size-generic Triton kernels (``compiler.bucket_tuning``): on a
CPU, with a stand-in kernel whose candidates are timed by a stand-in clock, each bucket is decided
once, by the ``tuning`` option, kept for every launcher of the kernel and in the tuning cache."""

from __future__ import annotations

import pytest
import triton.testing

from compiler import bucket_tuning, tuning_cache
from compiler.bucket_tuning import BucketTuner, bucket
from compiler.codegen.triton_tiles import SizeLaunch
from compiler.tuning import finish_tuning


class _Kernel:
    """Records launches and builds; ``fn[grid](*args, **meta)`` as Triton's JIT function is called."""

    def __init__(self) -> None:
        self.launches: list[dict] = []
        self.builds: list[dict] = []

    def __getitem__(self, grid: tuple):
        return lambda *args, **meta: self.launches.append(dict(meta, grid=grid))

    def warmup(self, *args, grid: tuple, **meta) -> None:
        self.builds.append(meta)


class _Launcher:
    def __init__(self, symbol: str, mode: str, interpret: bool = False) -> None:
        self.symbol, self.interpret, self.fn = symbol, interpret, _Kernel()
        self.size_launch = SizeLaunch(("s0",), "s0", "128", persistent=False, interpret=interpret)
        self.rendered = type("R", (), {"name": symbol, "args": ()})()
        self.rewritten: tuple[int, ...] = ()
        self.tuner = BucketTuner(self)
        self.tuner.mode = mode

    def tuning_key(self) -> str:
        return f"kernel {self.symbol}"

    @staticmethod
    def count_tuning(seconds: float) -> None:
        pass


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TUNING_CACHE", str(tmp_path / "configs.json"))
    tuning_cache.forget_loaded()
    bucket_tuning._PICKS.clear()
    # the stand-in clock: the candidate with RBLOCK 4096 is fastest
    monkeypatch.setattr(triton.testing, "do_bench",
                        lambda fn, **kw: (fn(), 1.0 if fn.__defaults__[1]["RBLOCK"] == 4096 else 2.0)[1])


def test_buckets_are_powers_of_two() -> None:
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == [1, 1, 2, 4, 4, 8, 1024, 1024, 2048]


def test_first_call_times_each_bucket_once_and_keeps_the_fastest() -> None:
    launcher = _Launcher("k_first", "first_call")
    candidates = launcher.size_launch.candidates(100, 128)
    assert len(candidates) == 3 and candidates[0][1]["RBLOCK"] == 2048
    launcher.tuner.launch((), 100, 128)
    timed = len(launcher.fn.launches)
    assert timed == 1 + len(candidates)  # each candidate once under the clock, then the launch
    assert launcher.fn.launches[-1]["RBLOCK"] == 4096
    launcher.tuner.launch((), 120, 128)  # the same bucket: no timing again
    assert len(launcher.fn.launches) == timed + 1 and launcher.fn.launches[-1]["RBLOCK"] == 4096
    launcher.tuner.launch((), 3000, 128)  # a new bucket is timed
    assert len(launcher.fn.launches) == timed + 2 + len(candidates)
    other = _Launcher("k_first", "first_call")  # another launcher of the same kernel shares the picks
    other.tuner.launch((), 110, 128)
    assert len(other.fn.launches) == 1 and other.fn.launches[0]["RBLOCK"] == 4096


def test_timing_a_bucket_puts_back_what_the_kernel_updates_in_place() -> None:
    """A size-generic kernel that reads and writes a buffer (``KernelLauncher.rewritten``): its
    candidates' timed runs are undone, and the launch after them updates it once."""
    import torch

    launcher = _Launcher("k_in_place", "first_call")
    launcher.rewritten = (0,)

    class Adding(_Kernel):  # each launch adds 1 to its first argument, as ``total += x.sum(0)`` would
        def __getitem__(self, grid: tuple):
            def run(*args, **meta):
                args[0].add_(1)
                self.launches.append(dict(meta, grid=grid))
            return run

    launcher.fn = Adding()
    total = torch.zeros(4)
    launcher.tuner.launch((total,), 100, 128)
    assert len(launcher.fn.launches) > 1 and torch.equal(total, torch.ones(4))
    launcher.tuner.launch((total,), 3000, 128)  # another bucket: timed again, applied once
    assert torch.equal(total, torch.full((4,), 2.0))


def test_picks_reach_a_later_process_through_the_tuning_cache() -> None:
    _Launcher("k_cached", "first_call").tuner.launch((), 100, 128)
    bucket_tuning._PICKS.clear()  # a new process: only the cache file remains
    tuning_cache.forget_loaded()
    later = _Launcher("k_cached", "first_call")
    later.tuner.launch((), 100, 128)
    assert len(later.fn.launches) == 1 and later.fn.launches[0]["RBLOCK"] == 4096


def test_deferred_runs_the_first_candidate_until_the_others_are_built() -> None:
    launcher = _Launcher("k_deferred", "deferred")
    launcher.tuner.launch((), 100, 128)
    assert len(launcher.fn.launches) == 1 and launcher.fn.launches[0]["RBLOCK"] == 2048
    assert finish_tuning(30)
    assert sorted(m["RBLOCK"] for m in launcher.fn.builds) == [1024, 4096]  # the other two, in the background
    launcher.tuner.launch((), 100, 128)  # built: this launch times them
    assert launcher.fn.launches[-1]["RBLOCK"] == 4096 and len(launcher.fn.launches) == 2 + 3


def test_a_launcher_builds_the_candidates_of_each_size_once(monkeypatch) -> None:
    """Sizes recur from call to call: the candidates and the bucket key of launch numbers already seen are
    remembered (building them was 6.3 us of host time a launch, 0.5 us remembered; 2-core CPU), up to
    ``SEEN_SIZES`` of them, and the launches are the same as without the memory."""
    launcher = _Launcher("k_seen", "first_call")
    built = []
    candidates = launcher.size_launch.candidates
    monkeypatch.setattr(launcher, "size_launch", type("L", (), {"candidates": lambda self, *n: (built.append(n),
                                                                                               candidates(*n))[1]})())
    for rows in (100, 3000, 100, 100, 3000):
        launcher.tuner.launch((), rows, 128)
    assert built == [(100, 128), (3000, 128)]
    assert [(m["grid"], m["RBLOCK"]) for m in launcher.fn.launches[-3:]] == [((100,), 4096)] * 2 + [((3000,), 4096)]
    monkeypatch.setattr(bucket_tuning, "SEEN_SIZES", 2)
    launcher.tuner.launch((), 7, 128)  # a third size: the memory starts over
    assert len(launcher.tuner.seen) == 1 and built[-1] == (7, 128)


@pytest.mark.parametrize("mode,interpret", [("off", False), ("first_call", True)])
def test_off_and_interpreted_launch_the_first_candidate_untimed(mode: str, interpret: bool) -> None:
    launcher = _Launcher(f"k_{mode}", mode, interpret)
    for rows in (100, 3000, 100):
        launcher.tuner.launch((), rows, 128)
    assert len(launcher.fn.launches) == 3 and not launcher.fn.builds
    first = launcher.size_launch.candidates(100, 128)[0][1]
    assert launcher.fn.launches[0] == dict(first, grid=launcher.size_launch.candidates(100, 128)[0][0])


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["first_call", "deferred"])
def test_dynamic_kernels_on_the_gpu_tune_each_bucket(mode: str, monkeypatch) -> None:
    """Compiled Triton kernels over symbolic sizes (a softmax, a column sum, a pointwise chain, a GEMM
    template) at sizes in three buckets: right at every size, no recompile, and a pick per bucket
    (under ``deferred``, once the background builds are done)."""
    import torch

    import compiler
    from compiler.backend import crucible_backend
    from tests.compiler.test_dynamic_shapes import run_sizes

    def fn(x, w):
        return torch.softmax(x, -1), x.sum(0), torch.sigmoid(x) * 2 + 1, x @ w

    graphs: list = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return crucible_backend(gm, example_inputs, options={"strict": True, "tuning": mode})

    compiled = torch.compile(fn, backend=backend, dynamic=True)
    make = lambda rows: (torch.randn(rows, 300, device="cuda"), torch.randn(300, 64, device="cuda"))  # noqa: E731
    shapes = [(100,), (3000,), (70,), (40000,), (3000,), (100,)]
    run_sizes(compiled, graphs, fn, make, shapes, 1e-3)
    if mode == "deferred":
        compiler.finish_tuning(120)
        run_sizes(compiled, graphs, fn, make, shapes, 1e-3)
    symbols = {key[0] for key in bucket_tuning._PICKS}
    buckets = {key[1:] for key in bucket_tuning._PICKS}
    assert symbols and len(buckets) >= 3, bucket_tuning._PICKS


@pytest.mark.gpu
def test_dynamic_kernels_on_the_gpu_bind_their_launches_per_size(monkeypatch) -> None:
    """Once a bucket's pick is final, the compiled kernel is bound at those sizes: a size met again
    launches without Triton's dispatch, a new size binds anew, and a misaligned input (a view one
    element in) falls back to the dispatch, still right."""
    import torch

    from compiler.backend import crucible_backend

    binds: list = []
    plain = BucketTuner.bind
    monkeypatch.setattr(BucketTuner, "bind", lambda self, sizes, *a: (binds.append(sizes), plain(self, sizes, *a))[1])

    def fn(x):
        return x.sum(0), torch.sigmoid(x) * 2 + 1

    compiled = torch.compile(fn, backend=lambda gm, ex: crucible_backend(gm, ex, options={"strict": True, "tuning": "off"}),
                             dynamic=True)
    base = torch.randn(3001 * 300, device="cuda")
    for rows, offset in ((100, 0), (3000, 0), (100, 0), (3000, 0), (3000, 1), (100, 0)):
        x = base[offset:offset + rows * 300].view(rows, 300)
        for got, want in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    kernels = len(binds) // 2
    assert kernels >= 1 and len(binds) == 2 * kernels, binds  # each kernel bound once at each of the 2 sizes
