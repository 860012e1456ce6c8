"""The fuzzer's CI tier: fixed seeds, small time boxes, planted bugs it must find, and zero
findings on the real compiler. Bugs are planted inside the isolated fuzz worker through
``--import tests.harness.fuzz_plants:<function>`` (see that module)."""

from __future__ import annotations

import re

import pytest

from compiler.gpu_build import available

PLANTED_OPS = "var.correction,var_mean.correction,clamp.default,clamp_min.default,hardsigmoid.default,add.Tensor"
COMMON = ["--target", "crucible-interpret", "--seed", "0", "--ops", PLANTED_OPS, "--shrink-seconds", "5",
          "--max-nodes", "3"]


def _signatures(stdout: str) -> list[str]:
    return re.findall(r"(fail_\w+ \| aten\.[\w.]+ \| \w+)\s+\d+\s+\d+\s+NEW", stdout)


def test_planted_lowering_and_rule_bugs_are_found(cli, tmp_path) -> None:
    """A var lowering without Bessel's correction, a clamp lowering that turns NaN into the
    bound and a hardsigmoid decomposition rule with the wrong slope, all planted in the worker:
    one fixed-seed campaign must report each as a new finding and exit 1."""
    db = str(tmp_path / "fuzz.sqlite")
    out = cli("fuzz", *COMMON, "--examples", "40", "--max-findings", "6", "--db", db,
              "--import", "tests.harness.fuzz_plants:var_without_bessel",
              "--import", "tests.harness.fuzz_plants:clamp_drops_nan",
              "--import", "tests.harness.fuzz_plants:hardsigmoid_rule_off_by_a_bit", timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    ops = {s.split(" | ")[1] for s in _signatures(out.stdout)}
    assert any(op.startswith("aten.var") for op in ops), out.stdout
    assert any(op.startswith("aten.clamp") for op in ops), out.stdout
    assert "aten.hardsigmoid.default" in ops, out.stdout
    report = cli("report", "--db", db)
    assert report.returncode == 0 and "fuzz findings by signature" in report.stdout
    key = re.search(r"\[([0-9a-f]{10})\]", report.stdout).group(1)
    repro = cli("report", "--db", db, "--repro", key)
    assert "def graph(" in repro.stdout and "torch.compile" in repro.stdout


def test_real_compiler_has_no_findings_on_the_same_campaign(cli, tmp_path) -> None:
    """The same seed and ops without planted bugs: zero new findings, exit 0 (the CI gate)."""
    out = cli("fuzz", *COMMON, "--examples", "20", "--db", str(tmp_path / "fuzz.sqlite"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "graphs run 20" in out.stdout and "validity 100.0%" in out.stdout


def test_an_error_finding_keeps_its_traceback(cli, tmp_path) -> None:
    """A lowering that raises: the finding stores the traceback it was found with; the report says
    where it was raised, ``--traceback KEY`` prints it and the repro names the frame too."""
    db = str(tmp_path / "fuzz.sqlite")
    out = cli("fuzz", "--target", "crucible-cpp", "--ops", "exp.default,add.Tensor", "--examples", "6",
              "--max-nodes", "2", "--shrink-seconds", "5", "--max-findings", "1", "--db", db,
              "--import", "tests.harness.fuzz_plants:exp_lowering_raises", timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    report = cli("report", "--db", db)
    where = re.search(r"raised at (tests/harness/fuzz_plants\.py:\d+ in broken) \(crucible report \S+ "
                      r"--traceback ([0-9a-f]{10})\)", report.stdout)
    assert where, report.stdout
    trace = cli("report", "--db", db, "--traceback", where.group(2))
    assert trace.returncode == 0 and "planted: exp has no lowering" in trace.stdout and "Traceback" in trace.stdout
    repro = cli("report", "--db", db, "--repro", where.group(2))
    assert f"# raised at: {where.group(1)}" in repro.stdout


def test_decomposition_fuzzer_finds_a_planted_rule_and_passes_the_real_one(cli, tmp_path) -> None:
    """fuzz-decomps on one rule by name, in this process (--in-process: no worker to start): the
    planted slope error fails it, the real rule passes."""
    db = str(tmp_path / "decomps.sqlite")
    rule = ["fuzz-decomps", "--rule", "torch:aten::hardsigmoid", "--examples", "30", "--seed", "0", "--db", db,
            "--in-process"]
    bad = cli(*rule, "--import", "tests.harness.fuzz_plants:hardsigmoid_rule_off_by_a_bit")
    assert bad.returncode == 1 and "torch:aten::hardsigmoid" in bad.stdout, bad.stdout + bad.stderr[-2000:]
    good = cli(*rule)
    assert good.returncode == 0 and "no findings" in good.stdout, good.stdout + good.stderr[-2000:]


def test_decomposition_fuzzer_on_workers_finds_the_planted_rules(cli, tmp_path) -> None:
    """fuzz-decomps -j 2: rules run as tasks on isolated workers (the plants are imported there); the
    wrong rule is a finding, the rule that aborts its worker is one too (the run goes on), the other
    rule passes."""
    out = cli("fuzz-decomps", "-j", "2", "--rule", "torch:aten::hardsigmoid", "--rule", "torch:aten::hardtanh",
              "--rule", "torch:aten::hardshrink", "--examples", "20", "--db", str(tmp_path / "d.sqlite"),
              "--import", "tests.harness.fuzz_plants:hardsigmoid_rule_off_by_a_bit",
              "--import", "tests.harness.fuzz_plants:hardshrink_rule_aborts", timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr[-2000:]
    assert "rules checked 3 of 3" in out.stdout, out.stdout
    assert sorted(re.findall(r"NEW +(\S+ \| \S+ \| \S+)", out.stdout)) == [
        "crash | torch:aten::hardshrink | SIGABRT", "fail_accuracy | torch:aten::hardsigmoid | error"], out.stdout


def test_gpu_build_check_finds_a_gpu_only_bug_and_passes_the_real_compiler(cli, tmp_path, monkeypatch) -> None:
    """CRUCIBLE_GPU_BUILD_CHECK=1 on crucible-interpret: every kernel is also built for an H200 on this
    machine. A planted GPU-only rendering bug is found (the interpreter alone passes it); the real
    compiler has no findings over the same campaign of every spec."""
    if not available():
        pytest.skip("Triton without its NVIDIA backend")
    monkeypatch.setenv("CRUCIBLE_GPU_BUILD_CHECK", "1")
    args = ["--target", "crucible-interpret", "--seed", "0", "--max-nodes", "4", "--shrink-seconds", "5"]
    planted = cli("fuzz", *args, "--ops", "exp.default,add.Tensor,mul.Tensor", "--examples", "10", "--max-findings", "1",
                  "--db", str(tmp_path / "p.sqlite"), "--import", "tests.harness.fuzz_plants:gpu_exp_misspelled",
                  timeout=300)
    assert planted.returncode == 1 and "GpuBuildError" in planted.stdout, planted.stdout + planted.stderr[-3000:]
    real = cli("fuzz", *args, "--examples", "40", "--db", str(tmp_path / "r.sqlite"), timeout=300)
    assert real.returncode == 0, real.stdout + real.stderr[-3000:]
    assert "graphs run 40" in real.stdout and "no findings" in real.stdout
