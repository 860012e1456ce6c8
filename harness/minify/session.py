"""One minimization: check the case, reduce it, localize the failure, write and verify the repro."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.minify.case import GraphCase, node_count
from harness.minify.check import case_device, case_target, failed, same_failure, signature
from harness.minify.localize import Localization, first_divergent_node, localize
from harness.minify.plugins import plugin_names
from harness.minify.reduce import Budget, Reducer
from harness.minify.repro_script import write_repro
from harness.minify.worker import CheckWorker
from harness.result import Result
from harness.status import Phase, Status

# Node by node on the captured graph compiles it once with every node as an output; above this
# size that one check could cost more than the whole reduction, and the minimized graph's answer
# (always computed) names the same node.
NODE_BY_NODE_LIMIT = 3000


class MinifyError(RuntimeError):
    """The minimizer's own machinery failed on a case (never a result about the target)."""


@dataclass
class MinifyReport:
    origin: str
    target: str
    result: Result  # the check of the minimized case (of the original case until it is minimized)
    nodes_before: int
    nodes_after: int = 0
    checks: int = 0
    seconds: float = 0.0
    localization: Localization = field(default_factory=Localization)
    repro: Path | None = None
    repro_verified: bool | None = None  # the written script exited 1 (None: not run)
    budget_ran_out: bool = False
    ops: list[str] = field(default_factory=list)  # the minimized graph's ATen ops, in graph order
    captured_first_divergent: str | None = None  # node by node on the captured (unminimized) graph

    @property
    def signature(self) -> str:
        """The minimized failure's identity, what ``crucible report`` groups by: entries failing
        from one bug minimize to the same ops with the same failure."""
        return f"{signature(self.result)} @ {' '.join(self.ops) or '(empty graph)'}"

    def summary(self) -> str:
        loc = self.localization
        lines = [f"{self.origin} on {self.target}: {signature(self.result)}",
                 f"  {self.result.error[:300]}" if self.result.error else "",
                 f"nodes {self.nodes_before} -> {self.nodes_after} in {self.seconds:.1f}s, {self.checks} checks"
                 + (" (budget ran out: best so far)" if self.budget_ran_out else ""),
                 f"minimized signature: {self.signature}"]
        if loc.first_divergent:
            lines.append(f"first divergent node: {loc.first_divergent} [{loc.how}]")
        if self.captured_first_divergent:
            lines.append(f"first divergent node of the captured graph: {self.captured_first_divergent}")
        if loc.stage:
            lines.append(f"stage at fault: {loc.stage} ({loc.stage_evidence})")
        elif loc.stage_evidence:
            lines.append(f"stage: not localized ({loc.stage_evidence})")
        if self.repro is not None:
            verified = {True: "reproduces", False: "DOES NOT reproduce", None: "not verified"}[self.repro_verified]
            lines.append(f"repro: {self.repro} ({verified}); run it: {shlex.join(['python', str(self.repro)])}")
        return "\n".join(line for line in lines if line)

    def as_record(self) -> dict[str, Any]:
        loc = self.localization
        return {"status": self.result.status.value, "signature": self.signature, "repro": str(self.repro.resolve()) if self.repro else "",
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after, "checks": self.checks,
                "seconds": self.seconds, "first_divergent": loc.first_divergent, "stage": loc.stage,
                "stage_evidence": loc.stage_evidence, "message": self.result.error}


def _ops(gm: torch.fx.GraphModule) -> list[str]:
    import operator

    return list(dict.fromkeys(str(n.target) for n in gm.graph.nodes
                              if n.op == "call_function" and n.target is not operator.getitem))


def verify_repro(path: Path, timeout_s: float = 600) -> bool:
    """Run the written script as a user would: True when it exits 1 (the failure reproduces)."""
    try:
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 1


def minify_case(case: GraphCase, out_dir: str | Path, *, worker: CheckWorker | None = None,
                expected: Result | None = None, time_limit_s: float = 600.0, max_checks: int = 5000,
                decomposition_fails: bool = False, repro_name: str = "repro.py", verify: bool = True,
                progress: Callable[[str], None] = lambda s: None) -> MinifyReport:
    """Minimize ``case`` against its own failure (``expected``, else a fresh check of it)."""
    own = worker is None
    worker = worker or CheckWorker(device=case_target(case.target, case_device(case)).device, target=case.target)
    start = time.monotonic()
    try:
        original = expected or worker.check(case)
        if original.phase == Phase.HARNESS:
            raise MinifyError(f"{case.origin}: the minimizer's own check failed, not {case.target}: "
                              f"{original.error}")
        report = MinifyReport(case.origin, case.target, original, node_count(case.gm))
        if not failed(original):
            report.seconds = time.monotonic() - start
            return report
        checks_before = worker.checks
        reduction = Reducer(case, lambda c: same_failure(worker.check(c), original),
                            Budget(time_limit_s, max_checks), progress).run()
        final, result = reduction.case, worker.check(reduction.case)
        if not same_failure(result, original):  # a flaky predicate: keep what is known to fail
            final, result = case, original
        report.result, report.budget_ran_out = result, reduction.budget_ran_out
        report.localization = localize(final, result, worker.check, reduction.failing_prefix_end,
                                       decomposition_fails)
        report.nodes_after, report.ops = node_count(final.gm), _ops(final.gm)
        if result.status == Status.FAIL_ACCURACY and report.nodes_before <= NODE_BY_NODE_LIMIT:
            report.captured_first_divergent = first_divergent_node(case, worker.check)[0]
        report.checks = worker.checks - checks_before
        report.seconds = time.monotonic() - start
        report.repro = write_repro(final, result, Path(out_dir), report.summary(), plugin_names(), repro_name)
        if verify:
            report.repro_verified = verify_repro(report.repro)
        return report
    finally:
        if own:
            worker.close()


def minify_graph(gm: torch.fx.GraphModule, inputs: list[Any], target: str, out_dir: str | Path,
                 dtype: str = "float32", origin: str = "", **options: Any) -> MinifyReport:
    """Minimize any ATen FX graph that fails on ``target`` with these real ``inputs`` (a fuzz
    finding, a saved case); ``options`` as for ``minify_case``."""
    return minify_case(GraphCase(gm, list(inputs), target, dtype, origin or "graph"), out_dir, **options)
