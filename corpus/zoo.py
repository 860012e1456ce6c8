"""The graph-break zoo: small hand-written modules, one Python/PyTorch feature each.

Each entry pins what TorchDynamo does with its feature: ``expected_graphs`` and
``expected_breaks`` were measured with the harness's capture analysis (inference,
under ``torch.no_grad``) and are asserted by tests/harness/test_zoo.py against
the installed torch. ``VERSION_OVERRIDES`` holds counts that differ on another
torch version (measured there, never guessed).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import logging
import math
import random
import warnings
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from corpus.entry import Built, Entry, ExpectedFailure

_ENTRIES: list[Entry] = []

# {"2.11": {"zoo/name": (graphs, breaks)}}: counts measured on another torch.
VERSION_OVERRIDES: dict[str, dict[str, tuple[int, int]]] = {
    # measured with torch 2.11.0+cu130 (every other zoo entry matches its 2.14 counts there)
    "2.11": {"zoo/python_random": (2, 2)},
}


def expected_counts(entry: Entry, torch_version: str) -> tuple[int | None, int | None]:
    """The entry's (graphs, breaks) on ``torch_version`` ("2.14.1+cu130" -> "2.14" table)."""
    major_minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    override = VERSION_OVERRIDES.get(major_minor, {}).get(entry.name)
    return override if override is not None else (entry.expected_graphs, entry.expected_breaks)


def zoo(name: str, graphs: int, breaks: int, inputs: Callable[[], tuple] = lambda: (torch.randn(4, 8),),
        family: str = "dynamo-feature", dtype: str = "float32", tags: tuple[str, ...] = (),
        expected_failures: tuple[ExpectedFailure, ...] = (), source: str = "zoo",
        into: list[Entry] | None = None, wrap: Callable[[Any], Any] | None = None,
        tier: str = "smoke") -> Callable:
    """Register a zoo entry; the decorated object is a function or an nn.Module class. ``source`` and
    ``into``: another hand-written source's name and entry list (``corpus.mutation``); ``wrap``: what
    the built model is run inside; ``tier``: "smoke" unless the entry is too large for it (the deep
    networks below)."""

    def register(obj: Any) -> Any:
        def factory(scale: str) -> Built:
            model = obj() if isinstance(obj, type) else obj
            if isinstance(model, nn.Module):
                model.eval()
            return Built(model if wrap is None else wrap(model), inputs())

        (_ENTRIES if into is None else into).append(Entry(
            name=f"{source}/{name}", source=source, family=family, factory=factory, tier=tier,
            tags=frozenset(("zoo", source, *tags)), dtype=dtype, expected_graphs=graphs, expected_breaks=breaks,
            expected_failures=expected_failures, eager_ms=1.0,
            description=(obj.__doc__ or "").strip().splitlines()[0] if obj.__doc__ else name))
        return obj

    return register


def entries() -> list[Entry]:
    return list(_ENTRIES)


# ---- baseline: whole model captured -------------------------------------------------
@zoo("mlp", 1, 0)
class Mlp(nn.Module):
    """Linear-GELU-Linear: the full-graph baseline."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x):
        return self.net(x)


@zoo("mlp_fp16", 1, 0, dtype="float16", tags=("half",))
class MlpHalf(Mlp):
    """The baseline MLP in float16 (parity oracle with half tolerances)."""


@zoo("mlp_bf16", 1, 0, dtype="bfloat16", tags=("half",))
class MlpBf16(Mlp):
    """The baseline MLP in bfloat16."""


@zoo("conv_bn_relu", 1, 0, inputs=lambda: (torch.randn(2, 3, 8, 8),))
class ConvBnRelu(nn.Module):
    """Conv2d + BatchNorm (eval) + ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


# ---- data-dependent control flow ----------------------------------------------------
@zoo("item_branch", 2, 1, family="data-dependent")
def item_branch(x):
    """Branch on .item(): Dynamo cannot trace the Python float."""
    y = x.sin()
    if y.sum().item() > 0:
        return y * 2
    return y - 1


@zoo("tensor_bool_branch", 2, 1, family="data-dependent")
def tensor_bool_branch(x):
    """Branch on a tensor's truth value (data-dependent jump)."""
    y = x.cos()
    if y.mean() > 0.5:
        return y + 1
    return y - 1


@zoo("nonzero", 2, 1, family="data-dependent")
def nonzero(x):
    """torch.nonzero: an output shape that depends on data."""
    return x[torch.nonzero(x > 0, as_tuple=True)].sum() + x.mean()


@zoo("tolist", 2, 1, family="data-dependent")
def tolist(x):
    """Tensor.tolist() hands Python numbers to Python code."""
    values = x[0, :3].tolist()
    return x * sum(values)


@zoo("torch_cond", 1, 0, family="data-dependent")
def torch_cond(x):
    """torch.cond: data-dependent control flow without a break."""
    return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


@zoo("shape_arithmetic", 1, 0, family="shapes")
def shape_arithmetic(x):
    """Python arithmetic on sizes (static shapes: constants)."""
    n, d = x.shape
    return x.reshape(n * d // 2, 2).sum(-1) * (d / n)


@zoo("requires_grad_branch", 1, 0, family="data-dependent")
def requires_grad_branch(x):
    """Branch on tensor metadata (guarded, not a break)."""
    if x.requires_grad:
        return x * 2
    return x * 3


# ---- side effects: print, logging, warnings -----------------------------------------
@zoo("print", 2, 1, family="side-effects")
def print_call(x):
    """print() in the middle of the model."""
    y = x.relu()
    print("zoo: print in forward")
    return y * 2


_log = logging.getLogger("crucible.zoo")


@zoo("logging", 2, 1, family="side-effects")
def logging_call(x):
    """A logger call in the middle of the model."""
    y = x.relu()
    _log.info("zoo: logging in forward")
    return y * 2


@zoo("warnings", 2, 1, family="side-effects")
def warnings_call(x):
    """warnings.warn in the middle of the model."""
    y = x.relu()
    warnings.warn("zoo: warning in forward", stacklevel=1)
    return y * 2


# ---- numpy ---------------------------------------------------------------------------
@zoo("numpy_roundtrip", 1, 0, family="numpy")
def numpy_roundtrip(x):
    """Tensor -> numpy -> tensor (Dynamo traces numpy calls as torch ops)."""
    y = x.exp()
    z = torch.from_numpy(np.tanh(y.numpy()))
    return z + 1


@zoo("numpy_constant", 1, 0, family="numpy")
def numpy_constant(x):
    """numpy on Python constants (folded at trace time)."""
    return x * float(np.sqrt(2.0))


# ---- Python language features -------------------------------------------------------
@zoo("generator_expression", 1, 0, family="python")
def generator_expression(x):
    """sum() over a generator expression of tensors."""
    return sum(x * i for i in range(3))


def _halves(x):
    yield x[:, :4]
    yield x[:, 4:]


@zoo("generator_function", 1, 0, family="python")
def generator_function(x):
    """A user generator function yielding tensors."""
    return torch.cat([h.sin() for h in _halves(x)], dim=1)


@zoo("closure", 1, 0, family="python")
def closure(x):
    """A nested function closing over a tensor."""
    scale = x.mean()

    def apply(t):
        return t * scale

    return apply(x) + 1


@zoo("recursion", 1, 0, family="python")
def recursion(x, depth: int = 3):
    """A recursive Python function (unrolled)."""
    if depth == 0:
        return x
    return recursion(x.sin(), depth - 1)


@zoo("lambda_map", 1, 0, family="python")
def lambda_map(x):
    """map() with a lambda over chunks."""
    return torch.stack(list(map(lambda t: t * 2, x.chunk(2))))  # noqa: C417 (map is the feature)


@zoo("itertools_functools", 1, 0, family="python")
def itertools_functools(x):
    """itertools.product and functools.partial."""
    scale = functools.partial(torch.mul, other=0.5)
    return sum(scale(x * i * j) for i, j in itertools.product(range(2), range(2)))


@zoo("enumerate_zip_sorted", 1, 0, family="python")
def enumerate_zip_sorted(x):
    """enumerate, zip and sorted on Python values."""
    weights = sorted([3, 1])
    return sum(c * w * (i + 1) for i, (c, w) in enumerate(zip(x.chunk(2, dim=1), weights)))


@zoo("string_format", 1, 0, family="python")
def string_format(x):
    """f-string formatting of shapes (constant at trace time)."""
    tag = f"{tuple(x.shape)}"
    return x * len(tag)


@zoo("math_module", 1, 0, family="python")
def math_module(x):
    """math on Python floats."""
    return x * math.sqrt(2.0) + math.pi


@zoo("isinstance", 1, 0, family="python")
def isinstance_check(x):
    """isinstance checks on inputs."""
    if isinstance(x, torch.Tensor):
        return x + 1
    return x


@zoo("python_random", 1, 0, family="python",
     expected_failures=(ExpectedFailure("crucible-*", "fail_accuracy", "Dynamo's first compiled call draws "
                                        "random.random() from the state before the frame's random.seed(0) "
                                        "(harness/FINDINGS.md)"),))
def python_random(x):
    """random.random() from Python's RNG (Dynamo replays it; seeded identically every run)."""
    y = x.sin()
    random.seed(0)
    return y * random.random()


@zoo("copy_deepcopy", 2, 1, family="python")
def copy_deepcopy(x):
    """copy.deepcopy of a tensor inside forward."""
    y = x.cos()
    return copy.deepcopy(y) + 1


@zoo("object_id", 1, 0, family="python")
def object_id(x):
    """id() of a tensor (a Python identity)."""
    return x * 2 if id(x) else x


# ---- containers and their mutation --------------------------------------------------
@zoo("list_mutation", 1, 0, family="containers")
def list_mutation(x):
    """append/pop on a local list."""
    parts = []
    for i in range(3):
        parts.append(x * i)
    parts.pop(0)
    return torch.stack(parts)


@zoo("dict_mutation", 1, 0, family="containers")
def dict_mutation(x):
    """Building and updating a local dict."""
    d = {"a": x.sin()}
    d["b"] = d["a"] + 1
    d.update(c=d["b"] * 2)
    return d["a"] + d["c"]


_SEEN: list[int] = []


@zoo("global_list_mutation", 1, 0, family="containers")
def global_list_mutation(x):
    """Appending to a module-level list (a replayed side effect)."""
    _SEEN.append(1)
    return x * 2


@zoo("dict_output", 1, 0, family="outputs")
def dict_output(x):
    """A dict of tensors as output."""
    return {"sin": x.sin(), "cos": x.cos()}


Pair = namedtuple("Pair", ["low", "high"])


@zoo("namedtuple_output", 1, 0, family="outputs")
def namedtuple_output(x):
    """A namedtuple as output."""
    return Pair(x.min(dim=1).values, x.max(dim=1).values)


@dataclasses.dataclass
class _Out:
    logits: torch.Tensor
    hidden: torch.Tensor


@zoo("dataclass_output", 1, 0, family="outputs")
def dataclass_output(x):
    """A dataclass as output (like HF ModelOutput)."""
    return _Out(logits=x.softmax(-1), hidden=x.tanh())


# ---- exceptions ------------------------------------------------------------------------
@zoo("try_except_no_raise", 1, 0, family="exceptions")
def try_except_no_raise(x):
    """try/except where nothing raises."""
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    return y * 2


@zoo("raise_and_catch", 1, 0, family="exceptions")
def raise_and_catch(x):
    """Raising and catching a Python exception inside the model."""
    try:
        if x.dim() == 2:
            raise ValueError("two dims")
        y = x
    except ValueError:
        y = x * 2
    return y + 1


# ---- autograd ---------------------------------------------------------------------------
class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


@zoo("custom_autograd_function", 1, 0, family="autograd")
def custom_autograd_function(x):
    """A custom torch.autograd.Function."""
    return _Square.apply(x) + 1


@zoo("no_grad_region", 1, 0, family="autograd")
def no_grad_region(x):
    """A torch.no_grad() block."""
    with torch.no_grad():
        y = x * 2
    return y + 1


@zoo("enable_grad_region", 1, 0, family="autograd")
def enable_grad_region(x):
    """A torch.enable_grad() block inside inference."""
    with torch.enable_grad():
        y = x.sin()
    return y.detach() + 1


# ---- in-place ops, state, RNG -----------------------------------------------------------
@zoo("inplace_ops", 1, 0, family="mutation")
def inplace_ops(x):
    """In-place ops on a fresh tensor."""
    y = x.clone()
    y.add_(1).mul_(2).relu_()
    return y


@zoo("input_mutation", 1, 0, family="mutation")
def input_mutation(x):
    """In-place update of an input tensor (functionalized by AOTAutograd)."""
    x.mul_(2)
    return x + 1


@zoo("buffer_mutation", 1, 0, family="mutation")
class BufferMutation(nn.Module):
    """A module that updates its own buffer in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return x * self.calls


@zoo("attribute_mutation", 1, 0, family="mutation")
class AttributeMutation(nn.Module):
    """A Python attribute counter incremented in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.counter = 0

    def forward(self, x):
        self.counter += 1
        return x + 1


_SCALE = 3.0


@zoo("global_python_state", 1, 0, family="global-state")
def global_python_state(x):
    """A module-level Python float (guarded constant)."""
    return x * _SCALE


_OFFSET = torch.arange(8.0)


@zoo("global_tensor", 1, 0, family="global-state")
def global_tensor(x):
    """A module-level tensor (lifted as a graph input)."""
    return x + _OFFSET


@zoo("rng_rand_like", 1, 0, family="rng",
     expected_failures=(ExpectedFailure("inductor", "fail_accuracy", "Inductor draws random numbers "
                                        "with its own generator: values differ from eager's"),))
def rng_rand_like(x):
    """torch.rand_like inside the graph."""
    return x + torch.rand_like(x)


@zoo("dropout_train", 1, 0, family="rng",
     expected_failures=(ExpectedFailure("inductor", "fail_accuracy", "Inductor's dropout mask comes "
                                        "from its own generator"),))
class DropoutTrain(nn.Module):
    """Dropout in training mode."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        self.drop.train()
        return self.drop(x) + 1


@zoo("manual_seed", 1, 1, family="rng")
def manual_seed(x):
    """torch.manual_seed inside forward (a skipped call after which nothing is captured)."""
    torch.manual_seed(0)
    return x + torch.rand_like(x)


# ---- explicit breaks, hooks, other modules ---------------------------------------------
@zoo("explicit_graph_break", 2, 1, family="explicit")
def explicit_graph_break(x):
    """torch._dynamo.graph_break()."""
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


@zoo("forward_hook", 1, 0, family="modules")
class ForwardHook(nn.Module):
    """A forward hook on a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.lin.register_forward_hook(lambda mod, inp, out: out * 2)

    def forward(self, x):
        return self.lin(x).relu()


@zoo("lstm", 0, 0, family="modules", inputs=lambda: (torch.randn(2, 5, 8),))
class Lstm(nn.Module):
    """nn.LSTM: Dynamo skips RNN modules' frames (no graph, no counted break, coverage 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 8, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


@zoo("einsum_attention", 1, 0, family="modules", inputs=lambda: (torch.randn(2, 4, 8),))
def einsum_attention(x):
    """einsum + softmax attention."""
    scores = torch.einsum("bqd,bkd->bqk", x, x) / math.sqrt(x.shape[-1])
    return torch.einsum("bqk,bkd->bqd", scores.softmax(-1), x)


# ---- deep networks: compile time against graph size (tier nightly-cpu) --------------------
# Realistic depth, small inputs: what they test is how the compiler scales with thousands of ATen
# nodes (harness/bench/compile_scaling.py), not the kernels' speed. Too large for smoke.
class _HourglassResidual(nn.Module):
    """Pre-activation bottleneck (bn-relu-conv x3) with a 1x1 projection when channels change."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        mid = cout // 2
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, mid, 1),
                                  nn.BatchNorm2d(mid), nn.ReLU(), nn.Conv2d(mid, mid, 3, padding=1),
                                  nn.BatchNorm2d(mid), nn.ReLU(), nn.Conv2d(mid, cout, 1))
        self.skip = nn.Identity() if cin == cout else nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        return self.body(x) + self.skip(x)


class _Hourglass(nn.Module):
    """One hourglass of ``depth`` levels: at each level a skip branch at this resolution and a
    max-pooled branch that recurses, upsampled (nearest) and added back."""

    def __init__(self, depth: int, channels: int) -> None:
        super().__init__()
        self.up = _HourglassResidual(channels, channels)
        self.down = _HourglassResidual(channels, channels)
        self.inner = _Hourglass(depth - 1, channels) if depth > 1 else _HourglassResidual(channels, channels)
        self.out = _HourglassResidual(channels, channels)

    def forward(self, x):
        low = self.out(self.inner(self.down(nn.functional.max_pool2d(x, 2))))
        return self.up(x) + nn.functional.interpolate(low, scale_factor=2, mode="nearest")


@zoo("stacked_hourglass", 1, 0, family="deep-network", tier="nightly-cpu",
     inputs=lambda: (torch.randn(1, 3, 64, 64),))
class StackedHourglass(nn.Module):
    """Stacked hourglass pose network (8 stacks of depth 4, 16 heatmaps, intermediate supervision)."""

    def __init__(self, stacks: int = 8, depth: int = 4, channels: int = 64, joints: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels // 2, 7, stride=2, padding=3),
                                  nn.BatchNorm2d(channels // 2), nn.ReLU(),
                                  _HourglassResidual(channels // 2, channels), nn.MaxPool2d(2),
                                  _HourglassResidual(channels, channels), _HourglassResidual(channels, channels))
        self.hourglasses = nn.ModuleList(_Hourglass(depth, channels) for _ in range(stacks))
        self.features = nn.ModuleList(
            nn.Sequential(_HourglassResidual(channels, channels), nn.Conv2d(channels, channels, 1),
                          nn.BatchNorm2d(channels), nn.ReLU()) for _ in range(stacks))
        self.heads = nn.ModuleList(nn.Conv2d(channels, joints, 1) for _ in range(stacks))
        self.merge_features = nn.ModuleList(nn.Conv2d(channels, channels, 1) for _ in range(stacks - 1))
        self.merge_heads = nn.ModuleList(nn.Conv2d(joints, channels, 1) for _ in range(stacks - 1))

    def forward(self, x):
        x = self.stem(x)
        heatmaps = []
        for i, hourglass in enumerate(self.hourglasses):
            features = self.features[i](hourglass(x))
            heatmaps.append(self.heads[i](features))
            if i < len(self.merge_features):
                x = x + self.merge_features[i](features) + self.merge_heads[i](heatmaps[-1])
        return torch.stack(heatmaps, 1)


class _R2Plus1dConv(nn.Sequential):
    """A 3x3x3 convolution factored into a spatial 1x3x3 and a temporal 3x1x1 one, with a batch norm
    and ReLU between them (mid channels chosen to keep the parameter count of the full 3-D conv)."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        mid = (cin * cout * 27) // (cin * 9 + cout * 3)
        super().__init__(nn.Conv3d(cin, mid, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False),
                         nn.BatchNorm3d(mid), nn.ReLU(),
                         nn.Conv3d(mid, cout, (3, 1, 1), stride=(stride, 1, 1), padding=(1, 0, 0), bias=False))


class _R2Plus1dBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(_R2Plus1dConv(cin, cout, stride), nn.BatchNorm3d(cout), nn.ReLU())
        self.conv2 = nn.Sequential(_R2Plus1dConv(cout, cout), nn.BatchNorm3d(cout))
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv3d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm3d(cout))

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return torch.relu(self.conv2(self.conv1(x)) + skip)


@zoo("r2plus1d_34", 1, 0, family="deep-network", tier="nightly-cpu",
     inputs=lambda: (torch.randn(1, 3, 8, 32, 32),))
class R2Plus1d34(nn.Module):
    """R(2+1)D-34 video classifier: factored 3-D convolutions, blocks [3, 4, 6, 3] (widths / 4)."""

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), width: int = 16, classes: int = 400) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, 45, (1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bias=False), nn.BatchNorm3d(45),
            nn.ReLU(), nn.Conv3d(45, width, (3, 1, 1), padding=(1, 0, 0), bias=False), nn.BatchNorm3d(width),
            nn.ReLU())
        layers, cin = [], width
        for i, count in enumerate(blocks):
            cout = width * 2 ** i
            for j in range(count):
                layers.append(_R2Plus1dBlock(cin, cout, 2 if j == 0 and i > 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3, 4)))
