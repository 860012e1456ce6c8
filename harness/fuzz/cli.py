"""``crucible fuzz`` and ``crucible fuzz-decomps``: arguments, progress line, summary, store."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tabulate import tabulate

from harness.runner import Progress
from harness.store import DEFAULT_DB, ResultStore


def add_fuzz_parser(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="differential fuzzing with hypothesis-generated ATen graphs (exit 1 on findings)")
    p.add_argument("--target", help="crucible-cpp, crucible-interpret, crucible-triton, eager or a Dynamo backend")
    p.add_argument("--device", choices=("cpu", "cuda"), help="device for Dynamo-backend targets")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="time box for generating graphs (default 60)")
    budget.add_argument("--examples", type=int, help="run exactly N generated graphs")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="N campaigns side by side, one isolated worker each, seeds derived from --seed "
                        "(--examples is split between them; default 1)")
    p.add_argument("--ops", help="only ops matching these globs, comma-separated (sum, aten.var*, *pool*)")
    p.add_argument("--max-nodes", type=int, default=6, help="ops per graph, at most (default 6)")
    p.add_argument("--shrink-seconds", type=float, default=120.0, help="time box per shrink (default 120)")
    p.add_argument("--max-findings", type=int, help="stop after N new findings (default: run the whole budget)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per graph before it is a hang (default 120)")
    p.add_argument("--capture", choices=("fx", "dynamo"), default="fx",
                   help="hand graphs to the compiler directly (fx, default) or through torch.compile (dynamo)")
    p.add_argument("--in-process", action="store_true",
                   help="run graphs in this process (no isolation: a crash ends the campaign)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE in the worker first (a plugin backend, or a planted bug in tests)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"SQLite results file (default {DEFAULT_DB})")
    p.add_argument("--run-id", help="name the run (default fuzz-<target>-<seed>-<time>)")
    p.add_argument("--list-ops", action="store_true", help="print the op table and exit")

    p = sub.add_parser("fuzz-decomps", help="check decomposition rules against the ops they replace (exit 1 on findings)")
    p.add_argument("--rule", action="append", metavar="NAME",
                   help="only this rule (repeatable; a RULES name such as torch:aten::_softmax, or core:<op>, globs ok)")
    p.add_argument("--seconds", type=float, help="time box for the whole check (default: no limit)")
    p.add_argument("--examples", type=int, default=30, help="generated inputs per rule (default 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="check rules on N isolated workers (default 1: in this process)")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run-id")
    p.add_argument("--list", action="store_true", help="list the rules checked and exit")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (tests use it to plant a broken rule)")


@dataclass
class FuzzProgress(Progress):
    """The run's progress line, in fuzz terms: graphs/s, findings, statuses."""

    summary: Any = None

    def update(self, summary: Any) -> None:
        self.summary = summary
        self._draw()

    def _line(self) -> str:
        s = self.summary
        if s is None:
            return "starting the worker..."
        elapsed = time.monotonic() - self.started
        new = len(s.new_findings)
        statuses = " ".join(f"{k}={v}" for k, v in sorted(s.statuses.items()))
        return (f"{s.graphs} graphs ({s.graphs / max(elapsed, 1e-9):.2f}/s) {elapsed:.0f}s | findings {new}"
                f" new, {len(s.findings) - new} known | {statuses}")


def _check_target(target: str, device: str | None) -> str | None:
    """A one-line problem with the target, or None."""
    import torch

    from harness.targets import parse_target, target_options_problem

    problem = target_options_problem(target, device)
    if problem:
        return problem
    t = parse_target(target, device)
    if t.device == "cuda" and not torch.cuda.is_available():
        return f"target {target} needs a CUDA GPU and none is available"
    if t.backend in (None, "crucible"):
        return None
    import torch._dynamo

    if t.backend not in torch._dynamo.list_backends(exclude_tags=()):
        return (f"unknown target {target!r}: use crucible-cpp, crucible-interpret, crucible-triton, eager "
                f"or a registered Dynamo backend ({', '.join(torch._dynamo.list_backends())})")
    return None


def cmd_fuzz(args: argparse.Namespace) -> int:
    from harness.fuzz.campaign import CampaignRequest
    from harness.fuzz.specs import OP_SPECS

    if args.list_ops:
        rows = [[s.name, s.family] for s in OP_SPECS.values()]
        print(tabulate(rows, headers=["op", "family"]))
        print(f"{len(rows)} op specs")
        return 0
    from harness.fuzz.builder import select_specs
    from harness.targets import default_target

    target = args.target or default_target()
    problem = _check_target(target, args.device)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.jobs > 1 and args.in_process:
        print("error: --in-process runs one campaign in this process; drop it or -j", file=sys.stderr)
        return 2
    for name, value in (("--seconds", args.seconds), ("--examples", args.examples), ("--max-nodes", args.max_nodes),
                        ("-j", args.jobs)):
        if value is not None and value <= 0:
            print(f"error: {name} must be positive, got {value:g}", file=sys.stderr)
            return 2
    select_specs(args.ops)  # a glob matching nothing is a usage error (ValueError -> exit 2)
    seconds = args.seconds if args.seconds is not None or args.examples is not None else 60.0
    request = CampaignRequest(target=target, device=args.device, seconds=seconds, examples=args.examples,
                              seed=args.seed, ops=args.ops, max_nodes=args.max_nodes,
                              shrink_seconds=args.shrink_seconds, timeout_s=args.timeout,
                              in_process=args.in_process, max_findings=args.max_findings, capture=args.capture, imports=tuple(args.imports))
    run_id = args.run_id or f"fuzz-{target}-s{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    return _run_and_store(request, run_id, args.db, args.jobs)


def _run_and_store(request: Any, run_id: str, db: str, jobs: int = 1) -> int:
    from harness.fuzz.campaign import run_campaign
    from harness.fuzz.parallel import run_parallel_campaign
    from harness.fuzz.repro import write_repro
    from harness.fuzz.workers import make_runner
    from harness.runner import run_metadata

    store = ResultStore(db)
    metadata = run_metadata("fuzz", request.target, request.seed, None, {})
    metadata["fuzz"] = {"ops": request.ops, "examples": request.examples, "seconds": request.seconds,
                        "capture": request.capture, "max_nodes": request.max_nodes, "jobs": jobs}
    store.create_run(run_id, "fuzz", request.target, metadata)
    how = (f"crucible fuzz --target {request.target} --seed {request.seed}"
           + (f" --ops {request.ops}" if request.ops else ""))

    def save(finding: Any) -> None:
        store.record_finding(run_id, {
            "signature": finding.signature, "kind": "graph", "target": request.target, "status": finding.status,
            "op": finding.op, "error": finding.error, "error_detail": finding.record.get("error_detail"),
            "known": finding.known, "hits": finding.hits,
            "nodes": len(finding.graph.nodes), "graph": finding.graph.to_json(),
            "repro": write_repro(finding.graph, request.target, request.device, finding.record, how)})

    progress = FuzzProgress(total=0)
    new_runner = lambda: make_runner(request.target, request.device, request.in_process,  # noqa: E731
                                     request.timeout_s, None)
    where = ("this process" if request.in_process else "an isolated worker" if jobs == 1
             else f"{jobs} isolated workers")
    print(f"fuzzing {request.target} (seed {request.seed}) in {where}", file=sys.stderr)
    runner = new_runner() if jobs == 1 else None
    try:
        if runner is not None:
            summary = run_campaign(request, runner, progress.update, save)
        else:
            summary = run_parallel_campaign(request, jobs, new_runner, progress.update, save)
    except KeyboardInterrupt:
        progress.close()
        print("\ninterrupted: findings so far are stored", file=sys.stderr)
        return 130
    finally:
        if runner is not None:
            runner.close()
        progress.close()
    for finding in summary.findings.values():  # hit counts and shrunk graphs changed since first saved
        save(finding)
    metadata["fuzz"].update(fuzz_summary(summary))
    store.update_metadata(run_id, metadata)
    store.finish_run(run_id)
    store.close()
    print(render_summary(summary))
    print(f"results: {db} (run {run_id}); repros: crucible report {run_id} --db {db} --repro KEY",
          file=sys.stderr)
    return 1 if summary.new_findings else 0


def fuzz_summary(summary: Any) -> dict[str, Any]:
    return {"graphs": summary.graphs, "executions": summary.executions, "validity": summary.validity,
            "ops_covered": len(summary.ops_covered), "ops_selected": summary.ops_selected,
            "elapsed_s": summary.elapsed_s, "graphs_per_s": summary.graphs / max(summary.elapsed_s, 1e-9),
            "statuses": dict(summary.statuses), "spec_rejections": summary.spec_rejections,
            "invalid": dict(summary.invalid.most_common(20)), "allowances": dict(summary.allowances)}


def render_summary(summary: Any) -> str:
    s = fuzz_summary(summary)
    lines = [f"ops covered {s['ops_covered']}/{s['ops_selected']}, graphs run {s['graphs']} "
             f"({s['executions']} runs with shrinking), validity {100 * s['validity']:.1f}%, "
             f"{s['graphs_per_s']:.2f} graphs/s over {s['elapsed_s']:.0f}s",
             "statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items()))]
    if s["allowances"]:  # passes the strict RMSE check alone would have failed, or could not judge
        lines.append("passed by an oracle allowance: " + ", ".join(f"{k} {v}" for k, v in sorted(s["allowances"].items())))
    if s["invalid"]:  # the op specs' gaps: graphs that are not valid by construction
        lines.append("invalid graphs (eager failed), by op and error:\n" +
                     "\n".join(f"  {n:4d}  {what}" for what, n in list(s["invalid"].items())[:8]))
    if summary.findings:
        rows = [[f.key, f.signature, f.hits, len(f.graph.nodes), f.known or "NEW"]
                for f in sorted(summary.findings.values(), key=lambda f: (f.known is not None, f.signature))]
        lines.append("findings by signature\n" + tabulate(rows, headers=["key", "signature", "hits", "nodes", "known"]))
    else:
        lines.append("no findings")
    return "\n".join(lines)


def cmd_fuzz_decomps(args: argparse.Namespace) -> int:
    from harness.fuzz.decomp_campaign import run_decomp_fuzz

    return run_decomp_fuzz(args)
