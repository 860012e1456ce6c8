"""The CPU benchmark (``harness.bench.cpu``): what its cold compiles hand each compiler, and the profile
of a row below its target."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config

from harness.bench import cpu


@pytest.mark.parametrize("threads", [1, 2])
def test_inductor_compiles_for_the_thread_count_it_is_timed_at(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """On torch 2.11 the 16-thread row's Inductor kernel was the 1-thread row's (no speed-up from 15 more
    threads): the thread count Inductor generates for is set explicitly, at compile and first call."""
    seen: list[tuple[str, int]] = []

    def fake_compile(fn, backend):  # noqa: ANN001, ANN202 -- torch.compile's stand-in
        seen.append(("compile", torch._inductor.config.cpp.threads))

        def first_call(*args):  # noqa: ANN002, ANN202
            seen.append(("call", torch._inductor.config.cpp.threads))
            return fn(*args)
        return first_call

    monkeypatch.setattr(torch, "compile", fake_compile)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        default = torch._inductor.config.cpp.threads
        cpu.compile_cold(lambda x: x + 1, (torch.ones(2),), "inductor", "TORCHINDUCTOR_CACHE_DIR")
        assert seen == [("compile", threads), ("call", threads)]
        assert torch._inductor.config.cpp.threads == default  # restored
        seen.clear()
        cpu.compile_cold(lambda x: x + 1, (torch.ones(2),), "crucible", "CRUCIBLE_CACHE_DIR")
        assert seen == [("compile", default), ("call", default)]  # Crucible's kernels read the count at run time
    finally:
        torch.set_num_threads(previous)


def test_a_slow_row_carries_each_contender_s_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row below the target says where each contender's call goes: eager's ATen op, Inductor's named
    kernel and Crucible's kernel from its own timer, with what lies outside Crucible's graph."""
    monkeypatch.setattr(cpu, "SLOW", float("inf"))  # every row is "slow": profile this one
    monkeypatch.setattr(cpu, "WARMUP_S", 0.2)
    previous = torch.get_num_threads()
    try:
        (row,) = cpu.run_case(cpu.Case("small softmax", lambda: cpu.softmax(64, 128)), 3, [1])
    finally:
        torch.set_num_threads(previous)
    names = {backend: [name for name, _ in pieces] for backend, pieces in row["profile"].items()}
    assert "aten::_softmax" in names["eager"]
    assert any("cpp_fused" in name for name in names["inductor"])
    assert any("exp" in name for name in names["crucible"])  # the kernel, named with its ops
    assert "outside the graph (Dynamo, AOTAutograd)" in names["crucible"]
    text = "\n".join(cpu.where_time_goes([row]))
    assert text.startswith("small softmax at 1 thread (vs eager") and "  crucible " in text



def test_a_slow_row_at_two_threads_gives_each_piece_at_one_thread_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 16 threads the CNN row's max-pool kernel took 505 us where Inductor's fused kernel took 91 (the
    forty-fourth session), and whether it scaled at all could not be read from one profile: a row at more
    than 1 thread is profiled at 1 thread too, each piece's time there in brackets beside its own."""
    monkeypatch.setattr(cpu, "SLOW", float("inf"))
    monkeypatch.setattr(cpu, "WARMUP_S", 0.2)
    previous = torch.get_num_threads()
    try:
        (row,) = cpu.run_case(cpu.Case("small softmax", lambda: cpu.softmax(64, 128)), 3, [2])
        assert torch.get_num_threads() == 2  # the 1-thread profile restored the row's count
    finally:
        torch.set_num_threads(previous)
    assert set(row["profile_one_thread"]) == {"eager", "inductor", "crucible"}
    lines = cpu.where_time_goes([row])
    eager = next(line for line in lines if line.startswith("  eager "))
    assert eager.split(" us:")[0].count("[1 thread ") == 1 and "aten::_softmax " in eager
    assert "] us: " in eager and eager.split("aten::_softmax ")[1].split(";")[0].count("[1 thread ") == 1
    inductor = next(line for line in lines if line.startswith("  inductor "))
    kernel = next(part for part in inductor.split(": ", 1)[1].split("; ") if "cpp_fused" in part)
    assert "[1 thread " in kernel  # found again after its recompile, under another graph number


def test_profile_pieces_match_across_recompiles() -> None:
    assert cpu._piece_key("graph_12_cpp_fused_softmax_0") == cpu._piece_key("graph_3_cpp_fused_softmax_0")
    assert cpu._piece_key("Torch-Compiled Region: 0/0") == cpu._piece_key("Torch-Compiled Region: 2/0")


def test_a_profile_that_fails_leaves_the_row_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("profiler unavailable\nsecond line")

    monkeypatch.setattr(cpu, "SLOW", float("inf"))
    monkeypatch.setattr(cpu, "WARMUP_S", 0.2)
    monkeypatch.setattr(cpu, "profile_row", broken)
    previous = torch.get_num_threads()
    try:
        (row,) = cpu.run_case(cpu.Case("small sum", lambda: cpu.column_sum(32, 16)), 3, [1])
    finally:
        torch.set_num_threads(previous)
    assert row["crucible ms"] > 0 and "profile" not in row
    assert cpu.where_time_goes([row])[1] == "  profile failed: RuntimeError: profiler unavailable"


def test_pieces_of_one_name_are_matched_largest_to_largest() -> None:
    """Two calls of the same extern op (the CNN's two oneDNN convolutions) are two pieces of one name."""
    conv = "mkldnn._convolution_pointwise.default (extern)"
    row = {"case": "cnn", "threads": 16, "vs eager": 1.6, "vs inductor": 0.7,
           "profile": {"crucible": [(conv, 327.0), ("k_maxpool", 300.0), (conv, 181.0)]},
           "profile_one_thread": {"crucible": [(conv, 900.0), (conv, 2000.0), ("k_maxpool", 700.0)]}}
    (_, line) = cpu.where_time_goes([row])
    assert line == (f"  crucible 808 [1 thread 3600] us: {conv} 327 [1 thread 2000]; k_maxpool 300 [1 thread 700]; "
                    f"{conv} 181 [1 thread 900]")
