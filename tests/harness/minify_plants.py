"""Test-only planted bugs for the minimizer's tests, imported through CRUCIBLE_MINIFY_PLUGINS.

Importing this module breaks Crucible's lowerings of a few ops on purpose, in whatever process
imports it (the minimizer, its check workers, a written repro):

- ``aten.cat``: an indexing bug: every part after the first is read one element too far along the
  cat dimension (clamped at its end), an accuracy failure;
- ``aten.atan``: the lowering raises, a compile error in pass 'lower';
- ``aten.asinh``: the lowering kills its process with SIGSEGV, a crash.
"""

from __future__ import annotations

import os
import signal

import torch

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


LOWERINGS[aten.cat] = _cat_off_by_one
LOWERINGS[aten.atan] = _atan_raises
LOWERINGS[aten.asinh] = _asinh_segfaults
