"""``crucible fuzz -j N``: N campaigns side by side, one isolated worker each, one merged result.

Campaign ``k`` is today's campaign (``harness.fuzz.campaign.run_campaign``) with its own seed
``campaign_seed(seed, k)`` (campaign 0 keeps ``seed``, so ``-j 1`` is the serial campaign) and
its own ``harness.fuzz.workers.WorkerRunner``: a pool worker fed ``harness.fuzz.tasks``. Hypothesis
drives each campaign from a thread of this process; the threads spend their time waiting on
their worker's pipe, so they cost the parent little. ``--examples`` is split between the
campaigns (each campaign's share is deterministic, so the merged run is too); a time box
applies to each. A signature one campaign has already found is not shrunk again by another:
it counts as a hit. Stored findings are replayed by campaign 0 before it generates
(``harness.fuzz.replay``); the others start generating at once. Findings are merged by signature (hits summed, the smallest graph kept);
progress and findings reach the caller from the calling thread only (SQLite stores are not
shared across threads). Coverage maps are merged (a union: each campaign's worker reports its own
lines), and candidate seeds are listed campaign by campaign (``harness.fuzz.seeds.new_seeds`` keeps
those that still add lines).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.fuzz.campaign import CampaignRequest, CampaignSummary, Finding, run_campaign
from harness.fuzz.coverage import CoverageMap
from harness.fuzz.replay import StoredFinding


def campaign_seed(seed: int, index: int) -> int:
    """The seed of campaign ``index`` of a ``-j`` run: ``seed`` itself for the first."""
    if index == 0:
        return seed
    return int(hashlib.sha1(f"crucible-fuzz:{seed}:{index}".encode()).hexdigest()[:8], 16)


def split_examples(examples: int | None, jobs: int) -> list[int | None]:
    if examples is None:
        return [None] * jobs
    return [examples // jobs + (1 if k < examples % jobs else 0) for k in range(jobs)]


def merge_summaries(summaries: list[CampaignSummary], elapsed_s: float) -> CampaignSummary:
    merged = CampaignSummary(ops_selected=max((s.ops_selected for s in summaries), default=0), elapsed_s=elapsed_s)
    for s in summaries:  # containers copied first (one C call each): a campaign may be mid-update
        statuses, findings, foreign = dict(s.statuses), dict(s.findings), dict(s.foreign_hits)
        merged.invalid.update(dict(s.invalid))
        merged.allowances.update(dict(s.allowances))
        merged.dynamic.update(dict(s.dynamic))
        merged.upstream.update(dict(s.upstream))
        merged.dynamic_reasons.update(dict(s.dynamic_reasons))
        merged.graphs += s.graphs
        merged.executions += s.executions
        merged.statuses.update(statuses)
        merged.ops_covered |= set(s.ops_covered)
        merged.spec_rejections += s.spec_rejections
        merged.replay = merged.replay or s.replay
        # coverage: sets copied one C call each, as the containers above
        merged.coverage.merge(CoverageMap({f: set(v) for f, v in list(s.coverage.lines.items())}))
        merged.seed_candidates += list(s.seed_candidates)
        merged.traced += s.traced
        for f in findings.values():
            _merge_finding(merged.findings, f)
        for sig, hits in foreign.items():
            merged.foreign_hits[sig] += hits
    for sig, hits in merged.foreign_hits.items():
        if sig in merged.findings:
            merged.findings[sig].hits += hits
    return merged


def _merge_finding(findings: dict[str, Finding], f: Finding) -> None:
    have = findings.get(f.signature)
    if have is None:
        findings[f.signature] = replace(f)
        return
    have.hits += f.hits
    if len(f.graph.nodes) < len(have.graph.nodes):
        have.graph, have.record = f.graph, f.record


def run_parallel_campaign(request: CampaignRequest, jobs: int, make_runner: Callable[[], Any],
                          on_progress: Callable[[CampaignSummary], None] = lambda s: None,
                          on_finding: Callable[[Finding], None] = lambda f: None,
                          replay: list[StoredFinding] | None = None) -> CampaignSummary:
    """Run ``jobs`` campaigns of ``request`` (``make_runner()`` gives each its worker); merged summary.
    ``replay``: the stored findings campaign 0 re-runs first (None: replay is off)."""
    import time

    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    start = time.monotonic()
    events: queue.Queue = queue.Queue()
    summaries: list[CampaignSummary | None] = [None] * jobs
    live: list[CampaignSummary] = [CampaignSummary() for _ in range(jobs)]
    found: dict[str, Finding] = {}  # every signature any campaign found, for the others to skip
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def new_count() -> int:
        with lock:
            return sum(1 for f in found.values() if f.known is None and f.replayed is None)

    def claim(finding: Finding) -> bool:
        """Record a campaign's finding; False when another campaign had it first."""
        with lock:
            first = finding.signature not in found
            found.setdefault(finding.signature, finding)
        if request.max_findings is not None and new_count() >= request.max_findings:
            stop.set()
        return first

    def work(k: int, examples: int | None) -> None:
        sub = replace(request, seed=campaign_seed(request.seed, k), examples=examples)
        runner = None
        try:
            runner = make_runner()
            summaries[k] = run_campaign(
                sub, runner, on_progress=lambda s: (live.__setitem__(k, s), events.put(("progress", k))),
                on_finding=lambda f: events.put(("finding", f)), claim=claim, should_stop=stop.is_set,
                found_elsewhere=lambda sig: sig in found, replay=replay if k == 0 else None)
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the calling thread
            errors.append(exc)
            stop.set()
        finally:
            if runner is not None:
                runner.close()
            events.put(("done", k))

    threads = [threading.Thread(target=work, args=(k, n), name=f"fuzz-campaign-{k}", daemon=True)
               for k, n in enumerate(split_examples(request.examples, jobs))]
    for t in threads:
        t.start()
    done = 0
    try:
        while done < jobs:
            kind, value = events.get()
            if kind == "done":
                done += 1
            elif kind == "finding":
                on_finding(value)
            on_progress(merge_summaries(list(live), time.monotonic() - start))
    except KeyboardInterrupt:
        stop.set()
        raise
    if errors:
        raise errors[0]
    return merge_summaries([s for s in summaries if s is not None], time.monotonic() - start)
