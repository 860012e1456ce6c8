"""The float64 reference's own versions of the few ops whose float64 kernels are not a sound truth.

The reference runs a graph's source with every float dtype mapped to float64 (``FuzzGraph.function(
reference=True)``) and ``aten`` mapped to ``ReferenceAten``, which takes the ops below from here:

- the norms (``native_layer_norm``, ``native_group_norm``, training batch norm) normalize before the
  affine step, over a mean that is correctly rounded where float64's own summation cancels
  (``exact_mean``);
- ``AS_WORKING``: ops whose defaults depend on the working dtype (nan_to_num's largest values, a bit
  cast's width) take the working dtype's name first; ``FuzzGraph.source(reference=True)`` renders
  their calls that way.

Written here, not taken from the compiler's rules, so that a wrong rule still shows against them.
A repro script embeds this module's functions as source (``harness.fuzz.repro``): they use ``math``
and ``torch`` alone.
"""

from __future__ import annotations

import math
from typing import Any

import torch

# rows whose float64 mean may hold fewer good bits than this are summed again exactly (about a
# hundred-millionth of the row's mean magnitude and less; the float64 means of rows that do not cancel stay)
MEAN_BITS = 20
EXACT_MEAN_LIMIT = 1 << 22  # elements summed exactly (math.fsum) per call, at most


def exact_mean(rows: torch.Tensor) -> torch.Tensor:
    """The mean of each row (the last dim) of a float64 tensor, correctly rounded wherever float64's
    summation may have cancelled past ``MEAN_BITS`` good bits (summed again with ``math.fsum``).

    A float32 layer norm over (-0.14, -3.4e38, -0.87, 3.4e38, -1.49): float64's mean is 4.7e21, its own
    rounding of the +-3.4e38 pair, where the exact mean is -0.5; x - mean of the small values then has
    the wrong sign, and with an infinite weight the reference's output was NaN where the exact one is
    inf (fuzzer, crucible-sim, seed 439: eager's float32 mean overflowed to NaN, Crucible's scaled sum
    gave the exact answer and was failed)."""
    mean = rows.mean(dim=-1)
    count = rows.shape[-1]
    if count == 0 or rows.numel() == 0:
        return mean
    # a row of one value has that value as its mean exactly; float64's sum of 1024 copies of -1.685
    # rounds, so x - mean was not 0 and a weight of -inf gave -inf where 0 * -inf is NaN (fuzzer,
    # crucible-interpret --dynamic, seed 550: a training batch norm over an expanded input)
    first = rows[..., :1]
    mean = torch.where((rows == first).all(dim=-1), first.squeeze(-1), mean)
    # float64's summation error is at most about count * u * sum|x|, count * u * mean|x| of the mean;
    # finite rows only (an inf or NaN term is the same in every order)
    scale = rows.abs().mean(dim=-1)
    u = torch.finfo(torch.float64).eps / 2
    cancels = torch.isfinite(scale) & (scale > 0) & (count * u * scale >= 2.0 ** -MEAN_BITS * mean.abs())
    flat, out = rows.reshape(-1, count), mean.reshape(-1).clone()
    where = cancels.reshape(-1).nonzero().flatten()
    if where.numel() == 0 or where.numel() * count > EXACT_MEAN_LIMIT:
        return mean
    for i, row in zip(where.tolist(), flat[where].tolist()):
        try:
            out[i] = math.fsum(row) / count
        except OverflowError:  # the exact sum passes float64's max: float64's mean says as much
            continue
    return out.reshape(mean.shape)


def _normalized(rows: torch.Tensor, eps: float) -> tuple:
    """(rows - mean) * rstd over the last dim, with its mean and rstd (keepdim)."""
    mean = exact_mean(rows).unsqueeze(-1)
    rstd = ((rows - mean).square().mean(dim=-1, keepdim=True) + eps).rsqrt()
    return (rows - mean) * rstd, mean, rstd


def _layer_norm_reference(x: torch.Tensor, normalized_shape: Any, weight: Any, bias: Any, eps: float) -> tuple:
    """native_layer_norm for the float64 reference: normalized, then the affine step, over the exact
    mean (``exact_mean``; fuzzer, crucible-sim, seed 439)."""
    inner = len(normalized_shape)
    count = math.prod(normalized_shape)
    if x.numel() == 0 or count == 0 or inner > x.dim():
        return torch.ops.aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)
    out, mean, rstd = _normalized(x.reshape(-1, count), eps)
    out = out.reshape(x.shape)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    stats = list(x.shape[:x.dim() - inner]) + [1] * inner
    return out, mean.reshape(stats), rstd.reshape(stats)


def _group_norm_reference(x: torch.Tensor, weight: Any, bias: Any, n: int, c: int, inner: int, groups: int,
                          eps: float) -> tuple:
    """native_group_norm for the float64 reference, normalizing before the affine step. ATen's CPU
    kernel computes x * (rstd * w) + (-mean * rstd * w), which cancels: a group of equal values gave
    -2.3e24 in float64 where the result is exactly 0, so the reference could not judge it (fuzzer,
    crucible-cpp, seed 22); its mean is the exact one (``exact_mean``)."""
    out, mean, rstd = _normalized(x.reshape(n, groups, -1), eps)
    out = out.reshape(x.shape)
    per_channel = [1, c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out, mean.reshape(n, groups), rstd.reshape(n, groups)


def _batch_norm_training_reference(x: torch.Tensor, weight: Any, bias: Any, running_mean: torch.Tensor,
                                   running_var: torch.Tensor, training: bool, momentum: float, eps: float) -> tuple:
    """_native_batch_norm_legit_functional for the float64 reference, training: each channel normalized
    over the exact mean before the affine step. ATen's float64 kernel subtracts a mean it summed: a
    channel of two equal values -3.4e38 came out -4.1e23 where they normalize to exactly 0 (fuzzer,
    crucible-cpp, seed 601). The running variance takes the unbiased variance (NaN for one value a
    channel, as ATen's)."""
    op = torch.ops.aten._native_batch_norm_legit_functional.default
    if not training or x.dim() < 2 or x.numel() == 0:
        return op(x, weight, bias, running_mean, running_var, training, momentum, eps)
    channels = x.shape[1]
    moved = x.movedim(1, 0)
    out, mean, rstd = _normalized(moved.reshape(channels, -1), eps)
    count = out.shape[1]
    var = (moved.reshape(channels, -1) - mean).square().mean(dim=-1)
    out = out.reshape(moved.shape).movedim(0, 1)
    per_channel = [1, channels] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    mean, rstd = mean.flatten(), rstd.flatten()
    unbiased = var * (count / (count - 1) if count > 1 else math.nan)
    return (out, mean, rstd, momentum * mean + (1 - momentum) * running_mean,
            momentum * unbiased + (1 - momentum) * running_var)


class Overloads:
    def __init__(self, **overloads: Any) -> None:
        self.__dict__.update(overloads)


REFERENCE_OPS = {"native_group_norm": Overloads(default=_group_norm_reference),
                 "native_layer_norm": Overloads(default=_layer_norm_reference),
                 "_native_batch_norm_legit_functional": Overloads(default=_batch_norm_training_reference)}


class ReferenceAten:
    """``torch.ops.aten`` for the float64 reference, with the ops of ``REFERENCE_OPS`` replaced."""

    def __getattr__(self, name: str) -> Any:
        return REFERENCE_OPS.get(name) or getattr(torch.ops.aten, name)


def _nan_to_num_as(dtype_name: str, x: Any, nan: Any = 0.0, posinf: Any = None, neginf: Any = None) -> Any:
    """nan_to_num in the float64 reference with the working dtype's defaults: +-inf become that
    dtype's largest values, not float64's (1.8e308 rounds back to inf in float32, and a layer norm of
    two of them was NaN in the reference where float32's [-3.4e38, -3.4e38] normalizes to 0; fuzzer,
    crucible-cpp, seed 251)."""
    dtype = getattr(torch, dtype_name, None)  # the node's working dtype, "float32"
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        top = torch.finfo(dtype).max
        posinf = top if posinf is None else posinf
        neginf = -top if neginf is None else neginf
    return torch.ops.aten.nan_to_num.default(x, 0.0 if nan is None else nan, posinf, neginf)


BIT_PARTNER = {torch.int32: torch.float32, torch.float32: torch.int32, torch.int64: torch.float64,
               torch.float64: torch.int64}


def _view_dtype_as(dtype_name: str, x: Any, dtype: Any) -> Any:
    """view.dtype (a bit cast of one width) in the float64 reference: the operand at its working width
    first (a float32 value is float64 here, and viewing float64 as int32 is refused), its bits read as
    the working result dtype ``dtype_name``, a float result widened back to float64."""
    target = getattr(torch, dtype_name)
    out = x.to(BIT_PARTNER[target]).view(target)
    return out.double() if target.is_floating_point else out


SLICE_BITS = 26  # a slice's terms are multiples of 2^k below 2^(k + 26): 2^27 of them sum exactly in float64
EXACT_SUM_LIMIT = 1 << 20  # output positions x slices combined by math.fsum, at most


def _exact_float64(out: Any, dtype_name: str, x: Any, reduce: Any) -> Any:
    """``out`` (``reduce(x)``, an ATen float64 sum) again, correctly rounded where its working dtype is
    float64: a float64 graph's reference is otherwise eager's own computation, with eager's error.

    The finite terms split into slices on a fixed exponent grid (each term a sum of multiples of 2^k
    below 2^(k + SLICE_BITS), k from 998 down to -1000; what is left below 2^-1000 a last slice), each
    slice summed exactly by ``reduce``, the slices' sums added by ``math.fsum`` per position. A position
    whose terms hold inf or NaN, or whose exact sum passes float64's max, keeps ATen's value. Fuzzer,
    crucible-sim --capture dynamo, seed 467: the float64 mean of 4 values each repeated 8,191 times (an
    expanded input) was 1,750 ulps off in ATen and within 3 ulps in Crucible, which was failed."""
    if (dtype_name != "float64" or not isinstance(out, torch.Tensor) or out.dtype != torch.float64
            or not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0):
        return out
    finite = torch.isfinite(x)
    rest = torch.where(finite, x, torch.zeros((), dtype=x.dtype)).double()
    clean = reduce((~finite).double()) == 0
    slices = []
    top = rest.abs().max().item()  # grid points above it give empty slices, and so do those after rest is 0
    for k in range(1024 - SLICE_BITS, -1000, -SLICE_BITS):
        scale = 2.0 ** k
        if scale > top:
            continue
        part = torch.trunc(rest / scale) * scale
        if bool((part != 0).any()):
            slices.append(reduce(part))
            rest = rest - part
            if not bool(rest.any()):
                break
    slices.append(reduce(rest))
    if out.numel() * len(slices) > EXACT_SUM_LIMIT:
        return out
    exact = out.clone().reshape(-1)
    columns = torch.stack([t.reshape(-1) for t in slices], dim=1).tolist()
    for i, (keep, terms) in enumerate(zip(clean.reshape(-1).tolist(), columns)):
        if keep:
            try:
                exact[i] = math.fsum(terms)
            except OverflowError:  # past float64's max: ATen's inf says as much
                continue
    return exact.reshape(out.shape)


def _sum_dims_as(dtype_name: str, x: Any, dim: Any, keepdim: bool = False, *, dtype: Any = None) -> Any:
    reduce = lambda t: torch.ops.aten.sum.dim_IntList(t, dim, keepdim, dtype=dtype)  # noqa: E731
    return _exact_float64(reduce(x), dtype_name, x, reduce)


def _sum_all_as(dtype_name: str, x: Any, *, dtype: Any = None) -> Any:
    reduce = lambda t: torch.ops.aten.sum.default(t, dtype=dtype)  # noqa: E731
    return _exact_float64(reduce(x), dtype_name, x, reduce)


def _mean_dims_as(dtype_name: str, x: Any, dim: Any, keepdim: bool = False, *, dtype: Any = None) -> Any:
    """mean.dim in the float64 reference: where its working dtype is float64, the exact sum over the
    count (``_exact_float64``)."""
    out = torch.ops.aten.mean.dim(x, dim, keepdim, dtype=dtype)
    if dtype_name != "float64" or not isinstance(out, torch.Tensor) or out.numel() == 0:
        return out
    total = _sum_dims_as(dtype_name, x, dim, keepdim, dtype=dtype)
    return torch.where(torch.isfinite(out), total / (x.numel() // out.numel()), out)


def _mean_all_as(dtype_name: str, x: Any, *, dtype: Any = None) -> Any:
    out = torch.ops.aten.mean.default(x, dtype=dtype)
    if dtype_name != "float64" or not isinstance(out, torch.Tensor) or x.numel() == 0:
        return out
    return torch.where(torch.isfinite(out), _sum_all_as(dtype_name, x, dtype=dtype) / x.numel(), out)


# ops whose float64 reference takes its working dtype first (``FuzzGraph.source(reference=True)``)
AS_WORKING = {"aten.nan_to_num.default": _nan_to_num_as, "aten.view.dtype": _view_dtype_as,
              "aten.sum.dim_IntList": _sum_dims_as, "aten.sum.default": _sum_all_as,
              "aten.mean.dim": _mean_dims_as, "aten.mean.default": _mean_all_as}
