"""Op specs beyond pointwise and reductions: views and movement, cat/pad, indexing, neural-net
ops, scans and sorting. Registered into ``harness.fuzz.opspec.OP_SPECS`` on import (``harness.fuzz.specs`` imports this module)."""

from __future__ import annotations

import math
import re

from hypothesis import strategies as st

from harness.fuzz.builder import ALL_DTYPES, NodeDraw
from harness.fuzz.reference_ops import BIT_PARTNER
from harness.fuzz.opspec import NUMERIC, spec
from harness.fuzz.values import FLOAT_DTYPES

FLOAT = FLOAT_DTYPES


def _shape(n: NodeDraw, name: str) -> list[int]:
    return list(n.meta(name).shape)


# -- views and movement ------------------------------------------------------------------------
@spec("aten.view.default", "view")
def _view(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, contiguous=True)
    shape = _shape(n, a)
    numel = math.prod(shape)
    kind = n.draw(st.sampled_from(["flat", "split", "merge", "infer"]))
    if kind == "flat" or not shape:
        new = [numel]
    elif kind == "split" and numel and numel % 2 == 0:
        new = [2, numel // 2]
    elif kind == "merge" and len(shape) >= 2:
        new = [shape[0] * shape[1], *shape[2:]]
    else:
        new = [-1] if numel else [0]
    return f"aten.view.default({a}, {new})"


@spec("aten.reshape.default", "view")
def _reshape(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    shape = _shape(n, a)
    new = [*reversed(shape)] if n.draw(st.booleans()) and math.prod(shape) else [math.prod(shape)]
    if math.prod(new) != math.prod(shape):
        new = [math.prod(shape)]
    return f"aten.reshape.default({a}, {new})"


@spec("aten.permute.default", "view")
def _permute(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    order = n.draw(st.permutations(range(n.meta(a).dim())))
    return f"aten.permute.default({a}, {list(order)})"


@spec("aten.transpose.int", "view")
def _transpose(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    return f"aten.transpose.int({a}, {n.dim(a)}, {n.dim(a)})"


@spec("aten.t.default", "view")
def _t(n: NodeDraw) -> str:
    return f"aten.t.default({n.tensor(ALL_DTYPES, max_rank=2)})"


# a bit cast of one width (float32 <-> int32, float64 <-> int64), from fresh inputs only: the sign and
# payload of a NaN an op computes are its kernel's own (ATen's loops differ), and a bit cast shows them
_BITS_OF = {str(a).removeprefix("torch."): str(b).removeprefix("torch.") for a, b in BIT_PARTNER.items()}


@spec("aten.view.dtype", "view")
def _view_dtype(n: NodeDraw) -> str:
    a = n.tensor(tuple(_BITS_OF), fresh_only=True)
    return f"aten.view.dtype({a}, {n.dt(_BITS_OF[n.dtype(a)])})"


@spec("aten.expand.default", "view")
def _expand(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    shape = _shape(n, a)
    new = [n.draw(st.sampled_from([3, 1, 5])) if s == 1 else s for s in shape]
    lead = [2] if n.draw(st.booleans()) else []
    return f"aten.expand.default({a}, {lead + new})"


@spec("aten.squeeze.dim", "view")
def _squeeze(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    return f"aten.squeeze.dim({a}, {n.dim(a) if n.meta(a).dim() else 0})"


@spec("aten.squeeze.dims", "view")
def _squeeze_dims(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    return f"aten.squeeze.dims({a}, {n.dims(a, min_size=0)})"


@spec("aten.unsqueeze.default", "view")
def _unsqueeze(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    rank = n.meta(a).dim()
    return f"aten.unsqueeze.default({a}, {n.draw(st.integers(-rank - 1, rank))})"


@spec("aten.slice.Tensor", "view")
def _slice(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    dim = n.dim(a)
    size = _shape(n, a)[dim]
    start = n.draw(st.sampled_from([0, 1, -2, None, -100, size]))
    end = n.draw(st.sampled_from([None, -1, size, 2, 10**9, -size - 3]))
    step = n.draw(st.sampled_from([1, 2, 3]))
    return f"aten.slice.Tensor({a}, {dim}, {start}, {end}, {step})"


@spec("aten.select.int", "view")
def _select(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1, nonempty=True)
    dim = n.dim(a)
    size = _shape(n, a)[dim]
    return f"aten.select.int({a}, {dim}, {n.draw(st.integers(-size, size - 1))})"


@spec("aten.narrow.default", "view")
def _narrow(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    dim = n.dim(a)
    size = _shape(n, a)[dim]
    start = n.draw(st.integers(0, size))
    return f"aten.narrow.default({a}, {dim}, {start}, {n.draw(st.integers(0, size - start))})"


@spec("aten.unfold.default", "view")
def _unfold(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    dim = n.dim(a)
    size = _shape(n, a)[dim]
    window = n.draw(st.integers(min(1, size), min(size, 4))) if size else 0
    return f"aten.unfold.default({a}, {dim}, {window}, {n.draw(st.sampled_from([1, 2, 3]))})"


@spec("aten.flip.default", "view")
def _flip(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    return f"aten.flip.default({a}, {n.dims(a, min_size=0) if n.meta(a).dim() else []})"


@spec("aten.roll.default", "view")
def _roll(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    dim = n.dim(a)
    return f"aten.roll.default({a}, [{n.draw(st.sampled_from([1, -1, 3, 17]))}], [{dim}])"


@spec("aten.as_strided.default", "view")
def _as_strided(n: NodeDraw) -> str:
    # valid by construction: a window of a contiguous tensor's storage that stays inside it
    a = n.tensor(ALL_DTYPES, contiguous=True, min_rank=1, nonempty=True, fresh_only=True)
    numel = n.meta(a).numel()
    rows = n.draw(st.integers(1, max(1, min(4, numel))))
    cols = n.draw(st.integers(1, max(1, numel // rows)))
    stride_r = n.draw(st.sampled_from([cols, 1, 0]))
    while (rows - 1) * stride_r + cols > numel:
        stride_r = max(0, stride_r - 1)
    return f"aten.as_strided.default({a}, [{rows}, {cols}], [{stride_r}, 1])"


@spec("aten.clone.default", "view")
def _clone(n: NodeDraw) -> str:
    return f"aten.clone.default({n.tensor(ALL_DTYPES)})"


@spec("aten.diagonal.default", "view")
def _diagonal(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=2)
    return f"aten.diagonal.default({a}, {n.draw(st.sampled_from([0, 1, -1]))})"


@spec("aten.split.Tensor", "view")
def _split(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    return f"aten.split.Tensor({a}, {n.draw(st.sampled_from([1, 2, 3]))}, {n.dim(a)})"


@spec("aten.unbind.int", "view")
def _unbind(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1, nonempty=True)
    dim = n.dim(a)
    if _shape(n, a)[dim] > 8:
        return f"aten.unbind.int(aten.narrow.default({a}, {dim}, 0, 3), {dim})"
    return f"aten.unbind.int({a}, {dim})"


@spec("aten.repeat.default", "view")
def _repeat(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, max_rank=3)
    reps = [n.draw(st.sampled_from([1, 2, 3])) for _ in range(n.meta(a).dim() + n.draw(st.integers(0, 1)))]
    return f"aten.repeat.default({a}, {reps})"


@spec("aten.tril.default", "view")
def _tril(n: NodeDraw) -> str:
    return f"aten.tril.default({n.tensor(ALL_DTYPES, min_rank=2)}, {n.draw(st.sampled_from([0, 1, -2]))})"


@spec("aten.triu.default", "view")
def _triu(n: NodeDraw) -> str:
    return f"aten.triu.default({n.tensor(ALL_DTYPES, min_rank=2)}, {n.draw(st.sampled_from([0, 1, -2]))})"


# -- cat, stack, pad ---------------------------------------------------------------------------
@spec("aten.cat.default", "view")
def _cat(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    dim = n.dim(a)
    shape = _shape(n, a)
    other = list(shape)
    other[dim] = n.draw(st.sampled_from([1, 3, 0, shape[dim]]))
    b = n.tensor(ALL_DTYPES, shape=other)
    return f"aten.cat.default([{a}, {b}], {dim})"


@spec("aten.stack.default", "view")
def _stack(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES)
    b = n.tensor((n.dtype(a),), shape=_shape(n, a))
    rank = n.meta(a).dim()
    return f"aten.stack.default([{a}, {b}], {n.draw(st.integers(-rank - 1, rank))})"


@spec("aten.constant_pad_nd.default", "view")
def _pad(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1)
    shape = _shape(n, a)
    pads = []
    for size in reversed(shape[-2:]):
        # negative padding crops; never more than the dim holds
        lo = n.draw(st.integers(-min(size, 2), 2))
        hi = n.draw(st.integers(-min(size + min(lo, 0), 2), 2))
        pads += [lo, hi]
    value = n.scalar(a, integer=not n.meta(a).is_floating_point())
    if str(n.meta(a).dtype) == "torch.bool":
        value = "0"
    return f"aten.constant_pad_nd.default({a}, {pads}, {value})"


# -- indexing ----------------------------------------------------------------------------------
def _index_tensor(n: NodeDraw, bound: int, shape: list[int], negative: bool = False) -> str:
    return n.tensor(("int64",), shape=shape, profile="index", bound=bound, negative=negative)


@spec("aten.gather.default", "indexing")
def _gather(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1, nonempty=True)
    dim = n.dim(a)
    shape = [n.draw(st.integers(1, s)) if s else 0 for s in _shape(n, a)]
    return f"aten.gather.default({a}, {dim}, {_index_tensor(n, _shape(n, a)[dim], shape)})"


@spec("aten.scatter.src", "indexing")
def _scatter(n: NodeDraw) -> str:
    # Duplicate indices make scatter's result depend on write order: the index is a reversed
    # arange along ``dim`` broadcast over the other dims, so every position is written once.
    a = n.tensor(ALL_DTYPES, min_rank=1, nonempty=True)
    rank, shape = n.meta(a).dim(), _shape(n, a)
    dim = n.dim(a) % rank
    column = [shape[dim] if i == dim else 1 for i in range(rank)]
    # on the input's device: a CPU arange indexing a CUDA tensor made eager fail (the H200 campaigns'
    # validity was 96-97%, most of the invalid graphs this one)
    arange = f"aten.arange.default({shape[dim]}, device={a}.device)"
    idx = f"aten.flip.default(aten.expand.default(aten.view.default({arange}, {column}), {shape}), [{dim}])"
    src = n.tensor((n.dtype(a),), shape=shape)
    return f"aten.scatter.src({a}, {dim}, {idx}, {src})"


@spec("aten.scatter.value", "indexing")
def _scatter_value(n: NodeDraw) -> str:
    a = n.tensor(FLOAT, min_rank=1, nonempty=True)
    dim = n.dim(a)
    idx = _index_tensor(n, _shape(n, a)[dim], [1 if i == dim % n.meta(a).dim() else s
                                              for i, s in enumerate(_shape(n, a))])
    return f"aten.scatter.value({a}, {dim}, {idx}, {n.scalar(a, integer=False)})"


@spec("aten.scatter_add.default", "indexing")
def _scatter_add(n: NodeDraw) -> str:
    a = n.tensor(("float64", "int64", "int32"), min_rank=1, nonempty=True)
    dim = n.dim(a)
    shape = _shape(n, a)
    idx = _index_tensor(n, shape[dim], shape)
    return f"aten.scatter_add.default({a}, {dim}, {idx}, {n.tensor((n.dtype(a),), shape=shape)})"


@spec("aten.index.Tensor", "indexing")
def _index(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1, nonempty=True)
    shape = _shape(n, a)
    idx = _index_tensor(n, shape[0], [n.draw(st.sampled_from([3, 1, 0, 5]))], negative=True)
    if len(shape) >= 2 and n.draw(st.booleans()):
        return f"aten.index.Tensor({a}, [None, {_index_tensor(n, shape[1], [2, 1])}])"
    return f"aten.index.Tensor({a}, [{idx}])"


@spec("aten.index_put.default", "indexing")
def _index_put(n: NodeDraw) -> str:
    a = n.tensor(("float32", "float64", "int64"), min_rank=1, nonempty=True)
    shape = _shape(n, a)
    accumulate = n.draw(st.booleans())
    # without accumulate, duplicate indices make the result order-dependent: use distinct ones
    idx = (_index_tensor(n, shape[0], [3]) if accumulate
           else f"aten.arange.default({min(shape[0], 3)})")
    count = 3 if accumulate else min(shape[0], 3)
    values = n.tensor((n.dtype(a),), shape=[count, *shape[1:]])
    return f"aten.index_put.default({a}, [{idx}], {values}, {accumulate})"


@spec("aten.index_select.default", "indexing")
def _index_select(n: NodeDraw) -> str:
    a = n.tensor(ALL_DTYPES, min_rank=1, nonempty=True)
    dim = n.dim(a)
    count = n.draw(st.sampled_from([2, 1, 0, 7]))
    return f"aten.index_select.default({a}, {dim}, {_index_tensor(n, _shape(n, a)[dim], [count])})"


@spec("aten.embedding.default", "indexing")
def _embedding(n: NodeDraw) -> str:
    w = n.tensor(FLOAT, min_rank=2, max_rank=2, nonempty=True)
    idx = _index_tensor(n, _shape(n, w)[0], [n.draw(st.sampled_from([4, 1, 0])), 3])
    return f"aten.embedding.default({w}, {idx})"


# -- neural-net ops ----------------------------------------------------------------------------
for _op in ("_softmax", "_log_softmax"):
    def _softmax(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(("float32", "float64", "float16", "bfloat16"), min_rank=1, rows="reduction")
        return f"aten.{_op}.default({a}, {n.dim(a)}, False)"

    spec(f"aten.{_op}.default", "nn")(_softmax)


# eps of norms: the usual ones, and large ones, so two norms of one input that differ only in eps
# differ in value (a result cached on too little a key shows)
NORM_EPS = ("1e-05", "1e-06", "0.1", "1.0")


def _affine(n: NodeDraw, dtype: str, shape: list[int], fresh_only: bool = False) -> tuple[str, str]:
    """(weight, bias) of a norm: both or neither; with the ``optionals`` corner each independently."""
    if n.corner("optionals"):
        present = n.again("affine", st.tuples(st.booleans(), st.booleans()))
    else:
        present = (n.draw(st.booleans()),) * 2
    return tuple(n.tensor((dtype,), shape=shape, fresh_only=fresh_only, contiguous=fresh_only) if p else "None"
                 for p in present)  # type: ignore[return-value]


def _eps(n: NodeDraw) -> str:
    """A norm's eps; a repeated norm takes another one than the norm it repeats."""
    if not n.corner("optionals"):
        return "1e-05"
    last = re.findall(r"([\d.e-]+)\)(?:\[0\])?$", n.repeating or "")
    return n.draw(st.sampled_from([e for e in NORM_EPS if e not in last]))


@spec("aten.native_layer_norm.default", "nn")
def _layer_norm(n: NodeDraw) -> str:
    a = n.tensor(FLOAT, min_rank=1, rows="reduction")
    rank = n.meta(a).dim()
    norm = _shape(n, a)[-min(rank, n.again("norm_dims", st.integers(1, min(2, rank)))):]
    w, b = _affine(n, n.dtype(a), norm)
    # mean and rstd of a 16-bit input are float32 on meta tensors (and the GPU) but the input's
    # dtype on the CPU: a later op typed from the meta kernel's fails in eager; output 0 only there
    only_out = "[0]" if n.dtype(a) in ("float16", "bfloat16") else ""
    return f"aten.native_layer_norm.default({a}, {norm}, {w}, {b}, {_eps(n)}){only_out}"


@spec("aten.native_group_norm.default", "nn")
def _group_norm(n: NodeDraw) -> str:
    echo = n.peek_echo()
    if echo is not None and n.meta(echo).dim() == 3 and n.meta(echo).shape[1] > 0:  # repeated: its channels
        channels = _shape(n, echo)[1]
        groups = n.draw(st.sampled_from([g for g in range(1, channels + 1) if channels % g == 0]))
        shape = _shape(n, echo)
    else:
        groups = n.draw(st.sampled_from([1, 2, 3]))
        channels = groups * n.draw(st.sampled_from([1, 2]))
        spatial = n.draw(st.sampled_from([1, 5, 16]))
        if n.corner("sizes") and n.draw(st.integers(0, 3)) == 3:  # a row from the size classes
            spatial = n.draw(st.sampled_from([s for s in n.builder.limits.blocks.classes("reduction")
                                              if s * channels <= n.builder.limits.max_row_numel // 2]))
        shape = [n.draw(st.sampled_from([1, 2])), channels, spatial]
    # contiguous: ATen's CUDA kernel rejects other layouts (H200 seed 11: 2% of the graphs)
    a = n.tensor(("float32", "float64"), shape=shape, fresh_only=True, contiguous=True, rows="reduction")
    if n.corner("optionals"):
        w, b = _affine(n, n.dtype(a), [channels], fresh_only=True)
    else:
        w, b = n.tensor((n.dtype(a),), shape=[channels], fresh_only=True, contiguous=True), "None"
    # output 0 only: the meta kernel's mean/rstd dtypes differ from the CPU kernel's
    return (f"aten.native_group_norm.default({a}, {w}, {b}, {_shape(n, a)[0]}, {channels}, "
            f"{_shape(n, a)[2]}, {groups}, {_eps(n)})[0]")


@spec("aten._native_batch_norm_legit_no_training.default", "nn")
def _batch_norm(n: NodeDraw) -> str:
    a = n.tensor(("float32", "float64"), min_rank=2, nonempty=True, rows="reduction")
    c = [_shape(n, a)[1]]
    dt = (n.dtype(a),)
    # parameters are fresh inputs: ATen's CPU kernel rejects some layouts/dtype mixes of
    # computed parameter tensors ("mixed dtype (CPU)") that meta tensors accept
    if n.corner("optionals"):
        w, b = (n.tensor(dt, shape=c, fresh_only=True) if n.draw(st.booleans()) else "None" for _ in range(2))
    else:
        w, b = (n.tensor(dt, shape=c, fresh_only=True) for _ in range(2))
    mean = n.tensor(dt, shape=c, fresh_only=True)
    var = n.tensor(dt, shape=c, profile="positive", fresh_only=True)
    return (f"aten._native_batch_norm_legit_no_training.default({a}, {w}, {b}, {mean}, {var}, 0.1, "
            f"{_eps(n)})[0]")  # eager's saved stats are empty, meta's are not


@spec("aten._native_batch_norm_legit_functional.default", "nn")
def _batch_norm_training(n: NodeDraw) -> str:
    """Training batch norm as a functionalized graph holds it (``Module.train()``): the normalized output,
    the batch mean and rstd it saves, and the updated running mean and variance, one of the five."""
    a = n.tensor(("float32", "float64"), min_rank=2, nonempty=True, rows="reduction")
    c = [_shape(n, a)[1]]
    dt = (n.dtype(a),)
    w, b = _affine(n, n.dtype(a), c, fresh_only=True)
    mean = n.tensor(dt, shape=c, fresh_only=True)
    var = n.tensor(dt, shape=c, profile="positive", fresh_only=True)
    # training only: an eval-mode graph holds ``_native_batch_norm_legit_no_training`` (its own spec)
    momentum = n.draw(st.sampled_from([0.1, 0.0, 1.0])) if n.corner("optionals") else 0.1
    output = n.draw(st.integers(0, 4))
    return (f"aten._native_batch_norm_legit_functional.default({a}, {w}, {b}, {mean}, {var}, True, "
            f"{momentum}, {_eps(n)})[{output}]")


def _matmul_dtypes() -> tuple[str, ...]:
    return ("float32", "float64", "bfloat16")


@spec("aten.mm.default", "nn")
def _mm(n: NodeDraw) -> str:
    a = n.tensor(_matmul_dtypes(), min_rank=2, max_rank=2)
    k = _shape(n, a)[1]
    return f"aten.mm.default({a}, {n.tensor((n.dtype(a),), shape=[k, n.draw(st.sampled_from([3, 1, 17, 0]))])})"


@spec("aten.bmm.default", "nn")
def _bmm(n: NodeDraw) -> str:
    a = n.tensor(_matmul_dtypes(), min_rank=3, max_rank=3)
    b_, _, k = _shape(n, a)
    return f"aten.bmm.default({a}, {n.tensor((n.dtype(a),), shape=[b_, k, n.draw(st.sampled_from([2, 5]))])})"


@spec("aten.addmm.default", "nn")
def _addmm(n: NodeDraw) -> str:
    a = n.tensor(_matmul_dtypes(), min_rank=2, max_rank=2)
    m, k = _shape(n, a)
    cols = n.draw(st.sampled_from([3, 1, 8]))
    dt = (n.dtype(a),)
    bias = n.tensor(dt, shape=n.draw(st.sampled_from([[cols], [m, cols], [1, cols]])))
    if not n.corner("optionals"):
        beta = n.draw(st.sampled_from(["", ", beta=0.5, alpha=2"]))
        return f"aten.addmm.default({bias}, {a}, {n.tensor(dt, shape=[k, cols])}{beta})"
    return n.call("aten.addmm.default", bias, a, n.tensor(dt, shape=[k, cols]),
                  beta=n.draw(st.sampled_from([None, "0.5", "0"])), alpha=n.draw(st.sampled_from([None, "2", "-1"])))


@spec("aten.matmul.default", "nn")
def _matmul(n: NodeDraw) -> str:
    a = n.tensor(_matmul_dtypes(), min_rank=1, max_rank=3)
    k = _shape(n, a)[-1]
    batch = _shape(n, a)[:-2] or [2]
    shape = n.draw(st.sampled_from([[k], [k, 4], [*batch, k, 3]]))
    return f"aten.matmul.default({a}, {n.tensor((n.dtype(a),), shape=shape)})"


@spec("aten.convolution.default", "nn")
def _convolution(n: NodeDraw) -> str:
    spatial = n.draw(st.sampled_from([1, 2]))
    groups = n.draw(st.sampled_from([1, 2]))
    cin, cout = 2 * groups, 2 * groups
    size = n.draw(st.sampled_from([5, 8, 3]))
    x = n.tensor(("float32", "float64"), shape=[n.draw(st.sampled_from([1, 2])), cin] + [size] * spatial)
    kernel = n.draw(st.sampled_from([1, 3]))
    w = n.tensor((n.dtype(x),), shape=[cout, cin // groups] + [kernel] * spatial)
    bias = n.tensor((n.dtype(x),), shape=[cout]) if n.draw(st.booleans()) else "None"
    stride, pad, dil = (n.draw(st.sampled_from(v)) for v in ([1, 2], [0, 1], [1, 2]))
    rep = lambda v: [v] * spatial  # noqa: E731
    return (f"aten.convolution.default({x}, {w}, {bias}, {rep(stride)}, {rep(pad)}, {rep(dil)}, "
            f"False, {rep(0)}, {groups})")


def _pool_input(n: NodeDraw) -> tuple[str, int]:
    x = n.tensor(FLOAT, shape=[1, 2, n.draw(st.sampled_from([4, 7, 9])), n.draw(st.sampled_from([4, 5, 8]))])
    return x, n.draw(st.sampled_from([2, 3]))


def _pool_padding(n: NodeDraw, k: int) -> str | None:
    """Padding of a k-window (at most k // 2, ATen's limit), or None to leave it out."""
    return n.draw(st.sampled_from([None, *(f"[{p}, {q}]" for p in range(k // 2 + 1) for q in range(k // 2 + 1))]))


@spec("aten.max_pool2d_with_indices.default", "nn")
def _max_pool(n: NodeDraw) -> str:
    x, k = _pool_input(n)
    if not n.corner("optionals"):
        return f"aten.max_pool2d_with_indices.default({x}, [{k}, {k}], [{n.draw(st.sampled_from([1, 2]))}], [{k // 2}])"
    padding = _pool_padding(n, k)
    pads = [int(p) for p in padding.strip("[]").split(",")] if padding else [0, 0]
    smallest = min(_shape(n, x)[2] + 2 * pads[0], _shape(n, x)[3] + 2 * pads[1])
    dilations = [d for d in (1, 2) if d * (k - 1) + 1 <= smallest]  # a window must fit the padded input
    return n.call("aten.max_pool2d_with_indices.default", x, f"[{k}, {k}]",
                  stride=n.draw(st.sampled_from([None, "[1]", "[2]", "[2, 1]"])), padding=padding,
                  dilation=n.draw(st.sampled_from([None, *(f"[{d}]" for d in dilations)])),
                  ceil_mode=n.draw(st.sampled_from([None, "True", "False"])))


@spec("aten.avg_pool2d.default", "nn")
def _avg_pool(n: NodeDraw) -> str:
    x, k = _pool_input(n)
    if not n.corner("optionals"):
        ceil, count = n.draw(st.booleans()), n.draw(st.booleans())
        return f"aten.avg_pool2d.default({x}, [{k}, {k}], [2, 2], [{k // 2}, {k // 2}], {ceil}, {count})"
    return n.call("aten.avg_pool2d.default", x, f"[{k}, {k}]",
                  stride=n.draw(st.sampled_from([None, "[2, 2]", "[1, 2]"])), padding=_pool_padding(n, k),
                  ceil_mode=n.draw(st.sampled_from([None, "True", "False"])),
                  count_include_pad=n.draw(st.sampled_from([None, "False", "True"])),
                  divisor_override=n.draw(st.sampled_from([None, "3", "1"])))


@spec("aten._adaptive_avg_pool2d.default", "nn")
def _adaptive(n: NodeDraw) -> str:
    x = n.tensor(FLOAT, shape=[1, 3, n.draw(st.sampled_from([4, 7, 9])), 6])
    return f"aten._adaptive_avg_pool2d.default({x}, [{n.draw(st.sampled_from([1, 2, 3]))}, 2])"


@spec("aten.upsample_nearest2d.vec", "nn")
def _upsample_nearest(n: NodeDraw) -> str:
    x = n.tensor(FLOAT, shape=[1, 2, n.draw(st.sampled_from([3, 4])), 5])
    return f"aten.upsample_nearest2d.vec({x}, None, [{n.draw(st.sampled_from([2.0, 1.5, 0.5]))}, 2.0])"


@spec("aten.upsample_bilinear2d.vec", "nn")
def _upsample_bilinear(n: NodeDraw) -> str:
    x = n.tensor(("float32", "float64"), shape=[1, 2, n.draw(st.sampled_from([3, 4])), 5])
    return f"aten.upsample_bilinear2d.vec({x}, None, {n.draw(st.booleans())}, [2.0, 1.5])"


# -- scans and sorting -------------------------------------------------------------------------
for _op in ("cumsum", "cumprod"):
    def _scan(n: NodeDraw, _op: str = _op) -> str:
        a = n.tensor(NUMERIC, min_rank=1, rows="reduction")
        if not n.corner("optionals"):
            return f"aten.{_op}.default({a}, {n.dim(a)})"
        dtypes = [None, "f64", "f32"] if n.meta(a).is_floating_point() else [None, "i32", "i64", "f64"]
        return n.call(f"aten.{_op}.default", a, str(n.dim(a)), dtype=n.draw(st.sampled_from(dtypes)))

    spec(f"aten.{_op}.default", "scan")(_scan)


@spec("aten.logcumsumexp.default", "scan")
def _logcumsumexp(n: NodeDraw) -> str:
    a = n.tensor(("float32", "float64"), min_rank=1, rows="reduction")
    return f"aten.logcumsumexp.default({a}, {n.dim(a)})"


@spec("aten.cummax.default", "scan")
def _cummax(n: NodeDraw) -> str:
    a = n.tensor(NUMERIC, min_rank=1, rows="reduction")
    return f"aten.cummax.default({a}, {n.dim(a)})"


@spec("aten.sort.stable", "scan")
def _sort(n: NodeDraw) -> str:
    # stable=True: ties keep their order, so indices are defined (unstable sort's are not)
    a = n.tensor(NUMERIC, min_rank=1, rows="reduction")
    return f"aten.sort.stable({a}, stable=True, dim={n.dim(a)}, descending={n.draw(st.booleans())})"


@spec("aten.topk.default", "scan")
def _topk(n: NodeDraw) -> str:
    # values only are deterministic under ties: the indices of equal values may differ by kernel
    a = n.tensor(("float32", "float64", "int64"), min_rank=1, nonempty=True, rows="reduction")
    dim = n.dim(a)
    k = n.draw(st.integers(0, min(3, _shape(n, a)[dim])))
    if not n.corner("optionals"):
        return f"aten.topk.default({a}, {k}, {dim}, {n.draw(st.booleans())})[0]"
    return n.call("aten.topk.default", a, str(k), dim=str(dim), largest=n.draw(st.sampled_from([None, "False", "True"])),
                  sorted=n.draw(st.sampled_from([None, "True"]))) + "[0]"


@spec("aten.argsort.stable", "scan")
def _argsort(n: NodeDraw) -> str:
    a = n.tensor(NUMERIC, min_rank=1, rows="reduction")
    return f"aten.argsort.stable({a}, stable=True, dim={n.dim(a)})"
