"""``compiler.compile_graph``: a bare ATen graph compiled with the backend's options."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import compiler
from compiler import backend
from compiler.config import Options


def _conv_relu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.nn.functional.conv2d(x, w, padding=1))


def test_every_backend_option_reaches_the_compilation(monkeypatch: pytest.MonkeyPatch, codegen: str) -> None:
    """Regression: ``compile_graph`` took ``codegen``, ``strict`` and ``extern`` only, so the fuzzer and
    the minimizer compiled ``crucible-triton`` (``tuning="first_call"``) unlike corpus runs. Each option
    reaches the compilation: the layout through the graph's report, the others as the pipeline
    receives them."""
    received: list[Options] = []
    compile_aten_graph = backend.compile_aten_graph

    def spy(gm: Any, inputs: Any, *, options: Options, **kwargs: Any) -> Any:
        received.append(options)
        return compile_aten_graph(gm, inputs, options=options, **kwargs)

    monkeypatch.setattr(backend, "compile_aten_graph", spy)
    x, w = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    gm = compiler.trace_aten(_conv_relu, x, w)
    default = "channels_last" if codegen == "cpp" else "contiguous"  # the C++ codegen's CPU rule (compiler.layout)
    forced = "contiguous" if default == "channels_last" else "channels_last"
    with compiler.collect_reports() as report:
        out = compiler.compile_graph(gm, [x, w], codegen=codegen, layout=forced, tuning="off",
                                     fold_weights=False, extern="all")(x, w)
    torch.testing.assert_close(out, _conv_relu(x, w), rtol=1e-4, atol=1e-4)
    assert received == [Options(codegen=codegen, strict=True, extern="all", fold_weights=False,
                                layout=forced, tuning="off")]
    assert [g.layout for g in report.graphs] == [forced]
    with compiler.collect_reports() as report:
        compiler.compile_graph(gm, [x, w], codegen=codegen)(x, w)  # today's keyword calls, today's defaults
    assert received[-1] == Options(codegen=codegen, strict=True)
    assert [g.layout for g in report.graphs] == [default]


def test_unknown_or_invalid_options_are_value_errors() -> None:
    x = torch.randn(4)
    gm = compiler.trace_aten(torch.relu, x)
    with pytest.raises(ValueError, match=r"unknown crucible option\(s\) \['tunning'\]; known: codegen, strict"):
        compiler.compile_graph(gm, [x], tunning="off")
    with pytest.raises(ValueError, match="tuning must be one of"):
        compiler.compile_graph(gm, [x], tuning="sometimes")
    with pytest.raises(ValueError, match="codegen must be one of"):
        compiler.compile_graph(gm, [x], codegen="cuda")


def test_a_traceback_through_a_compiled_graph_shows_the_wrapper_s_line() -> None:
    """The wrapper's source is registered with linecache under a name of its own: a traceback (and a
    CUDA memory snapshot's frames) through a compiled graph shows which wrapper line ran."""
    import traceback

    x = torch.randn(4)
    run = compiler.compile_graph(compiler.trace_aten(lambda a, b: a * b + 1, x, x), [x, x], codegen="cpp")
    with pytest.raises(ValueError) as info:
        run(x)  # one input where the graph takes two: the wrapper's unpacking fails
    frames = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename.startswith("<crucible-wrapper ")]
    assert frames and frames[-1].line == "arg0, arg1 = args"
