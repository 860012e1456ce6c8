"""Shadow values carried beside the interpreter's tensors: pointer provenance and poison taint.

Each ``TensorHandle`` the interpreter builds may carry two extra attributes:

- provenance: the index of the launch argument a pointer derives from (``MIXED`` when a select
  picked pointers of two arguments), so bounds are checked against *that* argument;
- taint: a boolean array, True on lanes whose value came from a masked-off lane of a load
  without ``other`` (undefined on a GPU), propagated through arithmetic, selects, shape ops,
  dots and reductions until it reaches a store or a reduction result.

Every ``create_*`` method of the interpreter's builder is wrapped while a checked launch runs.
The fast path (no input carries a shadow) costs one attribute probe per argument; the builder
call count also drives the liveness budget and the FLOP count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

PROV = "_crucible_prov"
TAINT = "_crucible_taint"
MIXED = -1

# Memory ops are checked by the launch itself (simulator.checked), not propagated here.
MEMORY_OPS = frozenset({"create_load", "create_store", "create_masked_load", "create_masked_store",
                        "create_atomic_cas", "create_atomic_rmw", "create_descriptor_load",
                        "create_descriptor_store", "create_descriptor_gather", "create_descriptor_scatter"})
# Ops that move lanes around without computing: their taint is the same op applied to the taint.
REARRANGE_OPS = frozenset({"create_expand_dims", "create_broadcast", "create_reshape", "create_trans",
                           "create_cat", "create_join", "create_split", "create_splat", "create_unsplat",
                           "create_permute"})
# Floating-point work per output lane (the roofline's compute side).
FLOP_OPS = {name: 1 for name in (
    "create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_fneg", "create_fabs",
    "create_exp", "create_exp2", "create_log", "create_log2", "create_sin", "create_cos", "create_sqrt",
    "create_rsqrt", "create_precise_sqrt", "create_precise_divf", "create_erf", "create_floor", "create_ceil",
    "create_minimumf", "create_maximumf", "create_minnumf", "create_maxnumf", "create_clampf")}
FLOP_OPS["create_fma"] = 2


def taint_of(h: Any) -> np.ndarray | None:
    return getattr(h, TAINT, None)


def set_taint(h: Any, taint: np.ndarray | None) -> None:
    if taint is not None and taint.any():
        setattr(h, TAINT, taint)


def prov_of(h: Any) -> int | None:
    return getattr(h, PROV, None)


def _full(shape: tuple[int, ...], value: bool) -> np.ndarray:
    return np.full(shape, value, dtype=bool)


def _broadcast(taint: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    try:
        return np.broadcast_to(taint, shape)
    except ValueError:  # not elementwise after all: every output lane may depend on a poisoned input
        return _full(shape, bool(taint.any()))


def _as_handle(handle_type: type, taint: np.ndarray) -> Any:
    import triton.language as tl

    return handle_type(taint.astype(np.int8), tl.int8)


def _rearranged_taint(orig: Callable, args: tuple, handle_type: type) -> Any:
    """The op applied to int8 stand-ins of the inputs' taints."""
    stand_ins = []
    for a in args:
        if isinstance(a, handle_type):
            t = taint_of(a)
            stand_ins.append(_as_handle(handle_type, t if t is not None else _full(np.shape(a.data), False)))
        else:
            stand_ins.append(a)
    out = orig(*stand_ins)
    return tuple(o.data.astype(bool) for o in out) if isinstance(out, tuple) else out.data.astype(bool)


def _propagate(name: str, orig: Callable, args: tuple, out: Any, handle_type: type) -> None:
    handles = [a for a in args if isinstance(a, handle_type)]
    if name in REARRANGE_OPS:
        taint = _rearranged_taint(orig, args, handle_type)
        if isinstance(out, tuple):
            for o, t in zip(out, taint):
                set_taint(o, t)
        else:
            set_taint(out, taint)
        return
    if not isinstance(out, handle_type):
        return
    shape = np.shape(out.data)
    if name == "create_select":
        cond, a, b = args[0], args[1], args[2]
        ta, tb, tc = taint_of(a), taint_of(b), taint_of(cond)
        picked = np.where(np.broadcast_to(cond.data, shape).astype(bool),
                          _broadcast(ta, shape) if ta is not None else False,
                          _broadcast(tb, shape) if tb is not None else False)
        set_taint(out, np.asarray(picked | (_broadcast(tc, shape) if tc is not None else False)))
        return
    if name == "create_dot":
        a, b = args[0], args[1]
        taint = _full(shape, False)
        if taint_of(a) is not None:
            taint |= taint_of(a).any(axis=-1)[..., :, None]
        if taint_of(b) is not None:
            taint |= taint_of(b).any(axis=-2)[..., None, :]
        if len(args) > 2 and taint_of(args[2]) is not None:
            taint |= _broadcast(taint_of(args[2]), shape)
        set_taint(out, taint)
        return
    if name == "create_gather":
        src, indices = args[0], args[1]
        taint = _full(shape, False)
        if taint_of(src) is not None:
            taint |= orig(_as_handle(handle_type, taint_of(src)), indices, *args[2:]).data.astype(bool)
        if taint_of(indices) is not None:
            taint |= _broadcast(taint_of(indices), shape)
        set_taint(out, taint)
        return
    taint = None
    for h in handles:  # elementwise: a lane is poisoned when one of its inputs is
        t = taint_of(h)
        if t is not None:
            t = _broadcast(t, shape)
            taint = t.copy() if taint is None else taint | t
    set_taint(out, taint)


def wrap_builder_op(name: str, orig: Callable, holder: Any, handle_type: type) -> Callable:
    """``orig`` plus shadow propagation, the liveness step count and the FLOP count (of ``holder.state``)."""
    flops_per_lane = FLOP_OPS.get(name, 0)
    makes_ptr_prov = name not in ("create_ptr_to_int", "create_int_to_ptr")

    def op(*args: Any) -> Any:
        out = orig(*args)
        state = holder.state
        state.step()
        if flops_per_lane and isinstance(out, handle_type):
            state.flops += flops_per_lane * out.data.size
        prov = None
        shadowed = False
        for a in args:
            if isinstance(a, handle_type):
                p = getattr(a, PROV, None)
                if p is not None:
                    prov = p if prov is None or prov == p else MIXED
                if getattr(a, TAINT, None) is not None:
                    shadowed = True
        if prov is not None and makes_ptr_prov:
            for o in out if isinstance(out, tuple) else (out,):
                if isinstance(o, handle_type) and o.dtype.is_ptr():
                    setattr(o, PROV, prov)
        if shadowed:
            _propagate(name, orig, args, out, handle_type)
        if name == "create_dot":
            a, b = args[0], args[1]
            state.dot_flops += 2 * int(np.prod(np.shape(out.data))) * int(np.shape(a.data)[-1])
            del b
        return out

    return op
