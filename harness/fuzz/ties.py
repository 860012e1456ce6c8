"""Index outputs over near-ties: where an argmax, a sort's indices or a running max's indices may
differ from eager's.

An index output names positions of the op's input; when two candidates are equal to within
rounding, which one wins depends on the last bit of how the input was computed, and that is no
bug. ``near_tied_indices`` accepts a compiled index output that differs from eager's only at such
positions: at each differing index, the input's values (eager's) at the compiled and at eager's
index are equal to within the input dtype's rounding tolerance, and they are not an exact tie in
both eager and the float64 reference (a real tie must be broken as eager breaks it: lowest index
for argmax, input order for a stable sort, the latest for cummax). The compiled indices must be
valid too: in range, a permutation per sorted slice, no later than the position for a running max.

Examples (fuzzer, crucible-cpp, seed 23): ``argsort`` over SDPA outputs equal to an ulp across the
batch flips order between eager and Crucible; ``cummax(exp2(x))[1]`` over equal inputs, where
ATen's float64 exp2 of one value differs by an ulp between its vectorized loop and its scalar tail
(eager's "maximum" moves, Crucible's consistent exp2 gives a true tie).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.fuzz.graph import FuzzGraph, namespace
from harness.oracle import DEFAULT_TOLERANCES

# op -> which of its outputs is an index into its first argument
INDEX_OUTPUTS = {"aten.argmax.default": 0, "aten.argmin.default": 0, "aten.max.dim": 1, "aten.min.dim": 1,
                 "aten.cummax.default": 1, "aten.sort.stable": 1, "aten.argsort.stable": 0}
SLICE_INDICES = ("aten.cummax.default", "aten.sort.stable", "aten.argsort.stable")  # one index per element
# ops that give their operand's elements in the same order, only another shape: an index output seen
# through them is judged as the index op's own (fuzzer, crucible-interpret, seed 171: argmax of a
# bfloat16 mish over 65,535 values, unsqueezed, picked another of the near-tied maxima)
ORDER_KEEPING = ("aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
                 "aten.view.default", "aten.reshape.default", "aten.clone.default")


class _Value:
    def __init__(self, name: str) -> None:
        self.name = name


class _Recorder:
    """``aten`` that records the one call an expression makes."""

    def __init__(self) -> None:
        self.call: tuple[tuple, dict] | None = None

    def __getattr__(self, name: str) -> Any:
        recorder = self

        class Packet:
            def __getattr__(self, overload: str) -> Any:
                def record(*args: Any, **kwargs: Any) -> None:
                    recorder.call = (args, kwargs)
                return record

        return Packet()


def _arguments(op: str, expr: str, names: list[str]) -> dict[str, Any] | None:
    """The call's arguments by schema name, defaults filled (None when the expression is not one call)."""
    recorder = _Recorder()
    ns = {**namespace(), "aten": recorder, **{n: _Value(n) for n in names}}
    try:
        eval(expr, ns)  # noqa: S307 -- a node of our own op table
        overload = eval("torch.ops." + op)  # noqa: S307
    except Exception:  # noqa: BLE001
        return None
    if recorder.call is None:
        return None
    args, kwargs = recorder.call
    bound: dict[str, Any] = {}
    for i, arg in enumerate(overload._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _gather(x: torch.Tensor, index: torch.Tensor, dim: Any, keepdim: bool) -> torch.Tensor:
    if x.dim() == 0:
        x = x.reshape(1)
    if dim is None:  # argmax/argmin over every element: an index into the flattened input
        return x.reshape(-1)[index.reshape(-1)].reshape(index.shape)
    dim = dim % x.dim()
    shaped = index.reshape(1) if index.dim() == 0 else index
    if not keepdim and shaped.dim() < x.dim():
        shaped = shaped.unsqueeze(dim)
    return x.gather(dim, shaped).reshape(index.shape)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def _valid(op: str, index: torch.Tensor, x: torch.Tensor, dim: Any) -> bool:
    size = x.numel() if dim is None or x.dim() == 0 else x.shape[dim % x.dim()]
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
        return False
    if op in SLICE_INDICES and x.dim() > 0:
        d = dim % x.dim()
        positions = torch.arange(size).reshape([-1 if i == d else 1 for i in range(x.dim())]).expand(x.shape)
        if op == "aten.cummax.default":
            return bool((index <= positions).all())
        return torch.equal(torch.sort(index, dim=d).values, positions)
    return True


def near_tied_indices(graph: FuzzGraph, name: str, eager: torch.Tensor, compiled: torch.Tensor) -> bool:
    """Whether ``compiled``, the index output ``name``, differs from ``eager`` only at near-ties of the
    indexed values (see the module docstring). False for any other output, and on any doubt."""
    node = next((n for n in graph.nodes if name in n.outputs), None)
    if eager.shape != compiled.shape or eager.dtype != torch.int64 or compiled.dtype != torch.int64:
        return False
    names = graph.input_names() + [o for n in graph.nodes for o in n.outputs]
    if node is not None and node.op in ORDER_KEEPING:
        args = _arguments(node.op, node.expr, names)
        source = args.get("self") if args else None
        producer = next((n for n in graph.nodes if isinstance(source, _Value) and source.name in n.outputs), None)
        if producer is None:
            return False
        shape = producer.out_meta[producer.outputs.index(source.name)][0]
        if torch.Size(shape).numel() != eager.numel():
            return False
        return near_tied_indices(graph, source.name, eager.reshape(shape), compiled.reshape(shape))
    if node is None or INDEX_OUTPUTS.get(node.op) != node.outputs.index(name):
        return False
    args = _arguments(node.op, node.expr, names)
    if not args or not isinstance(args.get("self"), _Value):
        return False
    source, dim, keepdim = args["self"].name, args.get("dim"), bool(args.get("keepdim", False))
    try:
        values = value_of(graph, source, eager.device)
    except Exception:  # noqa: BLE001 -- no float64 kernel for some op upstream: judged strictly
        return False
    if values is None:
        return False
    x, ref = values
    ie, ic = eager.cpu(), compiled.cpu()
    if not _valid(node.op, ic, x, dim):
        return False
    ve, vc = _gather(x, ie, dim, keepdim), _gather(x, ic, dim, keepdim)
    re, rc = _gather(ref, ie, dim, keepdim), _gather(ref, ic, dim, keepdim)
    if x.is_floating_point():
        tol = DEFAULT_TOLERANCES.get(str(x.dtype).removeprefix("torch."), DEFAULT_TOLERANCES["float32"])
        a, b = ve.double(), vc.double()
        near = _same(a, b) | ((a - b).abs() <= tol.rtol * torch.maximum(a.abs(), b.abs())
                              + torch.finfo(x.dtype).tiny)
    else:
        near = ve == vc
    true_tie = _same(ve, vc) & _same(re.double(), rc.double())
    return bool((_same(ie, ic) | (near & ~true_tie)).all())


def value_of(graph: FuzzGraph, source: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Eager's value of ``source`` (an input or node value; on the device eager ran on) and the
    float64 reference's, both on the CPU."""
    if source in graph.input_names():
        index = graph.input_names().index(source)
        return graph.make_inputs(str(device))[index].cpu(), graph.make_inputs("cpu", reference=True)[index]
    upto = graph.pruned([source])
    eager = upto.function()(*upto.make_inputs(str(device)))[0]
    ref = upto.function(reference=True)(*upto.make_inputs("cpu", reference=True))[0]
    if not isinstance(eager, torch.Tensor) or not isinstance(ref, torch.Tensor) or eager.shape != ref.shape:
        return None
    return eager.cpu(), ref
