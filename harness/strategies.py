"""Public hypothesis strategies for property tests of graph compilers.

    from hypothesis import given
    from harness.strategies import op_graphs, tensors

    @given(op_graphs(ops="add.Tensor,mul.Tensor,sum.*", max_nodes=4))
    def test_my_backend_matches_eager(graph):
        fn, inputs = graph.function(), graph.make_inputs()
        torch.testing.assert_close(my_compile(fn)(*inputs), fn(*inputs), equal_nan=True)

``op_graphs`` draws ``FuzzGraph``s: DAGs of 1..``max_nodes`` ATen calls from the fuzzer's op
table (``crucible fuzz --list-ops``), valid by construction (every draw runs in eager), over
inputs with 0-size, size-1 and odd dims, 0-d tensors, transposed/sliced/expanded/offset layouts
and special values (NaN, +-inf, -0.0, huge, tiny, denormal, integer extremes). A graph renders to
Python source (``graph.source()``), runs as a function (``graph.function()``; ``reference=True``
runs every float dtype in float64) and rebuilds its inputs deterministically
(``graph.make_inputs(device)``). ``tensors`` draws one such input tensor on its own.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.fuzz.builder import ALL_DTYPES, GraphDraw, GraphLimits, graphs
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.sizes import GENERIC_BLOCKS, target_blocks
from harness.fuzz.specs import select_specs
from harness.fuzz.values import make_input

__all__ = ["FuzzGraph", "op_graphs", "tensors"]


def op_graphs(ops: str | list[str] | None = None, max_nodes: int = 6, dtypes: tuple[str, ...] = ALL_DTYPES,
              max_numel: int = 8192, max_rank: int = 4, target: str | None = None) -> st.SearchStrategy[FuzzGraph]:
    """Graphs of ATen ops matching ``ops`` (globs, comma-separated; None: every op spec). An op that
    reduces, scans, normalizes or works elementwise may get an input with one dim from the size
    classes around ``target``'s block sizes (``harness.fuzz.sizes``; generic ones without a target),
    up to 16 x ``max_numel`` elements."""
    unknown = set(dtypes) - set(ALL_DTYPES)
    if unknown:
        raise ValueError(f"unknown dtypes {sorted(unknown)}; choose from {', '.join(ALL_DTYPES)}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    blocks = target_blocks(target) if target else GENERIC_BLOCKS
    limits = GraphLimits(max_nodes=max_nodes, max_rank=max_rank, max_numel=max_numel, dtypes=tuple(dtypes),
                         blocks=blocks, max_row_numel=16 * max_numel)
    return graphs(select_specs(ops), limits)


@st.composite
def _tensors(draw: Any, dtypes: tuple[str, ...], min_rank: int, max_rank: int, max_numel: int,
             device: str) -> Any:
    builder = GraphDraw(GraphLimits(max_rank=max_rank, max_numel=max_numel, dtypes=tuple(dtypes)))
    builder.fresh_input(draw, tuple(dtypes), min_rank, max_rank, False, False, None, None)
    return make_input(builder.graph.inputs[0], device)


def tensors(dtypes: tuple[str, ...] = ALL_DTYPES, min_rank: int = 0, max_rank: int = 4, max_numel: int = 8192,
            device: str = "cpu") -> st.SearchStrategy[Any]:
    """One tensor as the fuzzer draws graph inputs: shapes, layouts and value profiles above."""
    unknown = set(dtypes) - set(ALL_DTYPES)
    if unknown:
        raise ValueError(f"unknown dtypes {sorted(unknown)}; choose from {', '.join(ALL_DTYPES)}")
    return _tensors(tuple(dtypes), min_rank, max_rank, max_numel, device)
