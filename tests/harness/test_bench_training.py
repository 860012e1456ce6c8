"""The training benchmark (``harness.bench.training``) on a CPU: its parity measure, and one tiny row
end to end (eager against Crucible: step times, first step, parity within the fp32 limit)."""

from __future__ import annotations

import pytest
import torch

from harness.bench import gpu_profile, training


def test_update_err_is_the_share_of_eager_s_update_that_differs() -> None:
    start = [torch.zeros(4)]
    reference = [torch.ones(4)]
    assert training.update_err([torch.ones(4)], reference, start) == 0.0
    assert training.update_err([torch.full((4,), 1.5)], reference, start) == pytest.approx(0.5)
    assert training.update_err([torch.zeros(4)], [torch.zeros(4)], start) == 0.0
    assert training.update_err([torch.ones(4)], [torch.zeros(4)], start) == float("inf")


def test_a_parity_failure_is_listed() -> None:
    rows = [{"model": "m", "dtype": "fp32", "backends": {"eager": {"ms": 1.0},
                                                         "crucible": {"ms": 1.0, "update_err": 0.5, "loss_err": 0.1}}}]
    (line,) = training.problems(rows)
    assert "crucible: parity" in line and "limit 0.05" in line
    # eager's distance from itself (nondeterministic kernels under AdamW) raises the allowance
    rows[0]["backends"]["eager"]["noise_err"] = 0.1
    (line,) = training.problems(rows)
    assert "limit 0.3" in line
    rows[0]["backends"]["eager"]["noise_err"] = 0.2
    assert training.problems(rows) == []


@pytest.mark.nightly
def test_a_tiny_row_on_the_cpu(capsys) -> None:
    assert training.main(["--tiny", "--device", "cpu", "--models", "resnet50", "--dtypes", "fp32",
                          "--backends", "eager", "crucible", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("| resnet50"))  # the step-time table
    assert "FAILED" not in out and "errors and parity failures" not in out, out
    assert float(line.split("|")[3]) > 0 and float(line.split("|")[4]) > 0  # eager and crucible ms


def test_bad_arguments_are_clear_errors(capsys) -> None:
    with pytest.raises(SystemExit):
        training.main(["--steps", "0", "--device", "cpu"])
    assert "--steps 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        training.main(["--backends", "crucible", "eager", "--device", "cpu"])
    assert "put eager first" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        training.main(["--budget", "0", "--device", "cpu"])
    assert "--budget 0" in capsys.readouterr().err


def test_rows_past_the_budget_are_listed_as_not_run(capsys) -> None:
    assert training.main(["--tiny", "--device", "cpu", "--models", "resnet50", "--dtypes", "fp32",
                          "--backends", "eager", "crucible", "--budget", "0.5"]) == 0
    assert "resnet50 fp32: not run: too little of the --budget of 0 s was left" in capsys.readouterr().out


def test_saved_bytes_counts_activations_not_the_model() -> None:
    model = torch.nn.Linear(4, 4, bias=False)
    x = torch.randn(8, 4)

    def step(batch: tuple, target: torch.Tensor) -> None:
        model(*batch).relu().sum().backward()

    # the linear saves its input (for the weight's gradient) and the relu its output: 2 x 8 x 4 floats;
    # the weight, saved too, is the model's own
    assert training.saved_bytes(step, (x,), torch.zeros(()), model) == 2 * 8 * 4 * 4


def test_backends_are_timed_in_interleaved_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that slows down over the timing (here every step takes longer than the one before) falls on
    every backend alike: timed one after the other, the second backend took every slow step. A backend
    that raises is reported and dropped from the rounds; the others are still timed."""
    import contextlib
    import types

    calls, clock = [], [0.0]  # a clock of its own: real sleeps drift apart on a loaded machine

    def drifting(*_):
        calls.append(None)
        clock[0] += 0.001 * (1 + 0.05 * len(calls))

    def broken(*_):
        raise RuntimeError("no kernel for this")

    monkeypatch.setattr(training, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    failed: dict[str, str] = {}
    timed = training.interleaved_ms({"a": drifting, "b": drifting, "c": broken}, (), torch.zeros(1), "cpu",
                                    20, lambda _: contextlib.nullcontext(), failed)
    assert set(timed) == {"a", "b"} and set(failed) == {"c"} and "no kernel for this" in failed["c"]
    assert abs(timed["a"] - timed["b"]) < 0.2 * timed["a"], timed  # one step's drift apart, not twenty
    assert len(calls) == 2 * (2 + 20)  # two warm-up steps and one a round each


def _timed_row(crucible_ms: float) -> dict:
    kernels = {"crucible": [["k_norm_backward", 3.0], ["sm90_gemm", 2.0]], "inductor": [["triton_red_fused", 2.5]]}
    return {"model": "m", "dtype": "fp32", "backends": {
        "eager": {"ms": 12.0, "gpu_ms": 11.0},
        "inductor": {"ms": 10.0, "gpu_ms": 9.0, "top_kernels": kernels["inductor"]},
        "crucible": {"ms": crucible_ms, "gpu_ms": 5.0, "top_kernels": kernels["crucible"]}}}


def test_the_gpu_time_table_and_the_kernels_of_a_slow_row() -> None:
    """A row 0.91x its peer lists both sides' longest kernels; the GPU table gives each backend's busy
    share (Crucible's 5 ms of GPU work in an 11 ms step: it waits on the host)."""
    text = training.render([_timed_row(11.0)], ("eager", "inductor", "crucible"))
    busy = next(line for line in text.splitlines() if line.startswith("| m ") and "%" in line)
    assert [c.strip() for c in busy.split("|")[-4:-1]] == ["92%", "90%", "45%"]
    slow = text.split("below 0.95x its peer")[1]
    assert "m fp32 crucible/inductor: wall 0.91:" in slow
    assert "crucible: step 11.00 ms, GPU 5.00 ms: k_norm_backward 3.000; sm90_gemm 2.000" in slow
    assert "inductor: step 10.00 ms, GPU 9.00 ms: triton_red_fused 2.500" in slow


def test_a_row_ahead_on_the_clock_but_behind_in_gpu_time_lists_its_kernels() -> None:
    """On a slow host a step waits on it, and a row ahead of Inductor there can be behind in GPU work (the
    forty-third session's CNN rows): a faster host would show it, so its kernels are listed too."""
    row = _timed_row(9.0)
    row["backends"]["crucible"]["gpu_ms"] = 12.0  # Inductor's 9.0: 0.75x in GPU time, 1.11x in wall time
    slow = training.render([row], ("eager", "inductor", "crucible")).split("below 0.95x its peer")[1]
    assert "m fp32 crucible/inductor: GPU 0.75:" in slow and "wall" not in slow.splitlines()[1]


def test_a_row_at_its_peers_speed_lists_no_kernels_and_a_cpu_run_no_gpu_table() -> None:
    assert "below 0.95x" not in training.render([_timed_row(10.0)], ("eager", "inductor", "crucible"))
    row = _timed_row(11.0)
    for backend in row["backends"].values():
        backend.pop("gpu_ms"), backend.pop("top_kernels", None)
    text = training.render([row], ("eager", "inductor", "crucible"))
    assert "GPU time per step" not in text and "below 0.95x" not in text


@pytest.mark.gpu
def test_gpu_time_sums_a_step_s_kernels() -> None:
    x = torch.randn(1024, 1024, device="cuda")
    got = training.gpu_time(lambda: (x @ x).relu_())
    assert got["gpu_ms"] > 0 and len(got["top_kernels"]) >= 2  # the GEMM (one kernel or more) and the relu
    assert got["gpu_ms"] == pytest.approx(sum(ms for _, ms in got["top_kernels"]))


def _frame(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


def test_what_is_live_at_a_step_s_peak_by_where_it_was_allocated() -> None:
    """The allocator's events of one step: the peak is the most bytes allocated less freed (a block held
    before the step counts where it is freed), and what the step allocated and still holds there is
    summed per allocating line, the innermost frame outside torch (torch's own frames are skipped)."""
    torch_frame = _frame(str(gpu_profile._TORCH_DIR) + "/nn/functional.py", 10, "linear")
    a, b = [_frame("/m/model.py", 5, "forward")], [torch_frame, _frame("/m/model.py", 9, "forward")]
    mb = 2**20
    events = [
        {"action": "alloc", "addr": 1, "size": 4 * mb, "frames": a},
        {"action": "free_requested", "addr": 99, "size": 3 * mb},  # held before the step: counted free
        {"action": "free_completed", "addr": 99, "size": 3 * mb},
        {"action": "alloc", "addr": 2, "size": 2 * mb, "frames": b},
        {"action": "alloc", "addr": 3, "size": 1 * mb, "frames": b},
        {"action": "alloc", "addr": 4, "size": 1 * mb, "frames": []},  # the peak: 4 - 3 + 2 + 1 + 1 = 5 MB
        {"action": "free_completed", "addr": 1, "size": 4 * mb},
        {"action": "alloc", "addr": 5, "size": 3 * mb, "frames": a},  # 4 MB: below the peak
    ]
    got = gpu_profile.live_at_peak(events)
    assert got["trace_peak_mb"] == 5.0 and got["live_mb"] == 8.0
    assert got["peak_sites"] == [["model.py:5 forward", 4.0], ["model.py:9 forward", 3.0],
                                 ["(no Python frame)", 1.0]]
    assert sorted(size for size, _ in got["peak_blocks"]) == [mb, mb, 2 * mb, 4 * mb]  # each block of 1 MB or more


def test_what_one_side_holds_beyond_the_other_is_matched_by_size() -> None:
    """The two peaks share their saved activations (equal sizes); what differs is listed per size."""
    mb = 2**20
    mine = [[74 * mb, "w:33 extern30"], [74 * mb, "w:36 buf31"], [37 * mb, "w:50 buf40"], [37 * mb, "w:51 buf41"],
            [2 * mb, "w:60 buf9"]]
    theirs = [[74 * mb, "o:1 buf19"], [74 * mb, "o:2 buf20"], [37 * mb, "o:3 buf28"], [3 * mb, "o:4 buf5"]]
    assert gpu_profile.held_beyond(mine, theirs) == ["1 x 37.0 MB (w:51 buf41)", "1 x 2.0 MB (w:60 buf9)"]
    assert gpu_profile.held_beyond(theirs, mine) == ["1 x 3.0 MB (o:4 buf5)"]


def test_a_site_in_a_compiled_graph_names_the_wrapper_line() -> None:
    """A generated wrapper's lines are registered with linecache, so a block it allocated names the
    buffer's line, not a nameless frame."""
    from compiler.wrapper import source_name

    source = "def call(args):\n    buf0 = empty_strided((4,), (1,), torch.float32)\n    return (buf0,)\n"
    name = source_name(source)
    site = gpu_profile.allocation_site([_frame(name, 2, "call")])
    assert site == f"{name}:2 call: buf0 = empty_strided((4,), (1,), torch.float32)"


def test_rows_above_inductor_s_peak_list_what_each_side_holds() -> None:
    row = _timed_row(10.0)
    row["backends"]["inductor"].update(peak_mb=100.0, live_mb=90.0, peak_sites=[["output_code.py:40 call", 60.0]],
                                       peak_blocks=[[60 * 2**20, "output_code.py:40 call"]])
    row["backends"]["crucible"].update(peak_mb=130.0, live_mb=120.0,
                                       peak_sites=[["<crucible-wrapper x>:7 call: buf3 = empty", 80.0]],
                                       peak_blocks=[[60 * 2**20, "<crucible-wrapper x>:5 call"],
                                                    [20 * 2**20, "<crucible-wrapper x>:7 call: buf3 = empty"]])
    text = training.render([row], ("eager", "inductor", "crucible"))
    section = text.split("live at each peak")[1]
    assert "m fp32: crucible 130 MB, inductor 100 MB (+30):" in section
    assert "crucible: 120 MB allocated in the step live at its peak: <crucible-wrapper x>:7 call: buf3 = empty 80.0; " \
        "beyond inductor's: 1 x 20.0 MB (<crucible-wrapper x>:7 call: buf3 = empty)" in section
    assert "inductor: 90 MB allocated in the step live at its peak: output_code.py:40 call 60.0" in section
    row["backends"]["crucible"]["peak_mb"] = 100.5  # within PEAK_MARGIN_MB: nothing to explain
    assert "live at each peak" not in training.render([row], ("eager", "inductor", "crucible"))


@pytest.mark.gpu
def test_peak_profile_names_the_lines_live_at_a_peak() -> None:
    def call() -> None:
        big = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")  # 64 MB live at the peak
        small = torch.empty(2**20, dtype=torch.uint8, device="cuda")
        del big, small

    got = gpu_profile.peak_profile(call)
    assert got["trace_peak_mb"] >= 65.0
    assert got["peak_sites"][0][0].startswith("test_bench_training.py:")
    assert "big = torch.empty" in got["peak_sites"][0][0] and got["peak_sites"][0][1] == 64.0
