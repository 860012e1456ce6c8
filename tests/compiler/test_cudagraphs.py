"""``options={"cudagraphs": True}``: capture after warm-up, replay, and the recorded reasons where a
graph is not captured. The CPU tests cover the reasons a graph cannot be captured (read from the
schedule, no GPU needed); the GPU tests capture and replay."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import compiler
from compiler.config import Options
from compiler.cudagraphs import capture_blocker, static_input_indices
from compiler.graph import Buffer, ExternNode, View
from compiler.lowering import lower
from compiler.report import CudaGraphStatus, ExternReason
from compiler.scheduler import Schedule, schedule

CUDA = torch.device("cuda")


def _schedule_of(fn, *inputs) -> Schedule:
    return schedule(lower(compiler.trace_aten(fn, *inputs), torch.device("cpu")))


def _extern_schedule(op) -> Schedule:
    buf = Buffer("arg0", torch.float32, (4,), (1,), "input")
    view = View("arg0", (4,), (1,), 0, torch.float32)
    out = Buffer("buf0", torch.float32, (4,), (1,), "extern")
    node = ExternNode("buf0", op, (view, view), {}, [out], False, ExternReason.NO_LOWERING)
    return Schedule([node], [], {"arg0": buf, "buf0": out}, [buf], [view], CUDA)


def test_cpu_graph_is_accepted_and_reported() -> None:
    """A CPU model with cudagraphs on compiles and runs; its report says why nothing was captured."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    x = torch.randn(3, 8)
    compiled = torch.compile(model, backend="crucible", options={"cudagraphs": True})
    with compiler.collect_reports() as report:
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    (graph,) = report.graphs
    assert graph.cudagraph is CudaGraphStatus.CPU_GRAPH and "cpu" in graph.cudagraph_message
    assert "cuda graph: cpu_graph" in str(graph)


def test_not_requested_is_none() -> None:
    report = compiler.inspect(lambda a: a + 1, torch.randn(3))
    assert report.graphs[0].cudagraph is None


def test_capturable_cuda_schedule_has_no_blocker() -> None:
    sched = dataclasses.replace(_schedule_of(lambda a, b: torch.relu(a @ b), torch.randn(4, 4), torch.randn(4, 4)),
                                device=CUDA)
    assert capture_blocker(sched) is None


def test_cpu_inputs_block_capture() -> None:
    sched = dataclasses.replace(_schedule_of(lambda a: a + 1, torch.randn(3)), device=CUDA, moved_inputs=["arg0"])
    assert capture_blocker(sched) == (CudaGraphStatus.CPU_INPUTS, "inputs arg0 are not on cuda")


def test_host_syncing_extern_blocks_capture() -> None:
    """nonzero's output shape depends on the data: it reads back to the host."""
    status, message = capture_blocker(_extern_schedule(torch.ops.aten.nonzero.default))
    assert status is CudaGraphStatus.UNSUPPORTED_EXTERN and "nonzero" in message


def test_extern_writing_an_argument_blocks_capture() -> None:
    status, message = capture_blocker(_extern_schedule(torch.ops.aten.add_.Tensor))
    assert status is CudaGraphStatus.INPUT_MUTATION and "self" in message


def test_static_inputs_are_the_lifted_parameters() -> None:
    assert static_input_indices(5, 2, "inference") == [0, 1, 2]
    assert static_input_indices(5, 2, "backward") == []
    assert static_input_indices(3, None, "forward") == []


def test_option_is_a_bool() -> None:
    assert Options.parse({"cudagraphs": True}).cudagraphs
    with pytest.raises(ValueError, match="cudagraphs must be True or False"):
        Options.parse({"cudagraphs": "yes"})


def test_replay_outputs_are_copied_out_in_their_layouts() -> None:
    """What a replay returns is copied out of the graph's memory in one batched copy: fresh storage,
    the same strides, nesting and non-tensor values kept (a training forward returns hundreds of
    saved tensors; one ``copy_`` each was host time the replay was meant to save)."""
    from compiler.cudagraphs import _copy_out

    base = torch.randn(6, 4)
    out = (base.t(), [base[1:3], 7], torch.randn(()), None)
    copied = _copy_out(out)
    assert isinstance(copied, tuple) and isinstance(copied[1], list) and copied[1][1] == 7 and copied[3] is None
    for got, want in ((copied[0], out[0]), (copied[1][0], out[1][0]), (copied[2], out[2])):
        assert torch.equal(got, want) and got.stride() == want.stride()
        assert got.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert _copy_out([]) == [] and _copy_out(3) == 3


@pytest.mark.gpu
def test_capture_replay_and_outputs_survive_the_next_replay() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.LazyLinear(5)).cuda().eval()
    xs = [torch.randn(2, 3, 16, 16, device="cuda") for _ in range(4)]
    with torch.no_grad():
        model(xs[0])
        expected = [model(x) for x in xs]
        compiled = torch.compile(model, backend="crucible", options={"cudagraphs": True, "strict": True})
        with compiler.collect_reports() as report:
            outs = [compiled(x) for x in xs]
    (graph,) = report.graphs
    assert graph.cudagraph is CudaGraphStatus.CAPTURED, graph.cudagraph_message
    assert graph.cudagraph_replays == 3  # call 1 warms up, call 2 captures and replays, then 3 and 4
    assert graph.cudagraph_message.endswith("1 copied in")  # the image; the weights are read in place
    for out, exp in zip(outs, expected):  # earlier outputs were not overwritten by later replays
        torch.testing.assert_close(out, exp, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_moved_parameter_runs_without_the_graph() -> None:
    model = torch.nn.Linear(16, 16).cuda()
    x = torch.randn(4, 16, device="cuda")
    with torch.no_grad():
        compiled = torch.compile(model, backend="crucible", options={"cudagraphs": True})
        with compiler.collect_reports() as report:
            compiled(x), compiled(x)
            model.weight.data = torch.randn(16, 16, device="cuda")  # a new address, same guards
            torch.testing.assert_close(compiled(x), model(x))
    assert report.graphs[0].cudagraph_uncaptured_calls >= 1


@pytest.mark.gpu
def test_cpu_tensor_input_is_reported_not_an_error() -> None:
    compiled = torch.compile(lambda a, b: a * b.sum(), backend="crucible", options={"cudagraphs": True})
    a, b = torch.randn(8, device="cuda"), torch.randn(3)
    with compiler.collect_reports() as report:
        for _ in range(3):
            torch.testing.assert_close(compiled(a, b), a * b.sum())
    assert [g.cudagraph for g in report.graphs] == [CudaGraphStatus.CPU_INPUTS]


@pytest.mark.gpu
def test_training_forward_writing_running_statistics_is_captured() -> None:
    """Batch norm in training mode writes its running statistics (graph inputs, static buffers): the
    forward is captured, each call updates them once (the capture's extra runs are undone), and they
    and the gradients match eager's after every step."""
    torch.manual_seed(0)

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).cuda().train()

    eager, model = make(), make()
    compiled = torch.compile(model, backend="crucible", options={"cudagraphs": True, "strict": True})
    xs = [torch.randn(2, 3, 16, 16, device="cuda") for _ in range(4)]
    with compiler.collect_reports() as report:
        for x in xs:
            eager(x).square().sum().backward()
            compiled(x).square().sum().backward()
            torch.testing.assert_close(model[1].running_mean, eager[1].running_mean)
            torch.testing.assert_close(model[1].running_var, eager[1].running_var)
            assert int(model[1].num_batches_tracked) == int(eager[1].num_batches_tracked)
    torch.testing.assert_close(model[0].weight.grad, eager[0].weight.grad, rtol=1e-3, atol=1e-3)
    forward = [g for g in report.graphs if g.kind == "forward"]
    assert forward and forward[0].cudagraph is CudaGraphStatus.CAPTURED, forward[0].cudagraph_message
    assert forward[0].cudagraph_replays == 3


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4)).cuda()


@pytest.mark.gpu
def test_training_saved_tensors_stay_in_the_graphs_memory() -> None:
    """A training forward's replay returns its saved tensors uncopied and the backward's reads them
    where they are: no copy out and in per step, and the gradients match eager's at every step."""
    eager, model = _mlp(), _mlp()
    compiled = torch.compile(model, backend="crucible", options={"cudagraphs": True, "strict": True})
    xs = [torch.randn(8, 16, device="cuda") for _ in range(5)]
    with compiler.collect_reports() as report:
        for x in xs:
            eager.zero_grad(), model.zero_grad()
            eager(x).square().sum().backward()
            compiled(x).square().sum().backward()
            for p, q in zip(model.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    forward = next(g for g in report.graphs if g.kind == "forward")
    backward = next(g for g in report.graphs if g.kind == "backward")
    assert "saved tensors returned in place" in forward.cudagraph_message, forward.cudagraph_message
    assert "saved tensors read in place" in backward.cudagraph_message, backward.cudagraph_message
    assert forward.cudagraph_replays == backward.cudagraph_replays == 4
    assert forward.cudagraph_uncaptured_calls == backward.cudagraph_uncaptured_calls == 0


@pytest.mark.gpu
def test_a_second_forward_before_the_backward_runs_uncaptured() -> None:
    """Two forwards before one backward (two micro-batches summed): the first replay's saved tensors
    are still held when the second forward comes, so it runs without the graph (a replay would
    overwrite them), and its backward, reading tensors from elsewhere, too. Gradients match eager."""
    eager, model = _mlp(), _mlp()
    compiled = torch.compile(model, backend="crucible", options={"cudagraphs": True, "strict": True})
    with compiler.collect_reports() as report:
        for _ in range(4):
            a, b = torch.randn(8, 16, device="cuda"), torch.randn(8, 16, device="cuda")
            eager.zero_grad(), model.zero_grad()
            (eager(a).square().sum() + eager(b).sum()).backward()
            (compiled(a).square().sum() + compiled(b).sum()).backward()
            for p, q in zip(model.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    forward = next(g for g in report.graphs if g.kind == "forward")
    assert forward.cudagraph_replays >= 1 and forward.cudagraph_uncaptured_calls >= 1


@pytest.mark.gpu
def test_written_copied_input_reaches_the_caller() -> None:
    """A kernel writing into an input that is not static (copied into the graph's buffer): each replay
    copies the written value back to the caller's tensor."""
    def f(buf, x):
        buf.mul_(0.5).add_(x)
        return x + 1

    compiled = torch.compile(f, backend="crucible", options={"cudagraphs": True, "strict": True})
    buf, ref = torch.ones(8, device="cuda"), torch.ones(8, device="cuda")
    with compiler.collect_reports() as report:
        for k in range(4):
            x = torch.full((8,), float(k), device="cuda")
            compiled(buf, x)
            f(ref, x)
            torch.testing.assert_close(buf, ref)
    assert report.graphs[0].cudagraph is CudaGraphStatus.CAPTURED, report.graphs[0].cudagraph_message


def test_sizes_are_told_apart_by_copied_inputs_and_symbolic_sizes() -> None:
    """The runner's size key: the copied inputs' shapes and strides and the int arguments (a graph with
    symbolic sizes takes them so); a static input's (a parameter's) shape does not count."""
    from compiler.cudagraphs import CudaGraphRunner
    from compiler.report import GraphReport

    runner = CudaGraphRunner(lambda args: None, GraphReport(0, "inference", 0, "triton"), static_inputs=[0])
    w, x4, x8 = torch.randn(3), torch.randn(4, 3), torch.randn(8, 3)
    assert runner.size_key([w, x4, 4]) == runner.size_key([w, x4.clone(), 4])
    assert runner.size_key([w, x4, 4]) != runner.size_key([w, x8, 8])
    assert runner.size_key([w, x4, 4]) != runner.size_key([w, x4, 5])
    assert runner.size_key([w, x4, 4]) != runner.size_key([w, x8.t().contiguous().t()[:4], 4])  # strides
    assert runner.size_key([torch.randn(5), x4, 4]) == runner.size_key([w, x4, 4])


@pytest.mark.gpu
def test_symbolic_sizes_record_one_graph_per_size() -> None:
    """Issue 36 stage 5: a graph compiled with symbolic sizes records a CUDA graph per size it meets
    (warm-up call, capture on the second call at that size), and each replay is right at its size."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)).cuda().eval()
    compiled = torch.compile(model, backend="crucible", dynamic=True, options={"cudagraphs": True, "strict": True})
    rows = [4, 8, 4, 8, 12, 4, 8]
    with torch.no_grad(), compiler.collect_reports() as report:
        for n in rows:
            x = torch.randn(n, 16, device="cuda")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    (graph,) = [g for g in report.graphs if g.cudagraph is not None]
    assert graph.dynamic and graph.cudagraph is CudaGraphStatus.CAPTURED, graph.cudagraph_message
    assert graph.cudagraph_replays == 4  # 4: calls 3 (capture), 6; 8: calls 4 (capture), 7; 12: warm-up only
    assert "2 sizes captured" in graph.cudagraph_message
