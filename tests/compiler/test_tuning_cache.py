"""The on-disk cache of tuned launch configs (``compiler.tuning_cache``) and the runtime's use of it:
a pick survives the process, a corrupt or foreign file is ignored with a warning (never a crash),
the environment override is respected. The runtime's timing is faked (CPU-only CI has no GPU)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from compiler import config, runtime, tuning_cache
from compiler.codegen.base import RenderedKernel


@pytest.fixture
def cache_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sub" / "configs.json"
    monkeypatch.setenv("CRUCIBLE_TUNING_CACHE", str(path))
    tuning_cache.forget_loaded()
    yield path
    tuning_cache.forget_loaded()


def test_a_pick_is_read_back_by_a_later_process(cache_file: Path) -> None:
    tuning_cache.store("gpu | triton 3 | gemm a", 2, "BLOCK_M=64", 12.5)
    tuning_cache.store("gpu | triton 3 | gemm b", 0, "BLOCK_M=16", 3.0)
    tuning_cache.forget_loaded()  # as a new process: nothing in memory
    assert tuning_cache.lookup("gpu | triton 3 | gemm a", candidates=3) == 2
    assert tuning_cache.lookup("gpu | triton 3 | gemm b", candidates=3) == 0
    assert tuning_cache.lookup("gpu | triton 3 | gemm c", candidates=3) is None
    data = json.loads(cache_file.read_text())
    assert data["version"] == tuning_cache.VERSION and data["entries"]["gpu | triton 3 | gemm a"]["us"] == 12.5
    assert [p.name for p in cache_file.parent.iterdir()] == ["configs.json"]  # no temporary file left


def test_a_store_keeps_what_another_process_wrote_meanwhile(cache_file: Path) -> None:
    tuning_cache.store("mine", 1, "", 1.0)
    other = json.loads(cache_file.read_text())
    other["entries"]["theirs"] = {"index": 0, "config": "", "us": 2.0}
    cache_file.write_text(json.dumps(other))
    tuning_cache.store("mine too", 1, "", 1.0)
    assert set(json.loads(cache_file.read_text())["entries"]) == {"mine", "theirs", "mine too"}


def test_an_index_past_the_candidates_is_ignored(cache_file: Path) -> None:
    tuning_cache.store("key", 4, "", 1.0)
    assert tuning_cache.lookup("key", candidates=4) is None
    assert tuning_cache.lookup("key", candidates=5) == 4


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"version": 99, "entries": {}}', "\x00\xff"])
def test_a_corrupt_file_is_ignored_with_one_warning_and_rewritten(cache_file: Path, content: str) -> None:
    cache_file.parent.mkdir(parents=True)
    cache_file.write_text(content)
    with pytest.warns(RuntimeWarning, match="ignoring the tuning cache"):
        assert tuning_cache.lookup("key", candidates=3) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per file and process
        assert tuning_cache.lookup("other", candidates=3) is None
        tuning_cache.store("key", 1, "", 1.0)
    tuning_cache.forget_loaded()
    assert tuning_cache.lookup("key", candidates=3) == 1


def test_malformed_entries_are_skipped(cache_file: Path) -> None:
    cache_file.parent.mkdir(parents=True)
    entries = {"good": {"index": 1}, "no index": {"config": "x"}, "text index": {"index": "1"}, "list": [1]}
    cache_file.write_text(json.dumps({"version": tuning_cache.VERSION, "entries": entries}))
    assert tuning_cache.lookup("good", 2) == 1
    assert all(tuning_cache.lookup(k, 2) is None for k in ("no index", "text index", "list"))


def test_zero_turns_the_disk_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CRUCIBLE_TUNING_CACHE", "0")
    assert config.tuning_cache_path() is None
    tuning_cache.store("key", 1, "", 1.0)
    assert tuning_cache.lookup("key", 3) is None and not any(tmp_path.rglob("*.json"))
    monkeypatch.delenv("CRUCIBLE_TUNING_CACHE")
    assert config.tuning_cache_path() == tmp_path / "tuning" / "configs.json"  # the default: under the root


def test_an_unwritable_cache_warns_and_the_pick_stays_in_memory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("CRUCIBLE_TUNING_CACHE", str(blocker / "configs.json"))  # its parent is a file
    tuning_cache.forget_loaded()
    with pytest.warns(RuntimeWarning, match="could not write"):
        tuning_cache.store("key", 1, "", 1.0)
    assert tuning_cache.lookup("key", 3) == 1
    tuning_cache.forget_loaded()


SOURCE = """import triton
import triton.language as tl


@triton.jit
def {name}(x, BLOCK: tl.constexpr):
    pass
"""


def _launcher(name: str, key: str) -> runtime.KernelLauncher:
    configs = [((1,), {"BLOCK": b}) for b in (16, 32, 64)]
    rendered = RenderedKernel(name, "triton", SOURCE.format(name=name), ("x",), configs[0][0], configs[0][1],
                              tuple(configs[1:]), name, key, work=(4096, 96))
    return runtime.KernelLauncher(rendered, interpret=False)


def test_the_runtime_times_once_and_a_later_process_reads_the_pick(cache_file: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The first launcher times its configs (faked: BLOCK=32 is fastest) and records the pick; a
    launcher of another kernel with the same tuning key in a "new process" takes it untimed."""
    import triton.testing

    timed: list[int] = []

    def fake_bench(fn, **_: object) -> float:
        block = fn.__defaults__[1]["BLOCK"]  # launch(grid, meta)'s defaults
        timed.append(block)
        return {16: 0.3, 32: 0.1, 64: 0.2}[block]

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(runtime, "_TUNED", {})
    first = _launcher("k_tuning_test_a", "gemm test-shape tiles abc")
    first.tune(())
    assert first.meta == {"BLOCK": 32, **runtime.BUILD_OPTIONS} and timed == [16, 32, 64]
    (entry,) = json.loads(cache_file.read_text())["entries"].values()
    # every candidate's time is kept beside the pick (what pruning the candidate lists is read from)
    assert [us for _, us in entry["candidates"]] == [300.0, 100.0, 200.0]
    assert "'BLOCK': 16" in entry["candidates"][0][0] and entry["index"] == 1
    assert entry["work"] == [4096, 96]  # the kernel's iteration space: what a report groups candidates by
    monkeypatch.setattr(runtime, "_TUNED", {})
    tuning_cache.forget_loaded()
    second = _launcher("k_tuning_test_b", "gemm test-shape tiles abc")
    second.tune(())
    assert second.meta == {"BLOCK": 32, **runtime.BUILD_OPTIONS} and second.tuned and timed == [16, 32, 64]  # not timed again
    other = _launcher("k_tuning_test_c", "gemm other-shape tiles abc")
    other.tune(())
    assert timed == [16, 32, 64] * 2  # another key is timed


def test_launch_configs_are_the_ones_the_tuning_data_chose() -> None:
    """``triton_tiles`` (harness.bench.tuning_report over the 18 benchmark rows, thirtieth session): a
    persistent reduction runs a small program on one warp over rows of 64 to 512 and a 2048-element
    program over shorter and wider rows, untimed; a pointwise kernel has one config; a looped reduction
    (no data) keeps candidates to time."""
    from types import SimpleNamespace

    from compiler.codegen.triton import TritonRenderer

    renderer = TritonRenderer(interpret=False)

    def tiles(xnumel: int, rnumel: int, persistent: bool = True) -> list[tuple[int, int, int]]:
        return renderer.tiles(SimpleNamespace(is_reduction=rnumel > 1, persistent=persistent, xnumel=xnumel,
                                              rnumel=rnumel))

    assert tiles(100352, 96) == [(4, 128, 1)]  # convnext's layer norm: 25-36 us, the old first guess 132
    assert tiles(4096, 300) == [(1, 512, 1)]
    assert tiles(301056, 49) == [(8, 64, 1)]  # swin's window softmax
    assert tiles(6422528, 9) == [(128, 16, 4)]  # resnet50's pools of 9
    assert tiles(4096, 768) == [(2, 1024, 4)]
    assert tiles(4096, 4000) == [(1, 4096, 8)]
    assert tiles(1, 16) == [(1, 16, 2)]
    assert tiles(1 << 22, 1) == [(1024, 1, 4)]
    assert len(tiles(64, 100_000, persistent=False)) > 1


def test_the_tuning_report_ranks_candidate_subsets_from_kept_caches(tmp_path: Path) -> None:
    from harness.bench import tuning_report

    def entry(times: list[float]) -> dict:
        metas = [{"XBLOCK": 1, "RBLOCK": 1024, "num_warps": w} for w in (2, 4)]
        return {"index": times.index(min(times)), "config": "", "us": min(times),
                "candidates": [[str(m), t] for m, t in zip(metas, times)]}

    data = {"version": 1, "entries": {"gpu | triton | kernel k_a (2 configs)": entry([10.0, 20.0]),
                                      "gpu | triton | kernel k_b (2 configs)": entry([30.0, 15.0])}}
    (tmp_path / "m_fp32.json").write_text(json.dumps(data))
    text = tuning_report.report(tuning_report.kernels(tmp_path), keep=2)
    assert "reduction, 2 candidates: 2 kernels" in text
    assert "keep 1: 1.400  ['1024 elements, 256 per warp']" in text  # (20 + 15) / (10 + 15)
    assert "keep 2: 1.000" in text
    by_rows = tuning_report.report(tuning_report.kernels(tmp_path, by_rows=True), keep=1)
    assert "reduction, rows of 1024, 2 candidates: 2 kernels" in by_rows  # the row length the rule reads
    assert tuning_report.main([str(tmp_path / "none")]) == 2
