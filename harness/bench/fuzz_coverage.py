"""Fuzz coverage: what recording it costs, and what a growing seed corpus reaches that plain generation does not.

    python -m harness.bench.fuzz_coverage [--targets crucible-cpp,crucible-interpret] [--examples 60] [--rounds 2]
        [--samples 1,3]
    python -m harness.bench.fuzz_coverage --guided --generations 4 [--examples 60] [--targets crucible-cpp]
    python -m harness.bench.fuzz_coverage --union cov.sqlite     # every --coverage run of a file, together

Overhead (default): per target and round, the same campaign (same seed and example count, so the
same graphs) with coverage off and on (tracing every graph, and 1 in N: ``--samples``), in an order
that rotates per round, each on its own isolated worker with a fresh kernel cache. The worker is
started and warmed by one graph before the clock starts (its torch import is no graph's cost). It
prints graphs/s per mode (one worker: per core), the slowdown against off and the lines covered.

``--guided``: G campaigns of N graphs each (seeds 0..G-1) run twice with coverage, as plain
generation and with a seed corpus that each campaign grows for the next (campaign k reads what
campaigns 0..k-1 added). It prints the union of lines each way and the lines only one way reached.
Same seeds, same budgets, fresh kernel caches. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from harness.fuzz.campaign import CampaignRequest, CampaignSummary, run_campaign
from harness.fuzz.coverage import CoverageMap, file_coverage, package_roots
from harness.fuzz.graph import FuzzGraph, Node
from harness.fuzz.seeds import Seed, SeedCorpus, new_seeds
from harness.fuzz.tasks import GraphTask
from harness.fuzz.workers import make_runner


def _warm_graph() -> FuzzGraph:
    x = {"shape": [4, 5], "dtype": "float32", "layout": "contiguous", "profile": "normal", "seed": 0}
    return FuzzGraph([x], [Node("aten.exp.default", "aten.exp.default(x0)", ["v0"], [([4, 5], "float32")])], ["v0"])


def _campaign(request: CampaignRequest, cache: Path) -> CampaignSummary:
    """One campaign on a fresh worker whose kernel cache is ``cache``; the worker warmed first."""
    os.environ["CRUCIBLE_CACHE_DIR"] = str(cache)  # the worker inherits it when it starts
    runner = make_runner(request.target, None, False, 120.0, None)
    try:
        runner.run(GraphTask.of(_warm_graph(), coverage=request.coverage, session="warm"))
        return run_campaign(request, runner)
    finally:
        runner.close()


def bench_overhead(args: argparse.Namespace, roots: tuple[str, ...]) -> None:
    samples = [int(n) for n in args.samples.split(",")]
    modes = ["off"] + [f"1 in {n}" for n in samples]
    rows = []
    for target in args.targets.split(","):
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        lines: dict[str, int] = {}
        for round_ in range(args.rounds):
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:  # each round another order
                sample = 0 if mode == "off" else int(mode.split()[-1])
                request = CampaignRequest(target=target, examples=args.examples, seed=args.seed + round_,
                                          coverage=roots if sample else (), coverage_sample=sample or 1)
                with tempfile.TemporaryDirectory(prefix="crucible-bench-cov-") as tmp:
                    summary = _campaign(request, Path(tmp))
                rates[mode].append(summary.graphs / summary.elapsed_s)
                lines[mode] = max(lines.get(mode, 0), len(summary.coverage))
                print(f"{target} round {round_ + 1} coverage {mode}: {rates[mode][-1]:.2f} graphs/s, "
                      f"{summary.traced} traced", flush=True)
        for mode in modes:  # a round's campaigns run the same graphs: the slowdown is taken per round
            slowdown = statistics.median(off / rate for off, rate in zip(rates["off"], rates[mode]))
            rows.append([target, mode, args.examples, args.rounds, f"{statistics.median(rates[mode]):.2f}",
                         f"{slowdown:.2f}x", lines[mode] if mode != "off" else ""])
    print(tabulate(rows, headers=["target", "coverage", "graphs", "rounds", "graphs/s (median)",
                                  "slowdown vs off (median of rounds)", "lines covered"]))


def bench_guided(args: argparse.Namespace, roots: tuple[str, ...]) -> None:
    rows = []
    for target in args.targets.split(","):
        union = {"plain": CoverageMap(), "guided": CoverageMap()}
        corpus = SeedCorpus("bench")
        for mode in ("plain", "guided"):
            with tempfile.TemporaryDirectory(prefix="crucible-bench-cov-") as tmp:
                for k in range(args.generations):
                    request = CampaignRequest(target=target, examples=args.examples, seed=args.seed + k,
                                              coverage=roots, seed_corpus=corpus if mode == "guided" else None)
                    start = time.monotonic()
                    summary = _campaign(request, Path(tmp))
                    union[mode].merge(summary.coverage)
                    if mode == "guided":
                        for graph, lines, n in new_seeds(summary.seed_candidates, corpus):
                            corpus.seeds.append(Seed(graph, n))
                            corpus.lines.merge(CoverageMap.from_json(lines))
                    print(f"{target} {mode} campaign {k + 1}: {len(summary.coverage)} lines, union "
                          f"{len(union[mode])}, {time.monotonic() - start:.0f} s"
                          + (f", corpus {len(corpus.seeds)} seeds" if mode == "guided" else ""), flush=True)
        total = sum(r.total for r in file_coverage(CoverageMap(), roots))
        only = {m: sum(len(v - union[o].lines.get(f, set())) for f, v in union[m].lines.items())
                for m, o in (("plain", "guided"), ("guided", "plain"))}
        for mode in ("plain", "guided"):
            rows.append([target, mode, f"{args.generations} x {args.examples}", f"{len(union[mode])}/{total}",
                         only[mode], len(corpus.seeds) if mode == "guided" else ""])
    print(tabulate(rows, headers=["target", "generation", "campaigns x graphs", "lines covered", "lines only this way",
                                  "seeds"]))


def union(db: str, roots: tuple[str, ...]) -> None:
    """The coverage report of the union of every ``--coverage`` fuzz run stored in ``db``."""
    from harness.fuzz.coverage_report import render_coverage
    from harness.store import ResultStore

    covered = CoverageMap()
    with ResultStore(db, read_only=True) as store:
        for run in store.runs():
            lines = run["metadata"].get("fuzz", {}).get("coverage", {}).get("lines")
            if lines is not None:
                covered.merge(CoverageMap({f: set(v) for f, v in lines.items()}))
                fuzz = run["metadata"]["fuzz"]
                print(f"{run['id']}: {fuzz['graphs']} graphs, {fuzz['coverage']['covered']} lines")
    print("\n".join(render_coverage(covered, roots, crucible=True)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="crucible-cpp,crucible-interpret")
    parser.add_argument("--examples", type=int, default=60, help="graphs per campaign")
    parser.add_argument("--rounds", type=int, default=2, help="overhead: campaigns per target and mode")
    parser.add_argument("--samples", default="1,3", help="overhead: the --coverage-sample values to measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guided", action="store_true", help="plain generation against a growing seed corpus")
    parser.add_argument("--generations", type=int, default=4, help="--guided: campaigns in a row")
    parser.add_argument("--union", metavar="DB", help="print the coverage of every --coverage fuzz run in DB together")
    args = parser.parse_args(argv)
    roots = package_roots(["compiler"])
    if args.union:
        union(args.union, roots)
        return
    (bench_guided if args.guided else bench_overhead)(args, roots)


if __name__ == "__main__":
    main()
