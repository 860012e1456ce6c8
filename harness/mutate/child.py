"""The process that runs one campaign against one copy of the package under test (a mutant, or the
pristine copy of the baseline), started by ``harness.mutate.tasks.run_child``.

It is started through ``BOOTSTRAP`` (``python -c``), which puts the copy first on the import path
and, for a subpackage (``torch._inductor``), installs a finder that resolves that one package to the
copy, all before anything imports the package; then this module runs. It reads its settings (a
JSON file), runs the campaign in this process with one thread (``--budget-s`` means seconds of
one core), and writes what it saw as JSON: the failure signatures the baseline did not have, with
the graph of each (so the parent can check that the unmutated compiler passes it), graphs run,
executed lines when asked (``harness.mutate.tracing``), and its import and campaign seconds.

A campaign is ``fuzz`` (``crucible fuzz``'s campaign on a target, in process, no replay of stored
findings, no shrinking; then, with ``corpus_suite``, the corpus tier: entries of that suite on the
target) or ``MODULE:FUNCTION``, a function called with a ``Budget`` that returns
the signatures of the failures it saw (for another compiler's tests, or a test's tiny campaign).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Run as ``python -c BOOTSTRAP COPY_ROOT PACKAGE SETTINGS_JSON``, with the copy root as the working
# directory. Kept free of harness imports: the package under test must not be imported before the
# copy is on the path (``harness`` may import it).
BOOTSTRAP = """\
import importlib.machinery, os, runpy, sys
root, package = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
class _MutantFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != package:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [os.path.join(root, *name.split('.')[:-1])])
sys.meta_path.insert(0, _MutantFinder)
sys.argv = [sys.argv[0], sys.argv[3]]
runpy.run_module('harness.mutate.child', run_name='__main__', alter_sys=True)
"""


@dataclass(frozen=True)
class Budget:
    """What a campaign may spend: ``seconds`` of one core or ``graphs`` generated (one is None)."""

    seed: int
    seconds: float | None
    graphs: int | None
    target: str


def _fuzz(settings: dict, exclude: set[str], on_graph: Any = lambda graph: None) -> tuple[int, list[dict]]:
    from harness.fuzz.campaign import CampaignRequest, run_campaign
    from harness.fuzz.workers import InProcessRunner

    request = CampaignRequest(target=settings["target"], seconds=settings["seconds"], examples=settings["graphs"],
                              seed=settings["seed"], ops=settings.get("ops"), max_nodes=settings.get("max_nodes", 6),
                              shrink_seconds=1e-3, in_process=True)
    found: list[dict] = []

    def on_finding(finding: Any) -> None:
        if finding.signature not in exclude and not any(f["signature"] == finding.signature for f in found):
            found.append({"signature": finding.signature, "graph": finding.graph.to_json()})

    summary = run_campaign(request, InProcessRunner(request.target), on_finding=on_finding,
                           should_stop=lambda: bool(found) and settings.get("stop_early", True),
                           found_elsewhere=lambda sig: sig in exclude, replay=None, on_graph=on_graph)
    return summary.graphs, found


def _corpus(settings: dict, exclude: set[str]) -> list[dict]:
    """The corpus tier: each entry of ``corpus_suite`` (``corpus_entries`` globs, when given) on the
    target, in this process; an entry failing against the compiler is a failure ``corpus | NAME | STATUS``."""
    from corpus.registry import catalog, select
    from harness.pool import run_task
    from harness.selection import select_by_name
    from harness.targets import parse_target
    from harness.tasks import EntryTask

    cat = catalog()
    entries = select_by_name(select(cat.entries, settings["corpus_suite"]), settings.get("corpus_entries") or None)
    target = parse_target(settings["target"])
    found: list[dict] = []
    for entry in entries:
        result = run_task(EntryTask(entry.name, cat.origin_of(entry.name), capture=False), target, lambda phase: None)
        signature = f"corpus | {entry.name} | {result.status}"
        if result.against_compiler and signature not in exclude:
            found.append({"signature": signature, "graph": None})
            if settings.get("stop_early", True):
                break
    return found


def _plugin(settings: dict, exclude: set[str]) -> tuple[int | None, list[dict]]:
    module, _, function = settings["campaign"].partition(":")
    run = getattr(importlib.import_module(module), function)
    budget = Budget(settings["seed"], settings["seconds"], settings["graphs"], settings["target"])
    signatures: Iterable[str] = run(budget)
    found = [{"signature": str(s), "graph": None} for s in dict.fromkeys(signatures) if str(s) not in exclude]
    return None, found


def main(path: str) -> int:
    started = time.monotonic()
    settings = json.loads(open(path).read())
    threads = settings.get("threads", 1)
    os.environ["OMP_NUM_THREADS"] = os.environ["CRUCIBLE_COMPILE_THREADS"] = str(threads)
    if settings["campaign"] == "fuzz":
        import torch

        torch.set_num_threads(threads)
    if settings.get("mem_limit_mb"):
        # as the pool's CPU workers: a mutant that allocates without bound gets MemoryError (an
        # ``oom`` result, which kills it), not the machine's OOM killer among its neighbours
        from harness.pool import _limit_memory

        _limit_memory(settings["mem_limit_mb"])
    from harness.mutate.tracing import Attribution, LineTracer, relative_lines

    exclude = set(settings.get("exclude", []))
    imported = time.monotonic()
    tracer = LineTracer([settings["trace"]]) if settings.get("trace") else None
    # with ``attribute`` (a fuzz campaign, traced): which ops reach each line
    attribution = Attribution(tracer) if tracer is not None and settings.get("attribute") else None
    with tracer if tracer is not None else contextlib.nullcontext():
        if settings["campaign"] != "fuzz":
            graphs, found = _plugin(settings, exclude)
        elif attribution is not None:
            graphs, found = _fuzz(settings, exclude, lambda graph: attribution.after(graph.ops))
        else:
            graphs, found = _fuzz(settings, exclude)
        if settings.get("corpus_suite") and not (found and settings.get("stop_early", True)):
            found += _corpus(settings, exclude)
    out = {"graphs": graphs, "found": found, "import_s": imported - started,
           "campaign_s": time.monotonic() - imported,
           "lines": relative_lines(tracer.lines, settings["root"]) if tracer is not None else None,
           "calls": relative_lines(tracer.calls, settings["root"]) if tracer is not None else None,
           "line_ops": relative_lines(attribution.ops(), settings["root"]) if attribution is not None else None}
    with open(settings["out"], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
