"""Every status the harness reports, from planted entries of an external corpus run via the CLI.

A segfault, a hang and an allocation beyond the memory limit each take down or
stall their worker; the run must record them and go on with the other entries.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from corpus.entry import Built, Entry
from harness.entry_subject import run_entry
from harness.targets import parse_target

PLANTED = """
    import ctypes
    import os
    import time

    import torch
    from torch import nn

    from corpus.entry import Built, Entry, ExpectedFailure


    def _entry(name, forward, devices=("cpu",), **kw):
        return Entry(name=f"planted/{name}", source="planted", family="planted", tier="smoke",
                     devices=devices, factory=lambda scale: Built(forward, (torch.randn(4, 4),)), **kw)


    def ok(x):
        return x.sin() + 1


    def segfault(x):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return x


    def hang(x):
        time.sleep(3600)
        return x


    def oom(x):
        return torch.ones(4 * 1024**3, dtype=torch.uint8)  # 4 GiB, beyond the 1.5 GiB limit


    def eager_error(x):
        raise ValueError("planted eager failure")


    def worker_env(x):
        # CPU targets' workers hide the GPUs (regression: Dynamo 2.11 touched the accelerator while
        # tracing, and CUDA's context failed under the address-space limit: status 'oom')
        if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
            raise RuntimeError("a CPU target's worker can see the GPUs")
        # the workers share the cores: each builds kernels on its share of them
        if os.environ.get("CRUCIBLE_COMPILE_THREADS") != str(max(1, (os.cpu_count() or 1) // 2)):
            raise RuntimeError("a worker builds kernels on more than its share of the cores")
        return x.cos()


    _calls = [0]


    def nondeterministic(x):
        _calls[0] += 1
        return x + _calls[0]


    def wrong_when_compiled(x):
        # Dynamo traces the True branch; eager runs the False one.
        return x * 2 if torch.compiler.is_compiling() else x


    class Unbuildable(nn.Module):
        def __init__(self):
            super().__init__()
            raise RuntimeError("planted build failure")


    def entries():
        return [
            _entry("ok", ok),
            _entry("worker_env", worker_env),
            _entry("segfault", segfault),
            _entry("hang", hang),
            _entry("oom", oom),
            _entry("eager_error", eager_error),
            _entry("nondeterministic", nondeterministic),
            _entry("wrong_when_compiled", wrong_when_compiled),
            _entry("expected_wrong", wrong_when_compiled,
                   expected_failures=(ExpectedFailure("aot_*", "fail_accuracy", "planted"),)),
            Entry(name="planted/unbuildable", source="planted", family="planted", tier="smoke",
                  factory=lambda scale: Built(Unbuildable(), ())),
            _entry("cuda_only", ok, devices=("cuda",)),
        ]
"""

EXPECTED = {
    "planted/ok": "pass",
    "planted/worker_env": "pass",
    "planted/segfault": "crash",
    "planted/hang": "timeout",
    "planted/oom": "oom",
    "planted/eager_error": "eager_fail",
    "planted/nondeterministic": "eager_nondeterministic",
    "planted/wrong_when_compiled": "fail_accuracy",
    "planted/expected_wrong": "xfail",
    "planted/unbuildable": "eager_fail",
    "planted/cuda_only": "skipped",
}


def test_planted_failures_are_recorded_and_the_run_goes_on(tmp_path: Path, cli, make_corpus, load_json) -> None:
    corpus_dir = make_corpus(tmp_path / "planted", {"planted.py": PLANTED})
    out = tmp_path / "run.json"
    proc = cli("run", "--corpus", str(corpus_dir), "--suite", "planted", "--target", "aot_eager", "-j", "2",
               "--timeout", "8", "--mem-limit-mb", "1500", "--db", "r.sqlite", "--json", str(out))
    # a failure against the compiler (wrong_when_compiled) fails the run; the model's own crash, hang,
    # OOM and eager failures, the skip and the expected failure do not
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "FAILED: 1 entry failed against the compiler: planted/wrong_when_compiled" in proc.stderr
    doc = load_json(out)
    statuses = {name: e["status"] for name, e in doc["by_name"].items()}
    assert statuses == EXPECTED
    by_name = doc["by_name"]
    assert "SIGSEGV" in by_name["planted/segfault"]["error"]
    assert by_name["planted/segfault"]["phase"] == "eager"
    # The worker's fault report names the crashing Python frame.
    assert "in segfault" in by_name["planted/segfault"]["error_detail"]
    assert "timed out" in by_name["planted/hang"]["error"]
    assert "planted eager failure" in by_name["planted/eager_error"]["error"]
    assert by_name["planted/wrong_when_compiled"]["max_abs_err"] > 0
    assert by_name["planted/ok"]["graphs"] == 1 and by_name["planted/ok"]["capture_coverage"] == 1.0
    assert all(by_name["planted/ok"][f"{p}_s"] >= 0 for p in ("load", "build", "eager", "capture", "compile", "run"))
    # The report counts eager failures out of the pass rate and clusters the failures.
    assert "failures by error signature" in proc.stdout
    assert doc["run"]["finished"] and doc["run"]["target"] == "aot_eager"


@pytest.mark.parametrize(("target", "status"), [
    ("relu_compile_error_TESTING_ONLY", "fail_compile"),  # Dynamo's test backends that fail on relu
    ("relu_runtime_error_TESTING_ONLY", "fail_run"),
    ("relu_accuracy_error_TESTING_ONLY", "fail_accuracy"),
    ("no_such_backend", "fail_compile"),
    ("aot_eager", "pass"),
])
def test_compile_run_and_accuracy_failures_of_a_backend(target: str, status: str) -> None:
    entry = Entry(name="relu/relu", source="relu", family="f", tier="smoke",
                  factory=lambda scale: Built(torch.relu, (torch.randn(8),)))
    result = run_entry(entry, parse_target(target))
    assert result.status == status, result.error
    assert result.graphs == 1 and result.graph_breaks == 0
    if status != "pass":
        assert result.error
    if target == "no_such_backend":
        assert "unknown target" in result.error


def test_crucible_target_without_the_compiler_is_a_clear_fail_compile(monkeypatch) -> None:
    import sys

    import torch._dynamo

    def no_backend(name):
        raise KeyError(name)

    monkeypatch.setattr(torch._dynamo, "lookup_backend", no_backend)
    monkeypatch.setitem(sys.modules, "compiler.backend", None)  # import fails
    entry = Entry(name="relu/relu", source="relu", family="f", tier="smoke",
                  factory=lambda scale: Built(torch.relu, (torch.randn(8),)))
    result = run_entry(entry, parse_target("crucible-cpp"))
    assert result.status == "fail_compile"
    assert "crucible backend is unavailable" in result.error


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_cuda_target_on_a_cpu_machine_is_skipped(cli) -> None:
    entry = Entry(name="relu/relu", source="relu", family="f", tier="smoke",
                  factory=lambda scale: Built(torch.relu, (torch.randn(8),)))
    result = run_entry(entry, parse_target("crucible-triton"))
    assert result.status == "skipped" and "CUDA" in result.error
    proc = cli("run", "--source", "zoo", "--target", "crucible-triton")
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr


def _relu_entry() -> Entry:
    return Entry(name="relu/relu", source="relu", family="f", tier="smoke",
                 factory=lambda scale: Built(lambda x: torch.relu(x * 3), (torch.randn(8),)))


@pytest.mark.parametrize(("where", "recorded"), [("auto", "float64"), ("cpu", "float64"), ("device", "float64"),
                                                 ("none", "none (not requested)")])
def test_reference_placement_is_recorded(where: str, recorded: str) -> None:
    result = run_entry(_relu_entry(), parse_target("aot_eager"), reference=where)
    assert result.status == "pass" and result.reference == recorded


def test_reference_falls_back_to_the_cpu_when_the_device_run_fails(monkeypatch) -> None:
    """auto: a failed device reference (e.g. out of memory) is retried on the CPU, never lost."""
    from harness import model_runs

    real_fresh = model_runs.ModelCopies.fresh

    def failing_on_the_device(self, device, dtype):
        if dtype == torch.float64 and device != "cpu":
            raise RuntimeError("planted: no float64 on this device")
        return real_fresh(self, device, dtype)

    monkeypatch.setattr(model_runs.ModelCopies, "fresh", failing_on_the_device)
    entry = _relu_entry()
    result: dict = {}
    built = entry.build("small")
    models = model_runs.ModelCopies(entry, "small", built.model)
    sizes = [(None, built.inputs, built.kwargs)]
    assert model_runs.reference_runs(models, sizes, entry.seed, "fake-device", "auto", result, "inference") != [None]
    assert result["reference"] == "float64"
    result = {}
    assert model_runs.reference_runs(models, sizes, entry.seed, "fake-device", "device", result, "inference") == [None]
    assert result["reference"] == "none (fake-device: RuntimeError: planted: no float64 on this device)"


def test_unknown_reference_placement_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="reference='gpu'.*auto, cpu, device, none"):
        run_entry(_relu_entry(), parse_target("aot_eager"), reference="gpu")


@pytest.mark.gpu
def test_reference_runs_on_the_gpu_for_cuda_targets() -> None:
    result = run_entry(_relu_entry(), parse_target("eager", "cuda"))
    assert result.status == "pass" and result.reference == "float64 on cuda"


def test_entry_unavailable_in_this_installation_is_skipped_not_an_eager_failure() -> None:
    """Regression: corpus entries of a newer timm/transformers than the one installed (the GPU
    image) were counted as eager failures; they are skipped with the reason."""
    from corpus.entry import EntryUnavailable

    def factory(scale):
        raise EntryUnavailable("timm 0.0 has no model 'future_net'")

    entry = Entry(name="timm/future_net", source="timm", family="f", tier="smoke", factory=factory)
    result = run_entry(entry, parse_target("eager"))
    assert result.status == "skipped"
    assert result.error == "unavailable here: timm 0.0 has no model 'future_net'"


def _helper_with_a_break(t: torch.Tensor) -> torch.Tensor:
    torch._dynamo.graph_break()
    return t.sin() * 2


def _calls_helper_with_two_shapes(x: torch.Tensor) -> torch.Tensor:
    return _helper_with_a_break(x).sum() + _helper_with_a_break(x[:5]).sum()


def test_crucible_targets_compile_new_shapes_statically() -> None:
    """Regression (torchvision fasterrcnn on crucible-cpp: 'input arg0_1 is a symbolic scalar'): a
    frame that sees a second shape is recompiled for it, not handed symbolic sizes (the compiler
    specializes on static shapes; Dynamo goes dynamic on a recompile by default)."""
    import torch._dynamo

    torch._dynamo.reset()
    x = torch.randn(8, 4)
    compiled = parse_target("crucible-cpp").compile(_calls_helper_with_two_shapes)
    torch.testing.assert_close(compiled(x), _calls_helper_with_two_shapes(x))
    torch._dynamo.reset()
