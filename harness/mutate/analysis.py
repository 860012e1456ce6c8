"""A mutation analysis: baseline, coverage, deterministic selection, mutants in parallel, resumable.

1. Baseline: per target, the campaign runs once on a pristine copy of the package (same seed and
   budget as every mutant, a cold cache too), with line tracing on: its failure signatures are the
   ones a mutant is not killed by, its executed lines the only ones mutated (``covered_lines``;
   ``--coverage-file`` replaces the tracing).
2. Selection: every mutant the operators propose on a covered line of the chosen files, sorted by
   id, shuffled with ``random.Random(seed)``, the first ``--mutants``: the same sources, coverage and
   seed give the same mutants, and a larger ``--mutants`` extends the sample. A line of a module- or
   class-level assignment (a table, a constant, a field's default) runs at import, so it is reached
   only when a line the baseline ran inside a function reads a name it binds (``Mutant.data_names``;
   names only code outside the traced files reads stay reached): the GPU tile tables a CPU campaign
   imports but never reads were 10 of the 53 survivors of a 110-mutant run. Each goes to the first target whose baseline reaches its line; mutants only a CUDA
   target reaches are counted apart (GPU-only code), and sites no target reaches are reported.
3. Mutants run as ``harness.mutate.tasks.MutantTask`` on the single-host pool or the cluster
   executor (``harness.cluster.open_executor``). Each verdict is appended to the results file
   (JSON lines) as it arrives; a second session with the same settings skips the mutants done.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.mutate.operators import OPERATORS, Mutant, mutants_of, names_read
from harness.mutate.tasks import MAX_ROUNDS, START_S, Edit, MutantTask, package_location, run_child
from harness.pool import WorkerConfig
from harness.result import Result
from harness.validation import UsageError


@dataclass(frozen=True)
class MutateRequest:
    package: str = "compiler"
    paths: tuple[str, ...] = ()  # globs relative to the package directory; () = every file
    campaign: str = "fuzz"  # or MODULE:FUNCTION (harness.mutate.child)
    targets: tuple[str, ...] = ("crucible-cpp",)
    seed: int = 0
    seconds: float | None = 120.0
    graphs: int | None = None
    mutants: int = 100
    operators: tuple[str, ...] = OPERATORS
    ops: str | None = None
    max_nodes: int = 6
    corpus_suite: str | None = None  # the corpus tier after the fuzz budget (harness.mutate.child)
    corpus_entries: tuple[str, ...] = ()
    jobs: int = 1
    cluster: str | None = None
    mixed_versions: bool = False
    coverage_file: str | None = None
    out: str = "crucible-mutate.jsonl"
    workdir: str | None = None
    mem_limit_mb: int | None = None  # address space per mutant process beyond its start (None: no limit)
    cache: str = "warm"  # warm: each mutant's kernel cache starts as a copy of the baseline's; cold: empty
    focus_s: float | None = None  # a survivor's second round: seconds on the ops that reach its lines

    def settings(self, target: str) -> dict:
        """A child campaign's settings (``harness.mutate.child``); a CUDA target's carry the GPUs this
        process sees (the pool's workers, started for CPU work, hide them)."""
        from harness.targets import parse_target

        cuda = self.campaign == "fuzz" and parse_target(target).device == "cuda"
        gpus = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")} if cuda else {}
        return gpus | {"campaign": self.campaign, "target": target, "seed": self.seed, "seconds": self.seconds,
                # as the pool's: no address-space limit under CUDA (its driver reserves huge ranges)
                "mem_limit_mb": None if cuda else self.mem_limit_mb,
                "graphs": self.graphs, "ops": self.ops, "max_nodes": self.max_nodes, "threads": 1,
                "corpus_suite": self.corpus_suite, "corpus_entries": list(self.corpus_entries)}

    def key(self, digest: str) -> str:
        """What a results file's mutants depend on: a session resumes only a file with this key. The
        Python version is part of it: the operators' candidates come from ``ast``, whose positions
        differ between versions (f-strings have parts with positions from 3.12), so another version
        draws another sample from the same sources and seed, and a resumed file would mix two."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("jobs", "cluster", "mixed_versions", "out",
                                                                       "workdir", "mutants", "cache", "mem_limit_mb",
                                                                       "focus_s")}
        python = list(sys.version_info[:2])
        return hashlib.sha1(json.dumps([fields, digest, python], sort_keys=True).encode()).hexdigest()[:16]


def source_files(location: str, base: str, paths: tuple[str, ...]) -> list[str]:
    """The package's .py files (relative to ``base``) matching ``paths`` (globs relative to the package)."""
    if os.path.isfile(location):
        return [os.path.relpath(location, base)]
    files = sorted(str(p.relative_to(location)) for p in Path(location).rglob("*.py") if "__pycache__" not in p.parts)
    chosen = files
    if paths:
        for glob in paths:
            if not any(fnmatch.fnmatch(f, glob) for f in files):
                raise UsageError(f"--paths {glob}: matches no file of the package (globs are relative to "
                                 f"{location}, e.g. lowerings/*.py)")
        chosen = [f for f in files if any(fnmatch.fnmatch(f, glob) for glob in paths)]
    return [os.path.relpath(os.path.join(location, f), base) for f in chosen]


def sources_digest(base: str, files: list[str]) -> str:
    digest = hashlib.sha1()
    for f in files:
        digest.update(f.encode() + b"\0" + Path(base, f).read_bytes())
    return digest.hexdigest()[:16]


def baseline_cache(request: MutateRequest, target: str) -> str:
    """Where the baseline's kernel cache of ``target`` is kept (beside the results file, for resuming)."""
    return os.path.abspath(f"{request.out}.caches/{hashlib.sha1(target.encode()).hexdigest()[:12]}")


def covered_lines(request: MutateRequest, target: str, location: str, base: str,
                  trace: bool = True, attribute: bool = False) -> dict:
    """Run the baseline campaign of ``target`` on a pristine copy (with line tracing when ``trace``):
    {"lines": {file: [lines]} or None, "signatures": [...], "graphs", "seconds", "line_ops": which
    ops reach each line, with ``attribute``: ``harness.mutate.tracing.Attribution``}; its kernel cache is kept
    (``baseline_cache``). Raises when the baseline cannot run: then no mutant could be judged."""
    settings = dict(request.settings(target), trace=trace, stop_early=False, attribute=attribute)
    timeout = (request.seconds or 3600.0) * 4 + START_S
    run = run_child(settings, request.package, location, base, None, timeout, request.workdir,
                    keep_cache=baseline_cache(request, target))
    if run.status != "ok":
        raise RuntimeError(f"the baseline campaign on {target} did not finish ({run.status}); its output:\n{run.log}")
    return {"lines": run.lines, "calls": run.calls, "signatures": sorted(f["signature"] for f in run.found), "graphs": run.graphs,
            "seconds": run.campaign_s, "import_s": run.import_s, "copy_s": run.copy_s, "line_ops": run.line_ops}


class ResultsFile:
    """The JSON-lines results file: a ``config`` line, ``baseline`` lines, ``reach`` lines (which ops
    reach each line, per target: ``--focus-s``), one ``mutant`` line per verdict (the last one of a
    mutant counts: a focused round's comes after its first)."""

    def __init__(self, path: str, key: str) -> None:
        self.path, self.key = path, key
        self.baselines: dict[str, dict] = {}
        self.reach: dict[str, dict] = {}
        self.done: dict[str, dict] = {}
        if os.path.exists(path) and os.path.getsize(path):
            records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
            if not records or records[0].get("kind") != "config" or records[0].get("key") != key:
                raise UsageError(f"--out {path}: holds a mutation run with other settings, sources or Python "
                                 f"version; give another --out (or delete it to start over)")
            for record in records[1:]:
                if record["kind"] == "baseline":
                    self.baselines[record["target"]] = record
                elif record["kind"] == "reach":
                    self.reach[record["target"]] = record
                elif record["kind"] == "mutant" and record["verdict"] != "error":  # a harness error runs again
                    self.done[record["id"]] = record
        else:
            self.append({"kind": "config", "key": key})

    def append(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


def verdict(result: Result) -> str:
    """killed, survived, or error (the harness failed, counted nowhere)."""
    if result.status.passed:
        return "survived"
    return "killed" if result.status.failed and result.phase == "run" else "error"


def _side_by_side(request: MutateRequest, targets: list[str], run: Callable[[str], dict]) -> dict[str, dict]:
    """``run(target)`` for each target, up to ``request.jobs`` at once: {target: its result}."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(targets), request.jobs))) as threads:
        return dict(zip(targets, threads.map(run, targets)))


def plan(request: MutateRequest, results: ResultsFile, location: str, base: str, files: list[str],
         log: Callable[[str], None]) -> tuple[list[tuple[Mutant, str]], dict]:
    """Baselines (stored or run), then the selected (mutant, target) pairs, and what was not reached."""
    from harness.mutate.tracing import load_coverage_file

    focus = request.focus_s is not None and request.campaign == "fuzz"
    missing = [t for t in request.targets if t not in results.baselines]
    if missing:
        log(f"baseline campaign on {', '.join(missing)} (a pristine copy, line tracing on)...")
        runs = _side_by_side(request, missing, lambda t: covered_lines(
            request, t, location, base, trace=request.coverage_file is None or focus, attribute=focus))
        for target in missing:
            line_ops = runs[target].pop("line_ops")
            record = {"kind": "baseline", "target": target, **runs[target]}
            results.append(record)
            results.baselines[target] = record
            if focus:
                results.append(reach := {"kind": "reach", "target": target, "line_ops": line_ops})
                results.reach[target] = reach
    unattributed = [t for t in request.targets if focus and t not in results.reach]
    if unattributed:  # a results file from a run without --focus-s: the baseline campaign again, attributed
        log(f"which ops reach each line on {', '.join(unattributed)} (--focus-s: the baseline campaign again)...")
        runs = _side_by_side(request, unattributed, lambda t: covered_lines(request, t, location, base, attribute=True))
        for target in unattributed:
            results.append(reach := {"kind": "reach", "target": target, "line_ops": runs[target]["line_ops"]})
            results.reach[target] = reach
    given = load_coverage_file(request.coverage_file, base) if request.coverage_file else None
    covered = {t: {f: set(n) for f, n in (given or results.baselines[t]["lines"] or {}).items()}
               for t in request.targets}
    # lambdas that ran, per target; None (a coverage file): a lambda's line is enough
    called = {t: None if given else {f: set(n) for f, n in (results.baselines[t].get("calls") or {}).items()}
              for t in request.targets}

    readers: dict[str, tuple[set[str], set[str]]] = {}

    def read(target: str) -> tuple[set[str], set[str]]:
        """(names functions of the package read, those read on lines the target's baseline ran)."""
        if target not in readers:
            every, ran = set(), set()
            for file, lines in covered[target].items():
                path = Path(base, file)
                if path.suffix == ".py" and path.is_file():
                    in_file, on_lines = names_read(path.read_bytes(), lines)
                    every |= in_file
                    ran |= on_lines
            readers[target] = every, ran
        return readers[target]

    def reaches(target: str, mutant: Mutant) -> bool:
        span = set(range(mutant.line, mutant.end_line + 1))
        if not span & covered[target].get(mutant.file, set()):
            return False
        calls = called[target]
        return mutant.lambda_line is None or calls is None or mutant.lambda_line in calls.get(mutant.file, set())

    def data_read(target: str, mutant: Mutant) -> bool:
        """Data run at import is reached when code that ran reads it (or only code elsewhere reads it)."""
        names = set(mutant.data_names)
        if not names:
            return True
        every, ran = read(target)
        return not names & every or bool(names & ran)

    candidates: list[tuple[Mutant, str]] = []
    unreached: dict[str, int] = {}
    for file in files:
        source = Path(base, file).read_bytes()
        for mutant in mutants_of(source, file, request.operators):
            target = next((t for t in request.targets if reaches(t, mutant)), None)
            if target is None:
                unreached[file] = unreached.get(file, 0) + 1
            else:
                candidates.append((mutant, target))
    candidates.sort(key=lambda pair: pair[0].id)
    # a shuffle, then the first N: a larger --mutants later keeps these and adds more (the resumed
    # file's verdicts stay valid); the data rule filters after the shuffle, so that it only drops
    # mutants from an earlier sample
    random.Random(request.seed).shuffle(candidates)
    kept = []
    for mutant, target in candidates:
        target = next((t for t in request.targets if reaches(t, mutant) and data_read(t, mutant)), None)
        if target is None:
            unreached[mutant.file] = unreached.get(mutant.file, 0) + 1
        else:
            kept.append((mutant, target))
    candidates = kept
    return candidates[: request.mutants], {"candidates": len(candidates), "unreached": unreached}


def focus_ops(mutant: Mutant, line_ops: dict) -> list[str]:
    """The ops whose baseline graphs run a line of ``mutant`` most reliably (``Attribution``) ({file: {line: ops}}, lines as
    JSON keys), sorted; [] when none is known."""
    lines = line_ops.get(mutant.file) or {}
    return sorted({op for n in range(mutant.line, mutant.end_line + 1) for op in lines.get(str(n), ())})


def _focused_round(request: MutateRequest, results: ResultsFile, chosen: list[tuple[Mutant, str]], location: str,
                   base: str, log: Callable[[str], None]) -> None:
    """``--focus-s``: each survivor of the first round is fuzzed again for ``focus_s`` seconds on only
    the ops that reach its lines in the baseline (``focus_ops``): an op one graph in a hundred draws
    (a pooling mode, an argument combination) gets the whole budget. Its verdict replaces the first."""
    todo = []
    for mutant, target in chosen:
        first = results.done.get(mutant.id)
        if first is None or first["verdict"] != "survived" or "focus" in first:
            continue
        ops = focus_ops(mutant, results.reach[target]["line_ops"] or {})
        if ops:
            todo.append((mutant, target, ops))
    if not todo:
        return
    log(f"focused round: {len(todo)} survivors, {request.focus_s:g}s each on the ops that reach their lines")
    round_s = request.focus_s + START_S
    tasks = {f"mutant/{m.id}": (m, t, ops) for m, t, ops in todo}

    def record(result: Result) -> None:
        mutant, target, ops = tasks[result.name]
        entry = dict(results.done[mutant.id], verdict=verdict(result), status=str(result.status), how=result.error,
                     focus={"ops": ops, "seconds": request.focus_s, "graphs": result.cases,
                            "campaign_s": result.run_s, "wall_s": result.wall_s})
        results.append(entry)
        results.done[mutant.id] = entry
        log(f"[focused] {mutant.id} {mutant.file}:{mutant.line} on {len(ops)} ops: {entry['verdict']}"
            f"{' (' + result.error + ')' if result.error else ''}")

    _run_mutants(request, [_mutant_task(request, results, location, base, m, t, round_s, ops=",".join(ops),
                                        seconds=request.focus_s, graphs=None) for m, t, ops in todo],
                 round_s, record)


def _mutant_task(request: MutateRequest, results: ResultsFile, location: str, base: str, mutant: Mutant,
                 target: str, round_s: float, **settings: Any) -> MutantTask:
    """``mutant``'s campaign on ``target`` (its child stops at the first kill), ``settings`` over the
    request's; the baseline's signatures are no kill, its kernel cache the mutant's first (warm)."""
    return MutantTask(f"mutant/{mutant.id}", request.package, location, base,
                      Edit(mutant.file, mutant.start, mutant.end, mutant.replacement),
                      dict(request.settings(target), stop_early=True, **settings),
                      tuple(results.baselines[target]["signatures"]), round_s, request.workdir,
                      baseline_cache(request, target) if request.cache == "warm" else None)


def _run_mutants(request: MutateRequest, tasks: list[MutantTask], round_s: float,
                 record: Callable[[Result], None]) -> None:
    """``tasks`` on the single-host pool or the cluster, ``record`` called with each verdict."""
    from harness.cluster import open_executor

    config = WorkerConfig(target="eager", timeout_s=MAX_ROUNDS * round_s + 60, jobs=request.jobs, threads=1)
    with open_executor(config, request.cluster, request.mixed_versions) as executor:
        executor.run(tasks, record)


def run_analysis(request: MutateRequest, log: Callable[[str], None] = print, list_only: bool = False) -> dict:
    """The whole analysis; returns the summary ``harness.mutate.command.render`` prints (``list_only``:
    the baselines and the plan, ``{"chosen": [(mutant, target)]}``, no mutant run)."""
    from harness.targets import parse_target

    location, base = package_location(request.package)
    files = source_files(location, base, request.paths)
    results = ResultsFile(request.out, request.key(sources_digest(base, files)))
    chosen, reach = plan(request, results, location, base, files, log)
    todo = [(m, t) for m, t in chosen if m.id not in results.done]
    log(f"{len(chosen)} mutants selected of {reach['candidates']} on covered lines "
        f"({sum(reach['unreached'].values())} sites on lines no campaign reaches); {len(chosen) - len(todo)} done "
        f"in {request.out}, {len(todo)} to run on {request.cluster or f'{request.jobs} worker(s)'}")
    if list_only:
        return {"chosen": chosen, "reach": reach}
    round_s = (request.seconds if request.seconds is not None else
               3 * max(b["seconds"] for b in results.baselines.values())) + START_S
    mutants = {m.id: (m, t) for m, t in todo}
    tasks = [_mutant_task(request, results, location, base, m, t, round_s) for m, t in todo]
    started = time.monotonic()

    def record(result: Result) -> None:
        mutant, target = mutants[result.name.removeprefix("mutant/")]
        source = Path(base, mutant.file).read_bytes()
        entry = {"kind": "mutant", **mutant.to_dict(), "target": target,
                 "gpu_only": parse_target(target).device == "cuda", "verdict": verdict(result),
                 "status": str(result.status), "how": result.error, "graphs": result.cases,
                 "copy_s": result.build_s, "import_s": result.load_s, "campaign_s": result.run_s,
                 "wall_s": result.wall_s, "cache": request.cache, "diff": mutant.diff(source)}
        results.append(entry)
        results.done[mutant.id] = entry
        log(f"[{len(results.done)}/{len(chosen)}] {mutant.id} {mutant.file}:{mutant.line} {mutant.operator}: "
            f"{entry['verdict']}{' (' + result.error + ')' if result.error else ''}")

    if tasks:
        _run_mutants(request, tasks, round_s, record)
    if request.focus_s is not None and request.campaign == "fuzz":
        _focused_round(request, results, chosen, location, base, log)
    chosen_ids = {m.id for m, _ in chosen}
    return {"records": [r for i, r in results.done.items() if i in chosen_ids], "reach": reach,
            "baselines": results.baselines, "wall_s": time.monotonic() - started, "out": request.out}
