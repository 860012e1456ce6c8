"""``crucible fuzz-decomps``: hypothesis over every decomposition rule, one rule at a time.

Each rule gets ``--examples`` cases (one hypothesis run, seeded by the campaign seed and the
rule name, shrinking the first failure within a time box). Cases run in this process:
decompositions are Python over eager ATen, so there is no compiled code to crash a worker.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from harness.fuzz.builder import GraphLimits, graphs
from harness.fuzz.decomps import RedirectedAten, Rule, judge, reason_kind, select_rules, to64_rounded
from harness.fuzz.graph import FuzzGraph, namespace
from harness.fuzz.known import match_known
from harness.fuzz.values import make_input
from harness.runner import Progress
from harness.status import Status

SHRINK_SECONDS = 20.0
RULE_TIMEOUT_S = 600.0  # one rule on a worker: 30 cases plus a 20 s shrink take 1-20 s here


@dataclass
class DecompProgress(Progress):
    """rules done / total, cases/s, findings."""

    cases: int = 0
    findings: int = 0
    rule: str = ""

    def advance(self, rule: str, cases: int, findings: int) -> None:
        self.done, self.rule, self.cases, self.findings = self.done + 1, rule, cases, findings
        self._draw()

    def _line(self) -> str:
        elapsed = time.monotonic() - self.started
        return (f"[{self.done}/{self.total} rules] {elapsed:.0f}s {self.cases / max(elapsed, 1e-9):.1f} cases/s "
                f"| findings {self.findings} | {self.rule}")


class _RuleFailed(Exception):
    def __init__(self, status: str, reason: str, case: Any) -> None:
        super().__init__(reason)
        self.status, self.reason, self.case = status, reason, case


def _fail_case(status: str, reason: str, case: Any) -> None:
    raise _RuleFailed(status, reason, case)  # one raise site: see campaign._fail_example


def _graph_thunks(rule: Rule, graph: FuzzGraph) -> tuple:
    expr = graph.nodes[0].expr

    def run(ns: dict, inputs: list) -> Any:
        return eval(expr, {**ns, **dict(zip(graph.input_names(), inputs))})  # noqa: S307

    redirected = {**namespace(), "aten": RedirectedAten(rule)}
    return (lambda: run(namespace(), graph.make_inputs()), lambda: run(redirected, graph.make_inputs()),
            lambda: run(namespace(reference=True), graph.make_inputs(reference=True)),
            lambda: run(namespace(reference=True), to64_rounded(graph.make_inputs())))


def _perturb(value: Any, profile: str | None, seed: int) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and profile is not None:
        fresh = make_input({"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                            "profile": profile, "seed": seed})
        return value.detach().clone().copy_(fresh)
    if isinstance(value, (list, tuple)):
        return type(value)(_perturb(v, profile, seed + i) for i, v in enumerate(value))
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _captured_thunks(rule: Rule, call: tuple, profile: str | None, seed: int) -> tuple:
    from harness.fuzz.decomps import _to64

    args, kwargs = _perturb(call, profile, seed)
    fresh = lambda: (_perturb(args, None, 0), _perturb(kwargs, None, 0))  # noqa: E731
    return (lambda: rule.op(*fresh()[0], **fresh()[1]), lambda: rule.fn(*fresh()[0], **fresh()[1]),
            lambda: rule.op(*_to64(fresh()[0]), **_to64(fresh()[1])),
            lambda: rule.op(*to64_rounded(fresh()[0]), **to64_rounded(fresh()[1])))


def _case_strategy(rule: Rule, spec: Any, captured: list) -> Any:
    if spec is not None:
        return graphs([spec], GraphLimits(max_nodes=1)).map(lambda g: ("graph", g))
    return st.tuples(st.just("call"), st.integers(0, len(captured) - 1),
                     st.sampled_from([None, "special", "normal", "unit"]), st.integers(0, 2**16))


def fuzz_rule(rule: Rule, spec: Any, captured: list, examples: int, seed: int) -> tuple[int, _RuleFailed | None]:
    """Run ``examples`` cases of ``rule``; (valid cases, the shrunk failure or None)."""
    stats = {"valid": 0, "shrink_until": None, "best": None}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              verbosity=Verbosity.quiet, phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False)
    @hypothesis_seed(seed)
    @given(_case_strategy(rule, spec, captured))
    def check(case: Any) -> None:
        if stats["shrink_until"] is not None and time.monotonic() > stats["shrink_until"]:
            if stats["best"] is not None and _case_text(case) == _case_text(stats["best"].case):
                _fail_case(stats["best"].status, stats["best"].reason, case)
            return
        if case[0] == "graph" and not case[1].nodes:
            return  # every draw of the op's spec was rejected (linalg_vector_norm, seed 3): no case
        if case[0] == "graph":
            thunks = _graph_thunks(rule, case[1])
        else:
            thunks = _captured_thunks(rule, captured[case[1]], case[2], case[3])
        verdict = judge(*thunks)
        if verdict is None:
            stats["valid"] += stats["shrink_until"] is None
            return
        if stats["shrink_until"] is None:
            stats["shrink_until"] = time.monotonic() + SHRINK_SECONDS
        failure = _RuleFailed(verdict[0], verdict[1], case)
        if stats["best"] is None or len(_case_text(case)) <= len(_case_text(stats["best"].case)):
            stats["best"] = failure
        _fail_case(verdict[0], verdict[1], case)

    try:
        check()
    except _RuleFailed as failed:
        return stats["valid"], failed
    except Exception:  # hypothesis's own complaint (flaky replay after the time box): smallest failure
        if stats["best"] is None:
            raise
        return stats["valid"], stats["best"]
    return stats["valid"], None


def _case_text(case: Any) -> str:
    return case[1].to_json() if case[0] == "graph" else repr(case[1:])


def capture_opinfo_calls(ops: set) -> dict[Any, list]:
    """Calls of ``ops`` made by OpInfo sample inputs (forward, and backward where differentiable)."""
    import warnings

    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: dict[Any, list] = {}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            if func in ops and len(calls.setdefault(func, [])) < 8:
                calls[func].append(_perturb((args, kwargs), None, 0))
            return func(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in op_db:
            try:
                samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=info.supports_autograd))[:2]
            except Exception:  # noqa: BLE001 -- a sample generator this torch cannot run
                continue
            for s in samples:
                try:
                    with Recorder():
                        out = info.op(s.input, *s.args, **s.kwargs)
                        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                                if isinstance(o, torch.Tensor) and o.requires_grad]
                        ins = [x for x in (s.input, *s.args) if isinstance(x, torch.Tensor) and x.requires_grad]
                        if outs and ins:
                            torch.autograd.grad(sum(o.float().sum() for o in outs), ins, allow_unused=True)
                except Exception:  # noqa: BLE001 -- samples that fail in eager are not cases
                    pass
    return calls


# Bump when capture_opinfo_calls changes what it records: cached captures of older versions are ignored.
CAPTURE_FORMAT = 1
_LOADED: dict = {}  # cache file -> its captures, once per process (each -j worker checks many rules)


def cached_opinfo_calls(ops: set) -> dict[Any, list]:
    """``capture_opinfo_calls`` for ``ops``, through an on-disk cache under the cache root.

    Capturing runs every OpInfo's samples whatever ops are asked for (about 60 s on a 2-core
    machine), so a miss captures the calls of every rule without an op spec at once and stores
    them, keyed by torch's version and that op set: a later ``--rule NAME`` loads them in about
    a second. The cache directory is private (``compiler.config.private_cache_dir``), as the file
    is a pickle that loading would run."""
    import os

    from compiler.config import private_cache_dir
    from harness.fuzz.decomps import decomposition_rules
    from harness.fuzz.specs import OP_SPECS

    wanted = set(ops) | {r.op for r in decomposition_rules().values() if str(r.op) not in OP_SPECS}
    names = sorted(str(op) for op in wanted)
    digest = hashlib.sha1("\n".join([torch.__version__, str(CAPTURE_FORMAT), *names]).encode()).hexdigest()[:16]
    path = private_cache_dir("fuzz-decomps") / f"opinfo-calls-{torch.__version__.replace('+', '_')}-{digest}.pt"
    by_name = _LOADED.get(path)
    if by_name is None and path.exists():
        try:
            by_name = torch.load(path, weights_only=False)
        except Exception as exc:  # noqa: BLE001 -- a truncated or foreign file: capture again
            print(f"ignoring an unreadable OpInfo capture cache {path}: {exc}", file=sys.stderr)
    if by_name is None:
        print(f"capturing OpInfo sample calls for {len(wanted)} ops (cached for this torch version)...",
              file=sys.stderr)
        by_name = {str(op): [c for c in calls if _picklable(c)] for op, calls in capture_opinfo_calls(wanted).items()}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            torch.save(by_name, tmp)
            os.replace(tmp, path)  # atomic: a concurrent run reads the old file or the whole new one
        finally:
            tmp.unlink(missing_ok=True)
    _LOADED[path] = by_name
    return {op: by_name[str(op)] for op in ops if str(op) in by_name}


def _picklable(call: Any) -> bool:
    try:
        torch.save(call, io.BytesIO())
    except Exception:  # noqa: BLE001 -- a call holding a module or a lambda: not cacheable, dropped
        return False
    return True


def incomparable(op: Any) -> bool:
    """Ops whose outputs two correct implementations need not share: random (bernoulli, rand_like:
    the rule draws differently) or uninitialized memory (new_empty, empty_like). Their rules were
    reported as 'worse than the op' findings."""
    name = op.name().split("::")[-1]
    return torch.Tag.nondeterministic_seeded in op.tags or name.startswith(("empty", "new_empty"))


def check_rule(rule: Rule, calls: list, examples: int, seed: int) -> dict:
    """One rule's verdict as a record: status ``uncovered`` (no inputs), ``pass`` or the failure's."""
    from harness.fuzz.specs import OP_SPECS

    if incomparable(rule.op):
        return {"rule": rule.name, "status": "incomparable"}
    spec = OP_SPECS.get(str(rule.op))
    if spec is None and not calls:
        return {"rule": rule.name, "status": "uncovered"}
    digest = int(hashlib.sha1(rule.name.encode()).hexdigest()[:8], 16)
    valid, failure = fuzz_rule(rule, spec, calls, examples, seed * 1_000_003 + digest)
    result = {"rule": rule.name, "status": Status.PASS, "valid": valid}
    if failure is not None:
        result.update(status=failure.status, reason=failure.reason, case=_case_text(failure.case),
                      repro=decomp_repro(rule, failure, calls))
    return result


def run_rule_task(payload: dict) -> dict:
    """A worker task of ``fuzz-decomps -j``: ``check_rule`` for the rule ``payload["rule"]``."""
    from harness.fuzz.decomps import decomposition_rules
    from harness.fuzz.specs import OP_SPECS

    if time.time() > payload["deadline"]:
        return {"name": payload["name"], "rule": payload["rule"], "status": Status.SKIPPED}
    rule = decomposition_rules()[payload["rule"]]
    calls = [] if str(rule.op) in OP_SPECS else cached_opinfo_calls({rule.op}).get(rule.op, [])
    result = check_rule(rule, calls, payload["examples"], payload["seed"])
    result["name"] = payload["name"]
    return result


def _check_on_workers(rules: list[Rule], args: argparse.Namespace, deadline: float,
                      record: Callable[[dict], None]) -> None:
    """Rules as payload tasks of a ``harness.pool.WorkerPool`` of ``args.jobs`` isolated workers; a
    rule that crashes or hangs its worker is that rule's finding (``crash``/``timeout``)."""
    from harness.pool import Task, WorkerConfig, WorkerPool

    wall_deadline = time.time() + min(deadline - time.monotonic(), 10 * 365 * 86400)
    tasks = [Task(f"decomp/{r.name}", None, {"kind": "decomp_rule", "name": f"decomp/{r.name}", "rule": r.name,
                                               "examples": args.examples, "seed": args.seed,
                                               "deadline": wall_deadline, "imports": list(args.imports)})
             for r in rules]
    pool = WorkerPool(WorkerConfig(target="eager", timeout_s=RULE_TIMEOUT_S, capture=False, jobs=args.jobs),
                      jobs=args.jobs)
    pool.run(tasks, record)


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
        torch.save(_perturb(captured[case[1]], case[2], case[3]), buf)
        setup = (f"CALL = {base64.b64encode(buf.getvalue()).decode()!r}\n"
                 "def call(aten_ns):\n"
                 "    args, kwargs = torch.load(io.BytesIO(base64.b64decode(CALL)), weights_only=False)\n"
                 f"    fn = OP if aten_ns is torch.ops.aten else RULE\n"
                 "    return fn(*args, **kwargs)\n"
                 "def reference():\n"
                 "    from harness.fuzz.decomps import _to64\n"
                 "    args, kwargs = torch.load(io.BytesIO(base64.b64decode(CALL)), weights_only=False)\n"
                 "    return OP(*_to64(args), **_to64(kwargs))\n"
                 "def rounded():\n"
                 "    from harness.fuzz.decomps import to64_rounded\n"
                 "    args, kwargs = torch.load(io.BytesIO(base64.b64decode(CALL)), weights_only=False)\n"
                 "    return OP(*to64_rounded(args), **to64_rounded(kwargs))\n")
    return (f"# Crucible decomposition finding: {rule.name} ({rule.op}): {failure.status}\n# {failure.reason[:300]}\n"
            "import base64, io, math\nimport torch\n"
            "from compiler.decompositions import decomposition_table_for_compiler\n"
            "from harness.fuzz.decomps import RedirectedAten, Rule, compare, judge\n"
            f"OP = torch.ops.aten.{rule.op.__name__.replace('.default', '')}.{rule.op._overloadname}\n"
            "RULE = decomposition_table_for_compiler()[OP]\n" + setup +
            "rule = Rule('repro', OP, RULE)\n"
            "verdict = judge(lambda: call(torch.ops.aten), lambda: call(RedirectedAten(rule)), reference, rounded)\n"
            "print(verdict or 'decomposition matches the op')\nraise SystemExit(1 if verdict else 0)\n")


def run_decomp_fuzz(args: argparse.Namespace) -> int:
    from harness.execute import describe_error  # noqa: F401  (imported early: fail fast on a broken install)
    from harness.fuzz.execute import load_plugin
    from harness.fuzz.specs import OP_SPECS
    from harness.runner import run_metadata
    from harness.store import ResultStore

    for plugin in args.imports:
        load_plugin(plugin)
    if args.examples <= 0 or args.jobs <= 0 or (args.seconds is not None and args.seconds <= 0):
        print("error: --examples, -j and --seconds must be positive", file=sys.stderr)
        return 2
    rules = select_rules(args.rule)
    if args.list:
        for r in rules:
            print(f"{r.name}\t{r.op}\t{'op table' if str(r.op) in OP_SPECS else 'OpInfo samples'}")
        return 0
    uncovered_ops = {r.op for r in rules if str(r.op) not in OP_SPECS}
    captured = cached_opinfo_calls(uncovered_ops) if uncovered_ops else {}
    run_id = args.run_id or f"fuzz-decomps-s{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    store = ResultStore(args.db)
    metadata = run_metadata("fuzz-decomps", "decompositions", args.seed, None, {})
    store.create_run(run_id, "fuzz-decomps", "decompositions", metadata)
    start, deadline = time.monotonic(), time.monotonic() + (args.seconds or float("inf"))
    checked, cases, uncovered, findings, incomparable_rules = 0, 0, [], [], []
    progress = DecompProgress(total=len(rules))
    metadata["jobs"] = args.jobs
    def record(result: dict) -> None:
        nonlocal checked, cases
        name = result.get("rule") or result["name"].removeprefix("decomp/")
        if result["status"] == "uncovered":
            uncovered.append(name)
            return
        if result["status"] == "incomparable":
            incomparable_rules.append(name)
            return
        if result["status"] == Status.SKIPPED:  # the time box ran out before a worker reached it
            return
        checked, cases = checked + 1, cases + result.get("valid", 0)
        if result["status"] != Status.PASS:
            reason = result.get("reason") or result.get("error") or ""
            sig = f"{result['status']} | {name} | {reason_kind(result['status'], reason)}"
            known = match_known("decompositions", {"status": result["status"], "op": name, "error": reason})
            findings.append((sig, known))
            store.record_finding(run_id, {
                "signature": sig, "kind": "decomp", "target": "decompositions", "status": result["status"],
                "op": name, "error": reason, "known": known, "hits": 1, "nodes": 1,
                "graph": result.get("case", ""), "repro": result.get("repro", "")})
        progress.advance(name, cases, len(findings))

    if args.jobs > 1:
        _check_on_workers(rules, args, deadline, record)
    else:
        for rule in rules:
            if time.monotonic() > deadline:
                break
            record(check_rule(rule, captured.get(rule.op, []), args.examples, args.seed))
    progress.close()
    metadata["fuzz"] = {"rules": checked, "cases": cases, "uncovered": uncovered, "incomparable": incomparable_rules,
                        "elapsed_s": time.monotonic() - start}
    store.update_metadata(run_id, metadata)
    store.finish_run(run_id)
    store.close()
    print(f"rules checked {checked} of {len(rules)} ({len(uncovered)} without inputs: out=/in-place overloads "
          f"and ops no OpInfo sample reaches; {len(incomparable_rules)} not comparable: random or uninitialized "
          f"outputs), valid cases {cases}, {time.monotonic() - start:.0f}s")
    for sig, known in findings:
        print(f"  {'known: ' + known if known else 'NEW'}  {sig}")
    if not findings:
        print("no findings")
    print(f"results: {args.db} (run {run_id}); repros: crucible report {run_id} --db {args.db} --repro KEY",
          file=sys.stderr)
    return 1 if any(known is None for _, known in findings) else 0
