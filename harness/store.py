"""The results store: one SQLite file, written as each result arrives.

Tables: ``runs`` (one row per run: id, suite, target, metadata as JSON, finished flag),
``results`` (one row per run and entry: one column per field of ``harness.result.Result``, lists
and dicts as JSON text), ``fuzz_findings``, ``minimized`` and ``fuzz_seeds`` (the seed corpora of
``crucible fuzz --seed-corpus``: graphs that reached compiler lines first, ``harness.fuzz.seeds``). A run killed half-way keeps the rows
it wrote; ``--resume`` continues it, skipping entries already present.

The file carries a schema version (``PRAGMA user_version``). A file of an older version is
migrated when it is opened for writing (columns added since are added); opened read-only (a report,
the sources of a merge) it is read as it is, a field it lacks reading as None. A file of a newer
version than this code knows is refused, never rewritten.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.result import JSON_FIELDS, STORED_FIELDS, Result, field_type
from harness.validation import writable_output

DEFAULT_DB = "crucible-results.sqlite"

# 1: the layout before versioning (every scalar a REAL or TEXT column); 2: columns from Result's fields,
# typed (INTEGER, REAL, TEXT; JSON as TEXT). Bump when a migration is needed and add it to _MIGRATIONS.
SCHEMA_VERSION = 2
_SQL_TYPES = {"text": "TEXT", "integer": "INTEGER", "real": "REAL", "json": "TEXT"}
_COLUMN_DEFS = ", ".join(f"{name} {_SQL_TYPES[field_type(name)]}" for name in STORED_FIELDS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, suite TEXT, target TEXT, created REAL, finished INTEGER DEFAULT 0,
    metadata TEXT
);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL, {_COLUMN_DEFS}, recorded REAL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS fuzz_findings (
    run_id TEXT NOT NULL, signature TEXT NOT NULL, kind TEXT, target TEXT, status TEXT, op TEXT,
    error TEXT, known TEXT, hits INTEGER, nodes INTEGER, graph TEXT, repro TEXT, recorded REAL,
    error_detail TEXT, PRIMARY KEY (run_id, signature)
);
CREATE TABLE IF NOT EXISTS minimized (
    run_id TEXT NOT NULL, name TEXT NOT NULL, status TEXT, signature TEXT, repro TEXT, nodes_before REAL,
    nodes_after REAL, checks REAL, seconds REAL, first_divergent TEXT, stage TEXT, stage_evidence TEXT,
    message TEXT, recorded REAL, PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS fuzz_seeds (
    corpus TEXT NOT NULL, run_id TEXT, target TEXT, graph TEXT NOT NULL, lines TEXT, new_lines INTEGER,
    recorded REAL
);
"""
# Columns of ``minimized``: an entry's failure shrunk by ``crucible minify`` (harness.minify).
MINIMIZED_COLUMNS = ("status", "signature", "repro", "nodes_before", "nodes_after", "checks", "seconds",
                     "first_divergent", "stage", "stage_evidence", "message")
FINDING_COLUMNS = ("signature", "kind", "target", "status", "op", "error", "error_detail", "known", "hits", "nodes",
                   "graph", "repro")


class StoreError(RuntimeError):
    """The results file cannot be used: corrupted, truncated, locked, not SQLite, or another program's."""


# How long a writer waits for another process's transaction before the store reports it locked.
# Results are one short transaction each, so only a stuck process holds the lock this long.
BUSY_TIMEOUT_S = 60.0
_REQUIRED = {"runs": {"id", "suite", "target", "metadata"}, "results": {"run_id", "name", "status"}}


def _describe(path: str, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return (f"results database {path} is locked by another process (waited {BUSY_TIMEOUT_S:g}s): "
                f"wait for it to finish or use another --db")
    if "disk is full" in text or "disk I/O error" in text:
        return f"results database {path}: the disk is full or failing ({text})"
    if "not a database" in text or "malformed" in text or "file is encrypted" in text:
        return (f"results database {path} is corrupted or not an SQLite file ({text}): move it away "
                f"or pass another --db")
    return f"results database {path}: {text}"


def _guarded(method: Callable) -> Callable:
    """sqlite3 errors after opening (a file truncated or locked while in use) become StoreError."""

    @functools.wraps(method)
    def call(self: ResultStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreError(_describe(self.path, exc)) from None

    return call


class ResultStore:
    """One results file. Several processes may write it at once (parallel runs, pytest-xdist
    workers): WAL journaling lets readers and one writer proceed together, and every write is one
    short transaction that waits up to ``BUSY_TIMEOUT_S`` for the others.

    ``read_only=True`` never writes (no schema, no migration, no journal files where SQLite can do
    without: a store in a read-only directory can be reported on)."""

    def __init__(self, path: str | Path = DEFAULT_DB, read_only: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        if Path(self.path).is_dir():
            raise StoreError(f"results database {self.path} is a directory: pass a file to --db")
        if read_only and not Path(self.path).is_file():
            raise StoreError(f"no results database at {self.path}")
        try:
            self.db = self._connect()
            self.db.row_factory = sqlite3.Row
            self._check_foreign()
            self.version = self._check_version()
            if not read_only:
                try:
                    self.db.execute("PRAGMA journal_mode=WAL")
                except sqlite3.OperationalError:
                    pass  # a file system without shared memory: the rollback journal works too
                self.db.executescript(_SCHEMA)
                self._migrate()
            self._columns = {row[1] for row in self.db.execute("PRAGMA table_info(results)")}
            # a read-only store of an older schema may lack tables added since: they read as empty
            self._tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error as exc:
            raise StoreError(_describe(self.path, exc)) from None

    def _connect(self) -> sqlite3.Connection:
        if not self.read_only:
            return sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        uri = f"file:{quote(str(Path(self.path).resolve()))}"
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            # a WAL file in a directory we cannot write: SQLite cannot create its shared-memory file
            # there. Read the file as it stands (a finished run has checkpointed its WAL).
            db.close()
            return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S)

    def _check_version(self) -> int:
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(f"results database {self.path} has schema version {version}, newer than this "
                             f"Crucible's {SCHEMA_VERSION}: upgrade Crucible or pass another --db")
        has_tables = self.db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        return version or (1 if has_tables else SCHEMA_VERSION)  # before versioning, files said 0

    def _check_foreign(self) -> None:
        tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, needed in _REQUIRED.items():
            if table not in tables:
                continue
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            if not needed <= have:
                raise StoreError(f"{self.path} is an SQLite database of another program (its {table!r} table "
                                 f"lacks {', '.join(sorted(needed - have))}): pass another --db")
        if tables and not tables & set(_REQUIRED):
            raise StoreError(f"{self.path} is an SQLite database of another program (tables: "
                             f"{', '.join(sorted(tables)[:5])}): pass another --db")

    def _migrate(self) -> None:
        """Bring a file of an older schema to this one: the columns fields added since, the version."""
        have = {row[1] for row in self.db.execute("PRAGMA table_info(results)")}
        with self.db:
            for name in STORED_FIELDS:
                if name not in have:
                    self.db.execute(f"ALTER TABLE results ADD COLUMN {name} {_SQL_TYPES[field_type(name)]}")
            if "error_detail" not in {row[1] for row in self.db.execute("PRAGMA table_info(fuzz_findings)")}:
                self.db.execute("ALTER TABLE fuzz_findings ADD COLUMN error_detail TEXT")
            if self.version < SCHEMA_VERSION:
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.version = SCHEMA_VERSION

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultStore:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------
    @_guarded
    def create_run(self, run_id: str, suite: str, target: str, metadata: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO runs (id, suite, target, created, metadata) "
                            "VALUES (?, ?, ?, ?, ?)", (run_id, suite, target, time.time(), json.dumps(metadata)))

    @_guarded
    def create_unique_run(self, base: str, suite: str, target: str, metadata: dict[str, Any]) -> str:
        """Create a new run named ``base`` (or ``base-2``, ``base-3``, ...: the first free name) and
        return its id. Atomic: two processes starting runs in the same second get distinct ids."""
        n = 1
        while True:
            run_id = base if n == 1 else f"{base}-{n}"
            try:
                with self.db:
                    self.db.execute("INSERT INTO runs (id, suite, target, created, metadata) VALUES (?, ?, ?, ?, ?)",
                                    (run_id, suite, target, time.time(), json.dumps(metadata)))
                return run_id
            except sqlite3.IntegrityError:
                n += 1

    @_guarded
    def update_metadata(self, run_id: str, metadata: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET metadata = ? WHERE id = ?", (json.dumps(metadata), run_id))

    @_guarded
    def finish_run(self, run_id: str) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET finished = 1 WHERE id = ?", (run_id,))

    @_guarded
    def runs(self) -> list[dict[str, Any]]:
        if "runs" not in self._tables:
            return []
        count = ("(SELECT COUNT(*) FROM results WHERE run_id = r.id)" if "results" in self._tables else "0")
        rows = self.db.execute(f"SELECT r.*, {count} AS entries FROM runs r ORDER BY created, id").fetchall()
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
    @_guarded
    def record(self, run_id: str, result: Result) -> None:
        values = [_column_value(name, getattr(result, name)) for name in STORED_FIELDS]
        with self.db:
            self.db.execute(
                f"INSERT OR REPLACE INTO results (run_id, {', '.join(STORED_FIELDS)}, recorded) "
                f"VALUES (?, {', '.join('?' for _ in STORED_FIELDS)}, ?)",
                [run_id, *values, time.time()])

    @_guarded
    def record_minimized(self, run_id: str, name: str, record: dict[str, Any]) -> None:
        """Link a result to its minimized repro (one per run and entry; a new minimization replaces it)."""
        with self.db:
            self.db.execute(
                f"INSERT OR REPLACE INTO minimized (run_id, name, {', '.join(MINIMIZED_COLUMNS)}, recorded) "
                f"VALUES (?, ?, {', '.join('?' for _ in MINIMIZED_COLUMNS)}, ?)",
                [run_id, name, *[record.get(c) for c in MINIMIZED_COLUMNS], time.time()])

    @_guarded
    def minimized(self, run_id: str) -> dict[str, dict[str, Any]]:
        if "minimized" not in self._tables:
            return {}
        rows = self.db.execute("SELECT * FROM minimized WHERE run_id = ?", (run_id,)).fetchall()
        return {r["name"]: {c: r[c] for c in MINIMIZED_COLUMNS} for r in rows}

    @_guarded
    def finished_names(self, run_id: str) -> set[str]:
        if "results" not in self._tables:
            return set()
        return {r[0] for r in self.db.execute("SELECT name FROM results WHERE run_id = ?", (run_id,))}

    @_guarded
    def durations(self, target: str, mode: str | None = None) -> dict[str, float]:
        """Seconds each subject last took on ``target`` (dispatch to result: compile and run included),
        over every run in the file: what the runner balances a new run by."""
        if "results" not in self._tables or "wall_s" not in self._columns:
            return {}
        rows = self.db.execute(
            "SELECT name, wall_s FROM results WHERE target = ? AND wall_s IS NOT NULL"
            + (" AND (mode = ? OR mode IS NULL)" if mode else "") + " ORDER BY recorded",
            (target, mode) if mode else (target,))
        return {name: wall_s for name, wall_s in rows}

    @_guarded
    def results(self, run_id: str) -> list[Result]:
        if "results" not in self._tables:
            return []
        rows = self.db.execute("SELECT * FROM results WHERE run_id = ? ORDER BY name", (run_id,)).fetchall()
        minimized = self.minimized(run_id)
        return [self._result(row, minimized.get(row["name"])) for row in rows]

    def _result(self, row: sqlite3.Row, minimized: dict | None) -> Result:
        values = {name: _field_value(name, row[name]) for name in STORED_FIELDS if name in self._columns}
        return Result(**values, minimized=minimized)

    # -- fuzz findings (harness.fuzz) ----------------------------------------
    @_guarded
    def record_finding(self, run_id: str, finding: dict[str, Any]) -> None:
        with self.db:
            self.db.execute(f"INSERT OR REPLACE INTO fuzz_findings (run_id, {', '.join(FINDING_COLUMNS)}, recorded) "
                            f"VALUES (?, {', '.join('?' for _ in FINDING_COLUMNS)}, ?)",
                            [run_id, *[finding.get(c) for c in FINDING_COLUMNS], time.time()])

    @_guarded
    def findings(self, run_id: str) -> list[dict[str, Any]]:
        if "fuzz_findings" not in self._tables:
            return []
        rows = self.db.execute("SELECT * FROM fuzz_findings WHERE run_id = ? ORDER BY known IS NOT NULL, "
                               "signature", (run_id,)).fetchall()
        return [dict(r) for r in rows]

    @_guarded
    def latest_findings(self, target: str, kind: str = "graph", limit: int | None = None) -> list[dict[str, Any]]:
        """The newest stored finding of each signature ``target`` has (the target string as given,
        options included) across every run of this file, newest first, at most ``limit``: what a
        campaign replays before it generates (``harness.fuzz.replay``). Only findings with a graph."""
        if "fuzz_findings" not in self._tables:
            return []
        # SQLite: a bare column next to MAX() comes from the row holding the maximum
        rows = self.db.execute(
            "SELECT run_id, signature, known, graph, MAX(recorded) AS recorded FROM fuzz_findings "
            "WHERE kind = ? AND target = ? AND graph IS NOT NULL AND graph != '' GROUP BY signature "
            "ORDER BY recorded DESC, signature" + (" LIMIT ?" if limit is not None else ""),
            (kind, target, limit) if limit is not None else (kind, target)).fetchall()
        return [dict(r) for r in rows]

    # -- seed corpora (harness.fuzz.seeds) -------------------------------------
    @_guarded
    def record_seeds(self, corpus: str, run_id: str, target: str, seeds: list[tuple[str, str, int]]) -> None:
        """Add (graph JSON, lines it reached first as CoverageMap JSON, how many) rows to ``corpus``."""
        with self.db:
            self.db.executemany("INSERT INTO fuzz_seeds (corpus, run_id, target, graph, lines, new_lines, recorded) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                [(corpus, run_id, target, g, lines, n, time.time()) for g, lines, n in seeds])

    @_guarded
    def seeds(self, corpus: str) -> list[dict[str, Any]]:
        """The seeds of ``corpus`` in the order they were added (a campaign's input: the order matters)."""
        if "fuzz_seeds" not in self._tables:
            return []
        rows = self.db.execute("SELECT graph, lines, new_lines, run_id, target FROM fuzz_seeds WHERE corpus = ? "
                               "ORDER BY rowid", (corpus,)).fetchall()
        return [dict(r) for r in rows]

    def iter_all(self) -> Iterator[tuple[dict[str, Any], list[Result]]]:
        for run in self.runs():
            yield run, self.results(run["id"])


def check_usable(path: str | Path, option: str = "--db") -> None:
    """``path`` can be a results store: an existing file opens (read-only) as one this code reads (a
    damaged, foreign or newer file fails now, before any work); a new one can be created there.
    Nothing is written: a command creates the file when its work starts."""
    if Path(path).exists():
        with ResultStore(path, read_only=True):
            pass
    else:
        writable_output(option, str(path))


def _column_value(name: str, value: Any) -> Any:
    if name in JSON_FIELDS and value is not None:
        return json.dumps(value, default=str)
    return value


def _field_value(name: str, value: Any) -> Any:
    kind = field_type(name)
    if kind == "json":
        return None if value is None else json.loads(value)
    if kind == "integer" and value is not None:
        return int(value)  # files of schema 1 stored every number as REAL
    return value


def export_json(store: ResultStore, run_id: str, names: set[str] | None = None) -> dict[str, Any]:
    """The ``--json`` document of one run (only the entries ``names``, when given)."""
    run = store.run(run_id)
    if run is None:
        raise KeyError(f"no run {run_id!r} in {store.path}")
    header = {k: run[k] for k in ("id", "suite", "target", "created", "finished")}
    header.update(run["metadata"])
    return {"run": header, "entries": [r.to_dict() for r in store.results(run_id) if names is None or r.name in names]}


def missing_entries(run: dict[str, Any], names: set[str]) -> dict[str, list[str]]:
    """The count check: per shard of ``run`` (its metadata's ``planned`` lists, "all" for an unsharded
    run), the planned entries that have no result among ``names``."""
    planned = run.get("metadata", {}).get("planned") or {}
    return {shard: sorted(set(listed) - names) for shard, listed in sorted(planned.items())
            if set(listed) - names}


def merge(into: ResultStore, sources: list[str | Path]) -> dict[str, int]:
    """Copy every run of ``sources`` into ``into``; shards with the same run id become one run.

    Returns the number of result rows merged per run id.
    """
    merged: dict[str, int] = {}
    for path in sources:
        if str(path).endswith(".jsonl"):
            for run_id, n in _merge_spilled(into, Path(path)).items():
                merged[run_id] = merged.get(run_id, 0) + n
            continue
        with ResultStore(path, read_only=True) as src:
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
                planned = dict(existing["metadata"].get("planned") or {})
                for shard, names in (run["metadata"].get("planned") or {}).items():
                    planned[shard] = sorted(set(planned.get(shard, [])) | set(names))
                into.update_metadata(run["id"], {**metadata, "shards": sorted(shards), "planned": planned})
                for result in results:
                    into.record(run["id"], result)
                for name, minimized in src.minimized(run["id"]).items():
                    into.record_minimized(run["id"], name, minimized)
                if run["finished"] and (before is None or before["finished"]):
                    into.finish_run(run["id"])
                merged[run["id"]] = merged.get(run["id"], 0) + len(results)
    return merged


def _merge_spilled(into: ResultStore, path: Path) -> dict[str, int]:
    """Results a run could not write to its store (``{"run": ..., "result": ...}`` per line)."""
    merged: dict[str, int] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            run, result = item["run"], item["result"]
        except (ValueError, KeyError, TypeError):
            raise StoreError(f"{path}:{number}: not a line of unsaved results") from None
        if into.run(run["id"]) is None:
            into.create_run(run["id"], run["suite"], run["target"], run.get("metadata") or {})
        into.record(run["id"], Result.from_dict(result))
        merged[run["id"]] = merged.get(run["id"], 0) + 1
    return merged
