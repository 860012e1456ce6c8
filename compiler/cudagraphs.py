"""CUDA graphs for static shapes (``options={"cudagraphs": True}``).

A compiled graph's wrapper runs plainly on its first call (kernels are bound then), is captured
into a ``torch.cuda.CUDAGraph`` on the second (after its deferred launch configs are built and timed,
``compiler.tuning``: a graph replays the configs it captured), and replayed from then on: one host call
for the whole graph instead of one per kernel and extern call (the wrapper is host-bound on small
batches: ~40 us of host time per launched step on the H200).

* Inputs: parameters and buffers (the inputs Dynamo and AOTAutograd mark static) are read in
  place; every other tensor input is copied into a buffer the graph owns before each replay. A
  call whose static input has moved (a parameter re-assigned) runs the wrapper without the graph.
  A non-tensor input that differs from the captured value does the same.
* Outputs: each replay writes the same memory, so outputs are copied out (one device copy each):
  what a call returned is never overwritten by a later replay.
* Inputs a kernel writes (an input mutation kept in the graph: batch norm's running statistics in
  a training forward): a static one is written in place by the replay, and is restored after the
  capture's extra runs of the wrapper (the side-stream run, the tuning run), so each call applies its
  update once; a copied one is copied back to the caller's tensor after each replay.
* Graphs that cannot be captured run as usual with a recorded ``CudaGraphStatus``: CPU graphs
  (accepted, not an error), CPU inputs, extern ops that sync with the host, extern calls that write
  into an argument, a capture that raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from compiler.report import CudaGraphStatus, GraphReport
from compiler.scheduler import Schedule
from compiler.tuning import DeferredTuning

# ATen ops whose output shape depends on data (nonzero, unique, masked_select, ...) read results back
# to the host, which a capture cannot do.
_HOST_SYNC_TAGS = ("dynamic_output_shape", "data_dependent_output")
_HOST_SYNC_OPS = ("aten._local_scalar_dense", "aten.item")


def capture_blocker(schedule: Schedule) -> tuple[CudaGraphStatus, str] | None:
    """Why this scheduled graph cannot be captured, from what it contains; None when it can."""
    if schedule.device.type != "cuda":
        return CudaGraphStatus.CPU_GRAPH, f"the graph runs on {schedule.device}; CUDA graphs apply to CUDA graphs only"
    if schedule.moved_inputs:
        return CudaGraphStatus.CPU_INPUTS, f"inputs {', '.join(schedule.moved_inputs)} are not on {schedule.device}"
    for node in schedule.externs:
        name = str(getattr(node.op, "_overloadpacket", node.op))
        tags = {str(t).rsplit(".", 1)[-1] for t in getattr(node.op, "tags", ())}
        if name in _HOST_SYNC_OPS or tags.intersection(_HOST_SYNC_TAGS):
            return CudaGraphStatus.UNSUPPORTED_EXTERN, f"{node.op} reads results back to the host"
        schema = getattr(node.op, "_schema", None)
        written = [a.name for a in getattr(schema, "arguments", ()) if a.alias_info is not None and a.alias_info.is_write]
        if written:
            return CudaGraphStatus.INPUT_MUTATION, f"{node.op} writes into its argument {', '.join(written)}"
    return None


def written_inputs(schedule: Schedule) -> list[int]:
    """Positions of the graph inputs a kernel writes into (``compiler.lowerings.mutation``)."""
    written = {p.buffer for kernel in schedule.kernels for p in kernel.params if p.written}
    return [i for i, b in enumerate(schedule.inputs) if b is not None and b.name in written]


def static_input_indices(num_graph_inputs: int, num_dynamo_inputs: int | None, kind: str) -> list[int]:
    """Inputs with a fixed address: the parameters and buffers AOTAutograd lifted in front of the
    Dynamo graph's inputs, plus those Dynamo marks static (nn.Module parameters it inlined).
    Nothing for a backward graph (its saved tensors are fresh each step)."""
    if kind == "backward":
        return []
    fixed = set(range(max(0, num_graph_inputs - num_dynamo_inputs))) if num_dynamo_inputs is not None else set()
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    fixed.update(getattr(meta, "static_input_indices", None) or ())
    return sorted(i for i in fixed if i < num_graph_inputs)


def with_cudagraphs(call: Callable[[list], Any], schedule: Schedule, report: GraphReport,
                    static_inputs: Sequence[int], tuning: DeferredTuning | None = None) -> Callable[[list], Any]:
    """``call`` (a wrapper's call function), replayed from a CUDA graph where it can be; the reason
    otherwise, on ``report``. ``tuning``: the graph's deferred launch configs, tuned before capture."""
    blocker = capture_blocker(schedule)
    if blocker is not None:
        report.cudagraph, report.cudagraph_message = blocker
        return call
    report.cudagraph = CudaGraphStatus.WARMING_UP
    return CudaGraphRunner(call, report, static_inputs, tuning, written_inputs(schedule))


class CudaGraphRunner:
    """Warm-up call, then capture, then replays (see the module docstring)."""

    WARMUP_CALLS = 1

    def __init__(self, call: Callable[[list], Any], report: GraphReport, static_inputs: Sequence[int],
                 tuning: DeferredTuning | None = None, written: Sequence[int] = ()) -> None:
        self.call = call
        self.written = tuple(written)
        self.tuning = tuning
        self.report = report
        self.static = frozenset(static_inputs)
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.failed = False

    def __call__(self, args: list) -> Any:
        if self.graph is not None:
            return self.replay(args)
        self.calls += 1
        if self.failed or self.calls <= self.WARMUP_CALLS:
            return self.call(args)
        return self.capture(args)

    def capture(self, args: list) -> Any:
        cpu = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.device.type != "cuda"]
        if cpu:
            return self.give_up(CudaGraphStatus.CPU_INPUTS, f"inputs {cpu} are CPU tensors", args)
        # tensors the graph reads: static inputs in place, the others in buffers it owns
        self.inputs = [a if i in self.static or not isinstance(a, torch.Tensor) else _same_layout_copy(a)
                       for i, a in enumerate(args)]
        self.copied = [(i, t) for i, t in enumerate(self.inputs) if isinstance(t, torch.Tensor) and i not in self.static]
        self.static_positions = [i for i, a in enumerate(args) if i in self.static and isinstance(a, torch.Tensor)]
        self.static_ptrs = [a.data_ptr() if i in self.static_positions else None for i, a in enumerate(args)]
        self.constants = [(i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        self.written_back = [(i, t) for i, t in self.copied if i in self.written]
        # the runs below write static inputs in place: their values are put back before the first replay
        before = [(args[i], args[i].clone()) for i in self.written if i in self.static and isinstance(args[i], torch.Tensor)]
        if self.tuning is not None and self.tuning.pending:
            # a graph replays the launch configs it captured: its deferred candidates are built and
            # timed first (``call`` tunes once they are built), on the captured inputs' copies
            self.tuning.wait()
            self.call(list(self.inputs))
        try:
            # one run on a side stream first, as CUDA's capture rules ask (libraries set up lazily per stream)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.call(list(self.inputs))
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.outputs = self.call(list(self.inputs))
        except Exception as why:  # noqa: BLE001  (a graph that cannot be captured runs uncaptured)
            self.inputs = self.copied = []
            _restore(before)
            return self.give_up(CudaGraphStatus.CAPTURE_FAILED, f"{type(why).__name__}: {why}".splitlines()[0], args)
        _restore(before)
        self.graph = graph
        self.report.cudagraph = CudaGraphStatus.CAPTURED
        self.report.cudagraph_message = (f"{len(self.static_positions)} static inputs read in place, "
                                         f"{len(self.copied)} copied in")
        return self.replay(args)

    def give_up(self, status: CudaGraphStatus, message: str, args: list) -> Any:
        self.failed = True
        self.report.cudagraph, self.report.cudagraph_message = status, message
        return self.call(args)

    def replay(self, args: list) -> Any:
        if not self.static_inputs_in_place(args) or any(args[i] != v for i, v in self.constants):
            self.report.cudagraph_uncaptured_calls += 1
            return self.call(args)
        for i, buf in self.copied:
            buf.copy_(args[i])
        assert self.graph is not None
        self.graph.replay()
        for i, buf in self.written_back:
            args[i].copy_(buf)
        self.report.cudagraph_replays += 1
        return _copy_out(self.outputs)

    def static_inputs_in_place(self, args: list) -> bool:
        if _data_ptrs_equal is not None:  # in C++: a model has hundreds of parameters (~0.1 us each in Python)
            return _data_ptrs_equal(args, self.static_ptrs, self.static_positions)
        return all(args[i].data_ptr() == self.static_ptrs[i] for i in self.static_positions)


def _restore(saved: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for tensor, value in saved:
        tensor.copy_(value)


_data_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _copy_out(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return _same_layout_copy(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_copy_out(o) for o in out)
    return out
