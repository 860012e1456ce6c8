"""Kernels equal up to their buffers are rendered and built once (``compiler.kernel_sharing``).

Regression: a stacked hourglass's 346 C++ kernels were each compiled on their own, though only 34
computations were distinct (47 s of an 89 s compile on the 2-core CPU)."""

from __future__ import annotations

import torch

import compiler
from compiler import cpp_build
from compiler.kernel_sharing import canonical_kernel, render_shared
from compiler.scheduler import Kernel


def _blocks(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # the same pointwise block three times, matmuls (extern calls) between them
    for _ in range(3):
        x = torch.sigmoid(x * 2.0 + 1.0) @ w
    return x


def test_repeated_blocks_share_one_build(device: str) -> None:
    if device != "cpu":
        return
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    before = cpp_build.stats.compiles + cpp_build.stats.disk_hits
    with compiler.collect_reports() as reports:
        out = compiler.compile_graph(compiler.trace_aten(_blocks, x, w), [x, w], codegen="cpp")(x, w)
    torch.testing.assert_close(out, _blocks(x, w))
    (graph,) = reports.graphs
    sigmoid = [k for k in graph.kernels if "sigmoid" in k.name or "sigmoid" in k.symbol]
    assert len(sigmoid) == 3, [k.symbol for k in graph.kernels]
    assert len({k.symbol for k in sigmoid}) == 1 and len({k.source for k in sigmoid}) == 1
    # one library for the three (a memory hit for the other two)
    assert cpp_build.stats.compiles + cpp_build.stats.disk_hits - before <= len({k.symbol for k in graph.kernels})


def _kernels(fn, *inputs: torch.Tensor) -> list[Kernel]:
    from compiler.codegen.registry import renderer_for
    from compiler.lowering import lower
    from compiler.scheduler import schedule

    caps = renderer_for("cpp", torch.device("cpu")).capabilities
    sched = schedule(lower(compiler.trace_aten(fn, *inputs), torch.device("cpu"), caps), caps)
    return [s for s in sched.steps if isinstance(s, Kernel)]


def test_canonical_form_keeps_what_differs() -> None:
    def two(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.sigmoid(x * 2.0 + 1.0) @ w
        b = torch.sigmoid(a * 2.0 + 1.0) @ w
        c = torch.sigmoid(y * 2.0 + 1.0)  # another dtype and size
        d = torch.sigmoid(b * 3.0 + 1.0)  # another constant
        return b, c, d

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    kernels = _kernels(two, x, torch.randn(5, 3, dtype=torch.float64), w)
    forms = [canonical_kernel(k) for k in kernels]
    names = [form.name for form, _ in forms]
    assert len(kernels) == 4 and len(set(names)) == 3, [str(k) for k in kernels]
    assert forms[0][0] == forms[1][0] and names[0] == names[1]
    # every buffer of a kernel is renamed, parameters first and in order
    for k, (form, renaming) in zip(kernels, forms):
        assert [p.buffer for p in form.params] == [f"a{i}" for i in range(len(k.params))]
        assert [renaming[p.buffer] for p in k.params] == [p.buffer for p in form.params]


def test_each_kernel_keeps_its_own_arguments() -> None:
    def two(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.sigmoid(x + 1.0) @ w + 1.0)

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    kernels = _kernels(two, x, w)
    rendered_forms: list[Kernel] = []

    def render(k: Kernel):
        from compiler.codegen.registry import renderer_for

        rendered_forms.append(k)
        return renderer_for("cpp", torch.device("cpu")).render(k)

    rendered = render_shared(kernels, render)
    assert len(rendered_forms) == 1 and len(kernels) == 2
    for k in kernels:
        assert rendered[k.name].name == k.name
        assert sorted(rendered[k.name].args) == sorted(p.buffer for p in k.params)
