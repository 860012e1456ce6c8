"""Files of the kernel caches: atomic writes, content digests, and the notice when a damaged one is rebuilt.

Every artifact the compiler loads from its cache root is checked before use against what was
recorded when it was written: a C++ library and the precompiled prelude against a digest file
(``cpp_build``), a Triton kernel module against the source it must hold (``runtime.load_module``;
its file name carries that source's digest). A file that does not match (truncated by a full
disk, corrupted, half-written by a killed process) is rebuilt, with one line on stderr, instead
of failing every later compile until someone deletes the cache by hand. Files are replaced
atomically (written to a temporary file in the same directory, then ``os.replace``), so a
concurrent reader sees the old file or the new one, never part of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def file_digest(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def matches_digest(record: Path, files: dict[str, Path]) -> bool:
    """Whether every file of ``files`` (label -> path) exists with the digest ``record`` holds for its label."""
    try:
        recorded = json.loads(record.read_text())
        return isinstance(recorded, dict) and all(recorded.get(label) == file_digest(path)
                                                  for label, path in files.items())
    except (OSError, ValueError):
        return False


def record_digest(record: Path, files: dict[str, Path]) -> None:
    """Write ``record``: the digest of each file of ``files`` under its label."""
    write_atomic(record, json.dumps({label: file_digest(path) for label, path in files.items()}).encode())


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def report_rebuilt(what: str, path: Path) -> None:
    """The one line a rebuilt cache file gets on stderr (a damaged cache is worth knowing about, not
    worth failing a compile for)."""
    print(f"crucible: rebuilt {what} {path}: it did not match the digest recorded when it was written "
          f"(truncated or corrupted)", file=sys.stderr, flush=True)
