"""The results store: one SQLite file, written as each entry finishes.

Tables: ``runs`` (one row per run: id, suite, target, metadata as JSON, finished
flag) and ``results`` (one row per run and entry; scalar metrics as columns, the
graph-break list and error detail as JSON/text). A run killed half-way keeps the
rows it wrote; ``--resume`` continues it, skipping entries already present.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_DB = "crucible-results.sqlite"

# Scalar result fields stored as columns, in export order.
RESULT_COLUMNS = (
    "name", "suite", "target", "status", "phase", "graphs", "graph_breaks", "capture_coverage",
    "captured_ops", "eager_ops", "max_abs_err", "max_rel_err", "rmse_ratio", "cosine", "compile_s",
    "run_s", "wall_s", "load_s", "build_s", "eager_s", "reference_s", "capture_s", "kernels", "externs", "reference", "error", "error_detail", "capture_error",
)

_TEXT_COLUMNS = {"name", "suite", "target", "status", "phase", "reference", "error", "error_detail",
                 "capture_error"}
_COLUMN_DEFS = ", ".join(f"{c} {'TEXT' if c in _TEXT_COLUMNS else 'REAL'}" for c in RESULT_COLUMNS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, suite TEXT, target TEXT, created REAL, finished INTEGER DEFAULT 0,
    metadata TEXT
);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL, {_COLUMN_DEFS}, break_reasons TEXT, recorded REAL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS fuzz_findings (
    run_id TEXT NOT NULL, signature TEXT NOT NULL, kind TEXT, target TEXT, status TEXT, op TEXT,
    error TEXT, known TEXT, hits INTEGER, nodes INTEGER, graph TEXT, repro TEXT, recorded REAL,
    PRIMARY KEY (run_id, signature)
);
"""


class ResultStore:
    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = str(path)
        # One short transaction per write: readers (report, resume) never see half a row.
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(_SCHEMA)
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        # A database written by an older harness gains the columns added since.
        have = {row[1] for row in self.db.execute("PRAGMA table_info(results)")}
        with self.db:
            for column in RESULT_COLUMNS:
                if column not in have:
                    kind = "TEXT" if column in _TEXT_COLUMNS else "REAL"
                    self.db.execute(f"ALTER TABLE results ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultStore:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------
    def create_run(self, run_id: str, suite: str, target: str, metadata: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO runs (id, suite, target, created, metadata) "
                            "VALUES (?, ?, ?, ?, ?)", (run_id, suite, target, time.time(), json.dumps(metadata)))

    def update_metadata(self, run_id: str, metadata: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET metadata = ? WHERE id = ?", (json.dumps(metadata), run_id))

    def finish_run(self, run_id: str) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET finished = 1 WHERE id = ?", (run_id,))

    def runs(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT r.*, (SELECT COUNT(*) FROM results WHERE run_id = r.id) AS entries "
                               "FROM runs r ORDER BY created, id").fetchall()
        return [self._run_dict(r) for r in rows]

    def run(self, run_id: str) -> dict[str, Any] | None:
        return next((r for r in self.runs() if r["id"] == run_id), None)

    def latest_run(self, suite: str | None = None, target: str | None = None) -> dict[str, Any] | None:
        runs = [r for r in self.runs() if (suite is None or r["suite"] == suite)
                and (target is None or r["target"] == target)]
        return runs[-1] if runs else None

    @staticmethod
    def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
        out = dict(row)
        out["metadata"] = json.loads(out["metadata"] or "{}")
        out["finished"] = bool(out["finished"])
        return out

    # -- results ----------------------------------------------------------
    def record(self, run_id: str, result: dict[str, Any]) -> None:
        values = [result.get(c) for c in RESULT_COLUMNS]
        with self.db:
            self.db.execute(
                f"INSERT OR REPLACE INTO results (run_id, {', '.join(RESULT_COLUMNS)}, break_reasons, recorded) "
                f"VALUES (?, {', '.join('?' for _ in RESULT_COLUMNS)}, ?, ?)",
                [run_id, *values, json.dumps(result.get("break_reasons") or []), time.time()])

    def finished_names(self, run_id: str) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT name FROM results WHERE run_id = ?", (run_id,))}

    def results(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM results WHERE run_id = ? ORDER BY name", (run_id,)).fetchall()
        return [self._result_dict(r) for r in rows]

    @staticmethod
    def _result_dict(row: sqlite3.Row) -> dict[str, Any]:
        out = {c: row[c] for c in RESULT_COLUMNS}
        for c in ("graphs", "graph_breaks", "captured_ops", "eager_ops", "kernels", "externs"):
            if out[c] is not None:
                out[c] = int(out[c])
        out["break_reasons"] = json.loads(row["break_reasons"] or "[]")
        return out

    # -- fuzz findings (harness.fuzz) ----------------------------------------
    def record_finding(self, run_id: str, finding: dict[str, Any]) -> None:
        columns = ("signature", "kind", "target", "status", "op", "error", "known", "hits", "nodes", "graph", "repro")
        with self.db:
            self.db.execute(f"INSERT OR REPLACE INTO fuzz_findings (run_id, {', '.join(columns)}, recorded) "
                            f"VALUES (?, {', '.join('?' for _ in columns)}, ?)",
                            [run_id, *[finding.get(c) for c in columns], time.time()])

    def findings(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM fuzz_findings WHERE run_id = ? ORDER BY known IS NOT NULL, "
                               "signature", (run_id,)).fetchall()
        return [dict(r) for r in rows]

    def iter_all(self) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
        for run in self.runs():
            yield run, self.results(run["id"])


def export_json(store: ResultStore, run_id: str) -> dict[str, Any]:
    """The ``--json`` document of one run."""
    run = store.run(run_id)
    if run is None:
        raise KeyError(f"no run {run_id!r} in {store.path}")
    header = {k: run[k] for k in ("id", "suite", "target", "created", "finished")}
    header.update(run["metadata"])
    return {"run": header, "entries": store.results(run_id)}


def merge(into: ResultStore, sources: list[str | Path]) -> dict[str, int]:
    """Copy every run of ``sources`` into ``into``; shards with the same run id become one run.

    Returns the number of result rows merged per run id.
    """
    merged: dict[str, int] = {}
    for path in sources:
        with ResultStore(path) as src:
            for run, results in src.iter_all():
                existing = before = into.run(run["id"])
                # A merged run lists the shards it holds.
                shards = set(run["metadata"].get("shards", []))
                if run["metadata"].get("shard"):
                    shards.add(run["metadata"]["shard"])
                if existing is None:
                    into.create_run(run["id"], run["suite"], run["target"], run["metadata"])
                    existing = into.run(run["id"])
                shards |= set(existing["metadata"].get("shards", []))
                if existing["metadata"].get("shard"):
                    shards.add(existing["metadata"]["shard"])
                metadata = {k: v for k, v in existing["metadata"].items() if k != "shard"}
                into.update_metadata(run["id"], {**metadata, "shards": sorted(shards)})
                for result in results:
                    into.record(run["id"], result)
                if run["finished"] and (before is None or before["finished"]):
                    into.finish_run(run["id"])
                merged[run["id"]] = merged.get(run["id"], 0) + len(results)
    return merged
