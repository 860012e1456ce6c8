"""Kernels that differ only in the buffers they touch are rendered and built once.

A deep network repeats its blocks: a stacked hourglass's 346 C++ kernels were 34 distinct
computations over differently named buffers, and each was compiled on its own (47 s of an 89 s
compile on the 2-core CPU). Before rendering, every plain kernel is put in a canonical form: its
buffers renamed ``a0, a1, ...`` in parameter order (then any kernel-local store), its FX node
names dropped and its name replaced by one derived from that form (``kernel_names``). Kernels with
equal canonical forms share one rendering; each gets it back under its own name with its own
buffers as arguments, so the wrapper calls it as before. Equal sources then share one built
library (``compiler.runtime``) and one Triton build.

Template kernels (``compiler.templates``) name buffers outside their stores as well; they are
rendered one by one, as before, and so is a kernel that loads a buffer that is neither one of its
parameters nor one of its stores (a GPT-2 bf16 graph's fused GPU kernel read ``arg10`` that way:
renaming failed with a ``KeyError`` and the whole compile with it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence

from compiler.codegen.base import RenderedKernel
from compiler.ir import Expr, Op
from compiler.kernel_names import kernel_symbol
from compiler.scheduler import Kernel, Store


def _rename_loads(expr: Expr, names: dict[str, str], memo: dict[Expr, Expr]) -> Expr:
    """``expr`` with every load's buffer renamed by ``names`` (shared sub-expressions once)."""
    done = memo.get(expr)
    if done is not None:
        return done
    stack = [expr]
    while stack:  # operands first, without recursion: fused expressions can be deep
        e = stack[-1]
        pending = [s for s in e.src if s not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if e in memo:
            continue
        src = tuple(memo[s] for s in e.src)
        arg = names[e.arg] if e.op is Op.LOAD else e.arg
        memo[e] = e if (src == e.src and arg is e.arg) else Expr(e.op, e.dtype, src, arg)
    return memo[expr]


def canonical_kernel(k: Kernel) -> tuple[Kernel, dict[str, str]]:
    """``k`` over canonical buffer names, and the renaming (``k``'s name -> canonical name)."""
    names: dict[str, str] = {}
    for p in k.params:
        names.setdefault(p.buffer, f"a{len(names)}")
    for s in k.stores:  # kernel-local values have buffer names too
        names.setdefault(s.buffer, f"a{len(names)}")
    memo: dict[Expr, Expr] = {}
    stores = tuple(Store(names[s.buffer], _rename_loads(s.index, names, memo), _rename_loads(s.value, names, memo),
                         s.level) for s in k.stores)
    params = tuple(dataclasses.replace(p, buffer=names[p.buffer]) for p in k.params)
    kept = frozenset(names[b] for b in k.kept)
    shape = dataclasses.replace(k, name="", stores=stores, kept=kept, params=params, node_names=())
    digest = hashlib.sha256(_text(shape).encode()).hexdigest()
    return dataclasses.replace(shape, name=kernel_symbol(k.origins, digest)), names


def _text(k: Kernel) -> str:
    """Everything a renderer reads of ``k`` as text, every expression node with its dtype (the IR
    listing leaves dtypes out): the same text in every process, so names and cache keys are stable."""
    ids: dict[Expr, int] = {}
    lines = [f"{k.ranges} {k.rranges} {k.persistent} {sorted(k.kept)} {k.origins}"]
    lines += [f"{p.buffer} {p.dtype} {p.span} {p.read} {p.written}" for p in k.params]
    for s in k.stores:
        stack = [s.index, s.value]
        while stack:  # operands first; a sub-expression shared between stores is listed once
            e = stack[-1]
            if e in ids:
                stack.pop()
                continue
            pending = [x for x in e.src if x not in ids]
            if pending:
                stack.extend(reversed(pending))
                continue
            stack.pop()
            ids[e] = len(ids)
            lines.append(f"{ids[e]} {e.op.value} {e.dtype} {e.arg!r} {[ids[x] for x in e.src]}")
        lines.append(f"store {s.buffer} {s.level.value} {ids[s.index]} {ids[s.value]}")
    return "\n".join(lines)


def render_shared(kernels: Sequence[Kernel], render: Callable[[Kernel], RenderedKernel]) -> dict[str, RenderedKernel]:
    """kernel name -> its rendering; plain kernels with equal canonical forms rendered once."""
    out: dict[str, RenderedKernel] = {}
    shared: dict[Kernel, RenderedKernel] = {}
    for k in kernels:
        if type(k) is not Kernel:  # a template kernel: see the module docstring
            out[k.name] = render(k)
            continue
        try:
            canonical, names = canonical_kernel(k)
        except KeyError:  # a load of a buffer that is neither a parameter nor a store: render it as is
            out[k.name] = render(k)
            continue
        rendered = shared.get(canonical)
        if rendered is None:
            rendered = shared[canonical] = render(canonical)
        back = {new: old for old, new in names.items()}
        out[k.name] = dataclasses.replace(rendered, name=k.name, args=tuple(back[a] for a in rendered.args))
    return out
