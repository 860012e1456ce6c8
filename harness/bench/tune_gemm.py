"""Time every tile config of the GEMM and attention templates on the GPU, against cuBLAS / SDPA.

    python -m harness.bench.tune_gemm [--shapes square|decode|prefill|all] [--dtype bf16] [--split-k]

For each shape it lowers ``a @ b`` (or SDPA) with ``extern="none"``, renders the template kernel and
times each launch config the tile table offers (``compiler.templates.tiles``), printing TFLOP/s
(GEMM) or ms (attention) next to the ATen kernel. What the table keeps comes from these runs.
``--split-k`` times the deep-K decode GEMMs whole and split into K chunks (``tiles.gemm_split_k``), each
compiled end to end (template and reduction, tuned on the first call) against cuBLAS.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from tabulate import tabulate

from compiler.templates.tiles import tma_candidates


def _template_launcher(fn, args: list, device: torch.device):
    """The rendered template kernel of ``fn(*args)`` and its launcher, plus its argument tensors."""
    from compiler import trace_aten
    from compiler.codegen.registry import renderer_for
    from compiler.lowering import lower
    from compiler.runtime import KernelLauncher
    from compiler.templates.scheduling import schedule
    from compiler.templates.spec import TemplateKernel

    gm = trace_aten(fn, *args)
    renderer = renderer_for("triton", device)
    graph = lower(gm, device, renderer.capabilities, "none")
    sched = schedule(graph, renderer.capabilities)
    kernel = next(s for s in sched.steps if isinstance(s, TemplateKernel))
    rendered = renderer.render(kernel)
    names = {b.name: a for b, a in zip(graph.inputs, args) if b is not None}
    tensors = []
    for name in rendered.args:
        if name in names:
            tensors.append(names[name])
        else:
            buf = sched.buffers[name]
            tensors.append(torch.empty_strided(buf.shape, buf.stride, dtype=buf.dtype, device=device))
    return rendered, KernelLauncher(rendered, interpret=False), tensors


def time_configs(fn, args: list) -> list[tuple[dict, float]]:
    from triton.testing import do_bench

    from compiler.runtime import parallel_map

    rendered, launcher, tensors = _template_launcher(fn, args, args[0].device)
    parallel_map(lambda job: job(), launcher.precompile_jobs([t.dtype for t in tensors]))  # builds at once
    out = []
    for grid, meta in launcher.configs:
        try:
            ms = do_bench(lambda grid=grid, meta=meta: launcher.fn[grid](*tensors, **meta), warmup=10, rep=40,
                          return_mode="median")
        except Exception as why:  # noqa: BLE001  (a config that does not fit the SM: shown, skipped)
            print(f"  config {meta} failed: {type(why).__name__}: {str(why)[:120]}")
            continue
        out.append((meta, float(ms)))
    return out


GEMMS = {
    "square": [(4096, 4096, 4096), (8192, 8192, 8192)],
    # (M, N, K): Llama 1B (hidden 2048, 32 q / 8 kv heads of 64, MLP 8192) and 8B (4096, 32/8 x 128, 14336)
    "decode": [(1, 3072, 2048), (1, 16384, 2048), (1, 2048, 8192), (2, 6144, 4096), (1, 28672, 4096),
               (1, 4096, 14336)],
    "prefill": [(512, 3072, 2048), (512, 16384, 2048), (512, 2048, 8192), (1024, 6144, 4096),
                (512, 28672, 4096), (512, 4096, 14336)],
}


def gemm_rows(shapes: list[tuple[int, int, int]], dtype: torch.dtype, top: int = 3) -> list[list]:
    from triton.testing import do_bench

    rows = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)  # a Linear's weight: b = w.t()
        flops = 2 * m * n * k
        aten_ms = float(do_bench(lambda a=a, w=w: a @ w.t(), warmup=10, rep=40, return_mode="median"))
        results = time_configs(lambda a, w: a @ w.t(), [a, w])
        for meta, ms in sorted(results, key=lambda r: r[1])[:top]:
            cfg = "x".join(str(meta[key]) for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + \
                f" w{meta['num_warps']} s{meta['num_stages']}" + (" persistent" if meta.get("PERSISTENT") else "") + \
                (" tma" if meta.get("TMA") else "")
            rows.append([f"{m}x{n}x{k}", cfg, f"{flops / ms / 1e9:.1f}", f"{flops / aten_ms / 1e9:.1f}",
                         f"{aten_ms / ms:.2f}"])
            print(rows[-1], flush=True)
    return rows


ATTENTION = [  # (B, H, Hkv, L, S, D, causal)
    (1, 32, 8, 512, 512, 64, True), (2, 32, 8, 512, 512, 128, True), (1, 32, 8, 1, 768, 64, False),
    (2, 32, 8, 1, 768, 128, False), (1, 16, 16, 4096, 4096, 128, True),
    # harness.bench.models' calls: GPT-2 and BERT-base (8 x 512 tokens), the ~1B Llama-style decoder
    (8, 12, 12, 512, 512, 64, True), (8, 12, 12, 512, 512, 64, False), (8, 32, 8, 512, 512, 64, True),
]


def _sdpa(causal: bool):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    return fn


def attention_rows(dtype: torch.dtype) -> list[list]:
    from triton.testing import do_bench

    rows = []
    for b, h, hkv, length, keys, d, causal in ATTENTION:
        q = torch.randn(b, h, length, d, device="cuda", dtype=dtype)
        k = torch.randn(b, hkv, keys, d, device="cuda", dtype=dtype)
        v = torch.randn(b, hkv, keys, d, device="cuda", dtype=dtype)

        fn = _sdpa(causal)

        sdpa_ms = float(do_bench(lambda q=q, k=k, v=v, fn=fn: fn(q, k, v), warmup=10, rep=40, return_mode="median"))
        results = time_configs(fn, [q, k, v])
        if not results:
            continue
        meta, ms = min(results, key=lambda r: r[1])
        rows.append([f"{b}x{h}/{hkv}x{length}x{keys}x{d}{' causal' if causal else ''}",
                     f"{meta['BLOCK_M']}x{meta['BLOCK_N']} w{meta['num_warps']} s{meta['num_stages']}",
                     f"{ms * 1e3:.1f}", f"{sdpa_ms * 1e3:.1f}", f"{sdpa_ms / ms:.2f}"])
    return rows


CONVS = [  # (N, C_in, H, W, C_out, kernel, stride, groups): ResNet-50-like layers, a depthwise one
    (32, 64, 56, 56, 64, 3, 1, 1), (32, 256, 56, 56, 64, 1, 1, 1), (32, 128, 28, 28, 128, 3, 1, 1),
    (32, 96, 56, 56, 96, 3, 1, 96),
]


def _conv(stride: int, groups: int, pad: int):
    def fn(x, w):
        return F.conv2d(x, w, stride=stride, padding=pad, groups=groups)

    return fn


def conv_rows(dtype: torch.dtype) -> list[list]:
    from triton.testing import do_bench

    rows = []
    for n, cin, h, w, cout, k, stride, groups in CONVS:
        x = torch.randn(n, cin, h, w, device="cuda", dtype=dtype)
        wt = torch.randn(cout, cin // groups, k, k, device="cuda", dtype=dtype)
        fn = _conv(stride, groups, k // 2)
        aten_ms = float(do_bench(lambda x=x, wt=wt, fn=fn: fn(x, wt), warmup=10, rep=40, return_mode="median"))
        results = time_configs(fn, [x, wt])
        if not results:
            continue
        meta, ms = min(results, key=lambda r: r[1])
        rows.append([f"{n}x{cin}x{h}x{w} -> {cout} k{k} s{stride} g{groups}",
                     "x".join(str(meta[key]) for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K")),
                     f"{ms * 1e3:.0f}", f"{aten_ms * 1e3:.0f}", f"{aten_ms / ms:.2f}"])
    return rows


SPLIT_K_SHAPES = [(1, 2048, 8192), (1, 4096, 14336), (2, 4096, 14336)]


def split_k_rows(dtype: torch.dtype, splits: tuple[int, ...] = (1, 4, 7, 8, 16)) -> list[list]:
    """us per call of ``x @ w.t() + x0`` (a residual add, as the down projection's): cuBLAS in eager,
    then the CUDA-free compile for each split dividing K (the rule's choice marked)."""
    from triton.testing import do_bench

    from compiler.templates.tiles import forced_split_k, gemm_split_k

    rows = []
    for m, n, k in SPLIT_K_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        res = torch.randn(m, n, device="cuda", dtype=dtype)

        def fn(a, w, res):
            return a @ w.t() + res

        aten_us = 1e3 * float(do_bench(lambda args=(a, w, res): fn(*args), warmup=10, rep=50, return_mode="median"))
        rule = gemm_split_k(m, n, k, interpret=False)
        for s in (x for x in splits if k % x == 0):
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend="crucible", options={"extern": "none"}, dynamic=False)
            with forced_split_k(s):
                compiled(a, w, res)  # compiles and tunes
            us = 1e3 * float(do_bench(lambda c=compiled, args=(a, w, res): c(*args), warmup=10, rep=50, return_mode="median"))
            rows.append([f"{m}x{n}x{k}", f"{s}{' (rule)' if s == rule else ''}", f"{us:.1f}", f"{aten_us:.1f}",
                         f"{aten_us / us:.2f}"])
            print(rows[-1], flush=True)  # (a row per compile: a run cut short still says something)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="all", choices=[*GEMMS, "all", "none"])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--attention", action="store_true", help="also time the attention template")
    parser.add_argument("--conv", action="store_true", help="also time the convolution template")
    parser.add_argument("--split-k", action="store_true", help="also time split-K on the deep-K decode GEMMs")
    parser.add_argument("--tma", action="store_true", help="GEMM candidates also with tensor-descriptor loads")
    parser.add_argument("--top", type=int, default=3, help="GEMM configs shown per shape, fastest first")
    args = parser.parse_args(argv)
    import compiler  # noqa: F401  (registers the backend)

    if not torch.cuda.is_available():
        raise SystemExit("tune_gemm needs a CUDA GPU")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    shapes = [s for key in GEMMS for s in GEMMS[key]] if args.shapes == "all" else GEMMS.get(args.shapes, [])
    if args.tma:
        import triton

        # device-side tensor descriptors take their scratch memory from this allocator
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    if shapes:
        with tma_candidates(args.tma):
            rows = gemm_rows(shapes, dtype, args.top)
        print(tabulate(rows, headers=["M x N x K", "tile", "template TFLOP/s",
                                                          "cuBLAS TFLOP/s", "vs cuBLAS"]), flush=True)
    if args.attention:
        print(tabulate(attention_rows(dtype), headers=["attention", "tile", "template us", "SDPA us",
                                                        "vs SDPA"]), flush=True)
    if args.split_k:
        print(tabulate(split_k_rows(dtype), headers=["M x N x K", "splits", "template us", "cuBLAS us",
                                                     "vs cuBLAS"]), flush=True)
    if args.conv:
        print(tabulate(conv_rows(dtype), headers=["convolution", "tile", "template us", "cuDNN us", "vs cuDNN"]),
              flush=True)


if __name__ == "__main__":
    main()
