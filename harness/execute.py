"""Run one corpus entry on one target, in the current process, and grade it.

The order is fixed: build -> eager twice -> float64 reference -> capture analysis
-> compile (first call) -> run (second call) -> parity oracle. ``on_phase`` is
told each phase as it starts, so the parent process knows where a worker was
when it crashed, hung or was killed for memory.

Model and compiler code can raise anything, and every exception is a result to
record, not a harness bug: hence the broad ``except Exception`` clauses.
"""

from __future__ import annotations

import copy
import re
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from corpus.entry import Entry, EntryUnavailable
from harness.capture import analyze_capture, count_eager_ops
from harness.compile_reasons import entry_fields
from harness.oracle import ParityOracle, outputs_identical
from harness.status import Status
from harness.targets import REFERENCE_CHOICES, Target, TargetUnavailable, check_available, compile_model
from simulator.session import for_entry, is_memory_error

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}


def _cast(value: Any, device: str, dtype: torch.dtype | None) -> Any:
    """Move tensors to ``device``; floating tensors also to ``dtype`` (when given)."""
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device=device)
    if isinstance(value, (list, tuple)):
        cast = [_cast(v, device, dtype) for v in value]
        return type(value)(cast) if not hasattr(value, "_fields") else type(value)(*cast)
    if isinstance(value, dict):
        return type(value)((k, _cast(v, device, dtype)) for k, v in value.items())
    return value


def _prepare(model: Any, device: str, dtype: torch.dtype | None) -> Any:
    model = _copy(model)
    if isinstance(model, torch.nn.Module):
        model = model.to(device=device)
        if dtype is not None:
            model = model.to(dtype=dtype)
    return model


def _copy(model: Any) -> Any:
    # Each run gets its own copy so in-place updates of buffers (running stats,
    # caches) in one run cannot change the next run's result.
    try:
        return copy.deepcopy(model)
    except Exception:  # noqa: BLE001
        return model


def _innermost(exc: BaseException) -> BaseException:
    """The root error: Dynamo wraps a backend's exception (BackendCompilerFailed.inner_exception)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(one-line message, traceback tail) for a result record."""
    inner = _innermost(exc)
    first = (str(inner).strip().splitlines() or [""])[0]
    line = f"{type(inner).__name__}: {first}"[:500]
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return line, detail[-4000:]


def is_oom(exc: BaseException) -> bool:
    inner = _innermost(exc)
    if isinstance(inner, MemoryError) or type(inner).__name__ == "OutOfMemoryError":
        return True
    return bool(re.search(r"out of memory|can't allocate memory|std::bad_alloc", str(inner), re.IGNORECASE))


def is_compile_error(exc: BaseException) -> bool:
    """Errors raised by Dynamo or by a backend while compiling (vs. running compiled code)."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(exc, (TorchDynamoException, TargetUnavailable))


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _call(model: Any, args: tuple, kwargs: dict, seed: int) -> Any:
    torch.manual_seed(seed)
    return model(*args, **kwargs)


def _fresh(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    # A model may mutate its inputs in place: every run gets its own copy.
    return _copy(args), _copy(kwargs)


def execute_entry(entry: Entry, target: Target, on_phase: Callable[[str], None] = lambda p: None,
                  capture: bool = True, reference: str = "auto") -> dict[str, Any]:
    """Run ``entry`` on ``target``; returns a result record (see harness.store for fields).

    ``reference`` says where the float64 reference runs (``harness.targets.REFERENCE_CHOICES``)."""
    if reference not in REFERENCE_CHOICES:
        raise ValueError(f"reference={reference!r}: choose one of {', '.join(REFERENCE_CHOICES)}")
    result: dict[str, Any] = {"name": entry.name, "target": target.name, "status": None, "phase": "build"}
    if target.device not in entry.devices:
        result.update(status=Status.SKIPPED, error=f"entry does not run on {target.device}")
        return result
    if target.device == "cuda" and not torch.cuda.is_available():
        result.update(status=Status.SKIPPED, error=f"{target.name} needs a CUDA GPU and none is available")
        return result
    torch._dynamo.reset()
    simulation = for_entry(target.name, on_phase)  # crucible-sim: kernels run checked, bytes counted
    try:
        with torch.no_grad():
            _execute(entry, target, result, simulation.phase if simulation else on_phase, capture, reference)
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
             capture: bool, reference_where: str) -> None:
    clock = {"phase": None, "start": time.perf_counter()}

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
        built = entry.build("full" if device == "cuda" else "small")
        model = _prepare(built.model, device, dtype)
        args, kwargs = _cast(built.inputs, device, dtype), _cast(built.kwargs, device, dtype)
    except EntryUnavailable as exc:
        result.update(status=Status.SKIPPED, error=f"unavailable here: {exc}")
        return None
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.EAGER_FAIL, exc)

    phase("eager")
    try:
        first = _copy(model)  # copied outside the op counter: copying dispatches ops too
        eager_ops, eager_out = count_eager_ops(lambda *a, **k: _call(first, a, k, entry.seed),
                                               *_fresh(args, kwargs))
        _synchronize(device)
        eager_again = _call(_copy(model), *_fresh(args, kwargs), entry.seed)
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.EAGER_FAIL, exc)
    deterministic = outputs_identical(eager_out, eager_again)
    del eager_again

    phase("reference")
    reference = _reference(built, entry.seed, target.device, reference_where, result)

    if capture:
        phase("capture")
        try:
            torch._dynamo.reset()
            cap, _ = analyze_capture(_copy(model), *_fresh(args, kwargs))
            cap.eager_ops = eager_ops
            result.update(graphs=cap.graphs, graph_breaks=cap.graph_breaks,
                          capture_coverage=cap.coverage, captured_ops=cap.captured_ops, eager_ops=eager_ops,
                          break_reasons=[{"reason": b.reason, "category": b.category, "frame": b.frame}
                                         for b in cap.breaks])
        except Exception as exc:  # noqa: BLE001 -- capture analysis is information, not the verdict
            result["capture_error"] = describe_error(exc)[0]
        finally:
            torch._dynamo.reset()

    if not deterministic:
        result.update(status=Status.EAGER_NONDETERMINISTIC, error="two eager runs gave different outputs")
        return None
    _compile_and_compare(entry, target, model, args, kwargs, eager_out, reference, result, phase)
    return None


def _reference(built: Any, seed: int, device: str, where: str, result: dict) -> Any:
    """The model's outputs in float64, or None; ``result["reference"]`` says where they were
    computed or why there are none (the oracle compares on the CPU either way)."""
    if where == "none":
        result["reference"] = "none (not requested)"
        return None
    devices = {"cpu": ["cpu"], "device": [device], "auto": list(dict.fromkeys([device, "cpu"]))}[where]
    errors = []
    for dev in devices:
        try:
            model64 = _prepare(built.model, dev, torch.float64)
            out = _call(model64, _cast(built.inputs, dev, torch.float64), _cast(built.kwargs, dev, torch.float64),
                        seed)
            _synchronize(dev)
            result["reference"] = "float64" if dev == "cpu" else f"float64 on {dev}"
            return out
        except Exception as exc:  # noqa: BLE001 (e.g. no float64 kernel: compare with eager only)
            errors.append(f"{dev}: {describe_error(exc)[0][:200]}")
        finally:
            model64 = None
            if dev == "cuda":
                torch.cuda.empty_cache()
    result["reference"] = f"none ({'; '.join(errors)})"
    return None


def _compile_and_compare(entry: Entry, target: Target, model: Any, args: tuple, kwargs: dict,
                         eager_out: Any, reference: Any, result: dict, phase: Callable[[str], None]) -> None:
    device = target.device
    phase("compile")
    reports = _collector(target)
    try:
        check_available(target)
        with reports as rep:
            try:
                compiled = compile_model(target, _copy(model))
                call_args, call_kwargs = _fresh(args, kwargs)
                start = time.perf_counter()
                out = _call(compiled, call_args, call_kwargs, entry.seed)
                _synchronize(device)
                result["compile_s"] = time.perf_counter() - start
            finally:  # graphs compiled before a failure still count
                if rep is not None:  # counts, extern ops and their reasons, fallbacks, refusals
                    result.update(entry_fields(rep))
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.FAIL_COMPILE if is_compile_error(exc) else Status.FAIL_RUN, exc)

    phase("run")
    try:
        call_args, call_kwargs = _fresh(args, kwargs)
        start = time.perf_counter()
        _call(compiled, call_args, call_kwargs, entry.seed)
        _synchronize(device)
        result["run_s"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.FAIL_RUN, exc)

    phase("compare")
    oracle = ParityOracle(entry.dtype, entry.tolerance_for(entry.dtype))
    parity = oracle.compare(eager_out, out, reference)
    result.update(max_abs_err=parity.max_abs_err, max_rel_err=parity.max_rel_err,
                  rmse_ratio=parity.rmse_ratio, cosine=parity.cosine)
    if parity.passed:
        result["status"] = Status.PASS
    else:
        result.update(status=Status.FAIL_ACCURACY, error=parity.reason)
    return None


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
