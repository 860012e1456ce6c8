"""The training split (``partition`` option, compiler/partition.py) and training batch norm."""

from __future__ import annotations

import copy

import pytest
import torch

import compiler
from compiler.partition import pin_reads_of_mutated_inputs

aten = torch.ops.aten


def _saved_bytes(fn, *inputs) -> int:
    """Bytes of the distinct storages autograd saves for the backward of one call of ``fn``."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs).sum().backward()
    return sum(storages.values())


class _Chain(torch.nn.Module):
    """A linear layer and a pointwise chain whose derivative needs each intermediate value."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(64, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(torch.sin(self.linear(x)) * 2).exp()


def test_min_cut_saves_less_than_saving_everything_and_trains_alike() -> None:
    x = torch.randn(32, 64)
    saved, grads = {}, {}
    for partition in ("save_all", "min_cut"):
        torch._dynamo.reset()
        model = _Chain()
        compiled = torch.compile(model, backend="crucible", options={"codegen": "cpp", "partition": partition})
        saved[partition] = _saved_bytes(compiled, x)
        grads[partition] = [p.grad for p in model.parameters()]
    reference = _Chain()
    reference(x).sum().backward()
    for partition, got in grads.items():
        for g, want in zip(got, (p.grad for p in reference.parameters())):
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4, msg=partition)
    # save_all keeps sin(h) * 2 and the exp's result beside h; min-cut recomputes them from h
    assert saved["min_cut"] < saved["save_all"], saved


class _Attention(torch.nn.Module):
    """vit's attention block: SDPA, its output transposed back to tokens and projected."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.proj = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 9, 3, 4, 16).permute(2, 0, 3, 1, 4).unbind(0)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(2, 9, 64))


def test_the_attention_output_is_saved_once() -> None:
    """The forward returns ``alias(sdpa_out)`` for SDPA's backward beside the view of it the
    projection's weight gradient reads: both are the one buffer, as in eager (the alias was a copy:
    vit_base saved a [tokens, 768] tensor a layer more than Inductor)."""
    x = torch.randn(2, 9, 64)
    model = _Attention()
    compiled = torch.compile(model, backend="crucible", options={"codegen": "cpp"})
    saved = _saved_bytes(compiled, x)
    reference = _Attention()
    assert saved <= _saved_bytes(reference, x), (saved, _saved_bytes(reference, x))
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)


def test_an_unknown_partition_is_named() -> None:
    with pytest.raises(ValueError, match=r"partition must be one of \('min_cut', 'save_all'\), got 'greedy'"):
        compiler.config.Options.parse({"partition": "greedy"})


def _joint(fn, *inputs) -> torch.fx.Graph:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*inputs).graph


def test_reads_of_a_mutated_input_are_pinned_through_views_but_not_its_write_back() -> None:
    def joint(buf: torch.Tensor, x: torch.Tensor) -> tuple:
        scaled = buf * 0.9  # only written back: free to recompute, nothing reads it later
        shifted = (buf.view(2, 4) + 1).view(8)  # read through a view: the add is pinned, not the view
        aten.copy_(buf, scaled)
        return x * shifted, x.sum()

    graph = _joint(joint, torch.randn(8), torch.randn(8))
    pinned = pin_reads_of_mutated_inputs(graph)
    assert [n.target for n in pinned] == [aten.add.Tensor]
    views = [n for n in graph.nodes if n.target is aten.view.default]
    assert all("recompute" not in n.meta for n in views)


def test_a_graph_without_mutations_is_left_alone() -> None:
    graph = _joint(lambda x: (x + 1).relu(), torch.randn(4))
    assert pin_reads_of_mutated_inputs(graph) == []
    assert all("recompute" not in n.meta for n in graph.nodes)


def test_training_batch_norm_is_generated_code_not_an_extern_call() -> None:
    """Training batch norm decomposes into reductions and pointwise ops (torch's rules), so it fuses
    and min-cut can recompute its output; as the ATen call it was, its result had to be saved."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    reference = copy.deepcopy(net)
    x = torch.randn(2, 3, 10, 10)
    with compiler.collect_reports() as report:
        torch.compile(net, backend="crucible", options={"codegen": "cpp"})(x).sum().backward()
    reference(x).sum().backward()
    externs = [e.op for g in report.graphs for e in g.externs]
    assert not [op for op in externs if "batch_norm" in op], externs
    for got, want in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(net[1].running_mean, reference[1].running_mean)
    torch.testing.assert_close(net[1].running_var, reference[1].running_var)


def test_the_saved_factor_of_an_upper_cholesky_keeps_its_strides() -> None:
    """``crucible run --mode train`` on opinfo's linalg.cholesky (upper=True): the gradient was off by
    1.2. The forward returns an effect token first (cholesky's error check runs under
    ``with_effects``), which AOTAutograd leaves out when it reads the forward's reported strides; with
    it reported, the saved U^T was compiled for as U's (1, 5) strides and the backward read U."""
    torch.manual_seed(0)
    x = torch.randn(5, 5)
    a = x @ x.mT + 5 * torch.eye(5)
    w = torch.randn(5, 5)
    fn = lambda m: torch.linalg.cholesky(m, upper=True)  # noqa: E731
    want = a.clone().requires_grad_(True)
    (fn(want) * w).sum().backward()
    got = a.clone().requires_grad_(True)
    out = torch.compile(fn, backend="crucible", options={"codegen": "cpp", "strict": True})(got)
    (out * w).sum().backward()
    torch.testing.assert_close(out, fn(a))
    torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)


class _Blocks(torch.nn.Module):
    """Two linear + layer norm + GELU blocks: each GELU output feeds the next GEMM (an extern call)
    and is saved for its weight gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32),
                                                               torch.nn.GELU()) for _ in range(2)],
                                        torch.nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_a_value_an_extern_reads_and_the_forward_saves_is_computed_once() -> None:
    """Regression: the lowering realized a lazy value for the GEMM that reads it, and again as the
    forward's output (saved for the backward): the first block's GELU was computed twice, the second
    time in the last kernel, and the second's stored twice (a [64, 256] MLP's forward on the CPU spent
    400 us of its 1.2 ms in that kernel). One ``erf`` a block now, and the gradients match eager's."""
    from compiler.report import collect_reports

    model = _Blocks()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    eager = copy.deepcopy(model)
    eager(x).square().sum().backward()
    with collect_reports() as report:
        torch.compile(model, backend="crucible", options={"strict": True, "codegen": "cpp"})(x).square().sum().backward()
    forward = next(g for g in report.graphs if g.kind == "forward")
    assert sum(k.source.count("erf_f32(") for k in forward.kernels) == 2
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_equal_values_of_two_outputs_are_two_tensors() -> None:
    """Realizing each lazy value once per layout must not make two outputs one tensor: eager returns
    two, and a caller's in-place update of one would show in the other."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = x.sin() * 2
        b = x.sin() * 2
        return a, b, a

    x = torch.randn(8, 8)
    a, b, a2 = torch.compile(f, backend="crucible", options={"strict": True})(x)
    assert a.data_ptr() != b.data_ptr()
    torch.testing.assert_close(a, x.sin() * 2)
    torch.testing.assert_close(b, a)
    a.add_(1)
    torch.testing.assert_close(b, x.sin() * 2)


def test_a_sum_a_library_call_read_is_read_back_from_its_buffer_by_later_sums() -> None:
    """Regression: resnet50's residual sums were realized for the next convolution and recomputed by
    the next block's sum, which re-added every earlier block's branch (a stage's last sum read five
    buffers where two do: 0.94x Inductor in float32 on an H100). A lazy value already in a buffer is
    read from it where recomputing would read two whole buffers or more; one read stays inlined."""
    from compiler.graph import ComputedNode
    from compiler.lowering import lower

    aten = torch.ops.aten

    def blocks(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = aten.relu.default(aten.add.Tensor(x, a))
        for _ in range(4):
            out = aten.relu.default(aten.add.Tensor(aten.mm.default(out, w), out))
        return out

    x, a, w = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8) / 4
    gm = compiler.trace_aten(blocks, x, a, w)
    kernels = [n for n in lower(gm, torch.device("cpu")).nodes if isinstance(n, ComputedNode)]
    reads = [len({e.arg for e in n.body.walk() if e.op is compiler.ir.Op.LOAD}) for n in kernels]
    assert max(reads) == 2, reads
    torch.testing.assert_close(compiler.compile_graph(gm, [x, a, w], codegen="cpp")(x, a, w), blocks(x, a, w))


def test_aliases_are_dropped_before_the_partitioner_but_a_returned_one_stays() -> None:
    """softmax's backward reads its output through ``aten.alias``; the partitioner weighed the alias as
    a value of its own (swin_tiny fp32 on the GPU saved the scores and the statistics to recompute a
    softmax besides the softmax itself). A returned alias keeps AOTAutograd's plan of output aliasing."""
    from compiler.partition import drop_aliases

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    inner = graph.call_function(aten.alias.default, (x,))
    kept = graph.call_function(aten.alias.default, (inner,))
    doubled = graph.call_function(aten.mul.Tensor, (inner, 2))
    graph.output((doubled, kept))
    assert drop_aliases(graph) == 1
    assert doubled.args[0] is x and kept.args[0] is x
    assert [n.target for n in graph.nodes if n.op == "call_function"].count(aten.alias.default) == 1


def test_clones_of_computed_values_are_dropped_but_not_of_inputs_or_changing_strides() -> None:
    """``Dropout(0.0)`` in training is a clone (torch 2.11); swin_tiny's fp32 forward on the GPU saved
    each attention's clone besides the softmax or its statistics. A clone of an input stays (a later
    write to the input must not reach it), and so does one that makes a transposed value contiguous."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from compiler.partition import drop_aliases

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    with FakeTensorMode() as mode:
        x.meta["val"] = mode.from_tensor(torch.randn(4, 6))

    def call(target, args, **kwargs):
        node = graph.call_function(target, args, kwargs)
        node.meta["val"] = target(*[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args], **kwargs)
        return node

    with mode:
        computed = call(aten.exp.default, (x,))
        same = call(aten.clone.default, (computed,))
        of_input = call(aten.clone.default, (call(aten.view.default, (x, [6, 4])),))
        transposed = call(aten.permute.default, (computed, [1, 0]))
        contiguous = call(aten.clone.default, (transposed,), memory_format=torch.contiguous_format)
        returned = call(aten.clone.default, (computed,))
        uses = [call(aten.mul.Tensor, (v, 2)) for v in (same, of_input, contiguous)]
    graph.output((*uses, returned))
    assert drop_aliases(graph) == 1
    assert uses[0].args[0] is computed
    kept = [n.args[0] for n in graph.nodes if n.target is aten.clone.default]
    assert kept == [of_input.args[0], transposed, computed]


def test_a_clone_in_the_forward_saves_nothing_more() -> None:
    """A block whose softmax and GELU outputs pass through ``clone`` trains with the same saved bytes
    as without the clones (before: the clones and what recomputes their inputs, 26% more here)."""

    class Block(torch.nn.Module):
        def __init__(self, clones: bool) -> None:
            super().__init__()
            self.fc, self.fc2, self.clones = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16), clones

        def forward(self, q, k, v):
            a = torch.softmax(q @ k.transpose(-1, -2), -1)
            a = a.clone() if self.clones else a
            h = torch.nn.functional.gelu(self.fc(a @ v))
            return self.fc2(h.clone() if self.clones else h)

    def saved(model: torch.nn.Module, *args: torch.Tensor) -> int:
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        compiled = torch.compile(model, backend="crucible", options={"strict": True})
        compiled(*args)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = compiled(*args)
        out.sum().backward()
        return sum(storages.values())

    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 4, 64, 16, requires_grad=True) for _ in range(3))
    plain = Block(False)
    with_clones = Block(True)
    with_clones.load_state_dict(plain.state_dict())
    assert saved(with_clones, q, k, v) == saved(plain, q, k, v)


def test_attention_softmax_training_matches_eager_with_aliases_dropped() -> None:
    """A math-attention block (scores, bias, softmax, values) trained through Crucible: gradients as
    eager's, and no alias reaches the partition."""
    import compiler.partition as partition

    dropped: list[int] = []
    real = partition.drop_aliases
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 3, 16, 8, requires_grad=True) for _ in range(3))
    bias = torch.randn(3, 16, 16, requires_grad=True)

    def block(q, k, v, bias):
        return (torch.softmax(q @ k.transpose(-1, -2) * 0.35 + bias, -1) @ v).square()

    try:
        partition.drop_aliases = lambda g: dropped.append(real(g)) or dropped[-1]
        got = torch.compile(block, backend="crucible", options={"strict": True})(q, k, v, bias)
        grads = torch.autograd.grad(got.sum(), (q, k, v, bias))
    finally:
        partition.drop_aliases = real
    want = block(q, k, v, bias)
    for g, w in zip(grads, torch.autograd.grad(want.sum(), (q, k, v, bias))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert dropped and dropped[0] >= 1
