"""LLM benchmark: a Llama-style decoder (random weights from a config), prefill and decode tokens/s
for eager, Inductor, Inductor max-autotune, Crucible default and Crucible CUDA-free
(``extern="none"``), plus the per-op template microbenchmarks of ``harness.bench.tune_gemm``.

    python -m harness.bench.llm [--quick] [--models 1b,8b] [--layers N] [--dtypes bf16,fp16]
                                 [--batches 1,2] [--backends ...] [--max-autotune] [--ops] [--deadline S]

Prefill runs ``--prompt`` tokens (512) with causal attention. Decode runs one token per sequence
against a fixed-size key/value cache of prompt + ``--decode`` positions (768) under an additive mask
of the valid prefix (one static shape, so one compile for every step); its tokens/s is batch / step
time at a half-full cache. The cache write of the new token is left out (one small copy per layer).
Layers default to 2 (8B at full depth needs 16 GB per dtype and minutes of compiles per backend);
tokens/s scales with depth, and ``--layers`` says how many ran. Inductor max-autotune (its compiles
take minutes) runs only with ``--max-autotune`` or when ``--backends`` names it. Each row gives the
wall time of its first prefill and decode call (compiles and tuning); after the table, a line per
model, dtype and batch compares CUDA-free decode with the faster of eager and the cuBLAS path. Needs a
CUDA GPU.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import compiler


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    layers: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


CONFIGS = {  # Llama 3.2 1B and Llama 3.1 8B layer shapes
    "1b": LlamaConfig(hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256, layers=16),
    "8b": LlamaConfig(hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, layers=32),
}
# crucible-aten: every matmul/attention an ATen call (extern="all", the cuBLAS path); crucible: the
# default rule; crucible-cuda-free: extern="none"
BACKENDS = ("eager", "inductor", "inductor-max-autotune", "crucible-aten", "crucible", "crucible-cuda-free")
DEFAULT_BACKENDS = tuple(b for b in BACKENDS if b != "inductor-max-autotune")


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.c = c
        d = c.head_dim
        self.norm1, self.norm2 = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.qkv = nn.Linear(c.hidden, (c.heads + 2 * c.kv_heads) * d, bias=False)
        self.wo = nn.Linear(c.heads * d, c.hidden, bias=False)
        self.gate_up = nn.Linear(c.hidden, 2 * c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: tuple | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        c, (b, length, _) = self.c, x.shape
        d = c.head_dim
        q, k, v = self.qkv(self.norm1(x)).split([c.heads * d, c.kv_heads * d, c.kv_heads * d], dim=-1)
        q = rotate(q.view(b, length, c.heads, d).transpose(1, 2), cos, sin)
        k = rotate(k.view(b, length, c.kv_heads, d).transpose(1, 2), cos, sin)
        v = v.view(b, length, c.kv_heads, d).transpose(1, 2)
        if cache is None:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode: the new token against the cache (its own position included through the mask)
            attn = F.scaled_dot_product_attention(q, cache[0], cache[1], attn_mask=mask, enable_gqa=True)
        x = x + self.wo(attn.transpose(1, 2).reshape(b, length, c.heads * d))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: list | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, caches[i] if caches is not None else None, mask)
        return self.lm_head(self.norm(x[:, -1:]))


def compiled(model: nn.Module, backend: str):
    import torch._dynamo

    torch._dynamo.reset()
    if backend == "eager":
        return model
    # dynamic=False: prefill and decode are two static shapes; without it Dynamo's second compile makes
    # sizes symbolic, which Crucible does not compile (that graph would run in eager)
    if backend == "inductor":
        return torch.compile(model, dynamic=False)
    if backend == "inductor-max-autotune":
        return torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=False)
    extern = {"crucible-cuda-free": "none", "crucible-aten": "all"}.get(backend, "default")
    return torch.compile(model, backend="crucible", options={"extern": extern}, dynamic=False)


def time_ms(fn) -> float:
    from triton.testing import do_bench

    from compiler.tuning import finish_tuning

    fn()
    finish_tuning()  # Crucible's deferred launch configs (compiler/tuning.py), timed in the warm-up
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def bench_model(name: str, c: LlamaConfig, dtype: torch.dtype, batches: list[int], backends: list[str],
                prompt: int, decode: int, deadline: float = math.inf) -> list[list]:
    """One row per (batch, backend); rows not started by ``deadline`` (``time.monotonic()``) are skipped."""
    torch.manual_seed(0)
    model = Decoder(c).to("cuda", dtype).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.02)
    rows = []
    d, total = c.head_dim, prompt + decode
    angles = torch.arange(total, device="cuda")[:, None] * (10000 ** (-torch.arange(0, d, 2, device="cuda") / d))
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(dtype)
    for b in batches:
        x = torch.randn(b, prompt, c.hidden, device="cuda", dtype=dtype) * 0.1
        tok = torch.randn(b, 1, c.hidden, device="cuda", dtype=dtype) * 0.1
        caches = [(torch.randn(b, c.kv_heads, total, d, device="cuda", dtype=dtype) * 0.1,
                   torch.randn(b, c.kv_heads, total, d, device="cuda", dtype=dtype) * 0.1) for _ in range(c.layers)]
        pos = prompt + decode // 2
        mask = torch.full((1, 1, 1, total), -math.inf, device="cuda", dtype=dtype)
        mask[..., :pos + 1] = 0
        prefill_args = (x, cos[:prompt], sin[:prompt])
        decode_args = (tok, cos[pos:pos + 1], sin[pos:pos + 1], caches, mask)
        for backend in backends:
            if time.monotonic() > deadline:
                print(f"  {name} {dtype} batch {b} {backend}: skipped (--deadline)", flush=True)
                continue
            try:
                fn = compiled(model, backend)
                start = time.perf_counter()
                with torch.no_grad(), compiler.collect_reports() as report:
                    fn(*prefill_args)  # compiles (the report counts what each graph became)
                    fn(*decode_args)
                torch.cuda.synchronize()
                first = time.perf_counter() - start
                with torch.no_grad():
                    pre = time_ms(lambda fn=fn, a=prefill_args: fn(*a))
                    step = time_ms(lambda fn=fn, a=decode_args: fn(*a))
                made = ""
                for graph in report.fallbacks:
                    print(f"  {backend}: graph {graph.graph_id} ran in eager ({graph.failed_pass}): "
                          f"{graph.fallback_message[:300]}", flush=True)
                if backend.startswith("crucible"):
                    made = (f"{sum(k.kind.startswith('template') for k in report.kernels)} templates, "
                            f"{len(report.externs)} externs, {len(report.fallbacks)} eager graphs")
                rows.append([name, c.layers, str(dtype).replace("torch.", ""), b, backend,
                             f"{b * prompt / pre * 1e3:.0f}", f"{b / step * 1e3:.0f}", f"{step:.3f}", f"{first:.1f}",
                             made])
            except Exception as why:  # noqa: BLE001  (one backend failing is a row, not the end of the table)
                rows.append([name, c.layers, str(dtype).replace("torch.", ""), b, backend, "failed", "failed",
                             "", "", f"{type(why).__name__}: {str(why).splitlines()[0][:80]}"])
            print(rows[-1], flush=True)
    del model
    torch.cuda.empty_cache()
    return rows


def decode_ratios(rows: list[list]) -> list[str]:
    """Per (model, dtype, batch): CUDA-free decode tok/s over the faster of eager, crucible-aten and the
    default rule (the cuBLAS/cuDNN path; the issue's target is >= 0.9x)."""
    decode: dict[tuple, dict[str, float]] = {}
    for name, _, dtype, batch, backend, _, tok, *_ in rows:
        if tok != "failed":
            decode.setdefault((name, dtype, batch), {})[backend] = float(tok)
    lines = []
    for (name, dtype, batch), got in decode.items():
        library = {b: got[b] for b in ("eager", "crucible-aten", "crucible") if b in got}
        if "crucible-cuda-free" in got and library:
            best = max(library, key=library.get)
            lines.append(f"{name} {dtype} batch {batch}: CUDA-free decode {got['crucible-cuda-free'] / library[best]:.2f}x "
                         f"{best} (the faster cuBLAS-path row)")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1B, 2 layers, bf16, batch 1")
    parser.add_argument("--models", default="1b,8b")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers per model (shapes are per layer)")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--batches", default="1,2")
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS))
    parser.add_argument("--max-autotune", action="store_true", help="add Inductor max-autotune (slow compiles)")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--decode", type=int, default=256)
    parser.add_argument("--ops", action="store_true", help="also the per-op template microbenchmarks")
    parser.add_argument("--deadline", type=float, default=math.inf,
                        help="seconds after which no further row starts (the table so far is printed)")
    args = parser.parse_args(argv)
    from tabulate import tabulate

    if not torch.cuda.is_available():
        raise SystemExit("harness.bench.llm needs a CUDA GPU (see --help)")
    models, dtypes, batches = args.models.split(","), args.dtypes.split(","), [int(b) for b in args.batches.split(",")]
    if args.quick:
        models, dtypes, batches = ["1b"], ["bf16"], [1]
    backends = args.backends.split(",")
    if args.max_autotune and "inductor-max-autotune" not in backends:
        backends.append("inductor-max-autotune")
    unknown = set(backends) - set(BACKENDS) or set(models) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown {sorted(unknown)}; backends: {', '.join(BACKENDS)}; models: {', '.join(CONFIGS)}")
    deadline = time.monotonic() + args.deadline
    rows = []
    for name in models:
        c = CONFIGS[name]
        c = LlamaConfig(c.hidden, c.heads, c.kv_heads, c.ffn, c.vocab, min(args.layers, c.layers))
        for dt in dtypes:
            rows += bench_model(name, c, torch.bfloat16 if dt == "bf16" else torch.float16, batches, backends,
                                args.prompt, args.decode, deadline)
    print(tabulate(rows, headers=["model", "layers", "dtype", "batch", "backend", "prefill tok/s",
                                  "decode tok/s", "decode step ms", "first calls s", "compiled as"]))
    for line in decode_ratios(rows):
        print(line)
    if args.ops:
        from harness.bench import tune_gemm

        tune_gemm.main(["--shapes", "all", "--attention"])


if __name__ == "__main__":
    main()
