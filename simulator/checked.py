"""Checked execution of one Triton launch in the interpreter.

While a launch runs, the interpreter's builder is patched (and restored after): loads,
stores and atomics check every active lane against the argument its pointer derives
from, refuse the bad lanes (so a bad access never touches host memory), poison
masked-off lanes of loads without ``other`` and log each access with its program id.
After the grid has run, the access log gives races between program ids and the
launch's byte accounting; optionally the grid runs again, in a shuffled order on
copies of the arguments, and any output that changes is a finding.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from compiler.interpreter import without_dead_overflow_checks
from simulator.accounting import LaunchAccounting
from simulator.findings import Finding, FindingLog, Kind, SimulatorLivenessError, SimulatorMemoryError
from simulator.memory import ArgBuffer, InitShadow, shadow_for
from simulator.races import AccessLog
from simulator.shadow import MEMORY_OPS, MIXED, PROV, TAINT, prov_of, set_taint, taint_of, wrap_builder_op

# Builder calls one program may make before it counts as not finishing. The largest smoke-tier
# program makes a few thousand; a spin loop makes millions within seconds.
DEFAULT_STEP_BUDGET = 2_000_000
# Identical atomic/volatile observations in a row (same addresses, same values, no store in
# between) after which a program is spinning on a condition only another program could change.
SPIN_REPEATS = 1000
_SKIP_DIRS = tuple(os.path.dirname(m.__file__) for m in (np, torch) if getattr(m, "__file__", None)) + (
    os.path.dirname(__file__),)


class LaunchState:
    """Everything one checked launch learns."""

    def __init__(self, kernel: str, kernel_file: str, buffers: dict[int, ArgBuffer], step_budget: int,
                 spin_repeats: int) -> None:
        import triton

        self.kernel = kernel
        self.kernel_file = kernel_file
        self.buffers = buffers  # parameter index -> its tensor argument
        self.args = list(buffers.values())
        self.findings = FindingLog()
        self.log = AccessLog()
        self.flops = 0
        self.dot_flops = 0
        self.steps = 0
        self.step_budget = step_budget
        self.spin_repeats = spin_repeats
        self.pid = (0, 0, 0)
        self.pid_linear = 0
        self.shadows: dict[int, InitShadow] = {}
        for buf in self.args:
            shadow = shadow_for(buf.storage_lo)
            if shadow is not None:
                self.shadows[buf.index] = shadow
        self._spin: tuple[Any, int] = (None, 0)
        self._triton_dir = os.path.dirname(triton.__file__)

    # -- liveness -----------------------------------------------------------
    def begin_program(self, pid: tuple[int, int, int], linear: int) -> None:
        self.pid, self.pid_linear, self.steps, self._spin = pid, linear, 0, (None, 0)

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.step_budget:
            self._not_finishing(f"made more than {self.step_budget:,} interpreter operations without finishing "
                                f"(an endless loop under sequential semantics)")

    def observe_spin(self, signature: Any) -> None:
        last, repeats = self._spin
        repeats = repeats + 1 if signature == last else 1
        self._spin = (signature, repeats)
        if repeats >= self.spin_repeats:
            self._not_finishing(f"spins: the same atomic/volatile access returned the same values {repeats} times "
                                f"in a row; it waits for a program that, run one at a time, has not started")

    def store_seen(self) -> None:
        self._spin = (None, 0)

    def _not_finishing(self, message: str) -> None:
        line, source = self.where()
        self.findings.add(Finding(Kind.LIVENESS, self.kernel, line, source, message, self.pid))
        raise SimulatorLivenessError(self.kernel, self.findings.all())

    # -- reporting ----------------------------------------------------------
    def where(self) -> tuple[int | None, str]:
        """The kernel source line executing now: the innermost frame outside triton, numpy and us."""
        frame = sys._getframe(1)
        while frame is not None:
            path = frame.f_code.co_filename
            if not path.startswith(self._triton_dir) and not path.startswith(_SKIP_DIRS):
                return frame.f_lineno, linecache.getline(path, frame.f_lineno)
            frame = frame.f_back
        return None, ""

    def report(self, kind: str, message: str, lanes: np.ndarray, shape: tuple[int, ...], arg: str | None,
               access: str) -> None:
        """One finding for the lanes where ``lanes`` (a flat index array into a block of ``shape``) is set."""
        line, source = self.where()
        first = tuple(int(i) for i in np.unravel_index(int(lanes[0]), shape)) if shape else ()
        self.findings.add(Finding(kind, self.kernel, line, source, message, self.pid, first, arg, access,
                                  int(lanes.size)))

    def owner(self, address: int, itemsize: int, exclude: int | None = None) -> ArgBuffer | None:
        for buf in self.args:
            if buf.index != exclude and buf.lo <= address and address + itemsize <= buf.hi:
                return buf
        return None


def _element_ty(ptrs: Any) -> Any:
    getter = getattr(ptrs, "get_element_ty", None)  # older interpreters: no helper
    return getter() if getter is not None else ptrs.dtype.element_ty


def _itemsize(ptrs: Any) -> int:
    return max(1, _element_ty(ptrs).primitive_bitwidth // 8)


def _poison(shape: tuple[int, ...], np_dtype: np.dtype) -> np.ndarray:
    if np_dtype.kind == "f":
        return np.full(shape, np.nan, dtype=np_dtype)
    if np_dtype.kind == "b":
        return np.ones(shape, dtype=np_dtype)
    return np.full(shape, np.iinfo(np_dtype).max, dtype=np_dtype)  # drives a derived index far out of bounds


def check_lanes(state: LaunchState, ptrs: Any, mask: Any, access: str) -> tuple[np.ndarray, np.ndarray]:
    """(lanes allowed to run, lanes refused) for one access: bounds, provenance, poisoned addresses."""
    addrs = ptrs.data
    shape = np.shape(addrs)
    active = np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(mask.data, shape).astype(bool)
    isz = _itemsize(ptrs)
    prov = prov_of(ptrs)
    flat_active = np.flatnonzero(active)
    a = addrs.reshape(-1)[flat_active]
    if prov is not None and prov != MIXED:
        buf = state.buffers[prov]
        inside = buf.contains(a, isz)
        bad = np.flatnonzero(~inside)
        if bad.size:
            _report_bounds(state, buf, a, bad, flat_active, shape, isz, access)
    else:  # no provenance (an integer turned into a pointer, or a select of two arguments' pointers)
        inside = np.zeros(a.shape, dtype=bool)
        for buf in state.args:
            inside |= buf.contains(a, isz)
        bad = np.flatnonzero(~inside)
        if bad.size:
            first = int(a[bad[0]])
            state.report(Kind.OUT_OF_BOUNDS, f"{access} at address {first:#x} inside no argument of the launch",
                         flat_active[bad], shape, None, access)
    pt = taint_of(ptrs)
    if pt is not None:
        poisoned = np.broadcast_to(pt, shape).reshape(-1)[flat_active] & inside
        if poisoned.any():
            name = state.buffers[prov].name if prov is not None and prov != MIXED else None
            state.report(Kind.POISON, f"{access} through an address computed from a masked-off lane's value",
                         flat_active[np.flatnonzero(poisoned)], shape, name, access)
    allowed = np.zeros(shape, dtype=bool)
    allowed.reshape(-1)[flat_active[inside]] = True
    refused = active & ~allowed
    return allowed, refused


def _bytes(n: int, itemsize: int) -> str:
    elements = n / itemsize
    return f"{n} bytes ({elements:g} element{'' if elements == 1 else 's'})"


def _report_bounds(state: LaunchState, buf: ArgBuffer, a: np.ndarray, bad: np.ndarray, flat_active: np.ndarray,
                   shape: tuple[int, ...], isz: int, access: str) -> None:
    first = int(a[bad[0]])
    if first < buf.lo:
        distance = f"{_bytes(buf.lo - first, isz)} before its first element"
    else:
        distance = f"{_bytes(first + isz - buf.hi, isz)} past its end"
    offset = buf.element_offset(first)
    message = f"{access} of {buf.describe()} at element offset {offset:g}: {distance}"
    other = state.owner(first, isz, exclude=buf.index)
    kind = Kind.OUT_OF_BOUNDS
    if other is not None:
        kind = Kind.WRONG_BUFFER
        message += f"; the address lies inside argument {other.name} at element offset {other.element_offset(first):g}"
    elif not (buf.storage_lo <= first and first + isz <= buf.storage_hi):
        message += " and outside its storage"
    state.report(kind, message, flat_active[bad], shape, buf.name, access)


def _check_uninitialized(state: LaunchState, ptrs: Any, allowed: np.ndarray, access: str) -> None:
    prov = prov_of(ptrs)
    if prov is None or prov == MIXED or prov not in state.shadows:
        return
    flat = np.flatnonzero(allowed)
    bad = state.shadows[prov].unwritten(ptrs.data.reshape(-1)[flat], _itemsize(ptrs))
    if bad.any():
        buf = state.buffers[prov]
        first = int(ptrs.data.reshape(-1)[flat[np.flatnonzero(bad)[0]]])
        state.report(Kind.UNINITIALIZED, f"{access} of {buf.describe()} at element offset "
                     f"{buf.element_offset(first):g}: bytes nothing has written", flat[np.flatnonzero(bad)],
                     np.shape(ptrs.data), buf.name, access)


def memory_ops(holder: Any, builder: Any, handle_type: type) -> dict[str, Callable]:
    """Checked replacements for the builder's load, store and atomic ops (for the launch in ``holder.state``)."""
    cls = type(builder)
    orig_load = cls.create_masked_load.__get__(builder)
    orig_store = cls.create_masked_store.__get__(builder)
    orig_rmw = cls.create_atomic_rmw.__get__(builder)
    orig_cas = cls.create_atomic_cas.__get__(builder)

    # positional tails (cache modifier, eviction policy, volatile; sem/scope for atomics) differ across Triton
    # versions: passed through as they come
    def masked_load(ptrs: Any, mask: Any, other: Any, *rest: Any) -> Any:
        state = holder.state
        state.step()
        allowed, refused = check_lanes(state, ptrs, mask, "load")
        _check_uninitialized(state, ptrs, allowed, "load")
        shape = np.shape(ptrs.data)
        np_dtype = np.dtype(_np_dtype(_element_ty(ptrs)))
        fill = other if other is not None else handle_type(_poison(shape, np_dtype), _element_ty(ptrs))
        out = orig_load(ptrs, handle_type(allowed, mask.dtype if mask is not None else _int1()), fill, *rest)
        volatile = bool(rest[-1]) if rest and isinstance(rest[-1], bool) else False
        off = ~allowed
        taint = (off if other is None else refused).copy()
        if other is not None and taint_of(other) is not None:
            taint |= np.broadcast_to(taint_of(other), shape) & off
        if taint_of(ptrs) is not None:
            taint |= np.broadcast_to(taint_of(ptrs), shape) & allowed
        set_taint(out, taint)
        flat = ptrs.data[allowed]
        state.log.read(flat, state.pid_linear, _itemsize(ptrs), prov_of(ptrs), state.where()[0])
        if volatile:
            state.observe_spin((flat.tobytes(), out.data[allowed].tobytes()))
        return out

    def masked_store(ptrs: Any, value: Any, mask: Any, *rest: Any) -> Any:
        state = holder.state
        state.step()
        state.store_seen()
        allowed, _ = check_lanes(state, ptrs, mask, "store")
        shape = np.shape(ptrs.data)
        vt = taint_of(value)
        prov = prov_of(ptrs)
        name = state.buffers[prov].name if prov is not None and prov != MIXED else None
        if vt is not None:
            poisoned = np.flatnonzero(np.broadcast_to(vt, shape) & allowed)
            if poisoned.size:
                state.report(Kind.POISON, "store of a value computed from a masked-off lane of a load without "
                             "`other` (undefined on a GPU)", poisoned, shape, name, "store")
        isz = _itemsize(ptrs)
        flat = ptrs.data[allowed]
        state.log.write(flat, state.pid_linear, isz, prov, state.where()[0])
        if prov is not None and prov in state.shadows:
            state.shadows[prov].write(flat, isz)
        return orig_store(ptrs, value, handle_type(allowed, _int1()), *rest)

    def atomic_rmw(op: Any, ptrs: Any, val: Any, mask: Any, *rest: Any) -> Any:
        state = holder.state
        state.step()
        allowed, _ = check_lanes(state, ptrs, mask, "atomic")
        out = orig_rmw(op, ptrs, val, handle_type(allowed, _int1()), *rest)
        flat = ptrs.data[allowed]
        state.log.atomic(flat, state.pid_linear, _itemsize(ptrs), prov_of(ptrs))
        state.observe_spin((flat.tobytes(), out.data[allowed].tobytes(), np.asarray(val.data).tobytes()))
        return out

    def atomic_cas(ptrs: Any, cmp: Any, val: Any, *rest: Any) -> Any:
        state = holder.state
        state.step()
        allowed, refused = check_lanes(state, ptrs, None, "atomic")
        if refused.any():  # the interpreter's CAS has no mask: skip the whole op rather than touch bad memory
            return handle_type(_poison(np.shape(cmp.data), cmp.data.dtype), cmp.dtype.scalar)
        out = orig_cas(ptrs, cmp, val, *rest)
        flat = ptrs.data[allowed]
        state.log.atomic(flat, state.pid_linear, _itemsize(ptrs), prov_of(ptrs))
        state.observe_spin((flat.tobytes(), out.data.tobytes()))
        return out

    return {"create_masked_load": masked_load, "create_masked_store": masked_store,
            "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas}


def _np_dtype(tt: Any) -> Any:
    from triton.runtime.interpreter import _get_np_dtype

    return _get_np_dtype(tt)


def _int1() -> Any:
    import triton.language as tl

    return tl.int1


def reduce_wrapper(holder: Any, orig_apply: Callable, scan: bool) -> Callable:
    """``ReduceOps.apply`` / ``ScanOps.apply`` with taint: a poisoned input lane poisons its result."""

    def apply(self: Any, input: Any) -> Any:
        state = holder.state
        ret = orig_apply(self, input)
        inputs = input if isinstance(input, tuple) else (input,)
        outs = ret if isinstance(ret, tuple) else (ret,)
        for x in inputs:
            if x.dtype.is_floating():
                state.flops += int(np.size(x.handle.data))
        taints = [taint_of(x.handle) for x in inputs]
        if all(t is None for t in taints):
            return ret
        shape = np.shape(inputs[0].handle.data)
        taint = np.zeros(shape, dtype=bool)
        for t in taints:
            if t is not None:
                taint |= np.broadcast_to(t, shape)
        if scan:
            out_taint = np.logical_or.accumulate(np.flip(taint, self.axis) if self.reverse else taint, axis=self.axis)
            if self.reverse:
                out_taint = np.flip(out_taint, self.axis)
        else:
            out_taint = np.any(taint, axis=self.axis, keepdims=self.keep_dims)
        out_taint = np.asarray(out_taint)
        if out_taint.any():
            flat = np.flatnonzero(out_taint)
            state.report(Kind.POISON, f"{'scan' if scan else 'reduction'} over lanes that include a masked-off "
                         f"lane of a load without `other` (undefined on a GPU)", flat, out_taint.shape, None,
                         "reduce")
        for o in outs:
            if np.shape(o.handle.data) == out_taint.shape:
                set_taint(o.handle, out_taint)
            else:
                set_taint(o.handle, np.full(np.shape(o.handle.data), bool(out_taint.any())))
        return ret

    return apply


def grid_order(grid: tuple[int, int, int], shuffle_seed: int | None) -> Iterable[tuple[int, int, int]]:
    order = [(x, y, z) for x in range(grid[0]) for y in range(grid[1]) for z in range(grid[2])]
    if shuffle_seed is not None:
        rng = np.random.default_rng(shuffle_seed)
        order = [order[i] for i in rng.permutation(len(order))]
        if len(order) > 1 and all(o == s for o, s in zip(order, sorted(order))):
            order.reverse()
    return order


class _Holder:
    """The launch the patched builder reports to. The replacements are built once per process (building
    them per launch was 17 ms of a 50 ms small-model call) and read the current launch from here."""

    state: LaunchState | None = None


_HOLDER = _Holder()
_REPLACEMENTS: dict[str, Callable] = {}
_REDUCERS: dict[type, Callable] = {}


def _replacements() -> dict[str, Callable]:
    if not _REPLACEMENTS:
        from triton.runtime import interpreter as interp

        builder, handle_type = interp.interpreter_builder, interp.TensorHandle
        cls = type(builder)
        replaced = memory_ops(_HOLDER, builder, handle_type)
        for name in dir(cls):
            if name.startswith("create_") and name not in MEMORY_OPS:
                replaced[name] = wrap_builder_op(name, getattr(cls, name).__get__(builder), _HOLDER, handle_type)
        _REPLACEMENTS.update(replaced)
        for ops_cls, scan in ((getattr(interp, "ReduceOps", None), False), (getattr(interp, "ScanOps", None), True)):
            if ops_cls is not None:
                _REDUCERS[ops_cls] = reduce_wrapper(_HOLDER, ops_cls.apply, scan)
    return _REPLACEMENTS


class Patches:
    """Instance-level replacements on the builder and class-level ones on the reduce ops, undone on exit."""

    def __init__(self, state: LaunchState) -> None:
        self.state = state
        self.undo: list[Callable[[], None]] = []

    def __enter__(self) -> Patches:  # noqa: PYI034 (typing.Self needs Python 3.11)
        from triton.runtime import interpreter as interp

        if _HOLDER.state is not None:
            raise RuntimeError("a checked launch is already running (launches inside kernels are not supported)")
        builder = interp.interpreter_builder
        replaced = _replacements()
        _HOLDER.state = self.state
        self.undo.append(lambda: setattr(_HOLDER, "state", None))
        for name, fn in replaced.items():
            setattr(builder, name, fn)
            self.undo.append(lambda name=name: builder.__dict__.pop(name, None))
        # @triton.jit helpers (tl.sum, tl.max, users' own) were made in compiled mode, whose __call__
        # refuses to run; inside a checked launch they run as the interpreter's device functions.
        from triton.runtime.jit import JITFunction

        orig_call = JITFunction.__call__
        JITFunction.__call__ = _call_interpreted
        self.undo.append(lambda: setattr(JITFunction, "__call__", orig_call))
        for ops_cls, wrapped in _REDUCERS.items():
            orig = ops_cls.__dict__.get("apply")
            ops_cls.apply = wrapped
            self.undo.append(lambda ops_cls=ops_cls, orig=orig: _restore_apply(ops_cls, orig))
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self.undo):
            undo()


def _restore_apply(ops_cls: type, orig: Callable | None) -> None:
    if orig is None:
        del ops_cls.apply  # the inherited ReduceScanOpInterface.apply shows through again
    else:
        ops_cls.apply = orig


_DEVICE_FUNCTIONS: dict[Any, Any] = {}


def _call_interpreted(self: Any, *args: Any, **kwargs: Any) -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    fn = _DEVICE_FUNCTIONS.get(self.fn)
    if fn is None:
        fn = _DEVICE_FUNCTIONS[self.fn] = InterpretedFunction(self.fn)
    return fn(*args, **kwargs)


def run_grid(fn: Any, grid: Any, args: tuple, kwargs: dict, state: LaunchState | None,
             shuffle_seed: int | None = None) -> tuple[int, int, int]:
    """Run every program of ``fn`` (an InterpretedFunction) over ``grid``; with ``state``, checked.

    The interpreter's own GridExecutor, with two changes: the program order can be shuffled, and
    each tensor argument's pointer is tagged with the argument it is (its provenance)."""
    import triton
    from triton.runtime import interpreter as interp

    rewritten = fn.rewrite()
    try:
        executor = interp.GridExecutor(rewritten, fn.arg_names, grid, getattr(fn, "pre_run_hooks", []))
    except TypeError:  # older interpreters: no pre-run hooks
        executor = interp.GridExecutor(rewritten, fn.arg_names, grid)
    names = inspect.getfullargspec(rewritten).args
    kwargs = {k: v for k, v in kwargs.items() if k in names}
    args_hst, kwargs_hst = executor._init_args_hst(args, kwargs)
    for hook in getattr(executor, "pre_run_hooks", []):
        hook(*args_hst, **kwargs_hst)
    scope = interp._patch_lang(rewritten)
    try:
        call = inspect.getcallargs(rewritten, *args_hst, **kwargs_hst)
        index = {name: i for i, name in enumerate(names)}
        converted = {}
        for name, value in call.items():
            if name in executor.constexprs:
                converted[name] = value
                continue
            converted[name] = interp._implicit_cvt(value)
            if state is not None and isinstance(value, torch.Tensor):
                setattr(converted[name].handle, PROV, index[name])
        size = grid(converted) if callable(grid) else grid
        size = tuple(int(s) for s in size) + (1,) * (3 - len(size))
        interp.interpreter_builder.set_grid_dim(*size)
        try:
            # as the runtime's plain launches: the sanitizer's int64 recomputation feeds an assert that
            # checks nothing without Triton's debug option (harness/FINDINGS.md)
            with without_dead_overflow_checks():
                for pid in grid_order(size, shuffle_seed):
                    interp.interpreter_builder.set_grid_idx(*pid)
                    if state is not None:
                        state.begin_program(pid, pid[0] + size[0] * (pid[1] + size[1] * pid[2]))
                    rewritten(**converted)
        except SimulatorMemoryError:
            raise
        except Exception as e:
            knobs = getattr(triton, "knobs", None)
            if knobs is not None and knobs.compilation.front_end_debugging:
                raise
            raise interp.InterpreterError(repr(e)) from e
    finally:
        if scope is not None:  # older interpreters patch triton.language for good
            scope.restore()
    executor._restore_args_dev(args, args_hst, kwargs, kwargs_hst)
    return size


def launch_accounting(state: LaunchState, grid: tuple[int, int, int]) -> LaunchAccounting:
    return LaunchAccounting.from_log(state.kernel, grid, state.log, state.buffers, state.flops, state.dot_flops)


__all__ = ["TAINT", "LaunchState", "Patches", "launch_accounting", "run_grid"]
