"""``_foreach_*`` ops as the same op on each tensor of their lists.

A compiled optimizer step (``torch.compile`` over a function that calls ``optimizer.step()``, or an
optimizer compiled on its own) holds AdamW's foreach form: a dozen ``_foreach_*`` calls over every
parameter, each (after functionalization) writing a fresh list, and a ``copy_`` of the last into each
parameter and state. Run as ATen calls, each list is read and written again by the next call. Taken
apart into per-tensor ops, one parameter's whole update (its gradient, moments and step) is one
pointwise chain the scheduler fuses into one kernel that reads each tensor once and writes the
parameter and moments in place.

A rule maps its op's schema: a ``Tensor[]`` or ``Scalar[]`` argument is taken element by element, any
other argument is passed to every element's call as it is. Overloads whose per-tensor form is not
the same computation are left to ATen (``_foreach_addcmul.Tensor`` and ``_foreach_addcdiv.Tensor``
take their scalars as a tensor of values, one a list element; ``_foreach_powsum``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

# the per-tensor call of a foreach op whose own name (less ``_foreach_``) is not an ATen op of the same
# signature
_ADAPTED: dict[str, Callable[..., Any]] = {
    "norm": lambda t, ord=2, dtype=None: aten.linalg_vector_norm(t, ord, dtype=dtype),
    # value is keyword-only in the per-tensor ops
    "addcmul": lambda t, t1, t2, value=1: aten.addcmul(t, t1, t2, value=value),
    "addcdiv": lambda t, t1, t2, value=1: aten.addcdiv(t, t1, t2, value=value),
    # a number's maximum and minimum (ATen's foreach kernels propagate NaN, as clamp does)
    "maximum": lambda t, other: aten.maximum(t, other) if isinstance(other, torch.Tensor) else aten.clamp_min(t, other),
    "minimum": lambda t, other: aten.minimum(t, other) if isinstance(other, torch.Tensor) else aten.clamp_max(t, other),
}
_LEFT_TO_ATEN = {"addcmul.Tensor", "addcdiv.Tensor", "powsum.Scalar", "mm.default"}


def per_tensor_rule(op: torch._ops.OpOverload) -> Callable[..., list]:
    """The rule for one functional foreach overload: its schema's list arguments zipped, the call
    made once per element with the other arguments as they are."""
    schema = op._schema
    name = schema.name.split("::")[1].removeprefix("_foreach_")
    base = _ADAPTED.get(name) or getattr(aten, name)
    params = schema.arguments
    lists = [isinstance(a.type, torch.ListType) for a in params]

    def rule(*args: Any, **kwargs: Any) -> list:
        values = list(args) + [kwargs.get(a.name, a.default_value) for a in params[len(args):]]
        count = len(next(v for v, is_list in zip(values, lists) if is_list))
        out = []
        for i in range(count):
            positional, named = [], {}
            for a, v, is_list in zip(params, values, lists):
                element = v[i] if is_list else v
                if a.kwarg_only:
                    named[a.name] = element
                else:
                    positional.append(element)
            out.append(base(*positional, **named))
        return out

    return rule


def foreach_ops() -> list[torch._ops.OpOverload]:
    """Every functional foreach overload of this torch (no in-place or ``out`` forms: functionalization
    has turned a step's ``_foreach_add_`` into ``_foreach_add`` and ``copy_`` before a rule sees it)."""
    ops = []
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        if not qualified.startswith("aten::_foreach_"):
            continue
        full, _, overload = qualified[len("aten::"):].partition(".")
        short = full.removeprefix("_foreach_")
        if full.endswith("_") or overload.endswith("out") or f"{short}.{overload or 'default'}" in _LEFT_TO_ATEN:
            continue
        if short not in _ADAPTED and not hasattr(aten, short):
            continue
        ops.append(getattr(getattr(aten, full), overload or "default"))
    return ops
