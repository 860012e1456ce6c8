"""Launch configs picked by timing, kept on disk so a later process skips the timing.

The runtime times every launch config a kernel offers on its first call (``KernelLauncher.tune``:
1 + 4 ms per config; a Llama-shaped decoder's templates offer 3-6 configs each). A kernel whose
renderer gives it a ``tuning_key`` (the template kernels: family, dtype, shape bucket, operand
layouts and a fingerprint of the candidate list) has its pick recorded here, under that key plus the
GPU's name and Triton's version, as the index of the chosen config. The fingerprint makes an index
mean the same config for everyone who reads it; a kernel in the same bucket with other exact sizes
(or other epilogues) reuses the pick, which is only ever a speed question: every candidate is correct.

One JSON file (``config.tuning_cache_path()``, default ``<cache root>/tuning/configs.json``):
``{"version": 1, "entries": {key: {"index": i, "config": "...", "us": t, "candidates": [[config, us], ...]}}}``
(``candidates``: every config's time, None where it did not build; what pruning the candidate lists
is decided from). A store re-reads the
file and replaces it atomically (write a temporary file, ``os.replace``), so readers never see half
a file; two processes storing at once can lose one of the new entries (it is timed again later). A
file that is not such JSON is ignored with one warning and rewritten by the next store.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from pathlib import Path

from compiler import config

VERSION = 1
_LOCK = threading.Lock()
_loaded: dict[Path, dict[str, dict]] = {}  # path -> entries, read once per process
_warned: set[Path] = set()


def full_key(tuning_key: str, device_name: str, triton_version: str) -> str:
    return f"{device_name} | triton {triton_version} | {tuning_key}"


def _read(path: Path) -> dict[str, dict]:
    """The entries of ``path`` ({} when it is missing or corrupt; corrupt: warned once)."""
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as why:
        return _corrupt(path, f"unreadable ({why})")
    try:
        data = json.loads(text)
    except ValueError as why:
        return _corrupt(path, f"not JSON ({why})")
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("entries"), dict):
        return _corrupt(path, f"not a version-{VERSION} tuning cache")
    return {k: v for k, v in data["entries"].items() if isinstance(v, dict) and isinstance(v.get("index"), int)}


def _corrupt(path: Path, why: str) -> dict[str, dict]:
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"ignoring the tuning cache {path}: {why}; kernels are timed again and the file is "
                      f"rewritten (delete it, or set CRUCIBLE_TUNING_CACHE=0 to keep tuning per process)",
                      RuntimeWarning, stacklevel=3)
    return {}


def lookup(key: str, candidates: int) -> int | None:
    """The recorded pick for ``key`` (an index below ``candidates``), or None."""
    path = config.tuning_cache_path()
    if path is None:
        return None
    with _LOCK:
        if path not in _loaded:
            _loaded[path] = _read(path)
        entry = _loaded[path].get(key)
    if entry is None or not 0 <= entry["index"] < candidates:
        return None
    return entry["index"]


def store(key: str, index: int, description: str, microseconds: float,
          candidates: list[tuple[str, float | None]] | None = None, work: tuple[int, ...] = ()) -> None:
    """Record ``index`` as the pick for ``key`` (merged into the file as it is now on disk), with every
    candidate's (config, microseconds or None) and the kernel's iteration space (``work``:
    ``RenderedKernel.work``) when given: ``harness.bench.tuning_report`` reads them."""
    path = config.tuning_cache_path()
    if path is None:
        return
    entry: dict = {"index": index, "config": description, "us": round(microseconds, 2)}
    if candidates is not None:
        entry["candidates"] = [[c, None if us is None else round(us, 2)] for c, us in candidates]
    if work:
        entry["work"] = list(work)
    with _LOCK:
        entries = _read(path)
        entries[key] = entry
        _loaded[path] = entries
        try:
            _write(path, {"version": VERSION, "entries": entries})
        except OSError as why:  # a read-only cache costs a re-tune next time, never the compile
            warnings.warn(f"could not write the tuning cache {path}: {why}", RuntimeWarning, stacklevel=2)


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def forget_loaded() -> None:
    """Drop what this process read (tests: the next lookup reads the file again)."""
    with _LOCK:
        _loaded.clear()
        _warned.clear()
