"""Which Inductor knob makes a parity failure: run corpus entries under each knob, print a table.

A failure that lives in Inductor's handling of the whole Dynamo graph (a pattern rewrite, a layout
decision) does not survive capturing the ATen graph, so the minimizer cannot shrink it; this triage
runs the entry as ``crucible run`` does (``harness.entry_subject.run_entry``) once per knob and reports
the oracle's figures, plus the attention / convolution / matmul ops in Inductor's post-grad graph.
Knobs run in parallel processes (``-j``), each with one Inductor compile thread::

    python -m harness.minify.knobs transformers/deit transformers/beit --device cuda -j 8 --base torch-tf32

(``--base torch-tf32`` grades with torch's TF32 flags as they are, as the harness did before it fixed
float32 parity at full precision; see ``harness.oracle.working_precision``.)

Besides the entries it measures the kernels alone (``--ops``): scaled-dot-product attention per
backend and the patch-embedding convolution per memory format, against float64.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

# name -> what it changes; each knob runs in a process of its own (pattern tables are built once)
KNOBS: dict[str, str] = {
    "default": "Inductor as configured by default",
    "torch-tf32": "torch's TF32 flags as they are (cuDNN may use TF32) instead of the harness's float32",
    "pattern_matcher=False": "no pattern rewrites at all (pre-grad, joint-graph, post-grad)",
    "no_sdpa_rewrite": "all patterns but the attention ones (fuse_attention._sfdp_init skipped)",
    "sdpa_math": "SDPA restricted to the math backend (sdpa_kernel(MATH)) for eager and Inductor",
    "layout_optimization=False": "no channels-last conversion of convolution graphs",
    "cudnn.allow_tf32=False": "cuDNN convolutions without TF32, eager and Inductor",
    "matmul_precision=highest": "torch.set_float32_matmul_precision('highest') (fp32 matmuls, no TF32)",
    "emulate_precision_casts=True": "Inductor rounds intermediates as eager would",
    "shape_padding=False": "no padding of matmul shapes",
    "freezing=True": "parameters folded as constants",
    "fallback_random=True": "eager's RNG",
    "joint_graph_constant_folding=False": "no constant folding in the joint graph",
    "split_reductions=False": "reductions not split across programs",
}


@contextlib.contextmanager
def knob(name: str) -> Iterator[None]:
    """The knob's setting for the duration of one entry's run."""
    import torch
    import torch._inductor.config as inductor_config

    if name in ("default", "torch-tf32"):  # torch-tf32 is run_entry's allow_tf32
        yield
    elif name == "no_sdpa_rewrite":
        import torch._inductor.fx_passes.fuse_attention as fuse_attention

        fuse_attention._sfdp_init = lambda *args, **kwargs: None  # before the first compile of this process
        yield
    elif name == "sdpa_math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            yield
    elif name == "cudnn.allow_tf32=False":  # torch._C's setter: see harness.oracle.working_precision
        saved = torch._C._get_cudnn_allow_tf32()
        torch._C._set_cudnn_allow_tf32(False)
        try:
            yield
        finally:
            torch._C._set_cudnn_allow_tf32(saved)
    elif name == "matmul_precision=highest":
        saved = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved)
    else:
        key, _, value = name.partition("=")
        with inductor_config.patch({key: value == "True"}):
            yield


_WATCHED = ("attention", "convolution", "mm", "bmm", "addmm", "baddbmm", "softmax")


def _op_recorder(seen: set[str]) -> Callable[[Any], None]:
    def record(graph: Any) -> None:
        for node in graph.nodes:
            name = str(node.target).removeprefix("aten.")
            if node.op == "call_function" and any(w in name.split(".")[0] for w in _WATCHED):
                seen.add(name)

    return record


def run_knob(name: str, entry_names: list[str], device: str, base: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """One result row per entry, run under knob ``name`` (on top of the ``base`` knobs) in this process."""
    import torch
    import torch._inductor.config as inductor_config

    from corpus.registry import catalog, select
    from harness.entry_subject import run_entry
    from harness.targets import parse_target

    inductor_config.compile_threads = 1  # knobs run side by side, one process each
    sources = sorted({n.split("/", 1)[0] for n in entry_names})  # listing every source takes seconds
    entries = {e.name: e for e in select(catalog(sources=sources).entries, names=entry_names)}
    target = parse_target("inductor", device)
    for entry_name in entry_names:
        row: dict[str, Any] = {"knob": name, "entry": entry_name}
        entry = entries.get(entry_name)
        if entry is None:
            yield {**row, "status": "unknown entry"}
            continue
        seen: set[str] = set()
        torch._dynamo.reset()
        start = time.monotonic()
        # a plain-function custom pass makes Inductor bypass its FX graph cache: the recorder always runs
        with contextlib.ExitStack() as stack:
            for each in (*base, name):
                stack.enter_context(knob(each))
            stack.enter_context(inductor_config.patch({"post_grad_custom_post_pass": _op_recorder(seen)}))
            result = run_entry(entry, target, allow_tf32="torch-tf32" in (*base, name))
        row.update({k: getattr(result, k) for k in ("rmse_ratio", "max_abs_err", "error")}, status=result.status.value)
        yield {**row, "ops": sorted(seen), "wall_s": round(time.monotonic() - start, 1)}


def _rel_rmse(x: Any, ref: Any) -> float:
    return float(((x.double().cpu() - ref) ** 2).mean().sqrt() / ref.pow(2).mean().sqrt())


def measure_ops(device: str) -> list[dict[str, Any]]:
    """Relative RMSE against float64 of attention per SDPA backend and of a patch-embedding conv."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator().manual_seed(0)
    rows: list[dict[str, Any]] = []
    q, k, v = (torch.randn(2, 4, 65, 16, generator=g) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    qd, kd, vd = (t.to(device) for t in (q, k, v))
    manual = torch.softmax(qd @ kd.transpose(-1, -2) / 4.0, -1) @ vd
    rows.append({"op": "attention as matmul+softmax (eager)", "rel_rmse": _rel_rmse(manual, ref)})
    choice = SDPBackend(torch._fused_sdp_choice(qd, kd, vd)).name  # what eager's SDPA dispatches to
    rows.append({"op": f"sdpa default (picks {choice})",
                 "rel_rmse": _rel_rmse(F.scaled_dot_product_attention(qd, kd, vd), ref)})
    for backend in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION,
                    SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qd, kd, vd)
            rows.append({"op": f"sdpa {backend.name}", "rel_rmse": _rel_rmse(out, ref)})
        except RuntimeError as exc:
            rows.append({"op": f"sdpa {backend.name}", "error": str(exc).splitlines()[0][:80]})
    # the patch embedding of the ViT-family entries at full scale: 16x16 patches of a 224x224 image
    x, w = torch.randn(2, 3, 224, 224, generator=g), torch.randn(32, 3, 16, 16, generator=g) / 16
    ref = F.conv2d(x.double(), w.double(), stride=16)
    for fmt in (torch.contiguous_format, torch.channels_last):
        for tf32 in (False, True):
            # torch._C's setter: torch.backends' property raises once torch's OpInfo utilities
            # are imported (see harness.oracle.working_precision)
            saved = torch._C._get_cudnn_allow_tf32()
            torch._C._set_cudnn_allow_tf32(tf32)
            try:
                out = F.conv2d(x.to(device, memory_format=fmt), w.to(device, memory_format=fmt), stride=16)
            finally:
                torch._C._set_cudnn_allow_tf32(saved)
            rows.append({"op": f"conv2d patch-embed {str(fmt).split('.')[-1]} cudnn.allow_tf32={tf32}",
                         "rel_rmse": _rel_rmse(out, ref)})
    return rows


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3g}"
        if isinstance(value, list):
            return ",".join(value)
        return "" if value is None else str(value)[:90]

    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.minify.knobs", description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="*", help="corpus entry names, e.g. transformers/deit")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--knobs", default=",".join(KNOBS), help="comma-separated names from: " + ", ".join(KNOBS))
    parser.add_argument("--base", default="", help="comma-separated knobs applied to every row, e.g. torch-tf32")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="knobs run side by side")
    parser.add_argument("--deadline-s", type=float, default=None, help="stop waiting after this many seconds")
    parser.add_argument("--ops", action="store_true", help="also measure the kernels alone against float64")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one knob, print JSON rows
    args = parser.parse_args(argv)
    base = tuple(k for k in args.base.split(",") if k)
    if args.one:
        for row in run_knob(args.one, args.entries, args.device, base):
            print("ROW " + json.dumps(row), flush=True)
        return 0
    knobs = [k for k in args.knobs.split(",") if k]
    unknown = [k for k in (*knobs, *base) if k not in KNOBS]
    if unknown:
        parser.error(f"unknown knob(s) {unknown}; known: {', '.join(KNOBS)}")
    if args.ops:
        print(_table(measure_ops(args.device), ["op", "rel_rmse", "error"]), flush=True)
    rows = _run_parallel(knobs, args.entries, args.device, args.jobs, args.deadline_s, base)
    print(_table(rows, ["entry", "knob", "status", "rmse_ratio", "max_abs_err", "ops", "wall_s"]))
    return 0


def _run_parallel(knobs: list[str], entries: list[str], device: str, jobs: int,
                  deadline_s: float | None, base: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    pending, running, rows = list(knobs), {}, []
    deadline = time.monotonic() + deadline_s if deadline_s else None
    while pending or running:
        while pending and len(running) < max(1, jobs):
            name = pending.pop(0)
            running[name] = subprocess.Popen([sys.executable, "-m", "harness.minify.knobs", "--one", name,
                                              "--device", device, "--base", ",".join(base), *entries],
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, proc in list(running.items()):
            if proc.poll() is not None or (deadline and time.monotonic() > deadline):
                if proc.poll() is None:
                    proc.kill()
                out = proc.communicate()[0]
                got = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ROW ")]
                for row in got:
                    print(f"{row['entry']:24s} {name:36s} {row.get('status')} ratio={row.get('rmse_ratio')}",
                          flush=True)
                rows += got
                if len(got) < len(entries):
                    rows.append({"knob": name, "entry": "(rest)", "status": f"exit {proc.returncode}",
                                 "ops": [out.strip().splitlines()[-1][:80]] if out.strip() else []})
                del running[name]
        time.sleep(0.5)
    order = {k: i for i, k in enumerate(knobs)}
    return sorted(rows, key=lambda r: (r["entry"], order.get(r["knob"], 0)))


if __name__ == "__main__":
    sys.exit(main())
