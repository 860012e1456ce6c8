"""Fixtures for harness tests: the CLI in a subprocess, and external corpora in tmp dirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    # The tests must not depend on ``pip install -e .``: run the package from the checkout.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def run_cli(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def cli(tmp_path: Path):
    def call(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return run_cli(list(args), tmp_path, timeout)

    return call


def write_corpus(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (directory / name).write_text(textwrap.dedent(source))
    return directory


def load_json(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc["by_name"] = {e["name"]: e for e in doc["entries"]}
    return doc


@pytest.fixture
def make_corpus():
    """``make_corpus(dir, {"file.py": source})`` writes an external corpus directory."""
    return write_corpus


@pytest.fixture(name="load_json")
def load_json_fixture():
    return load_json


@pytest.fixture
def spawn_cli(tmp_path: Path):
    """Start the CLI without waiting, in its own session (so the test can kill the whole run)."""

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=cli_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    return start
