"""Corpus metadata files and data-driven tier selection.

Two kinds of files live in ``corpus/data``:

* ``<source>.json`` - the catalog of a source: which models/ops exist, their natural
  input size and a parameter count taken without running anything (meta device or tiny
  config). Written by ``crucible corpus check --catalog`` so that listing never has to
  import timm/transformers or enumerate op_db.
* ``measured/<source>.jsonl`` - one line per entry written by ``crucible corpus check``
  as soon as that entry finishes: eager status at scale "small" on the CPU, parameter
  count, eager time, error. The last line for a name wins, so a re-check appends.

Tiers are derived from these numbers (``assign_tiers``), never kept by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"
MEASURED_DIR = DATA_DIR / "measured"

# Eager statuses written by the check; only "ok" entries can be in smoke or nightly-cpu.
OK = "ok"

# --- thresholds (eager at scale "small", one CPU thread) ------------------------------
# Smoke must finish in 10 minutes on 2 CPU cores through the harness on the interpreter
# target. Measured there on an idle 2-core machine: a single op entry costs ~1.5 s, a
# model of a few ms eager 5-20 s, mostly compile and capture, which grow with graph size
# as eager time does. So the cost model is a fixed cost plus SMOKE_S_PER_EAGER_MS per
# eager millisecond, and this corpus's share of the budget is half of 2 cores x 10
# minutes (the hand-written zoo and slack take the rest).
SMOKE_MAX_EAGER_MS = 4.0
SMOKE_MAX_PARAMS = 3_000_000
SMOKE_FIXED_S = 1.5
SMOKE_S_PER_EAGER_MS = 3.0
SMOKE_BUDGET_S = 600.0
# How many smoke entries each source contributes at most (the zoo picks its own tiers);
# each source gets the share of the budget its quota is of the total.
SMOKE_QUOTA = {"timm": 24, "transformers": 24, "torchvision": 8, "opinfo": 40}
# nightly-cpu: whatever a CPU night can afford at reduced input sizes.
NIGHTLY_CPU_MAX_EAGER_MS = 250.0
NIGHTLY_CPU_MAX_PARAMS = 60_000_000
# Fallback for entries never measured: only the parameter count (from the catalog) is
# known, so they can reach nightly-cpu when small, never smoke.
UNMEASURED_CPU_MAX_PARAMS = 5_000_000
# Models too large even for one GPU at full size are only in "full".
GPU_MAX_PARAMS = 3_000_000_000


def load_catalog(source: str) -> dict[str, Any] | None:
    """The catalog of ``source``, or None when it was never generated."""
    path = DATA_DIR / f"{source}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


def write_catalog(source: str, catalog: dict[str, Any]) -> Path:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / f"{source}.json"
    path.write_text(json.dumps(catalog, indent=1, sort_keys=True) + "\n")
    return path


def measured_path(source: str) -> Path:
    return MEASURED_DIR / f"{source}.jsonl"


def load_measurements(source: str) -> dict[str, dict[str, Any]]:
    """name -> the latest check record of that entry (empty when never checked)."""
    path = measured_path(source)
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a killed run
            continue
        records[record["name"]] = record
    return records


def append_measurement(source: str, record: dict[str, Any]) -> None:
    """Append one check record at once, so an interrupted check loses nothing."""
    MEASURED_DIR.mkdir(parents=True, exist_ok=True)
    with measured_path(source).open("a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()


def compact_measurements(source: str, names: Iterable[str]) -> int:
    """Rewrite ``source``'s records keeping the latest one per current entry name.

    Not safe while another check appends to the same file; run it on its own.
    """
    keep = set(names)
    records = [r for n, r in sorted(load_measurements(source).items()) if n in keep]
    path = measured_path(source)
    if path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        tmp.replace(path)
    return len(records)


@dataclass(frozen=True)
class Metadata:
    """What tiers are decided from, for one entry."""

    name: str
    family: str
    params: int | None  # measured, else from the catalog
    eager_ms: float | None  # measured only
    status: str | None  # None when never checked


def smoke_cost_s(eager_ms: float) -> float:
    """Estimated seconds of one smoke entry through the interpreter target."""
    return SMOKE_FIXED_S + eager_ms * SMOKE_S_PER_EAGER_MS


def _is_smoke_candidate(m: Metadata) -> bool:
    return (
        m.status == OK
        and m.eager_ms is not None
        and m.eager_ms <= SMOKE_MAX_EAGER_MS
        and (m.params or 0) <= SMOKE_MAX_PARAMS
    )


def pick_smoke(
    source: str, metas: Iterable[Metadata], groups: dict[str, str] | None = None,
    excluded: Iterable[str] = (),
) -> set[str]:
    """Cheapest entries of each group, round-robin over groups, within quota and budget.

    Round-robin keeps every group (the family unless the source says otherwise, e.g.
    modality for transformers) represented before any group gets a second entry. Eager
    times are rounded to 0.1 ms when ordering so measurement noise does not reshuffle
    the suite between checks; ties go by name.
    """
    quota = SMOKE_QUOTA.get(source, 10)
    budget = SMOKE_BUDGET_S * quota / sum(SMOKE_QUOTA.values())
    skip = set(excluded)
    by_group: dict[str, list[Metadata]] = {}
    for m in metas:
        if _is_smoke_candidate(m) and m.name not in skip:
            by_group.setdefault((groups or {}).get(m.name, m.family), []).append(m)
    order = lambda m: (round(m.eager_ms or 0.0, 1), m.params or 0, m.name)
    # Groups whose cheapest entry is cheapest go first, so the budget is not spent on an
    # expensive group's entry before a cheap group got its turn.
    queues = sorted((sorted(v, key=order) for v in by_group.values()), key=lambda q: order(q[0]))
    chosen: set[str] = set()
    spent = 0.0
    while len(chosen) < quota and any(queues):
        for queue in queues:
            if not queue or len(chosen) >= quota:
                continue
            m = queue.pop(0)
            cost = smoke_cost_s(m.eager_ms or 0.0)
            if spent + cost > budget:
                continue
            chosen.add(m.name)
            spent += cost
    return chosen


def tier_of(m: Metadata, smoke: set[str]) -> str:
    """The smallest suite an entry belongs to (see ``docs/corpus.md``)."""
    if m.name in smoke:
        return "smoke"
    if m.status is None:  # never measured: parameter count is the only evidence
        if m.params is not None and m.params <= UNMEASURED_CPU_MAX_PARAMS:
            return "nightly-cpu"
        if m.params is not None and m.params > GPU_MAX_PARAMS:
            return "full"
        return "nightly-gpu"
    if m.status in ("timeout", "skipped") and (m.params or 0) <= GPU_MAX_PARAMS:
        return "nightly-gpu"  # too slow or too large for the CPU check; a GPU run may manage
    if m.status != OK:
        return "full"  # known broken in eager: listed, run only by the full suite
    params = m.params or 0
    if params > GPU_MAX_PARAMS:
        return "full"
    if (m.eager_ms or 0.0) <= NIGHTLY_CPU_MAX_EAGER_MS and params <= NIGHTLY_CPU_MAX_PARAMS:
        return "nightly-cpu"
    return "nightly-gpu"


def assign_tiers(source: str, catalog_params: dict[str, int | None], families: dict[str, str]) -> dict[str, Metadata]:
    """name -> Metadata for every entry of ``source``: measured numbers where the check
    recorded them, else the catalog's parameter count. ``tiers_for`` turns them into tiers.
    """
    measured = load_measurements(source)
    metas: dict[str, Metadata] = {}
    for name, params in catalog_params.items():
        rec = measured.get(name)
        if rec is not None:
            metas[name] = Metadata(
                name=name,
                family=families[name],
                params=rec.get("params", params),
                eager_ms=rec.get("eager_ms"),
                status=rec.get("status"),
            )
        else:
            metas[name] = Metadata(name=name, family=families[name], params=params, eager_ms=None, status=None)
    return metas


def tiers_for(
    source: str, metas: dict[str, Metadata], groups: dict[str, str] | None = None,
    smoke_excluded: Iterable[str] = (),
) -> dict[str, str]:
    """name -> tier. ``groups`` spreads smoke over groups other than the family;
    ``smoke_excluded`` names entries that must not be in smoke (CPU-only ones: smoke
    also runs on the GPU)."""
    smoke = pick_smoke(source, metas.values(), groups, smoke_excluded)
    return {name: tier_of(m, smoke) for name, m in metas.items()}
