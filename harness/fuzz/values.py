"""Input tensors of a fuzz graph, built from a small JSON-able description.

This module imports nothing but torch: ``repro.py`` files embed its source so that a
repro needs only torch and the target. An input is described by a dict::

    {"shape": [3, 0, 5], "dtype": "float16", "layout": "transposed",
     "profile": "special", "seed": 7}

``layout`` makes the tensor non-contiguous the way real graphs see it: ``contiguous``,
``transposed`` (a permuted view of a contiguous buffer), ``sliced`` (every other element
of a buffer twice as large along the last dim), ``expanded`` (size-1 dims broadcast to the
shape with stride 0; ``expand_from`` gives the stored shape), ``offset`` (a view starting
past element 0 of its storage), ``narrowed`` (each size-1 dim is the middle element of a dim of 3,
as ``x[:, 1:2]`` is: a real, nonzero stride and an offset, and the dims before it strided past a
gap). ``profile`` picks the values (see ``PROFILES``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset", "narrowed")
# normal: randn; positive: (0.1, 4]; unit: (-1, 1); special: normal values with NaN, +-inf,
# -0.0, huge and tiny magnitudes and denormals mixed in; small_int: -8..8; extreme: integers
# with their dtype's min/max mixed in; divisor: nonzero small integers, negatives included,
# never -1 (INT_MIN // -1 traps in C); index: valid indices into a dim of size ``bound``
# (negative ones too when ``negative``); bool: fair coin; ties: values exactly halfway between two
# neighbours of every narrower float (and x.5 for integer casts and round; integers halfway between
# floats for int -> float casts), so a cast that rounds half away or truncates differs from eager's
# round-half-even; tiny_huge: subnormal, smallest-normal and near-max magnitudes (a divisor whose
# reciprocal overflows or goes subnormal); accumulation: magnitudes whose sum, sum of squares or
# mean's partial sums come near the dtype's overflow (int32 sums past int32, which eager sums in
# int64); small: magnitudes log-uniform in (2^-16, 1], either sign (the series branches of log1p, expm1,
# tanh, atan, ... near 0 take most of them: randn puts 4% of its values below 0.05); shifted: one
# offset of 4 to 8192 for the whole tensor plus a spread 2^-4 to 2^-14 of it (what a variance, a norm's
# mean or a difference computed by cancellation gets wrong: randn's mean is near 0).
PROFILES = ("normal", "positive", "unit", "special", "small_int", "extreme", "divisor", "index", "bool",
            "ties", "tiny_huge", "accumulation", "small", "shifted")
_NARROWER = {torch.float64: (torch.float32, torch.float16, torch.bfloat16),
             torch.float32: (torch.float16, torch.bfloat16), torch.float16: (torch.bfloat16,)}
_MANTISSA = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def _specials(dtype: torch.dtype) -> list[float]:
    info = torch.finfo(dtype)
    return [math.nan, math.inf, -math.inf, -0.0, 0.0, info.max, -info.max, info.tiny,
            info.tiny / 4 if dtype != torch.bfloat16 else info.tiny, 1e4, -1e-3, 1.0, -1.0]


def _pick(choices: list[torch.Tensor], shape: list[int], gen: torch.Generator) -> torch.Tensor:
    """Elementwise, one of ``choices`` (float64 tensors of ``shape``), uniformly."""
    which = torch.randint(0, len(choices), shape, generator=gen)
    out = choices[0].clone()
    for k, choice in enumerate(choices[1:], 1):
        out = torch.where(which == k, choice, out)
    return out


def _float_ties(shape: list[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Midpoints between neighbours of each float narrower than ``dtype`` (exact in ``dtype``), and x.5."""
    base = torch.randn(shape, generator=gen, dtype=torch.float64) * 4
    halves = torch.randint(-8, 8, shape, generator=gen).double() + 0.5
    choices = [halves]
    for narrow in _NARROWER.get(dtype, ()):
        low = base.to(narrow)
        high = torch.nextafter(low, torch.full_like(low, math.inf))
        choices.append((low.double() + high.double()) / 2)
    return _pick(choices, shape, gen)


def _int_ties(shape: list[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Integers halfway between two neighbouring floats (2^p + odd past each significand)."""
    odd = torch.randint(0, 8, shape, generator=gen) * 2 + 1
    sign = torch.where(torch.rand(shape, generator=gen) < 0.3, -1, 1)
    bits = [m for m in _MANTISSA.values() if m < (31 if dtype == torch.int32 else 63)]
    powers = torch.tensor([1 << m for m in bits], dtype=torch.int64)
    return (powers[torch.randint(0, len(bits), shape, generator=gen)] + odd) * sign


def _tiny_huge(shape: list[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    info = torch.finfo(dtype)
    steps = torch.randint(1, max(2, _MANTISSA[dtype] - 1), shape, generator=gen).double()
    subnormal = info.tiny * torch.exp2(-steps)
    tiny = info.tiny * (1 + torch.rand(shape, generator=gen, dtype=torch.float64))
    huge = info.max * (0.25 + 0.75 * torch.rand(shape, generator=gen, dtype=torch.float64))
    normal = torch.randn(shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=gen) < 0.3, -1.0, 1.0).double()
    out = _pick([subnormal, tiny, huge, normal], shape, gen) * sign
    return out if dtype != torch.bfloat16 else torch.where(out.abs() < info.tiny, info.tiny * sign, out)


def _accumulation(shape: list[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Values whose accumulation nears the overflow: a share of max / numel (the sum), of sqrt(max)
    (the sum of squares) and of max itself (a mean's partial sums), mostly positive."""
    count = max(1, math.prod(shape))
    scale = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.5 + 0.5
    sign = torch.where(torch.rand(shape, generator=gen) < 0.25, -1.0, 1.0).double()
    if dtype.is_floating_point:
        top = torch.finfo(dtype).max
        choices = [torch.full(shape, top / count, dtype=torch.float64), torch.full(shape, math.sqrt(top), dtype=torch.float64),
                   torch.full(shape, top / 2, dtype=torch.float64)]
        return _pick(choices, shape, gen) * scale * sign
    # int32: sums 1-4x past int32 (eager sums int32 in int64); int64: sums near its max
    top = float(torch.iinfo(dtype).max) * (4 if dtype == torch.int32 else 1)
    return (scale * sign * top / count).floor().clamp(torch.iinfo(dtype).min, torch.iinfo(dtype).max).long()


def _small(shape: list[int], gen: torch.Generator) -> torch.Tensor:
    magnitude = torch.exp2(-16 * torch.rand(shape, generator=gen, dtype=torch.float64))
    return torch.where(torch.rand(shape, generator=gen) < 0.5, -magnitude, magnitude)


def _shifted(shape: list[int], gen: torch.Generator) -> torch.Tensor:
    k, m = torch.randint(2, 13, (2,), generator=gen).tolist(), int(torch.randint(4, 15, (1,), generator=gen))
    offset = (1 + torch.rand((), generator=gen, dtype=torch.float64).item()) * 2.0 ** k[0] * (-1) ** k[1]
    return offset + abs(offset) * 2.0 ** -m * torch.randn(shape, generator=gen, dtype=torch.float64)


def _values(shape: list[int], dtype: torch.dtype, profile: str, gen: torch.Generator,
            bound: int = 1, negative: bool = False) -> torch.Tensor:
    if dtype == torch.bool or profile == "bool":
        return (torch.rand(shape, generator=gen) < 0.5).to(dtype)
    if profile == "index":
        low = -bound if negative else 0
        return torch.randint(low, max(bound, low + 1), shape, generator=gen).to(dtype)
    if profile == "ties":
        return (_float_ties(shape, dtype, gen) if dtype.is_floating_point else _int_ties(shape, dtype, gen)).to(dtype)
    if profile == "tiny_huge" and dtype.is_floating_point:
        return _tiny_huge(shape, dtype, gen).to(dtype)
    if profile == "accumulation":
        return _accumulation(shape, dtype, gen).to(dtype)
    if profile in ("small", "shifted") and dtype.is_floating_point:
        return (_small(shape, gen) if profile == "small" else _shifted(shape, gen)).to(dtype)
    if dtype.is_floating_point:
        if profile == "positive":
            base = torch.rand(shape, generator=gen, dtype=torch.float64) * 3.9 + 0.1
        elif profile == "unit":
            base = torch.rand(shape, generator=gen, dtype=torch.float64) * 1.98 - 0.99
        else:
            base = torch.randn(shape, generator=gen, dtype=torch.float64)
        if profile == "special" and base.numel():
            specials = torch.tensor(_specials(dtype), dtype=torch.float64)
            mask = torch.rand(shape, generator=gen) < 0.3
            picks = specials[torch.randint(0, len(specials), shape, generator=gen)]
            base = torch.where(mask, picks, base)
        return base.to(dtype)
    if profile == "divisor":
        mags = torch.randint(1, 8, shape, generator=gen)
        signs = torch.where(torch.rand(shape, generator=gen) < 0.4, -1, 1)
        out = mags * signs
        if out.numel():  # their dtype's extremes too (never -1: INT_MIN // -1 traps)
            info = torch.iinfo(dtype)
            mask = torch.rand(shape, generator=gen) < 0.15
            out = torch.where(mask, torch.tensor([info.min, info.max])[torch.randint(0, 2, shape, generator=gen)], out)
        return torch.where(out == -1, torch.full_like(out, -2), out).to(dtype)
    out = torch.randint(-8, 9, shape, generator=gen)
    if profile == "extreme" and out.numel():
        info = torch.iinfo(dtype)
        specials = torch.tensor([info.min, info.max, 0, -1, 1, info.max - 1], dtype=torch.int64)
        mask = torch.rand(shape, generator=gen) < 0.3
        out = torch.where(mask, specials[torch.randint(0, len(specials), shape, generator=gen)], out)
    return out.to(dtype)


def make_input(desc: dict[str, Any], device: str = "cpu") -> torch.Tensor:
    """The tensor ``desc`` describes (deterministic: the values depend only on ``desc``)."""
    shape = list(desc["shape"])
    dtype = DTYPES[desc["dtype"]]
    layout = desc.get("layout", "contiguous")
    gen = torch.Generator().manual_seed(int(desc.get("seed", 0)))
    profile = desc.get("profile", "normal")
    bound, negative = int(desc.get("bound", 1)), bool(desc.get("negative", False))
    if layout == "transposed" and len(shape) >= 2:
        stored = shape[:-2] + [shape[-1], shape[-2]]
        return _values(stored, dtype, profile, gen, bound, negative).to(device).transpose(-1, -2)
    if layout == "sliced" and len(shape) >= 1:
        stored = shape[:-1] + [2 * shape[-1]]
        return _values(stored, dtype, profile, gen, bound, negative).to(device)[..., ::2]
    if layout == "expanded" and desc.get("expand_from") is not None:
        stored = list(desc["expand_from"])
        return _values(stored, dtype, profile, gen, bound, negative).to(device).expand(shape)
    if layout == "offset":
        flat = _values([math.prod(shape) + 3], dtype, profile, gen, bound, negative).to(device)
        return flat[3:].view(shape)
    if layout == "narrowed":
        return _narrowed(_values(_wider(shape), dtype, profile, gen, bound, negative).to(device), shape)
    return _values(shape, dtype, profile, gen, bound, negative).to(device)


def _wider(shape: list[int]) -> list[int]:
    return [3 if s == 1 else s for s in shape]


def _narrowed(stored: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """The middle element of ``stored``'s dim of 3 wherever ``shape`` has a dim of size 1."""
    return stored[tuple(slice(1, 2) if s == 1 else slice(None) for s in shape)]


def layout_of(desc: dict[str, Any], device: str = "meta") -> torch.Tensor:
    """An uninitialized tensor with ``desc``'s shape, dtype and strides (for metadata)."""
    shape, dtype = list(desc["shape"]), DTYPES[desc["dtype"]]
    layout = desc.get("layout", "contiguous")
    if layout == "transposed" and len(shape) >= 2:
        return torch.empty(shape[:-2] + [shape[-1], shape[-2]], dtype=dtype, device=device).transpose(-1, -2)
    if layout == "sliced" and len(shape) >= 1:
        return torch.empty(shape[:-1] + [2 * shape[-1]], dtype=dtype, device=device)[..., ::2]
    if layout == "expanded" and desc.get("expand_from") is not None:
        return torch.empty(list(desc["expand_from"]), dtype=dtype, device=device).expand(shape)
    if layout == "offset":
        return torch.empty([math.prod(shape) + 3], dtype=dtype, device=device)[3:].view(shape)
    if layout == "narrowed":
        return _narrowed(torch.empty(_wider(shape), dtype=dtype, device=device), shape)
    return torch.empty(shape, dtype=dtype, device=device)
