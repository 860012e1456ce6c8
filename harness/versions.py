"""What results are made with: the project's commit and sources, torch, triton, Python.

A run records these in its metadata. A cluster worker (``harness.cluster``) reports its own when it
joins, and the submitter refuses a worker whose build differs from its own (or labels its results),
so results of mixed versions never merge silently. The build is compared by the digest of the
project's sources, not by the commit alone: a worker installed from a wheel has no git checkout,
and two dirty trees at one commit can hold different code.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("compiler", "corpus", "harness", "simulator")
_SOURCE_SUFFIXES = (".py", ".h", ".json")


def git_commit() -> str | None:
    """HEAD's commit, with ``-dirty`` when tracked files differ from it (results then came from
    code no commit holds)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=False)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    if not commit:
        return None
    return f"{commit}-dirty" if changed.returncode == 0 and changed.stdout.strip() else commit


def triton_version() -> str | None:
    try:
        import triton
    except Exception:  # noqa: BLE001 -- triton is optional off Linux
        return None
    return triton.__version__


def installed_versions() -> str:
    """"torch X, triton Y": what results were made with (expected-results files record it)."""
    import torch

    return f"torch {torch.__version__}, triton {triton_version() or 'none'}"


def source_digest() -> str:
    """A digest of the project's sources (paths and contents of its packages' code and data files)."""
    digest = hashlib.sha256()
    for package in _PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix in _SOURCE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Build:
    """The versions one process runs with; ``host`` and ``pid`` say which process it is."""

    commit: str | None
    source: str
    torch: str
    triton: str | None
    python: str
    host: str = ""
    pid: int = 0

    def label(self) -> str:
        """"abc123def456 (sources 1a2b...), torch X, triton Y": stored with each result of a cluster run."""
        commit = (self.commit or "no commit")[:12] + ("-dirty" if (self.commit or "").endswith("-dirty") else "")
        return (f"{commit} (sources {self.source[:8]}), torch {self.torch}, "
                f"triton {self.triton or 'none'}")

    def differences(self, other: Build) -> list[str]:
        """What makes ``other``'s results incomparable with this build's, in words ([] when nothing)."""
        out = []
        if self.source != other.source:
            out.append(f"project sources {other.source[:8]} (commit {(other.commit or 'none')[:12]}) vs "
                       f"{self.source[:8]} (commit {(self.commit or 'none')[:12]})")
        for name in ("torch", "triton"):
            if getattr(self, name) != getattr(other, name):
                out.append(f"{name} {getattr(other, name)} vs {getattr(self, name)}")
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def this_build() -> Build:
    """This process's build (computed once: the digest reads every source file). torch and triton
    are named by their installed distributions, so a cluster worker answers without importing them."""
    return Build(commit=git_commit(), source=source_digest(), torch=_distribution_version("torch") or "none",
                 triton=_distribution_version("triton"), python=platform.python_version(),
                 host=socket.gethostname(), pid=os.getpid())
