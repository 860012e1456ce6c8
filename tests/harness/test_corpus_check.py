"""``crucible corpus check``: every outcome becomes a recorded status, nothing escapes."""

from __future__ import annotations

import time

import pytest
import torch

from corpus import check, tiers
from corpus.entry import Built, Entry


def _boom(scale: str) -> Built:
    raise RuntimeError("factory exploded")


def _eager_boom(scale: str) -> Built:
    def model(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("forward exploded")

    return Built(model, (torch.ones(2),))


def _slow(scale: str) -> Built:
    time.sleep(5)
    return Built(torch.nn.Identity(), (torch.ones(2),))


def _random(scale: str) -> Built:
    return Built(lambda x: x + torch.rand_like(x), (torch.ones(2),))


def _nan(scale: str) -> Built:
    return Built(lambda x: x / 0 * 0, (torch.ones(2),))  # NaN every run: deterministic


def _good(scale: str) -> Built:
    return Built(torch.nn.Linear(4, 3), (torch.ones(2, 4),))


FAKE = {
    f"fake/{fn.__name__.strip('_')}": Entry(name=f"fake/{fn.__name__.strip('_')}", source="fake", family="f",
                                            factory=fn)
    for fn in (_boom, _eager_boom, _slow, _random, _nan, _good)
}


@pytest.fixture()
def fake_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(check._ENTRY_CACHE, "fake", FAKE)


@pytest.mark.parametrize(
    ("name", "status", "error"),
    [
        ("fake/boom", "build_fail", "factory exploded"),
        ("fake/eager_boom", "eager_fail", "forward exploded"),
        ("fake/slow", "timeout", "build took longer"),
        ("fake/random", "eager_nondeterministic", "differ"),
        ("fake/good", "ok", None),
        ("fake/nan", "ok", None),
    ],
)
def test_check_entry_statuses(fake_source: None, name: str, status: str, error: str | None) -> None:
    record = check.check_entry("fake", name, timeout_s=1.0)
    assert record["status"] == status
    if error is None:
        assert record["eager_ms"] >= 0 and "error" not in record
        assert record.get("params") == (15 if name == "fake/good" else None)
    else:
        assert error in record["error"]


def test_run_checks_writes_each_record_at_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    names = ["opinfo/add-float32-0", "opinfo/sum-float32-0"]
    counts = check.run_checks([("opinfo", n) for n in names], jobs=1, timeout_s=60)
    assert counts == {"ok": 2}
    records = tiers.load_measurements("opinfo")
    assert sorted(records) == names
    assert all(r["eager_ms"] is not None for r in records.values())


def test_report_prints_recorded_failures(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    tiers.append_measurement("timm", {"name": "timm/resnet18", "status": "eager_fail", "error": "ValueError: nope"})
    tiers.append_measurement("timm", {"name": "timm/gone", "status": "eager_fail", "error": "stale"})
    assert check.main(["--report", "--source", "timm"]) == 0
    out = capsys.readouterr().out
    assert "timm/resnet18" in out and "ValueError: nope" in out
    assert "timm/gone" not in out  # a record of an entry no longer listed is stale


def test_compact_keeps_the_latest_record_of_current_entries(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    for record in ({"name": "s/a", "status": "timeout"}, {"name": "s/a", "status": "ok"}, {"name": "s/old", "status": "ok"}):
        tiers.append_measurement("s", record)
    assert tiers.compact_measurements("s", ["s/a", "s/b"]) == 1
    assert (tmp_path / "s.jsonl").read_text().splitlines() == ['{"name": "s/a", "status": "ok"}']
