"""``crucible report`` on a fuzz run: the findings section, or one finding's repro script."""

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Any

from harness.report import render_fuzz_findings
from harness.store import ResultStore


def _database(ref: str | None, default: str) -> str:
    # the same references harness.cli.load_run accepts: RUN_ID, FILE.sqlite, FILE.sqlite:RUN_ID
    if ref and ".sqlite:" in ref:
        return ref.partition(".sqlite:")[0] + ".sqlite"
    if ref and ref.endswith(".sqlite"):
        return ref
    return default


def print_fuzz_report(run: dict[str, Any], args: argparse.Namespace) -> int:
    with ResultStore(_database(args.run, args.db)) as store:
        findings = store.findings(run["id"])
    if args.repro:
        chosen = [f for f in findings if hashlib.sha1(f["signature"].encode()).hexdigest().startswith(args.repro)]
        if len(chosen) != 1:
            print(f"error: {'no' if not chosen else 'more than one'} finding of run {run['id']} has key "
                  f"{args.repro!r}; `crucible report {run['id']}` lists the keys", file=sys.stderr)
            return 2
        print(chosen[0]["repro"])
        return 0
    print(render_fuzz_findings(run, findings))
    return 0
