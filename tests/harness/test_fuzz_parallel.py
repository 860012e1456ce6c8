"""``crucible fuzz -j N``: per-campaign seeds, the examples split, findings merged across workers."""

from __future__ import annotations

import threading

from harness.fuzz.campaign import CampaignRequest, run_campaign
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.parallel import campaign_seed, run_parallel_campaign, split_examples
from harness.fuzz.tasks import GraphTask
from harness.result import Result
from harness.status import Status

OPS = "sign,add.Tensor,mul.Tensor,exp"
PASSING_OPS = "add.Tensor,mul.Tensor,exp"


class _SignRunner:
    """Wrong on every graph using aten.sign (one signature); records the graphs it ran."""

    def __init__(self, seen: list) -> None:
        self.seen, self.closed = seen, False

    def run(self, task: GraphTask) -> Result:
        self.seen.append(task.name)
        if "aten.sign.default" in FuzzGraph.from_json(task.graph).ops:
            return Result(name=task.name, target="fake", status=Status.FAIL_ACCURACY, op="aten.sign.default",
                          error="v0: NaN positions differ from eager")
        return Result(name=task.name, target="fake", status=Status.PASS)

    def close(self) -> None:
        self.closed = True


def _run(jobs: int, examples: int, seed: int = 3, ops: str = OPS) -> tuple:
    runners: list[_SignRunner] = []
    lock = threading.Lock()

    def make() -> _SignRunner:
        with lock:
            runners.append(_SignRunner([]))
            return runners[-1]

    found = []
    request = CampaignRequest(target="fake", examples=examples, seed=seed, ops=ops, shrink_seconds=20)
    summary = run_parallel_campaign(request, jobs, make, on_finding=found.append)
    return summary, runners, found


def test_seeds_and_example_split() -> None:
    assert campaign_seed(7, 0) == 7  # -j 1 is the serial campaign
    seeds = {campaign_seed(7, k) for k in range(8)} | {campaign_seed(8, k) for k in range(1, 8)}
    assert len(seeds) == 15
    assert split_examples(10, 3) == [4, 3, 3] and split_examples(None, 2) == [None, None]


def test_parallel_campaigns_merge_findings_once_with_all_hits() -> None:
    """Three campaigns all meet the sign bug: one finding, shrunk to the op, hits of every campaign."""
    summary, runners, found = _run(jobs=3, examples=30)
    assert len(runners) == 3 and all(r.closed for r in runners)
    assert summary.graphs == 30 and summary.statuses[Status.PASS] + summary.statuses[Status.FAIL_ACCURACY] == 30
    (finding,) = summary.findings.values()
    assert finding.graph.ops == ["aten.sign.default"]
    assert finding.hits == summary.statuses[Status.FAIL_ACCURACY] >= 3  # each failing graph counted once
    assert [f.signature for f in found] == [finding.signature]  # reported to the caller once
    assert len(summary.new_findings) == 1


def test_parallel_campaign_is_deterministic_per_seed_and_one_job_is_serial() -> None:
    def graphs_per_campaign(seed: int) -> list:
        _, runners, _ = _run(jobs=2, examples=8, seed=seed, ops=PASSING_OPS)
        return sorted(tuple(r.seen) for r in runners)

    assert graphs_per_campaign(3) == graphs_per_campaign(3)
    assert graphs_per_campaign(3) != graphs_per_campaign(4)
    serial: list = []
    run_campaign(CampaignRequest(target="fake", examples=6, seed=5, ops=PASSING_OPS, shrink_seconds=20),
                 _SignRunner(serial))
    _, (runner,), _ = _run(jobs=1, examples=6, seed=5, ops=PASSING_OPS)
    assert runner.seen == serial


def test_max_findings_stops_every_campaign() -> None:
    runners: list = []
    request = CampaignRequest(target="fake", seconds=120, seed=1, ops="sign", max_findings=1, shrink_seconds=5)
    summary = run_parallel_campaign(request, 2, lambda: runners.append(_SignRunner([])) or runners[-1])
    assert len(summary.new_findings) == 1 and summary.elapsed_s < 60


def test_each_campaigns_worker_gets_its_share_of_the_cores() -> None:
    """``-j N``: each campaign's worker runs torch on cores / N threads (a worker each on all cores
    oversubscribed them: -j 2 ran at 10.5 graphs/s on 2 cores, 24.5 with one thread each)."""
    from harness.fuzz.workers import make_runner

    runner = make_runner("crucible-cpp", None, False, 60.0, None, campaigns=2)
    assert runner._executor.config.jobs == 2
    runner.close()
