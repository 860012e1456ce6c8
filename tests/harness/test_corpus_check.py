"""``crucible corpus check``: every outcome becomes a recorded status, nothing escapes; it runs on the
harness's engine and worker pool (isolated workers, deadlines, one torch thread each)."""

from __future__ import annotations

import pytest
import torch

from corpus import tiers
from corpus.entry import Built, Entry
from harness import corpus_check
from harness.cli import main
from harness.engine import execute
from harness.targets import parse_target
from harness.tasks import CorpusCheckSubject


def _boom(scale: str) -> Built:
    raise RuntimeError("factory exploded")


def _eager_boom(scale: str) -> Built:
    def model(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("forward exploded")

    return Built(model, (torch.ones(2),))


def _random(scale: str) -> Built:
    return Built(lambda x: x + torch.rand_like(x), (torch.ones(2),))


def _nan(scale: str) -> Built:
    return Built(lambda x: x / 0 * 0, (torch.ones(2),))  # NaN every run: deterministic


def _good(scale: str) -> Built:
    return Built(torch.nn.Linear(4, 3), (torch.ones(2, 4),))


def _no_tensor(scale: str) -> Built:
    return Built(lambda x: "a string", (torch.ones(2),))


@pytest.mark.parametrize(
    ("factory", "status", "error"),
    [
        (_boom, "build_fail", "factory exploded"),
        (_eager_boom, "eager_fail", "forward exploded"),
        (_random, "eager_nondeterministic", "differ"),
        (_no_tensor, "eager_fail", "holds no tensor"),
        (_good, "ok", None),
        (_nan, "ok", None),
    ],
)
def test_check_statuses(factory, status: str, error: str | None) -> None:
    entry = Entry(name=f"fake/{factory.__name__}", source="fake", family="f", factory=factory)
    result = execute(CorpusCheckSubject(entry), parse_target("eager"))
    record = corpus_check.measurement(result, "fake", torch.__version__)
    assert record["status"] == status, record
    if error is None:
        assert record["eager_ms"] >= 0 and "error" not in record
        assert record.get("params") == (15 if factory is _good else None)
        assert record["input_shapes"] and record["build_ms"] >= 0
    else:
        assert error in record["error"]


def test_run_checks_writes_each_record_at_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    names = ["opinfo/add-float32-0", "opinfo/sum-float32-0"]
    counts = corpus_check.run_checks([("opinfo", n) for n in names], jobs=1, timeout_s=60)
    assert counts == {"ok": 2}
    records = tiers.load_measurements("opinfo")
    assert sorted(records) == names
    assert all(r["eager_ms"] is not None and r["status"] == "ok" for r in records.values())


def test_report_prints_recorded_failures(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    tiers.append_measurement("timm", {"name": "timm/resnet18", "status": "eager_fail", "error": "ValueError: nope"})
    tiers.append_measurement("timm", {"name": "timm/gone", "status": "eager_fail", "error": "stale"})
    assert main(["corpus", "check", "--report", "--source", "timm"]) == 0
    out = capsys.readouterr().out
    assert "timm/resnet18" in out and "ValueError: nope" in out
    assert "timm/gone" not in out  # a record of an entry no longer listed is stale


def test_compact_keeps_the_latest_record_of_current_entries(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    for record in ({"name": "s/a", "status": "timeout"}, {"name": "s/a", "status": "ok"}, {"name": "s/old", "status": "ok"}):
        tiers.append_measurement("s", record)
    assert tiers.compact_measurements("s", ["s/a", "s/b"]) == 1
    assert (tmp_path / "s.jsonl").read_text().splitlines() == ['{"name": "s/a", "status": "ok"}']
