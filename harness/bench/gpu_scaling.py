"""How a suite's wall time scales with the GPUs of one host: ``python -m harness.bench.gpu_scaling``.

Runs the same entries twice with ``crucible run``: on one GPU (``CUDA_VISIBLE_DEVICES`` = the first
device, ``-j`` = workers per GPU) and on every GPU (``-j`` = GPUs x workers per GPU, the workers
pinned round-robin), then prints both wall times and their ratio, and checks that both runs gave
the same statuses (a speed-up that changes results is a bug). It asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def _run(args: argparse.Namespace, gpus: list[str], jobs: int, db: Path) -> tuple[float, Counter]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus))
    out = db.with_suffix(".json")
    cmd = [sys.executable, "-m", "harness", "run", "--suite", args.suite, "--target", args.target,
           "--device", "cuda", "-j", str(jobs), "--db", str(db), "--json", str(out), "--no-report",
           "--timeout", str(args.timeout)]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if args.mode != "inference":
        cmd += ["--mode", args.mode]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"error: `{' '.join(cmd)}` exited with {proc.returncode}")
    doc = json.loads(out.read_text())
    return wall, Counter(e["status"] for e in doc["entries"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.gpu_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="nightly-gpu", help="suite to run (default nightly-gpu)")
    parser.add_argument("--target", default="crucible-triton", help="target (default crucible-triton)")
    parser.add_argument("--limit", type=int, default=64, help="entries (default 64; 0 = the whole suite)")
    parser.add_argument("--per-gpu", type=int, default=1, help="workers per GPU (default 1)")
    parser.add_argument("--mode", choices=("inference", "train"), default="inference")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per entry (default 600)")
    args = parser.parse_args(argv)
    if args.per_gpu < 1:
        parser.error("--per-gpu must be at least 1")
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; run this on a host with several GPUs", file=sys.stderr)
        return 2
    from harness.pool import visible_gpus

    gpus = list(visible_gpus())
    if len(gpus) < 2:
        print(f"note: only {len(gpus)} GPU visible; the ratio will be about 1", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="crucible-gpu-scaling-") as tmp:
        one_s, one = _run(args, gpus[:1], args.per_gpu, Path(tmp) / "one.sqlite")
        all_s, every = _run(args, gpus, args.per_gpu * len(gpus), Path(tmp) / "all.sqlite")
    print(f"{'GPUs':>5} {'workers':>8} {'wall s':>9}  statuses")
    print(f"{1:>5} {args.per_gpu:>8} {one_s:>9.1f}  {dict(one)}")
    print(f"{len(gpus):>5} {args.per_gpu * len(gpus):>8} {all_s:>9.1f}  {dict(every)}")
    print(f"speed-up {one_s / all_s:.2f}x on {len(gpus)} GPUs (ideal {len(gpus)}x)")
    if one != every:
        print("warning: the two runs' statuses differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
