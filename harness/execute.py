"""Run one corpus entry on one target, in the current process, and grade it.

The order is fixed: build -> eager twice -> float64 reference -> capture analysis
-> compile (first call) -> run (second call) -> parity oracle. A crucible target's capture
analysis rides along its compile (``harness.capture.CaptureProbe``: Dynamo traces the model
once); where that compile does not finish its first call (or the entry stops before it),
the capture analysis runs on its own, as for every other target. In train mode the
first call's phases are ``forward`` and ``backward`` (AOTAutograd compiles the
backward graph at the first backward). ``on_phase`` is told each phase as it
starts, so the parent process knows where a worker was when it crashed, hung or
was killed for memory.

Model and compiler code can raise anything, and every exception is a result to
record, not a harness bug: hence the broad ``except Exception`` clauses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from corpus.entry import Entry, EntryUnavailable
from harness.capture import CaptureProbe, CaptureResult, analyze_capture, count_eager_ops
from harness.compile_reasons import entry_fields
# errors and model runs live in their own modules; their names stay importable from here
from harness.errors import describe_error, is_compile_error, is_oom
from harness.model_runs import (DTYPES, ModelCopies, StepOutput, _TRAIN_PARAMS, _call, _cast, _fresh,
                                _identical, _reference, _step, _synchronize)
from harness.oracle import ParityOracle, working_precision
from harness.shapes import dynamo_counters, size_variants
from harness.status import Status
from harness.targets import REFERENCE_CHOICES, Target, check_available, compile_model
from simulator.session import for_entry, is_memory_error
from harness.training import MODES, NoGradient

__all__ = ["DTYPES", "ModelCopies", "StepOutput", "describe_error", "execute_entry", "is_compile_error",
           "is_oom"]

@dataclass
class _Variant:
    """One input size: ``batch`` is None when the entry runs at its built size only."""

    batch: int | None
    args: tuple
    kwargs: dict


def execute_entry(entry: Entry, target: Target, on_phase: Callable[[str], None] = lambda p: None,
                  capture: bool = True, reference: str = "auto", mode: str = "inference",
                  dynamic: bool = False, allow_tf32: bool = False) -> dict[str, Any]:
    """Run ``entry`` on ``target``; returns a result record (see harness.store for fields).

    ``reference`` says where the float64 reference runs (``harness.targets.REFERENCE_CHOICES``);
    ``mode`` is ``inference`` or ``train`` (forward, seeded loss, backward; gradients graded);
    ``dynamic`` compiles with dynamic shapes and grades every size of ``harness.shapes``;
    ``allow_tf32`` keeps torch's TF32 flags instead of grading float32 at full precision
    (``harness.oracle.working_precision``)."""
    if reference not in REFERENCE_CHOICES:
        raise ValueError(f"reference={reference!r}: choose one of {', '.join(REFERENCE_CHOICES)}")
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: choose one of {', '.join(MODES)}")
    result: dict[str, Any] = {"name": entry.name, "target": target.name, "status": None, "phase": "build",
                              "mode": mode, "dynamic": int(dynamic)}
    if target.device not in entry.devices:
        result.update(status=Status.SKIPPED, error=f"entry does not run on {target.device}")
        return result
    if target.device == "cuda" and not torch.cuda.is_available():
        result.update(status=Status.SKIPPED, error=f"{target.name} needs a CUDA GPU and none is available")
        return result
    torch._dynamo.reset()
    simulation = for_entry(target.name, on_phase)  # crucible-sim: kernels run checked, bytes counted
    try:
        with torch.no_grad(), working_precision(allow_tf32):  # train mode re-enables grad inside its step
            _execute(entry, target, result, simulation.phase if simulation else on_phase, capture, reference,
                     dynamic)
    finally:
        torch._dynamo.reset()
        if simulation:
            simulation.close(result)
    xfail = entry.expected_failure(target.name)
    if xfail is not None and result["status"] == xfail.status:
        result["status"] = Status.XFAIL
        result["error"] = f"expected {xfail.status}: {xfail.reason}; got: {result.get('error', '')}"
    return result


def _fail(result: dict, status: str, exc: BaseException) -> None:
    result["status"] = Status.OOM if is_oom(exc) else Status.FAIL_MEMORY if is_memory_error(exc) else status
    result["error"], result["error_detail"] = describe_error(exc)


def _execute(entry: Entry, target: Target, result: dict, on_phase: Callable[[str], None],
             capture: bool, reference_where: str, dynamic: bool) -> None:
    clock = {"phase": None, "start": time.perf_counter()}
    mode = result["mode"]

    def phase(name: str) -> None:
        # Seconds per phase (build_s, eager_s, reference_s, capture_s) show where an
        # entry's wall time goes; compile_s and run_s are measured around the calls.
        now = time.perf_counter()
        if clock["phase"] in ("build", "eager", "reference", "capture"):
            result[f"{clock['phase']}_s"] = now - clock["start"]
        clock.update(phase=name, start=now)
        result["phase"] = name
        on_phase(name)

    device = target.device
    dtype = DTYPES.get(entry.dtype)
    phase("build")
    try:
        scale = "full" if device == "cuda" else "small"
        built = entry.build(scale)
        models = ModelCopies(entry, scale, built.model)
        model = models.fresh(device, dtype)
        sizes = size_variants(built.inputs, built.kwargs) if dynamic else [(None, built.inputs, built.kwargs)]
        variants = [_Variant(b, _cast(a, device, dtype), _cast(k, device, dtype)) for b, a, k in sizes]
    except EntryUnavailable as exc:
        result.update(status=Status.SKIPPED, error=f"unavailable here: {exc}")
        return None
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.EAGER_FAIL, exc)
    args, kwargs = variants[0].args, variants[0].kwargs

    phase("eager")
    try:
        # ATen ops of the forward (what capture coverage is measured against), counted on a copy
        # made outside the op counter: copying dispatches ops too.
        first = model if mode == "inference" else models.fresh(device, dtype)
        eager_ops, counted = count_eager_ops(lambda *a, **k: _call(first, a, k, entry.seed), *_fresh(args, kwargs))
        # inference: the counted run is the first eager run; train mode runs its own (with backward)
        eager = [StepOutput(counted)] if mode == "inference" else []
        try:
            eager += [_step(mode, models.fresh(device, dtype), *_fresh(v.args, v.kwargs), entry.seed)
                      for v in variants[len(eager):1]]
        except NoGradient:
            raise
        except Exception as exc:
            if mode != "train":
                raise
            mode = _TRAIN_PARAMS  # retried below with the parameters' gradients only
            try:
                eager = [_step(mode, models.fresh(device, dtype), *_fresh(args, kwargs), entry.seed)]
            except NoGradient:
                raise exc from None  # no parameters either: eager's own failure is the result
            result["grad_note"] = (f"gradients of parameters only: with inputs requiring grad eager "
                                   f"failed ({describe_error(exc)[0][:200]})")
        _synchronize(device)
        eager_again = _step(mode, models.fresh(device, dtype), *_fresh(args, kwargs), entry.seed)
    except NoGradient as exc:
        result.update(status=Status.SKIPPED, error=f"train mode: {exc}")
        return None
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.EAGER_FAIL, exc)
    finally:
        first = None
    deterministic = _identical(eager[0], eager_again)
    del eager_again
    if len(variants) > 1:
        variants, sizes = _eager_sizes(entry, models, mode, device, dtype, variants, sizes, eager, result)
    if models.copy_error:
        result["model_copy"] = f"rebuilt from the seeded factory for every run (deepcopy failed: " \
                               f"{models.copy_error})"

    phase("reference")
    references = _reference(models, [(b, a, k) for b, a, k in sizes], entry.seed, device, reference_where,
                            result, mode)

    def capture_apart(late: bool = False) -> None:
        # ``late``: after a compile that failed, whose record keeps the phase it failed in
        where = result["phase"]
        phase("capture")
        try:
            torch._dynamo.reset()
            cap, _ = analyze_capture(models.fresh(device, dtype), *_fresh(args, kwargs))
            _record_capture(result, cap, eager_ops)
        except Exception as exc:  # noqa: BLE001 -- capture analysis is information, not the verdict
            result["capture_error"] = describe_error(exc)[0]
        finally:
            torch._dynamo.reset()
            result["capture_s"] = time.perf_counter() - clock["start"]
            if late:
                result["phase"] = where

    probe = CaptureProbe() if capture and target.is_crucible else None
    if capture and probe is None:
        capture_apart()
    if not deterministic:
        result.update(status=Status.EAGER_NONDETERMINISTIC, error="two eager runs gave different outputs")
        if probe is not None:
            capture_apart()
        return None
    del model
    _compile_and_compare(entry, target, models, variants, eager, references, result, phase, dynamic, mode, probe)
    if probe is not None and probe.finished:
        _record_capture(result, probe.finish(), eager_ops)
    elif probe is not None:
        capture_apart(late=True)  # the compile stopped before its first call returned
    return None


def _record_capture(result: dict, cap: CaptureResult, eager_ops: int) -> None:
    cap.eager_ops = eager_ops
    result.update(graphs=cap.graphs, graph_breaks=cap.graph_breaks, capture_coverage=cap.coverage,
                  captured_ops=cap.captured_ops, eager_ops=eager_ops,
                  break_reasons=[{"reason": b.reason, "category": b.category, "frame": b.frame}
                                 for b in cap.breaks])


def _eager_sizes(entry: Entry, models: ModelCopies, mode: str, device: str, dtype: torch.dtype | None,
                 variants: list[_Variant], sizes: list, eager: list[StepOutput], result: dict) -> tuple[list, list]:
    """--dynamic: eager at the further batch sizes (appended to ``eager``). A size eager fails at is
    dropped and noted, not an eager failure: the leading dimension of an op's input need not be a
    batch (a square matrix for cholesky)."""
    kept, notes = [0], []
    for i in range(1, len(variants)):
        try:
            eager.append(_step(mode, models.fresh(device, dtype), *_fresh(variants[i].args, variants[i].kwargs),
                               entry.seed))
            kept.append(i)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"batch {variants[i].batch} dropped: eager fails at it ({describe_error(exc)[0][:160]})")
    if notes:
        result["dynamic_note"] = "; ".join(notes)
    return [variants[i] for i in kept], [sizes[i] for i in kept]


def _grade(entry: Entry, eager: StepOutput, compiled: StepOutput, reference: StepOutput | None) -> dict:
    """Oracle verdict on outputs and (train mode) gradients: metric fields plus ``passed``/``reason``."""
    oracle = ParityOracle(entry.dtype, entry.tolerance_for(entry.dtype))
    parity = oracle.compare(eager.out, compiled.out, reference.out if reference is not None else None)
    graded = {"max_abs_err": parity.max_abs_err, "max_rel_err": parity.max_rel_err,
              "rmse_ratio": parity.rmse_ratio, "cosine": parity.cosine,
              "passed": parity.passed, "reason": parity.reason}
    if eager.grads is not None:
        grads = oracle.compare(eager.grads, compiled.grads or {},
                               reference.grads if reference is not None else None)
        graded.update(grad_max_abs_err=grads.max_abs_err, grad_max_rel_err=grads.max_rel_err,
                      grad_rmse_ratio=grads.rmse_ratio, grad_cosine=grads.cosine, grads=len(eager.grads))
        if graded["passed"] and not grads.passed:
            graded.update(passed=False, reason=f"gradient {grads.reason}")
    return graded


def _compile_and_compare(entry: Entry, target: Target, models: ModelCopies, variants: list[_Variant],
                         eager: list[StepOutput], references: list[StepOutput | None], result: dict,
                         phase: Callable[[str], None], dynamic: bool, mode: str,
                         probe: CaptureProbe | None = None) -> None:
    device = target.device
    dtype = DTYPES.get(entry.dtype)
    args, kwargs = variants[0].args, variants[0].kwargs
    phase("compile" if mode == "inference" else "forward")
    reports = _collector(target)
    try:
        check_available(target)
        with reports as rep:
            try:
                compiled = compile_model(target, models.fresh(device, dtype), dynamic=dynamic,
                                         wrap=probe.wrap if probe is not None else None)
                graphs_before, failures_before = dynamo_counters()
                start = time.perf_counter()
                out = _step(mode, compiled, *_fresh(args, kwargs), entry.seed, lambda: phase("backward"))
                _synchronize(device)
                result["compile_s"] = time.perf_counter() - start
                if probe is not None:  # the capture is the first call's: later calls do not count
                    probe.finish()
                if mode != "inference":
                    result["backward_graphs"] = out.backward_graphs
            finally:  # graphs compiled before a failure still count
                if rep is not None:  # counts, extern ops and their reasons, fallbacks, refusals
                    result.update(entry_fields(rep))
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.FAIL_COMPILE if is_compile_error(exc) else Status.FAIL_RUN, exc)

    phase("run")
    try:
        call_args, call_kwargs = _fresh(args, kwargs)
        start = time.perf_counter()
        _step(mode, compiled, call_args, call_kwargs, entry.seed)
        _synchronize(device)
        result["run_s"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.FAIL_RUN, exc)

    phase("compare")
    graded = _grade(entry, eager[0], out, references[0])
    if not dynamic:
        _verdict(result, graded)
        return None
    _compare_sizes(entry, target, compiled, variants, eager, references, result, phase, graded,
                   (graphs_before, failures_before), mode)
    return None


def _verdict(result: dict, graded: dict) -> None:
    result.update({k: v for k, v in graded.items() if k not in ("passed", "reason")})
    if graded["passed"]:
        result["status"] = Status.PASS
    else:
        result.update(status=Status.FAIL_ACCURACY, error=graded["reason"])


def _compare_sizes(entry: Entry, target: Target, compiled: Any, variants: list[_Variant],
                   eager: list[StepOutput], references: list[StepOutput | None], result: dict,
                   phase: Callable[[str], None], first: dict, counters_before: tuple[int, int], mode: str) -> None:
    """--dynamic: run the compiled model at every further size; grade each; record recompiles.

    ``recompiles`` counts the graphs Dynamo compiled after the first size (a backend that handles
    symbolic shapes compiles none for sizes >= 2); ``guard_failures`` the guards that failed."""
    graphs_first = dynamo_counters()[0] - counters_before[0]
    per_size = [{"batch": variants[0].batch, "status": Status.PASS if first["passed"] else Status.FAIL_ACCURACY,
                 "rmse_ratio": first["rmse_ratio"], "grad_rmse_ratio": first.get("grad_rmse_ratio"),
                 "graphs": graphs_first, "error": first["reason"] or None}]
    worst = (None, first) if first["passed"] else (Status.FAIL_ACCURACY, first)
    for i, variant in enumerate(variants[1:], start=1):
        phase("run")
        graphs_before = dynamo_counters()[0]
        try:
            out = _step(mode, compiled, *_fresh(variant.args, variant.kwargs), entry.seed)
            _synchronize(target.device)
            phase("compare")
            graded = _grade(entry, eager[i], out, references[i])
            status = Status.PASS if graded["passed"] else Status.FAIL_ACCURACY
            row = {"batch": variant.batch, "status": status, "rmse_ratio": graded["rmse_ratio"],
                   "grad_rmse_ratio": graded.get("grad_rmse_ratio"), "error": graded["reason"] or None}
        except Exception as exc:  # noqa: BLE001
            status = Status.OOM if is_oom(exc) else Status.FAIL_COMPILE if is_compile_error(exc) else Status.FAIL_RUN
            graded = {"passed": False, "reason": describe_error(exc)[0], "detail": describe_error(exc)[1]}
            row = {"batch": variant.batch, "status": status, "error": graded["reason"]}
        row["graphs"] = dynamo_counters()[0] - graphs_before
        per_size.append(row)
        if status != Status.PASS and worst[0] is None:
            worst = (status, graded)
    graphs_now, failures_now = dynamo_counters()
    result.update(sizes=per_size, recompiles=graphs_now - counters_before[0] - graphs_first,
                  guard_failures=failures_now - counters_before[1])
    _verdict(result, first)
    if worst[0] is not None:
        batch = per_size[[r["status"] for r in per_size].index(worst[0])]["batch"]
        result.update(status=worst[0], error=f"at batch {batch}: {worst[1]['reason']}",
                      error_detail=worst[1].get("detail"))
    if len(variants) == 1 and variants[0].batch is None:
        result["dynamic_note"] = "no common batch dimension: ran at the built size only"


class _NoReports:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _collector(target: Target) -> Any:
    """Collect crucible's compile reports (kernels, extern ops with reasons, fallbacks, refused
    fusions) when it can report them."""
    if not target.is_crucible:
        return _NoReports()
    try:
        from compiler.report import collect_reports
    except Exception:  # noqa: BLE001
        return _NoReports()
    return collect_reports()
