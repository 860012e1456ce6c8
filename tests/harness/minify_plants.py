"""Test-only planted bugs for the minimizer's tests, imported through CRUCIBLE_MINIFY_PLUGINS.

Importing this module breaks Crucible's lowerings of a few ops on purpose, in whatever process
imports it (the minimizer, its check workers, a written repro):

- ``aten.cat``: an indexing bug: every part after the first is read one element too far along the
  cat dimension (clamped at its end), an accuracy failure;
- ``aten.atan``: the lowering raises, a compile error in pass 'lower';
- ``aten.asinh``: the lowering kills its process with SIGSEGV, a crash;
- the Dynamo backend ``minify_planted_cat``: eager, but every cat result 1% too large;
- ``aten.tanh``: results 1% too large, an accuracy failure (the 1,000-node benchmark plants it in
  BERT's pooler, the last op of the graph: the worst case for truncation);
- ``aten.log1p``: every element is read one position further along the last dimension, without a
  clamp: the last one reads past the end of its input, a memory-safety defect that ``crucible-sim``
  finds (``fail_memory``) and the unchecked targets do not.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
from torch._dynamo.backends.registry import register_backend

import compiler.lowerings  # noqa: F401  (register every rule first, so the patch is not undone)
from compiler import ir
from compiler.graph import numel
from compiler.ir import Op
from compiler.lowering import LOWERINGS, Lazy, read
from compiler.lowerings.indexing import c64, clamp_index
from compiler.lowerings.pointwise import out_meta

aten = torch.ops.aten


def _cat_off_by_one(ctx, node, tensors, dim=0):
    """``compiler.lowerings.indexing.lower_cat`` with the planted bug: parts after the first are
    read at offset ``-off + 1``."""
    shape, dtype = out_meta(node)
    dim = dim % len(shape)
    parts = [t for t in tensors if numel(t.shape) > 0]
    if not parts:
        return Lazy(shape, dtype, ir.const(0, dtype))
    index = [ir.xvar(d) if n != 1 else c64(0) for d, n in enumerate(shape)]
    value, offsets, start = None, [], 0
    for t in parts:
        offsets.append(start)
        start += t.shape[dim]
    for t, off in reversed(list(zip(parts, offsets))):
        local = list(index)
        shift = -off + (1 if off else 0)
        local[dim] = clamp_index(ir.from_affine({index[dim]: 1, None: shift}) if index[dim].op is Op.XVAR
                                 else c64(shift), t.shape[dim])
        here = ir.cast(read(t, local), dtype)
        value = here if value is None else ir.where(ir.binary(Op.LT, index[dim], c64(off + t.shape[dim])),
                                                    here, value)
    return Lazy(shape, dtype, value)


def _atan_raises(*args, **kwargs):
    raise RuntimeError("planted bug in the atan lowering")


def _asinh_segfaults(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGSEGV)


_real_tanh = LOWERINGS[aten.tanh]


def _tanh_one_percent_high(ctx, node, *args, **kwargs):
    out = _real_tanh(ctx, node, *args, **kwargs)
    return Lazy(out.shape, out.dtype, ir.binary(Op.MUL, out.expr, ir.const(1.01, out.dtype)))


_real_log1p = LOWERINGS[aten.log1p]


def _log1p_reads_past_the_end(ctx, node, x):
    out = _real_log1p(ctx, node, x)
    last = ir.xvar(len(out.shape) - 1)
    return Lazy(out.shape, out.dtype, ir.substitute(out.expr, {last: ir.from_affine({last: 1, None: 1})}))


LOWERINGS[aten.cat] = _cat_off_by_one
LOWERINGS[aten.tanh] = _tanh_one_percent_high
LOWERINGS[aten.atan] = _atan_raises
LOWERINGS[aten.asinh] = _asinh_segfaults
LOWERINGS[aten.log1p] = _log1p_reads_past_the_end


def _cat_perturbing_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
    """A Dynamo backend that runs the graph in eager but makes every cat result 1% too large: stands
    for any third-party compiler with an accuracy bug (the minimizer must work for every target)."""

    class Perturbing(torch.fx.Interpreter):
        def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
            out = super().call_function(target, args, kwargs)
            return out * 1.01 if target in (aten.cat.default, torch.cat) else out

    return lambda *args: Perturbing(gm).run(*args)


register_backend(name="minify_planted_cat")(_cat_perturbing_backend)
