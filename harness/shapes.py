"""Dynamic shapes: the same entry at several batch sizes and, where it has one, sequence lengths.

An entry's inputs come from its factory at one size. The batch dimension is the one every
tensor input shares as its leading dimension (token ids, attention masks and images of one
batch agree on it); resizing it keeps an input valid whatever it holds, because the new rows
are rows of the original (cycled), so ids stay in the vocabulary and masks stay masks.
Inputs without a common leading dimension (an op entry with a weight and a bias) cannot be
resized generically: such entries run at their one size and say so.

The sequence dimension is the second one shared by every integer or bool input of rank 2 or
more (a text model's token ids and attention mask); every input with that second dimension is
resized the same way (columns cycled), once, at ``SEQUENCE_FACTOR`` times the built length and twice the built batch, so a
compiler that specialized on the length recompiles there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from harness.oracle import flatten_outputs

# Multiples of the built batch size: with a built batch of 1 these are sizes 1, 2 and 3; Dynamo
# specializes sizes 0 and 1, so sizes 2 and 3 both exercise the one symbolic graph.
BATCH_FACTORS = (1, 2, 3)
# The further sequence length: a multiple of the built one (short at the small scale, so twice it
# stays inside every text model's position table).
SEQUENCE_FACTOR = 2


class SizeVariant(NamedTuple):
    """One input size: ``batch`` None when the entry runs at its built size only; ``seq`` the sequence
    length where the entry has one; ``name`` what an entry's own schedule calls it."""

    batch: int | None
    seq: int | None
    args: tuple
    kwargs: dict
    name: str = ""

    @property
    def label(self) -> str:
        return size_label(self.batch, self.seq, self.name)


def size_label(batch: int | None, seq: int | None, name: str = "") -> str:
    """How results and messages name one size."""
    return name or f"batch {batch}" + (f", sequence {seq}" if seq is not None else "")


def batch_size(args: tuple, kwargs: dict) -> int | None:
    """The leading dimension shared by every tensor input of rank >= 1, or None."""
    sizes = {leaf.shape[0] for _, leaf in flatten_outputs([list(args), dict(kwargs)])
             if isinstance(leaf, torch.Tensor) and leaf.dim() >= 1}
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    return size if size >= 1 else None


def sequence_length(args: tuple, kwargs: dict) -> int | None:
    """The second dimension shared by every integer or bool tensor input of rank >= 2 (token ids,
    attention masks), or None (no such input, or they disagree)."""
    sizes = {leaf.shape[1] for _, leaf in flatten_outputs([list(args), dict(kwargs)])
             if isinstance(leaf, torch.Tensor) and leaf.dim() >= 2
             and (leaf.dtype == torch.bool or not (leaf.is_floating_point() or leaf.is_complex()))}
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    return size if size >= 2 else None


def _resize(value: Any, old: int, new: int, dim: int = 0) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dim() > dim and value.shape[dim] == old:
            index = torch.arange(new, device=value.device) % old
            return value.index_select(dim, index).contiguous()
        return value
    if isinstance(value, (list, tuple)):
        items = [_resize(v, old, new, dim) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return type(value)((k, _resize(v, old, new, dim)) for k, v in value.items())
    return value


def size_variants(args: tuple, kwargs: dict, schedule: tuple = ()) -> list[SizeVariant]:
    """Every size to run: an entry's own ``schedule`` (``corpus.entry.SizedInputs``, a variable-length
    workload's calls) when it has one; else the batch factors at the built sequence length, then (where
    the entry has a sequence dimension) a longer sequence at twice the batch; one item when there is
    no batch dim."""
    if schedule:
        return [SizeVariant(s.batch, s.seq, s.inputs, s.kwargs, s.label) for s in schedule]
    batch = batch_size(args, kwargs)
    if batch is None:
        return [SizeVariant(None, None, args, kwargs)]
    seq = sequence_length(args, kwargs)
    out = [SizeVariant(batch * f, seq, _resize(args, batch, batch * f), _resize(kwargs, batch, batch * f))
           for f in BATCH_FACTORS]
    if seq is not None:
        a, k = out[1].args, out[1].kwargs
        longer = seq * SEQUENCE_FACTOR
        out.append(SizeVariant(batch * 2, longer, _resize(a, seq, longer, 1), _resize(k, seq, longer, 1)))
    return out


def dynamo_counters() -> tuple[int, int]:
    """(graphs Dynamo compiled so far, guard failures recorded so far) in this process."""
    from torch._dynamo import utils

    graphs = int(utils.counters["stats"]["unique_graphs"])
    failures = sum(len(v) for v in utils.guard_failures.values())
    return graphs, failures
