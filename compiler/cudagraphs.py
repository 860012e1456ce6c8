"""CUDA graphs, one per size of the inputs (``options={"cudagraphs": True}``).

A compiled graph's wrapper runs plainly on its first call at a size (kernels are bound then), is
captured into a ``torch.cuda.CUDAGraph`` on the second (after its deferred launch configs are built and timed,
``compiler.tuning``: a graph replays the configs it captured), and replayed from then on: one host call
for the whole graph instead of one per kernel and extern call (the wrapper is host-bound on small
batches: ~40 us of host time per launched step on the H200).

* Inputs: parameters and buffers (the inputs Dynamo and AOTAutograd mark static) are read in
  place; every other tensor input is copied into a buffer the graph owns before each replay. A
  call whose static input has moved (a parameter re-assigned) runs the wrapper without the graph.
* Sizes: the copied inputs' shapes and strides and the non-tensor inputs (a graph with symbolic
  sizes takes them as ints) pick the size's graph; each new size warms up and is captured as the
  first was, up to ``CudaGraphRunner.MAX_SIZES`` sizes.
* Outputs: each replay writes the same memory, so outputs are copied out (one batched device copy):
  what a call returned is never overwritten by a later replay. A training forward's saved tensors
  (what AOTAutograd keeps for the backward) are the exception: they are returned uncopied, the
  backward reads them in place, and a replay runs only once nothing holds the last one's (else the
  call runs uncaptured: two forwards before one backward).
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


def saved_outputs_start(kind: str) -> int | None:
    """Where a training forward's outputs saved for the backward begin (AOTAutograd returns them after
    the user's outputs and mutated inputs); None for other graphs or where torch does not say."""
    if kind != "forward":
        return None
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    start = getattr(getattr(context, "fw_metadata", None), "num_forward", None)
    return start if isinstance(start, int) else None


def with_cudagraphs(call: Callable[[list], Any], schedule: Schedule, report: GraphReport,
                    static_inputs: Sequence[int], tuning: DeferredTuning | None = None,
                    saved_from: int | None = None) -> Callable[[list], Any]:
    """``call`` (a wrapper's call function), replayed from a CUDA graph where it can be; the reason
    otherwise, on ``report``. ``tuning``: the graph's deferred launch configs, tuned before capture;
    ``saved_from``: a training forward's first output saved for the backward (``saved_outputs_start``)."""
    blocker = capture_blocker(schedule)
    if blocker is not None:
        report.cudagraph, report.cudagraph_message = blocker
        return call
    report.cudagraph = CudaGraphStatus.WARMING_UP
    return CudaGraphRunner(call, report, static_inputs, tuning, written_inputs(schedule), saved_from)


# data pointers of saved tensors a forward's replays return in place: a backward reads the inputs it
# finds here in place too (they come back at the same address every step), not through a copy
_IN_PLACE_OUTPUTS: set[int] = set()


class _SizeGraph:
    """The capture of one size: its calls so far, and once captured the graph with its buffers."""

    def __init__(self) -> None:
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.copied: list[tuple[int, torch.Tensor]] = []  # (position, the graph's buffer for that input)
        self.written_back: list[tuple[int, torch.Tensor]] = []
        self.static_ptrs: list[int | None] = []
        self.outputs: Any = None
        self.in_place: list[tuple[int, int]] = []  # (position, address): inputs read where they are
        self.kept: list[int] = []  # output positions returned in place (a forward's saved tensors)
        self.storages: list[tuple[Any, int]] = []  # their storages, and the references the runner holds


class CudaGraphRunner:
    """Per distinct size of the inputs: a warm-up call, then capture, then replays (see the module
    docstring). A static graph has one size; a graph with symbolic sizes records a CUDA graph for
    each size it is called with (at most ``MAX_SIZES``; later sizes run uncaptured), as Inductor's
    CUDA-graph trees do. The sizes' graphs share one memory pool: they never run at once, and each
    replay's outputs are copied out before another graph can write that memory."""

    WARMUP_CALLS = 1
    MAX_SIZES = 64

    def __init__(self, call: Callable[[list], Any], report: GraphReport, static_inputs: Sequence[int],
                 tuning: DeferredTuning | None = None, written: Sequence[int] = (), saved_from: int | None = None) -> None:
        self.call = call
        self.saved_from = saved_from
        self.written = tuple(written)
        self.tuning = tuning
        self.report = report
        self.static = frozenset(static_inputs)
        self.sizes: dict[tuple, _SizeGraph] = {}
        self.keyed: tuple[list[int], list[int]] | None = None  # positions of (copied tensors, non-tensors)
        self.pool: Any = None
        self.static_positions: list[int] = []
        self.failed = False

    def size_key(self, args: list) -> tuple:
        """What tells one size from another: the copied inputs' shapes and strides and the non-tensor
        arguments (symbolic sizes); parameters and buffers keep theirs (a moved one is caught apart)."""
        if self.keyed is None:
            self.keyed = ([i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in self.static],
                          [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)])
        tensors, others = self.keyed
        return (tuple((args[i].shape, args[i].stride()) for i in tensors), tuple(args[i] for i in others))

    def __call__(self, args: list) -> Any:
        if self.failed:
            return self.call(args)
        key = self.size_key(args)
        size = self.sizes.get(key)
        if size is None:
            if len(self.sizes) >= self.MAX_SIZES:
                self.report.cudagraph_uncaptured_calls += 1
                return self.call(args)
            size = self.sizes[key] = _SizeGraph()
        if size.graph is not None:
            return self.replay(size, args)
        size.calls += 1
        if size.calls <= self.WARMUP_CALLS:
            return self.call(args)
        return self.capture(size, args)

    def capture(self, size: _SizeGraph, args: list) -> Any:
        cpu = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.device.type != "cuda"]
        if cpu:
            return self.give_up(CudaGraphStatus.CPU_INPUTS, f"inputs {cpu} are CPU tensors", args)
        # tensors the graph reads: static inputs and a forward's saved tensors in place, the others in
        # buffers it owns
        in_place = [(i, a.data_ptr()) for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                    and i not in self.static and a.data_ptr() in _IN_PLACE_OUTPUTS]
        read_in_place = self.static.union(i for i, _ in in_place)
        inputs = [a if i in read_in_place or not isinstance(a, torch.Tensor) else _same_layout_copy(a)
                  for i, a in enumerate(args)]
        copied = [(i, t) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and i not in read_in_place]
        # the runs below write static inputs in place: their values are put back before the first replay
        before = [(args[i], args[i].clone()) for i in self.written if i in self.static and isinstance(args[i], torch.Tensor)]
        if self.tuning is not None and self.tuning.pending:
            # a graph replays the launch configs it captured: its deferred candidates are built and
            # timed first (``call`` tunes once they are built), on the captured inputs' copies
            self.tuning.wait()
            self.call(list(inputs))
        try:
            # one run on a side stream first, as CUDA's capture rules ask (libraries set up lazily per stream)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.call(list(inputs))
            torch.cuda.current_stream().wait_stream(side)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                size.outputs = self.call(list(inputs))
        except Exception as why:  # noqa: BLE001  (a graph that cannot be captured runs uncaptured)
            _restore(before)
            return self.give_up(CudaGraphStatus.CAPTURE_FAILED, f"{type(why).__name__}: {why}".splitlines()[0], args)
        _restore(before)
        size.graph, size.copied, size.in_place = graph, copied, in_place
        self.keep_saved_outputs(size)
        size.written_back = [(i, t) for i, t in copied if i in self.written]
        size.static_ptrs = [a.data_ptr() if i in self.static and isinstance(a, torch.Tensor) else None
                            for i, a in enumerate(args)]
        self.static_positions = [i for i, a in enumerate(args) if i in self.static and isinstance(a, torch.Tensor)]
        self.report.cudagraph = CudaGraphStatus.CAPTURED
        captured = sum(1 for s in self.sizes.values() if s.graph is not None)
        self.report.cudagraph_message = (
            f"{len(self.static_positions)} static inputs read in place, {len(copied)} copied in"
            + (f", {len(in_place)} saved tensors read in place" if in_place else "")
            + (f"; {len(size.kept)} saved tensors returned in place" if size.kept else "")
            + (f"; {captured} sizes captured" if captured > 1 else ""))
        return self.replay(size, args)

    def keep_saved_outputs(self, size: _SizeGraph) -> None:
        """A training forward returns its saved tensors from the graph's memory, uncopied, for the
        backward to read in place; the next replay, which overwrites them, waits until nothing holds
        them any more (else that call runs uncaptured)."""
        outputs = size.outputs
        if self.saved_from is None or not isinstance(outputs, (list, tuple)):
            return
        size.kept = [i for i in range(self.saved_from, len(outputs)) if isinstance(outputs[i], torch.Tensor)]
        storages = [outputs[i].untyped_storage() for i in size.kept]
        size.storages = [(st, _use_count(st)) for st in storages]
        _IN_PLACE_OUTPUTS.update(outputs[i].data_ptr() for i in size.kept)

    def give_up(self, status: CudaGraphStatus, message: str, args: list) -> Any:
        self.failed = True
        self.report.cudagraph, self.report.cudagraph_message = status, message
        return self.call(args)

    def replay(self, size: _SizeGraph, args: list) -> Any:
        if (not self.static_inputs_in_place(size, args) or any(args[i].data_ptr() != ptr for i, ptr in size.in_place)
                or any(_use_count(st) > held for st, held in size.storages)):
            # a parameter moved, a saved tensor came from elsewhere (an uncaptured forward), or the
            # saved tensors of the last replay are still held (two forwards before a backward)
            self.report.cudagraph_uncaptured_calls += 1
            return self.call(args)
        # one host call per direction: a training backward copies in hundreds of saved tensors, and
        # one ``copy_`` each was as much host time as the kernel launches the replay saves
        _copy_all([buf for _, buf in size.copied], [args[i] for i, _ in size.copied])
        assert size.graph is not None
        size.graph.replay()
        _copy_all([args[i] for i, _ in size.written_back], [buf for _, buf in size.written_back])
        self.report.cudagraph_replays += 1
        if not size.kept:
            return _copy_out(size.outputs)
        out = list(size.outputs)
        kept = set(size.kept)
        returned = _copy_out([o for i, o in enumerate(out) if i not in kept])
        for i in size.kept:  # a tensor of its own on the graph's memory: what holds it is counted
            returned.insert(i, out[i].detach())
        return type(size.outputs)(returned) if isinstance(size.outputs, tuple) else returned

    def static_inputs_in_place(self, size: _SizeGraph, args: list) -> bool:
        if _data_ptrs_equal is not None:  # in C++: a model has hundreds of parameters (~0.1 us each in Python)
            return _data_ptrs_equal(args, size.static_ptrs, self.static_positions)
        return all(args[i].data_ptr() == size.static_ptrs[i] for i in self.static_positions)


def _use_count(storage: Any) -> int:
    """References to a storage (tensors and views on it, storage objects)."""
    return torch._C._storage_Use_Count(storage._cdata)


def _restore(saved: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for tensor, value in saved:
        tensor.copy_(value)


_data_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _copy_all(destinations: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    if destinations:
        torch._foreach_copy_(destinations, sources)


def _copy_out(out: Any) -> Any:
    """The replay's outputs in fresh tensors of the same layouts (nested lists and tuples kept)."""
    sources: list[torch.Tensor] = []
    fresh: list[torch.Tensor] = []

    def empty(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            sources.append(value)
            fresh.append(torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=value.device))
            return fresh[-1]
        if isinstance(value, (list, tuple)):
            return type(value)(empty(v) for v in value)
        return value

    result = empty(out)
    _copy_all(fresh, sources)
    return result
