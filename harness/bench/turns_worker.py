"""A benchmark row's worker process: ``turns_worker.py LOCK BENCH ARGS...`` (``turns.worker_command``).

It takes its shared hold on the lock before anything imports torch, so that even a worker's
start-up never overlaps another row's timing, then runs ``harness.bench.<BENCH>`` (``models`` or ``training``) with the hold.
Run as a script, this file's folder leads ``sys.path``: ``turns`` is imported from there (it
imports nothing heavy), and only then is the project root put first for the benchmark itself.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    import turns  # the sibling module, without the compiler package (and so without torch)

    lock, bench, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    if bench not in turns.BENCHMARKS:
        raise SystemExit(f"turns_worker.py: unknown benchmark {bench!r} (expected one of {', '.join(turns.BENCHMARKS)})")
    hold = turns.Turns(lock)
    hold.compiling()
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # its modules would shadow top-level ones
    import importlib

    return importlib.import_module(f"harness.bench.{bench}").main(argv, turns=hold)


if __name__ == "__main__":
    raise SystemExit(main())
