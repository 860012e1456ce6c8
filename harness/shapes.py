"""Dynamic shapes: the same entry at several batch sizes.

An entry's inputs come from its factory at one size. The batch dimension is the one every
tensor input shares as its leading dimension (token ids, attention masks and images of one
batch agree on it); resizing it keeps an input valid whatever it holds, because the new rows
are rows of the original (cycled), so ids stay in the vocabulary and masks stay masks.
Inputs without a common leading dimension (an op entry with a weight and a bias) cannot be
resized generically: such entries run at their one size and say so.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.oracle import flatten_outputs

# Multiples of the built batch size: with a built batch of 1 these are sizes 1, 2 and 3; Dynamo
# specializes sizes 0 and 1, so sizes 2 and 3 both exercise the one symbolic graph.
BATCH_FACTORS = (1, 2, 3)


def batch_size(args: tuple, kwargs: dict) -> int | None:
    """The leading dimension shared by every tensor input of rank >= 1, or None."""
    sizes = {leaf.shape[0] for _, leaf in flatten_outputs([list(args), dict(kwargs)])
             if isinstance(leaf, torch.Tensor) and leaf.dim() >= 1}
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    return size if size >= 1 else None


def _resize(value: Any, old: int, new: int) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dim() >= 1 and value.shape[0] == old:
            index = torch.arange(new, device=value.device) % old
            return value.index_select(0, index).contiguous()
        return value
    if isinstance(value, (list, tuple)):
        items = [_resize(v, old, new) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return type(value)((k, _resize(v, old, new)) for k, v in value.items())
    return value


def size_variants(args: tuple, kwargs: dict) -> list[tuple[int | None, tuple, dict]]:
    """[(batch, args, kwargs)] for every batch size to run; one item when there is no batch dim."""
    batch = batch_size(args, kwargs)
    if batch is None:
        return [(None, args, kwargs)]
    return [(batch * f, _resize(args, batch, batch * f), _resize(kwargs, batch, batch * f))
            for f in BATCH_FACTORS]


def dynamo_counters() -> tuple[int, int]:
    """(graphs Dynamo compiled so far, guard failures recorded so far) in this process."""
    from torch._dynamo import utils

    graphs = int(utils.counters["stats"]["unique_graphs"])
    failures = sum(len(v) for v in utils.guard_failures.values())
    return graphs, failures
