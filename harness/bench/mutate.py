"""Benchmark: what one mutant of ``crucible mutate`` costs besides its fuzz budget, side by side.

    python -m harness.bench.mutate [--target crucible-cpp] [--graphs 150] [--rounds 2]

Runs the same campaign (a fixed number of graphs, one seed) as ``crucible mutate`` runs a mutant: a
child process on a fresh copy of ``compiler/`` (``harness.mutate.tasks.run_child``), one thread.
Each round runs it with an empty kernel cache (``--cache cold``), with a private copy of that
cache (``--cache warm``) and warm with the baseline's line tracing on, and prints per variant the
seconds copying the sources (and the cache), the child's imports, the campaign, graphs/s, and the
campaign's time as a ratio of the warm one. It asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from tabulate import tabulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="crucible-cpp", help="fuzz target (default crucible-cpp)")
    parser.add_argument("--graphs", type=int, default=150, help="graphs per campaign (default 150)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three variants (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--package", default="compiler", help="the package copied (default compiler)")
    args = parser.parse_args(argv)

    from harness.mutate.tasks import package_location, run_child

    location, base = package_location(args.package)
    settings = {"campaign": "fuzz", "target": args.target, "seed": args.seed, "seconds": None,
                "graphs": args.graphs, "threads": 1, "stop_early": False}
    rows: dict[str, list] = {"cold cache": [], "warm cache": [], "warm cache, traced": []}
    with tempfile.TemporaryDirectory(prefix="crucible-bench-mutate-") as scratch:
        for index in range(args.rounds):
            cache = str(Path(scratch) / f"cache-{index}")
            runs = {"cold cache": run_child(settings, args.package, location, base, None, 3600, scratch,
                                            keep_cache=cache)}
            runs["warm cache"] = run_child(settings, args.package, location, base, None, 3600, scratch,
                                           seed_cache=cache)
            runs["warm cache, traced"] = run_child(dict(settings, trace=True), args.package, location, base, None,
                                                   3600, scratch, seed_cache=cache)
            for name, run in runs.items():
                if run.status != "ok":
                    print(f"{name}: the campaign did not finish ({run.status}):\n{run.log}")
                    return 1
                rows[name].append(run)
    warm = statistics.median(r.campaign_s for r in rows["warm cache"])
    table = [[name, f"{statistics.median(r.copy_s for r in runs):.2f}", f"{statistics.median(r.import_s for r in runs):.1f}",
              f"{statistics.median(r.campaign_s for r in runs):.1f}",
              f"{args.graphs / statistics.median(r.campaign_s for r in runs):.2f}",
              f"{statistics.median(r.campaign_s for r in runs) / warm:.2f}"] for name, runs in rows.items()]
    print(f"{args.target}, {args.graphs} graphs, seed {args.seed}, one thread, medians of {args.rounds} round(s)")
    print(tabulate(table, headers=["variant", "copy s", "imports s", "campaign s", "graphs/s", "vs warm"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
