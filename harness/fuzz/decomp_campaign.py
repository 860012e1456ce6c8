"""``crucible fuzz-decomps``, per rule: hypothesis draws the rule's cases, the engine runs each.

A rule is a task (``RuleTask``) for an isolated worker (``-j N``; ``--in-process`` for debugging):
one hypothesis run of ``--examples`` cases, seeded by the campaign seed and the rule's name, each
case a subject of the execution engine (``harness.fuzz.decomp_subject``); the first failing case is
shrunk within a time box. A rule that crashes or hangs its worker is that rule's finding. The
command itself (settings, store, summary) is ``harness.fuzz.cli.cmd_fuzz_decomps``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from harness.fuzz.builder import GraphLimits, graphs
from harness.fuzz.decomp_subject import Case, case_text, perturb, run_case
from harness.fuzz.decomps import Rule, decomposition_rules
from harness.fuzz.opinfo_calls import cached_opinfo_calls
from harness.fuzz.specs import OP_SPECS
from harness.pool import WorkerContext
from harness.result import Result
from harness.status import Status
from harness.targets import Target, parse_target

SHRINK_SECONDS = 20.0
RULE_TIMEOUT_S = 600.0  # one rule on a worker: 30 cases plus a 20 s shrink take 1-20 s here
# why a rule was not checked (its result is ``skipped`` with one of these errors)
UNCOVERED = "no inputs: an out=/in-place overload, or an op no OpInfo sample reaches"
INCOMPARABLE = "not comparable: the op's outputs are random or uninitialized"


@dataclass(frozen=True)
class RuleTask:
    """Check the decomposition rule ``rule`` (a ``decomposition_rules()`` name) on ``examples`` cases."""

    name: str
    rule: str
    examples: int = 30
    seed: int = 0
    imports: tuple[str, ...] = ()

    def __call__(self, worker: WorkerContext) -> Result:
        rule = decomposition_rules()[self.rule]
        calls = [] if str(rule.op) in OP_SPECS else cached_opinfo_calls({rule.op}).get(rule.op, [])
        return check_rule(rule, calls, self.examples, self.seed, worker.target, worker.progress)


class _RuleFailed(Exception):
    def __init__(self, result: Result, case: Case) -> None:
        super().__init__(result.error)
        self.result, self.case = result, case

    @property
    def status(self) -> Status:
        return self.result.status

    @property
    def reason(self) -> str:
        return self.result.error or ""


def _fail_case(result: Result, case: Case) -> None:
    raise _RuleFailed(result, case)  # one raise site: see campaign._fail_example


def _case_strategy(rule: Rule, spec: Any, captured: list) -> Any:
    if spec is not None:
        return graphs([spec], GraphLimits(max_nodes=1)).map(lambda g: ("graph", g))
    return st.tuples(st.just("call"), st.integers(0, len(captured) - 1),
                     st.sampled_from([None, "special", "normal", "unit"]), st.integers(0, 2**16))


def fuzz_rule(rule: Rule, spec: Any, captured: list, examples: int, seed: int, target: Target | None = None,
              on_phase: Callable[[str], None] = lambda phase: None) -> tuple[int, _RuleFailed | None]:
    """Run ``examples`` cases of ``rule``; (valid cases, the shrunk failure or None). A case whose op
    rejects its inputs (or answers twice differently) is not valid; one the rule fails is a failure
    (``Result.against_compiler``: the rule is what is under test)."""
    target = target or parse_target("eager")
    stats: dict[str, Any] = {"valid": 0, "shrink_until": None, "best": None}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              verbosity=Verbosity.quiet, phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False)
    @hypothesis_seed(seed)
    @given(_case_strategy(rule, spec, captured))
    def check(case: Any) -> None:
        if stats["shrink_until"] is not None and time.monotonic() > stats["shrink_until"]:
            if stats["best"] is not None and case_text(case) == case_text(stats["best"].case):
                _fail_case(stats["best"].result, case)
            return
        if case[0] == "graph" and not case[1].nodes:
            return  # every draw of the op's spec was rejected (linalg_vector_norm, seed 3): no case
        result = run_case(rule, case, captured, target, on_phase)
        if not result.against_compiler:
            stats["valid"] += stats["shrink_until"] is None and result.counts
            return
        if stats["shrink_until"] is None:
            stats["shrink_until"] = time.monotonic() + SHRINK_SECONDS
        failure = _RuleFailed(result, case)
        if stats["best"] is None or len(case_text(case)) <= len(case_text(stats["best"].case)):
            stats["best"] = failure
        _fail_case(result, case)

    try:
        check()
    except _RuleFailed as failed:
        return stats["valid"], failed
    except Exception:  # hypothesis's own complaint (flaky replay after the time box): smallest failure
        if stats["best"] is None:
            raise
        return stats["valid"], stats["best"]
    return stats["valid"], None


def incomparable(op: Any) -> bool:
    """Ops whose outputs two correct implementations need not share: random (bernoulli, rand_like:
    the rule draws differently) or uninitialized memory (new_empty, empty_like). Their rules were
    reported as 'worse than the op' findings."""
    name = op.name().split("::")[-1]
    return torch.Tag.nondeterministic_seeded in op.tags or name.startswith(("empty", "new_empty"))


def check_rule(rule: Rule, calls: list, examples: int, seed: int, target: Target | None = None,
               on_phase: Callable[[str], None] = lambda phase: None) -> Result:
    """One rule's verdict: ``pass`` (``cases``: the valid cases), ``skipped`` (``UNCOVERED``, no inputs,
    or ``INCOMPARABLE``) or the failing case's result, with the case (``failing_case``) and a repro."""
    target = target or parse_target("eager")
    name = f"decomp/{rule.name}"
    if incomparable(rule.op):
        return Result(name=name, target=target.name, status=Status.SKIPPED, op=rule.name, error=INCOMPARABLE)
    spec = OP_SPECS.get(str(rule.op))
    if spec is None and not calls:
        return Result(name=name, target=target.name, status=Status.SKIPPED, op=rule.name, error=UNCOVERED)
    digest = int(hashlib.sha1(rule.name.encode()).hexdigest()[:8], 16)
    valid, failure = fuzz_rule(rule, spec, calls, examples, seed * 1_000_003 + digest, target, on_phase)
    if failure is None:
        return Result(name=name, target=target.name, status=Status.PASS, op=rule.name, cases=valid)
    return failure.result.replace(cases=valid, failing_case=case_text(failure.case),
                                  repro=decomp_repro(rule, failure, calls))


def decomp_repro(rule: Rule, failure: _RuleFailed, captured: list) -> str:
    """A standalone script comparing the op with the rule on the failing case (torch + compiler)."""
    case = failure.case
    if case[0] == "graph":
        graph = case[1]
        # the float64 reference as the campaign runs it (harness.fuzz.graph's namespace maps every
        # float dtype to float64); a repro judged against the op alone disagreed with the campaign
        setup = (f"from harness.fuzz.decomps import to64_rounded\n"
                 f"from harness.fuzz.graph import FuzzGraph, namespace\n"
                 f"GRAPH = FuzzGraph.from_json({graph.to_json()!r})\n"
                 f"EXPR = {graph.nodes[0].expr!r}\nNAMES = GRAPH.input_names()\n"
                 "def _run(ns, inputs):\n"
                 "    return eval(EXPR, {**ns, **dict(zip(NAMES, inputs))})\n"
                 "def call(aten_ns):\n"
                 "    return _run({**namespace(), 'aten': aten_ns}, GRAPH.make_inputs())\n"
                 "def reference():\n"
                 "    return _run(namespace(reference=True), GRAPH.make_inputs(reference=True))\n"
                 "def rounded():\n"
                 "    return _run(namespace(reference=True), to64_rounded(GRAPH.make_inputs()))\n")
    else:
        buf = io.BytesIO()
        torch.save(perturb(captured[case[1]], case[2], case[3]), buf)
        setup = (f"CALL = {base64.b64encode(buf.getvalue()).decode()!r}\n"
                 "def call(aten_ns):\n"
                 "    args, kwargs = torch.load(io.BytesIO(base64.b64decode(CALL)), weights_only=False)\n"
                 f"    fn = OP if aten_ns is torch.ops.aten else RULE\n"
                 "    return fn(*args, **kwargs)\n"
                 "def reference():\n"
                 "    from harness.fuzz.decomps import to64\n"
                 "    args, kwargs = torch.load(io.BytesIO(base64.b64decode(CALL)), weights_only=False)\n"
                 "    return OP(*to64(args), **to64(kwargs))\n"
                 "def rounded():\n"
                 "    from harness.fuzz.decomps import to64_rounded\n"
                 "    args, kwargs = torch.load(io.BytesIO(base64.b64decode(CALL)), weights_only=False)\n"
                 "    return OP(*to64_rounded(args), **to64_rounded(kwargs))\n")
    header = (f"Crucible decomposition finding: {rule.name} ({rule.op}): {failure.status}\n"
              f"{failure.reason[:300]}").splitlines()
    return ("".join(f"# {line}\n" for line in header) +
            "import base64, io, math\nimport torch\n"
            "from compiler.decompositions import decomposition_table_for_compiler\n"
            "from harness.fuzz.decomps import RedirectedAten, Rule, compare\n"
            f"OP = torch.ops.aten.{rule.op.__name__.replace('.default', '')}.{rule.op._overloadname}\n"
            "RULE = decomposition_table_for_compiler()[OP]\n" + setup +
            "rule = Rule('repro', OP, RULE)\n"
            "op_out = call(torch.ops.aten)\n"
            "try:\n"
            "    rule_out = call(RedirectedAten(rule))\n"
            "except Exception as exc:\n"
            "    print(f'the rule raised {type(exc).__name__}: {exc}')\n"
            "    raise SystemExit(1) from None\n"
            "try:\n"
            "    ref = reference()\n"
            "except Exception:  # no float64 kernel: judged against the op only, as the campaign does\n"
            "    ref = None\n"
            "try:\n"
            "    near = rounded() if ref is not None else None\n"
            "except Exception:\n"
            "    near = None\n"
            "verdict = compare(op_out, rule_out, ref, near)\n"
            "print(verdict or 'decomposition matches the op')\nraise SystemExit(1 if verdict else 0)\n")
