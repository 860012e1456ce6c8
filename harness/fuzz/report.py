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
    key = getattr(args, "traceback", None) or args.repro
    if key:
        chosen = [f for f in findings if hashlib.sha1(f["signature"].encode()).hexdigest().startswith(key)]
        if len(chosen) != 1:
            print(f"error: {'no' if not chosen else 'more than one'} finding of run {run['id']} has key "
                  f"{key!r}; `crucible report {run['id']}` lists the keys", file=sys.stderr)
            return 2
        if args.repro:
            print(chosen[0]["repro"])
            return 0
        detail = chosen[0].get("error_detail")
        if not detail:
            print(f"error: finding {key} of run {run['id']} has no traceback ({chosen[0]['status']}: "
                  "accuracy findings raise nothing, and runs recorded before tracebacks were stored have none); "
                  f"`crucible report {run['id']} --repro {key}` reproduces it", file=sys.stderr)
            return 2
        print(detail)
        return 0
    print(render_fuzz_findings(run, findings))
    return 0
