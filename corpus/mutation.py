"""Mutation zoo: hand-written modules that mutate their parameters, buffers or inputs inside forward.

One pattern each: writes through ``.data`` (PixelCNN's masked convolution), ``set_``, in-place ops on
parameters and buffers (running statistics, clamped weights, counters), ``index_put_`` and ``copy_``
into buffers, a buffer read before and after its update, in-place updates of an input, and BatchNorm
in training mode. AOTAutograd keeps such inference mutations in the graph it hands the backend (as
Inductor asks it to), so a backend must write the new values back into the caller's tensors.

The harness compares a model's outputs only, so each entry runs its pattern inside ``WithState``,
whose outputs are the pattern's output followed by every parameter, buffer and input after the call:
a value that was not written back is an output that differs from eager's. ``PATTERNS`` lists the bare
modules with their inputs for tests that compare state directly. Graph and break counts were measured
as the zoo's are (``corpus.zoo``): one graph, and one break where ``WithState`` copies the state in
eager (``set_`` under no_grad breaks the graph in Dynamo itself: the set_buffer pattern compiles as two
graphs around it; the storage swap that reaches the compiler is ``.data = ...``, in data_assign).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from corpus.entry import Entry
from corpus.zoo import zoo

_ENTRIES: list[Entry] = []


@torch._dynamo.disable
def _snapshot(tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Copies of ``tensors`` taken in eager, outside the compiled graph: what their storage holds once
    the graph has run (inside the graph a copy would be of the functional value, not of the storage)."""
    return tuple(t.detach().clone() for t in tensors)


class WithState(nn.Module):
    """``inner``'s output, then copies of its parameters, its buffers and the call's inputs as they are
    after it (copies: the harness calls a model again before it compares the first call's outputs)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any) -> tuple:
        out = self.inner(*args)
        return (out, *_snapshot((*self.inner.parameters(), *self.inner.buffers(), *args)))


# name -> (module class, inputs): the bare patterns, in registration order
PATTERNS: dict[str, tuple[type[nn.Module], Callable[[], tuple]]] = {}


def mutation(name: str, inputs: Callable[[], tuple] = lambda: (torch.randn(4, 8),), graphs: int = 1,
             breaks: int = 1, family: str = "state", **kwargs: Any) -> Callable:
    """Register a mutation pattern (an nn.Module class) as the entry ``mutation/<name>``."""
    register = zoo(name, graphs, breaks, inputs, family=family, source="mutation", into=_ENTRIES, wrap=WithState,
                   **kwargs)

    def add(cls: type[nn.Module]) -> type[nn.Module]:
        PATTERNS[name] = (cls, inputs)
        return register(cls)

    return add


def entries() -> list[Entry]:
    return list(_ENTRIES)


_image = functools.partial(torch.randn, 2, 3, 8, 8)


# ---- parameters written through .data and set_ ----------------------------------------------------
@mutation("masked_conv", inputs=lambda: (_image(),), family="data")
class MaskedConv2d(nn.Conv2d):
    """PixelCNN's masked convolution (mask type A): ``self.weight.data *= self.mask`` before the conv."""

    def __init__(self) -> None:
        super().__init__(3, 4, 3, padding=1)
        mask = torch.ones_like(self.weight)
        mask[:, :, 1, 1:] = 0  # the centre pixel and those right of it
        mask[:, :, 2:] = 0  # the rows below
        self.register_buffer("mask", mask)

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


@mutation("data_assign", family="data")
class DataAssign(nn.Linear):
    """``self.weight.data = ...``: a weight replaced by a value computed from it (twice: halved again)."""

    def __init__(self) -> None:
        super().__init__(8, 6)

    def forward(self, x):
        self.weight.data = self.weight.data * 0.5 + 0.01
        return super().forward(x)


@mutation("set_buffer", graphs=2, breaks=3, family="data")
class SetBuffer(nn.Module):
    """``buf.set_(value)`` under no_grad: a buffer's storage replaced by a computed one."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.randn(8))

    def forward(self, x):
        with torch.no_grad():
            self.state.set_(self.state * 0.5 + x.mean(0))
        return x + self.state


# ---- in-place ops on parameters and buffers ------------------------------------------------------
@mutation("buffer_add")
class BufferAdd(nn.Module):
    """``self.buf.add_(1)``, then the updated buffer read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.randn(8))

    def forward(self, x):
        self.buf.add_(1)
        return x * self.buf


@mutation("running_stats")
class RunningStats(nn.Module):
    """``self.running.mul_(0.9).add_(...)``: an exponential moving average of the batch mean."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running", torch.randn(8))

    def forward(self, x):
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return x - self.running


@mutation("param_clamp")
class ParamClamp(nn.Linear):
    """``self.weight.clamp_(-0.2, 0.2)`` under no_grad before the linear (a weight constraint)."""

    def __init__(self) -> None:
        super().__init__(8, 6)

    def forward(self, x):
        with torch.no_grad():
            self.weight.clamp_(-0.2, 0.2)
            self.bias.mul_(0.5)
        return super().forward(x)


@mutation("index_put_buffer")
class IndexPutBuffer(nn.Module):
    """``index_put_`` with accumulation into a buffer (a repeated index), then the buffer read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.randn(8))
        self.register_buffer("idx", torch.tensor([0, 2, 2, 5]))

    def forward(self, x):
        self.buf.index_put_((self.idx,), x.sum(0)[:4], accumulate=True)
        return x + self.buf


@mutation("setitem_buffer")
class SetitemBuffer(nn.Module):
    """``self.cache[:, 1:] = ...``: a slice of a 2-d buffer overwritten, the rest kept."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.randn(4, 3))

    def forward(self, x):
        self.cache[:, 1:] = self.cache[:, :2] + x[:, :2]
        return x[:, :3] * self.cache


@mutation("copy_buffer")
class CopyBuffer(nn.Module):
    """``self.last.copy_(x.mean(0))``: the buffer keeps the last batch's mean."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("last", torch.randn(8))

    def forward(self, x):
        y = x - self.last  # the previous call's mean
        self.last.copy_(x.mean(0))
        return y


@mutation("read_then_mutate")
class ReadThenMutate(nn.Module):
    """A buffer read before and after its update: each read must see its own value."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.randn(8))

    def forward(self, x):
        before = x * self.buf
        self.buf.add_(x.sum(0))
        return before + self.buf


@mutation("flip_buffer")
class FlipBuffer(nn.Module):
    """``self.buf.copy_(self.buf.flip(0))``: the new value reads the old one at other elements."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.randn(8))

    def forward(self, x):
        self.buf.copy_(self.buf.flip(0) + 1)
        return x + self.buf


@mutation("swap_buffers")
class SwapBuffers(nn.Module):
    """Two buffers exchange values: each new value is the other's old one."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("a", torch.randn(8))
        self.register_buffer("b", torch.randn(8))

    def forward(self, x):
        old = self.a.clone()
        self.a.copy_(self.b)
        self.b.copy_(old * 2)
        return x * self.a + self.b


@mutation("counter_int")
class CounterInt(nn.Module):
    """An int64 step counter (``self.steps += 1``) and a float buffer updated by its value."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("total", torch.zeros(8))

    def forward(self, x):
        self.steps += 1
        self.total.add_(x.sum(0) * self.steps)
        return x * self.steps


@mutation("transposed_buffer")
class TransposedBuffer(nn.Module):
    """A buffer updated through a transposed view (``self.w.t().mul_(...)``): strided writes."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(8, 6))

    def forward(self, x):
        self.w.t().mul_(torch.arange(6.0, device=x.device).unsqueeze(1) * 0.1)
        return x @ self.w


# ---- inputs ------------------------------------------------------------------------------------------
@mutation("input_inplace", family="input")
class InputInplace(nn.Module):
    """In-place updates of an input argument: a chain on the whole tensor, a slice zeroed."""

    def forward(self, x):
        x.mul_(2).add_(1)
        x[:, :2].zero_()
        return x.sum(1)


@mutation("input_and_buffer", family="input")
class InputAndBuffer(nn.Module):
    """An input updated from a buffer and the buffer from the updated input."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.randn(8))

    def forward(self, x):
        x.add_(self.buf)
        self.buf.copy_(x.mean(0))
        return x.relu()


# ---- combinations and training mode ------------------------------------------------------------------
@mutation("combined", inputs=lambda: (_image(),), family="combined")
class Combined(nn.Module):
    """A masked convolution, a running mean of its output, a step counter and the input rescaled."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = MaskedConv2d()
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        y = self.conv(x)
        self.running.mul_(0.9).add_(y.mean((0, 2, 3)) * 0.1)
        self.steps.add_(1)
        x.mul_(0.5)
        return y - self.running.view(1, -1, 1, 1)


@mutation("batchnorm_train", family="training")
class BatchNormTrain(nn.Module):
    """BatchNorm in training mode: running statistics and the batch counter updated in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        self.bn.train()
        return self.bn(self.lin(x)).relu()


@mutation("masked_linear_train", family="training")
class MaskedLinearTrain(nn.Module):
    """Training-style update: the weight masked through ``.data``, a running mean kept under no_grad."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 6)
        self.register_buffer("mask", (torch.rand(6, 8) > 0.3).float())
        self.register_buffer("running", torch.zeros(6))

    def forward(self, x):
        self.lin.weight.data *= self.mask
        y = self.lin(x)
        with torch.no_grad():
            self.running.mul_(0.9).add_(y.mean(0) * 0.1)
        return y.tanh()
