"""Crucible's rules a campaign never executed, and the ones no op can reach at all (dead rules).

A rule is a decomposition rule (``compiler.decompositions.RULES``) or a lowering function
(``compiler.lowerings.rules.LOWERINGS``, one function per op or op set; the closures one factory
makes for many ops count as one rule). It is **dead** when no
torch call can make it run, whatever a generator draws:

- a decomposition rule for an op that has a ``CompositeImplicitAutograd`` kernel and no backend or
  autograd kernel: the dispatcher decomposes the op while AOTAutograd traces, before the table is
  consulted (``crucible:var_mean_to_var_and_mean``: ``aten.var_mean.dim`` becomes
  ``var_mean.correction``);
- a lowering function all of whose ops are decomposed before lowering, or are scalar overloads only
  Python knows (``aten.isfinite.float``): by the dispatcher (as above) or by the compiler's own
  decomposition table (``decomposition_table_for_compiler``; a
  torch rule that declines a call with ``NotImplemented`` would leave it, so a dead lowering that a
  campaign did execute is reported as executed, never as dead).

A rule that is not dead but was never executed is **unreached**: either no op spec calls its op (a
gap of the generator: the op is only reachable through another op's decomposition, or not at all
from the op table) or the campaign did not draw it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import CodeType
from typing import Any

from harness.fuzz.coverage import CoverageMap, code_objects, file_key, executable_lines


@dataclass(frozen=True)
class RuleReach:
    kind: str  # "decomposition" or "lowering"
    name: str  # the rule's name, or the lowering function's
    ops: tuple[str, ...]
    where: str  # file:first-last
    executed: bool
    dead: str | None  # why no torch call reaches it; None when one can
    in_op_table: bool  # some op spec calls one of its ops


def _decomposed_by_dispatcher(op: Any) -> bool:
    import torch

    name = op.name()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return has(name, "CompositeImplicitAutograd") and not any(
            has(name, key) for key in ("CPU", "CUDA", "Autograd", "CompositeExplicitAutograd"))
    except RuntimeError:  # an overload only Python knows (aten.isfinite.float, aten.exp.int): a scalar
        return True  # call, never a tensor node of a graph to lower


def _overloads(op: Any) -> list[Any]:
    """The OpOverloads a registry key stands for (an OpOverloadPacket: every overload of it)."""
    import torch

    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    return [op]


def _span(fn: Any, roots: tuple[str, ...]) -> tuple[str, set[int]] | None:
    """(file key, executable body lines) of a Python function under ``roots``; None otherwise."""
    code: CodeType | None = getattr(fn, "__code__", None)
    if code is None:
        return None
    key = file_key(code.co_filename, roots)
    if key is None:
        return None
    lines = {line for c in code_objects(code) for _, _, line in c.co_lines() if line is not None}
    return key, set(executable_lines(code.co_filename)) & lines


def rule_reach(covered: CoverageMap, roots: tuple[str, ...], op_table: set[str]) -> list[RuleReach]:
    """Every decomposition rule and lowering function of Crucible's compiler under ``roots``, with
    whether the campaign executed it and whether any torch call can."""
    import compiler.lowering  # noqa: F401 -- registers every lowering rule
    from compiler.decompositions import RULES, decomposition_table_for_compiler
    from compiler.lowerings.rules import LOWERINGS

    rows: list[RuleReach] = []

    def add(kind: str, name: str, fn: Any, ops: list[Any], dead: str | None) -> None:
        span = _span(fn, roots)
        if span is None or not span[1]:
            return
        key, lines = span
        executed = bool(lines & covered.lines.get(key, set()))
        names = tuple(sorted({str(o) for o in ops}))
        rows.append(RuleReach(kind, name, names, f"{key}:{min(lines)}-{max(lines)}", executed,
                              None if executed else dead, any(n in op_table for n in names)))

    for rule in RULES.values():
        dead = (f"{rule.op} is CompositeImplicitAutograd: the dispatcher decomposes it before AOTAutograd "
                f"consults the table" if _decomposed_by_dispatcher(rule.op) else None)
        add("decomposition", rule.name, rule.fn, [rule.op], dead)

    table = decomposition_table_for_compiler()
    by_code: dict[Any, tuple[Any, list[Any]]] = {}  # closures of one factory share their code: one rule
    for op, fn in LOWERINGS.items():
        by_code.setdefault(getattr(fn, "__code__", fn), (fn, []))[1].extend(_overloads(op))
    for fn, ops in by_code.values():
        gone = [o for o in ops if o in table or _decomposed_by_dispatcher(o)]
        dead = (f"every op it lowers is decomposed before lowering ({', '.join(sorted(map(str, gone))[:4])}"
                f"{', ...' if len(gone) > 4 else ''})" if ops and len(gone) == len(ops) else None)
        add("lowering", fn.__name__, fn, ops, dead)
    return sorted(rows, key=lambda r: (r.kind, r.where))
