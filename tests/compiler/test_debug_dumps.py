"""Debug output (``CRUCIBLE_DUMP_DIR``, ``CRUCIBLE_DEBUG=3``): linear in the graph, readable."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import compiler
from compiler import ir


def tanh_chain(n: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        for _ in range(n):
            x = torch.tanh(x)
        return x

    return fn


def x_tanh_chain(n: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        for _ in range(n):
            x = x * torch.tanh(x)
        return x

    return fn


def _debug_output(fn: Callable, codegen: str, where: Path, monkeypatch: pytest.MonkeyPatch,
                  capfd: pytest.CaptureFixture) -> tuple[int, int, float]:
    """(bytes written to the dump directory, bytes of CRUCIBLE_DEBUG=3 output, seconds) of one compile."""
    monkeypatch.setenv("CRUCIBLE_DUMP_DIR", str(where))
    monkeypatch.setenv("CRUCIBLE_DEBUG", "3")
    x = torch.randn(4, 8)
    capfd.readouterr()
    started = time.perf_counter()
    out = compiler.compile_graph(compiler.trace_aten(fn, x), [x], codegen=codegen)(x)
    seconds = time.perf_counter() - started
    printed = len(capfd.readouterr().err)
    torch.testing.assert_close(out, fn(x))
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()), printed, seconds


@pytest.mark.parametrize("chain", [tanh_chain, x_tanh_chain])
def test_dumps_grow_linearly_with_shared_subexpressions(chain: Callable, codegen: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capfd: pytest.CaptureFixture) -> None:
    """Regression: the IR text of the lower and schedule stages repeated every shared subexpression
    (tanh's decomposition reads its input five times), so it grew exponentially: 4 chained tanh
    wrote a 177 MB dump in 25 s and 8 ran past 10 minutes. Each shared subexpression is now printed
    once, by name: doubling the chain doubles the output."""
    dumped8, printed8, seconds8 = _debug_output(chain(8), codegen, tmp_path / "8", monkeypatch, capfd)
    dumped16, printed16, seconds16 = _debug_output(chain(16), codegen, tmp_path / "16", monkeypatch, capfd)
    assert dumped16 < 2.5 * dumped8 and printed16 < 2.5 * printed8, (dumped8, dumped16, printed8, printed16)
    assert dumped16 < 300_000 and seconds16 < 60, (dumped16, seconds8, seconds16)


def test_schedule_dump_defines_each_name_before_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capfd: pytest.CaptureFixture) -> None:
    """The named subexpressions stay readable: each kernel lists ``tN = ...`` operands first, every
    name it uses is defined above, and names restart per kernel."""
    _debug_output(tanh_chain(3), "cpp", tmp_path, monkeypatch, capfd)
    (schedule,) = tmp_path.glob("graph_*/02_schedule.txt")
    kernels = schedule.read_text().split("\nrefused fusions:")[0].split("kernel ")[1:]
    assert kernels
    for text in kernels:
        defined: set[str] = set()
        for line in text.splitlines()[1:]:
            name, _, value = line.strip().partition(" = ")
            assert set(re.findall(r"\bt\d+\b", value)) <= defined, line
            if re.fullmatch(r"t\d+", name):
                assert name == f"t{len(defined)}"
                defined.add(name)
        assert "t0" in defined and "store " in text


def test_render_expr_names_shared_subexpressions_once() -> None:
    x = ir.load("buf0", ir.xvar(0), torch.float32)
    e = ir.unary(ir.Op.EXP, x)
    assert ir.render_expr(ir.binary(ir.Op.ADD, e, e)) == "let t0 = exp(buf0[x0]) in add(t0, t0)"
    assert ir.render_expr(ir.binary(ir.Op.ADD, x, ir.const(1.0, torch.float32))) == "add(buf0[x0], 1.0)"
    for _ in range(200):  # 2**200 paths: the nested text could never be written
        e = ir.binary(ir.Op.MUL, e, e)
    assert len(ir.render_expr(e)) < 200 * 40
    definitions, texts = ir.expr_listing([x, x, ir.unary(ir.Op.NEG, x)])
    assert (definitions, texts) == (["t0 = buf0[x0]"], ["t0", "t0", "neg(t0)"])
