"""Input tensors of a fuzz graph, built from a small JSON-able description.

This module imports nothing but torch: ``repro.py`` files embed its source so that a
repro needs only torch and the target. An input is described by a dict::

    {"shape": [3, 0, 5], "dtype": "float16", "layout": "transposed",
     "profile": "special", "seed": 7}

``layout`` makes the tensor non-contiguous the way real graphs see it: ``contiguous``,
``transposed`` (a permuted view of a contiguous buffer), ``sliced`` (every other element
of a buffer twice as large along the last dim), ``expanded`` (size-1 dims broadcast to the
shape with stride 0; ``expand_from`` gives the stored shape), ``offset`` (a view starting
past element 0 of its storage). ``profile`` picks the values (see ``PROFILES``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset")
# normal: randn; positive: (0.1, 4]; unit: (-1, 1); special: normal values with NaN, +-inf,
# -0.0, huge and tiny magnitudes and denormals mixed in; small_int: -8..8; extreme: integers
# with their dtype's min/max mixed in; divisor: nonzero small integers, negatives included,
# never -1 (INT_MIN // -1 traps in C); index: valid indices into a dim of size ``bound``
# (negative ones too when ``negative``); bool: fair coin.
PROFILES = ("normal", "positive", "unit", "special", "small_int", "extreme", "divisor", "index", "bool")


def _specials(dtype: torch.dtype) -> list[float]:
    info = torch.finfo(dtype)
    return [math.nan, math.inf, -math.inf, -0.0, 0.0, info.max, -info.max, info.tiny,
            info.tiny / 4 if dtype != torch.bfloat16 else info.tiny, 1e4, -1e-3, 1.0, -1.0]


def _values(shape: list[int], dtype: torch.dtype, profile: str, gen: torch.Generator,
            bound: int = 1, negative: bool = False) -> torch.Tensor:
    if dtype == torch.bool or profile == "bool":
        return (torch.rand(shape, generator=gen) < 0.5).to(dtype)
    if profile == "index":
        low = -bound if negative else 0
        return torch.randint(low, max(bound, low + 1), shape, generator=gen).to(dtype)
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
    return _values(shape, dtype, profile, gen, bound, negative).to(device)


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
    return torch.empty(shape, dtype=dtype, device=device)
