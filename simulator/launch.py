"""One checked launch end to end: snapshot, checked run, race analysis, order check, report.

The arguments are snapshotted before the launch (aliasing kept: one copy per storage). The
snapshot feeds the shuffled-order rerun and the repro file. A launch whose access log shows
no race and no atomic cannot depend on program order (each program is deterministic and
reads nothing another one writes), so by default the shuffled rerun happens only for
launches with atomics; ``shuffle="always"`` reruns every multi-program launch.
"""

from __future__ import annotations

import inspect
import linecache
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from compiler.interpreter import interpreted_function
from simulator.accounting import LaunchAccounting
from simulator.checked import (
    DEFAULT_STEP_BUDGET,
    SPIN_REPEATS,
    LaunchState,
    Patches,
    launch_accounting,
    run_grid,
)
from simulator.findings import Finding, Kind, SimulatorLivenessError, SimulatorMemoryError
from simulator.memory import ArgBuffer, shadow_for
from simulator.races import find_races

SHUFFLE_CHOICES = ("atomics", "always", "never")
SHUFFLE_SEED = 20240611

# Every finished checked launch is handed to these (simulator.session.Recorder registers here).
OBSERVERS: list[Callable[[LaunchReport], None]] = []


@dataclass
class LaunchReport:
    kernel: str
    findings: list[Finding]
    accounting: LaunchAccounting | None
    order_checked: bool = False
    repro: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings


def _interpreted(kernel: Any) -> Any:
    fn = getattr(kernel, "fn", kernel)
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise TypeError(f"expected a @triton.jit kernel or its Python function, got {type(kernel).__name__}")
    return interpreted_function(kernel)


def _snapshot(values: list[Any]) -> list[Any]:
    """Copies of the tensor values, aliasing between them kept (one clone per storage)."""
    clones: dict[int, torch.UntypedStorage] = {}
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            key = storage.data_ptr()
            if key not in clones:
                clones[key] = storage.clone()
            t = torch.empty(0, dtype=v.dtype)
            t.set_(clones[key], v.storage_offset(), v.size(), v.stride())
            out.append(t)
        else:
            out.append(v)
    return out


def _buffers(names: list[str], values: dict[str, Any]) -> dict[int, ArgBuffer]:
    buffers = {}
    for i, name in enumerate(names):
        v = values.get(name)
        if isinstance(v, torch.Tensor):
            if v.device.type != "cpu":
                raise ValueError(f"argument {name} is on {v.device}: the simulator runs kernels on CPU tensors")
            buffers[i] = ArgBuffer.of(i, name, v)
    return buffers


def check_launch(kernel: Any, grid: Any, args: tuple, meta: dict | None = None, *, shuffle: str = "atomics",
                 step_budget: int = DEFAULT_STEP_BUDGET, spin_repeats: int = SPIN_REPEATS,
                 raise_on_error: bool = True, repro_dir: Path | None = None) -> LaunchReport:
    """Run ``kernel[grid](*args, **meta)`` in the interpreter with every check on."""
    if shuffle not in SHUFFLE_CHOICES:
        raise ValueError(f"shuffle={shuffle!r}: choose one of {', '.join(SHUFFLE_CHOICES)}")
    meta = dict(meta or {})
    fn = _interpreted(kernel)
    names = list(fn.arg_names)
    try:
        bound = inspect.signature(fn.fn).bind_partial(*args, **{k: v for k, v in meta.items() if k in names})
    except TypeError as e:
        raise TypeError(f"kernel {fn.fn.__name__}: {e}") from None
    values = dict(bound.arguments)
    buffers = _buffers(names, values)
    positional = [values.get(n) for n in names[:len(args)]]
    snapshot_args = _snapshot(list(args))
    saved_shadows = {i: (s.written.copy() if (s := shadow_for(b.storage_lo)) is not None else None)
                     for i, b in buffers.items()}
    name = fn.fn.__name__
    state = LaunchState(name, inspect.getsourcefile(fn.fn) or "", buffers, step_budget, spin_repeats)
    del positional
    try:
        with Patches(state):
            size = run_grid(fn, grid, args, meta, state)
    except SimulatorLivenessError as e:
        e.repro = _save_repro(fn, grid, snapshot_args, meta, saved_shadows, buffers, repro_dir)
        raise
    findings = state.findings
    for race in find_races(state.log):
        first, other = race.pids
        owner = next((b for b in buffers.values() if b.lo <= race.address < b.hi), None)
        where = (f"{owner.describe()} at element offset {owner.element_offset(race.address):g}"
                 if owner is not None else f"address {race.address:#x}")
        verb = "also wrote" if race.kind == "write_write" else "read"
        line_w, line_o = race.lines
        source = linecache.getline(state.kernel_file, line_o) if line_o else ""
        findings.add(Finding(Kind.RACE_WRITE_WRITE if race.kind == "write_write" else Kind.RACE_READ_WRITE, name,
                             line_o, source, f"program {_pid(first, size)} wrote {where} (line {line_w}) and program "
                             f"{_pid(other, size)} {verb} it ({race.count} addresses): their order is undefined "
                             f"on a GPU", _pid(other, size), arg=owner.name if owner else None, access="race",
                             count=race.count))
    accounting = launch_accounting(state, size)
    programs = size[0] * size[1] * size[2]
    order_checked = False
    wants_rerun = shuffle == "always" or (shuffle == "atomics" and bool(state.log.atomics))
    if programs > 1 and wants_rerun and not findings:
        order_checked = True
        _check_order(fn, grid, args, snapshot_args, meta, buffers, state, step_budget, spin_repeats, size)
    report = LaunchReport(name, findings.all(), accounting, order_checked)
    if report.findings:
        report.repro = _save_repro(fn, grid, snapshot_args, meta, saved_shadows, buffers, repro_dir)
    for observer in OBSERVERS:
        observer(report)
    if report.findings and raise_on_error:
        raise SimulatorMemoryError(name, report.findings, report.repro, accounting)
    return report


def _pid(linear: int, size: tuple[int, int, int]) -> tuple[int, int, int]:
    return (linear % size[0], (linear // size[0]) % size[1], linear // (size[0] * size[1]))


def _check_order(fn: Any, grid: Any, args: tuple, snapshot_args: list, meta: dict, buffers: dict[int, ArgBuffer],
                 state: LaunchState, step_budget: int, spin_repeats: int, size: tuple[int, int, int]) -> None:
    rerun_args = _snapshot(snapshot_args)
    rerun_meta = dict(meta)
    shadow_state = LaunchState(state.kernel, state.kernel_file, _buffers(list(fn.arg_names), {
        **dict(zip(fn.arg_names, rerun_args)), **rerun_meta}), step_budget, spin_repeats)
    try:
        with Patches(shadow_state):
            run_grid(fn, grid, tuple(rerun_args), rerun_meta, shadow_state, shuffle_seed=SHUFFLE_SEED)
    except SimulatorLivenessError as e:
        state.findings.add(Finding(Kind.ORDER_DEPENDENT, state.kernel, None, "",
                                   f"never finishes when its programs run in a shuffled order: {e.findings[0].message}"))
        return
    for original, rerun in zip(args, rerun_args):
        if not isinstance(original, torch.Tensor):
            continue
        a = original.detach().reshape(-1).view(torch.uint8) if original.is_contiguous() else None
        b = rerun.detach().reshape(-1).view(torch.uint8) if original.is_contiguous() else None
        if a is None:
            a, b = original.detach().clone().reshape(-1).view(torch.uint8), rerun.detach().clone().reshape(-1).view(
                torch.uint8)
        diff = (a != b).nonzero()
        if diff.numel():
            buf = next(x for x in buffers.values() if x.base == original.data_ptr() and x.shape == tuple(original.shape))
            element = int(diff[0]) // original.element_size()
            state.findings.add(Finding(Kind.ORDER_DEPENDENT, state.kernel, None, "",
                                       f"{buf.describe()} differs at element {element} (and {diff.numel()} bytes in "
                                       f"all) when the programs run in a shuffled order", arg=buf.name))


def _save_repro(fn: Any, grid: Any, args: list, meta: dict, shadows: dict, buffers: dict[int, ArgBuffer],
                repro_dir: Path | None) -> str | None:
    """Write the launch (kernel location, arguments before it ran) to a file; the command that replays it."""
    import hashlib
    import pickle

    if callable(grid):
        return None  # a grid function may close over anything: no faithful file for it
    from compiler import config

    directory = repro_dir or config.cache_root() / "sim-repros"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        doc = {"file": inspect.getsourcefile(fn.fn), "name": fn.fn.__name__, "grid": tuple(grid), "args": args,
               "meta": meta, "uninitialized": {buffers[i].name: s for i, s in shadows.items() if s is not None}}
        blob = pickle.dumps({k: v for k, v in doc.items() if k != "args"}) + repr(
            [(tuple(a.shape), str(a.dtype)) if isinstance(a, torch.Tensor) else a for a in args]).encode()
        path = directory / f"{fn.fn.__name__}-{hashlib.sha256(blob).hexdigest()[:12]}.pt"
        torch.save(doc, path)
    except Exception:  # noqa: BLE001 -- a repro file is a convenience; the report stands without it
        return None
    return f"python -m simulator repro {path}"
