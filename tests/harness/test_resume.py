"""A killed run resumes: finished entries are kept and not run again, the rest completes."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

SLOW = """
    import time
    from pathlib import Path

    import torch
    from corpus.entry import Built, Entry

    LOG = Path(__file__).with_name("builds.log")


    def _factory(name):
        def build(scale):
            with LOG.open("a") as f:  # one line per build: proves what ran twice
                f.write(name + "\\n")
            time.sleep(0.5)
            return Built(lambda x: x * 2, (torch.ones(3),))
        return build


    def entries():
        return [Entry(name=f"slow/e{i}", source="slow", family="f", tier="smoke", factory=_factory(f"e{i}"))
                for i in range(6)]
"""


def _finished(db: Path) -> set[str]:
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(db) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM results")}
    except sqlite3.OperationalError:  # schema not created yet
        return set()


def test_killed_run_resumes(tmp_path: Path, make_corpus, spawn_cli, cli, load_json) -> None:
    corpus_dir = make_corpus(tmp_path / "slow", {"slow.py": SLOW})
    db = tmp_path / "r.sqlite"
    args = ("run", "--corpus", str(corpus_dir), "--suite", "slow", "--target", "eager", "--db", str(db))
    proc = spawn_cli(*args)
    deadline = time.monotonic() + 120
    while len(_finished(db)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, as a crash or Ctrl-\ would
    proc.wait()
    before = _finished(db)
    assert 2 <= len(before) < 6, "the run should have been killed half-way"

    out = tmp_path / "resumed.json"
    resumed = cli(*args, "--resume", "--json", str(out))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming run" in resumed.stderr
    doc = load_json(out)
    assert sorted(doc["by_name"]) == [f"slow/e{i}" for i in range(6)]
    assert all(e["status"] == "pass" for e in doc["entries"])
    assert doc["run"]["finished"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    builds = (corpus_dir / "builds.log").read_text().split()
    for name in before:  # entries finished before the kill were not built again
        assert builds.count(name.split("/")[1]) == 1
