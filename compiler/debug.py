"""Debug output: ``CRUCIBLE_DEBUG`` levels and ``CRUCIBLE_DUMP_DIR`` files.

| level | prints (to stderr) |
|---|---|
| 1 | a summary per compiled graph: FX nodes, kernels with fused ops, extern calls with reasons |
| 2 | + the source of every generated kernel and the wrapper |
| 3 | + the IR after every pass |

With ``CRUCIBLE_DUMP_DIR=path`` every graph gets ``path/graph_<id>/`` holding each
stage (``00_aten_graph.py``, ``01_lower.txt``, ``02_schedule.txt``, kernel sources,
``wrapper.py``) and ``repro.py``, a runnable script that compiles that ATen graph
again on random inputs of the same shapes and compares with eager.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from compiler import config
from compiler.codegen.registry import source_suffix

if TYPE_CHECKING:
    from compiler.pipeline import GraphCompilation


def _print(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _graph_dir(comp: GraphCompilation) -> Path | None:
    root = config.dump_dir()
    if root is None:
        return None
    path = root / f"graph_{comp.graph_id}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _stage_text(out: Any) -> str:
    if isinstance(out, dict):
        return "\n\n".join(f"# {k}\n{getattr(v, 'source', v)}" for k, v in out.items())
    if hasattr(out, "steps"):
        return "\n".join(str(s) for s in out.steps) + "\n\nrefused fusions:\n" + "\n".join(
            f"  {r}" for r in out.refusals)
    return str(out)


def graph_start(comp: GraphCompilation) -> None:
    path = _graph_dir(comp)
    if path is not None:
        (path / "00_aten_graph.py").write_text(comp.gm.code)
        (path / "repro.py").write_text(repro_source(comp.gm, comp.codegen))
    if config.debug_level() >= 3:
        _print(f"[crucible] graph {comp.graph_id} ATen graph:\n{comp.gm.code}")


def after_pass(comp: GraphCompilation, name: str, out: Any) -> None:
    if name in ("select_renderer", "load"):
        return
    path = _graph_dir(comp)
    # the stage's text is for dumps only: it is linear in the IR (shared subexpressions print once,
    # ``ir.expr_listing``), but still no compile should pay for text nobody reads
    if path is None and config.debug_level() < 3:
        return
    # graph rewrites before lowering (weight folding) sort right after 00_aten_graph.py
    order = {"late_decompositions": 0, "fold_batch_norm": 0, "fuse_extern_epilogues": 0, "merge_matmuls": 0, "onednn_linears": 0, "lower": 1, "schedule": 2, "render": 3, "wrap": 4}.get(name, 9)
    text = _stage_text(out) if name != "wrap" else out.source
    if path is not None:
        (path / f"{order:02d}_{name}.txt").write_text(text)
    if config.debug_level() >= 3:
        _print(f"[crucible] graph {comp.graph_id} after {name} "
               f"({comp.report.pass_seconds.get(name, 0) * 1e3:.1f} ms):\n{text}")


def graph_done(comp: GraphCompilation, wrapper: Any, rendered: dict) -> None:
    level = config.debug_level()
    path = _graph_dir(comp)
    if path is not None:
        (path / "wrapper.py").write_text(wrapper.source)
        for name, r in rendered.items():
            (path / f"{name}.{source_suffix(r.codegen)}").write_text(r.source)
    if level >= 1:
        _print(f"[crucible] {comp.report}")
    if level >= 2:
        for r in rendered.values():
            _print(f"[crucible] kernel {r.name} ({r.codegen}):\n{r.source}")
        _print(f"[crucible] wrapper:\n{wrapper.source}")


def repro_source(gm: torch.fx.GraphModule, codegen: str) -> str:
    """A standalone script that recompiles this ATen graph and checks it against eager."""
    specs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                specs.append((tuple(val.shape), tuple(val.stride()), str(val.dtype), str(val.device)))
            else:
                specs.append(val)
    body = "\n".join("    " + line for line in gm.code.strip().splitlines())
    return f'''"""Repro written by Crucible: recompiles one ATen graph and compares it with eager."""
import torch
from torch import device  # noqa: F401  (the graph code may name devices)
import compiler


class Repro(torch.nn.Module):
{body}


def make_inputs():
    out = []
    for spec in {specs!r}:
        if not isinstance(spec, tuple):
            out.append(spec)
            continue
        shape, stride, dtype, dev = spec
        dtype = getattr(torch, dtype.replace("torch.", ""))
        size = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
        if dtype.is_floating_point:
            base = torch.randn(size, device=dev).to(dtype)
        elif dtype == torch.bool:
            base = torch.rand(size, device=dev) > 0.5
        else:
            base = torch.randint(0, 8, (size,), device=dev).to(dtype)
        out.append(torch.as_strided(base, shape, stride))
    return out


if __name__ == "__main__":
    gm = torch.fx.symbolic_trace(Repro())
    inputs = make_inputs()
    compiled = compiler.compile_graph(gm, inputs, codegen={codegen!r})
    expected = gm(*inputs)
    got = compiled(*inputs)
    for e, g in zip(expected if isinstance(expected, (list, tuple)) else [expected],
                    got if isinstance(got, (list, tuple)) else [got]):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4, equal_nan=True)
    print("repro: outputs match eager")
'''
