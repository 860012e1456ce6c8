"""Tier selection from measured metadata (synthetic numbers, no models)."""

from __future__ import annotations

import json

import pytest

from corpus import tiers
from corpus.tiers import Metadata, pick_smoke, smoke_cost_s, tier_of


def _meta(name: str, family: str = "f", params: int | None = 1000, eager_ms: float | None = 1.0,
          status: str | None = "ok") -> Metadata:
    return Metadata(name=name, family=family, params=params, eager_ms=eager_ms, status=status)


def test_smoke_round_robins_over_families_before_repeating() -> None:
    metas = [_meta(f"s/a{i}", "a", eager_ms=0.1 * (i + 1)) for i in range(10)]
    metas += [_meta("s/b0", "b", eager_ms=3.0), _meta("s/c0", "c", eager_ms=2.0)]
    chosen = pick_smoke("transformers", metas)
    assert {"s/a0", "s/b0", "s/c0"} <= chosen


def test_smoke_respects_quota_thresholds_and_budget() -> None:
    metas = [_meta(f"s/x{i}", f"fam{i}", eager_ms=0.5) for i in range(100)]
    metas.append(_meta("s/slow", "slowfam", eager_ms=tiers.SMOKE_MAX_EAGER_MS * 2))
    metas.append(_meta("s/big", "bigfam", params=tiers.SMOKE_MAX_PARAMS * 2))
    metas.append(_meta("s/broken", "brokenfam", status="eager_fail"))
    chosen = pick_smoke("timm", metas)
    assert len(chosen) == tiers.SMOKE_QUOTA["timm"]
    assert not {"s/slow", "s/big", "s/broken"} & chosen
    share = tiers.SMOKE_BUDGET_S * tiers.SMOKE_QUOTA["timm"] / sum(tiers.SMOKE_QUOTA.values())
    assert sum(smoke_cost_s(0.5) for _ in chosen) <= share


def test_smoke_total_budget_fits_ten_minutes_on_two_cores() -> None:
    worst_entry = smoke_cost_s(tiers.SMOKE_MAX_EAGER_MS)
    assert tiers.SMOKE_BUDGET_S <= 2 * 10 * 60
    assert sum(tiers.SMOKE_QUOTA.values()) >= 60
    assert worst_entry < 60


@pytest.mark.parametrize(
    ("meta", "tier"),
    [
        (_meta("s/fast", eager_ms=10.0), "nightly-cpu"),
        (_meta("s/slow", eager_ms=tiers.NIGHTLY_CPU_MAX_EAGER_MS + 1), "nightly-gpu"),
        (_meta("s/huge", params=tiers.GPU_MAX_PARAMS + 1, eager_ms=None), "full"),
        (_meta("s/broken", status="eager_fail"), "full"),
        (_meta("s/timeout", status="timeout", eager_ms=None), "nightly-gpu"),
        (_meta("s/too-big-for-cpu", status="skipped", params=2 * 10**9, eager_ms=None), "nightly-gpu"),
        (_meta("s/unmeasured-small", params=1000, eager_ms=None, status=None), "nightly-cpu"),
        (_meta("s/unmeasured-big", params=10**8, eager_ms=None, status=None), "nightly-gpu"),
        (_meta("s/unmeasured-unknown", params=None, eager_ms=None, status=None), "nightly-gpu"),
    ],
)
def test_tier_of(meta: Metadata, tier: str) -> None:
    assert tier_of(meta, smoke=set()) == tier


def test_unmeasured_entries_never_reach_smoke() -> None:
    assert pick_smoke("timm", [_meta("s/u", eager_ms=None, status=None)]) == set()


def test_measurements_latest_line_wins_and_torn_lines_are_skipped(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tiers, "MEASURED_DIR", tmp_path)
    tiers.append_measurement("src", {"name": "src/a", "status": "timeout"})
    tiers.append_measurement("src", {"name": "src/a", "status": "ok", "eager_ms": 2.0, "params": 5})
    with (tmp_path / "src.jsonl").open("a") as f:
        f.write('{"name": "src/b", "sta')  # a run killed mid-write
    records = tiers.load_measurements("src")
    assert records == {"src/a": {"name": "src/a", "status": "ok", "eager_ms": 2.0, "params": 5}}
    metas = tiers.assign_tiers("src", {"src/a": 7, "src/c": 9}, {"src/a": "f", "src/c": "g"})
    assert metas["src/a"].params == 5 and metas["src/a"].eager_ms == 2.0
    assert metas["src/c"].status is None and metas["src/c"].params == 9
    json.dumps([m.__dict__ for m in metas.values()])
