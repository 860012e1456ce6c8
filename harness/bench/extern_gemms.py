"""The GEMM rewrites of ``compiler.extern_passes``, measured side by side on the GPU.

    python -m harness.bench.extern_gemms [--dtype bf16]

Per case: the library calls as the graph would make them, the rewritten call, and the ratio
(old / new; above 1 means the rewrite pays). Cases are the transformer shapes of
``harness.bench.models`` (8 x 512 tokens, and 8 rows for decode):

- ``pad``: GPT-2's LM head, N = 50257 (no 16-byte aligned leading dimension for cuBLAS), against
  the weight padded to a multiple of 8 columns plus the copy of the sliced result into a dense one;
- ``concat``: the Q, K, V (BERT, Llama with grouped KV heads) and gate/up (Llama) projections as
  separate GEMMs against one GEMM over the concatenated weight;
- ``epilogue``: ``addmm`` then a separate activation against ``_addmm_activation`` (cuBLASLt's
  bias + activation epilogue);
- ``bias``: ``addmm`` (cuBLASLt's bias epilogue) against ``mm`` alone, the bias left to the kernel
  that reads the result anyway (``compiler.lowerings.library``: there the add costs nothing).

Nothing here asserts; the rules in ``compiler.extern_passes`` cite these numbers.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F

TOKENS, DECODE = 8 * 512, 8


def _ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=5, rep=40, return_mode="median"))


def _linear(n: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5  # nn.Linear's [out, in] weight


def pad_case(m: int, dtype: torch.dtype) -> tuple[float, float]:
    k, n = 768, 50257
    x, w = torch.randn(m, k, device="cuda", dtype=dtype), _linear(n, k, dtype)
    padded = torch.zeros(n + (-n) % 8, k, device="cuda", dtype=dtype)
    padded[:n] = w
    old = _ms(lambda: torch.mm(x, w.t()))
    new = _ms(lambda: torch.mm(x, padded.t())[:, :n].contiguous())
    return old, new


def concat_case(m: int, k: int, ns: tuple[int, ...], dtype: torch.dtype, bias: bool) -> tuple[float, float]:
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    ws = [_linear(n, k, dtype) for n in ns]
    bs = [torch.randn(n, device="cuda", dtype=dtype) for n in ns]
    wcat, bcat = torch.cat(ws), torch.cat(bs)
    if bias:
        old = _ms(lambda: [torch.addmm(b, x, w.t()) for w, b in zip(ws, bs)])
        new = _ms(lambda: torch.addmm(bcat, x, wcat.t()).split(ns, 1))
    else:
        old = _ms(lambda: [torch.mm(x, w.t()) for w in ws])
        new = _ms(lambda: torch.mm(x, wcat.t()).split(ns, 1))
    return old, new


def epilogue_case(m: int, k: int, n: int, dtype: torch.dtype, gelu: bool, conv1d: bool) -> tuple[float, float]:
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(k, n, device="cuda", dtype=dtype) / k ** 0.5 if conv1d else _linear(n, k, dtype).t()
    b = torch.randn(n, device="cuda", dtype=dtype)
    act = (lambda t: F.gelu(t, approximate="tanh")) if gelu else torch.relu
    old = _ms(lambda: act(torch.addmm(b, x, w)))
    new = _ms(lambda: torch.ops.aten._addmm_activation(b, x, w, use_gelu=gelu))
    return old, new


def bias_case(m: int, k: int, n: int, dtype: torch.dtype) -> tuple[float, float]:
    x, w = torch.randn(m, k, device="cuda", dtype=dtype), _linear(n, k, dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    return _ms(lambda: torch.addmm(b, x, w.t())), _ms(lambda: torch.mm(x, w.t()))


# (label, K, N) of the benchmark models' prefill linears (vit_base's 32 x 197 tokens too)
LINEARS = (("bert/vit attn out", 768, 768), ("bert/vit mlp up", 768, 3072), ("bert/vit mlp down", 3072, 768),
           ("bert qkv", 768, 2304), ("llama-1b qkv", 2048, 3072), ("llama-1b down", 8192, 2048))


def cases(dtype: torch.dtype) -> list[tuple[str, Callable[[], tuple[float, float]]]]:
    out: list[tuple[str, Callable[[], tuple[float, float]]]] = []
    for m in (TOKENS, DECODE):
        out.append((f"pad gpt2 lm_head M={m} K=768 N=50257->50264", lambda m=m: pad_case(m, dtype)))
        for label, k, ns, bias in (("bert qkv", 768, (768,) * 3, True),
                                   ("llama qkv", 2048, (2048, 512, 512), False),
                                   ("llama gate/up", 2048, (5632, 5632), False)):
            out.append((f"concat {label} M={m} K={k} N={'+'.join(map(str, ns))}",
                        lambda m=m, k=k, ns=ns, bias=bias: concat_case(m, k, ns, dtype, bias)))
        for label, k, n, gelu, conv1d in (("gpt2 mlp gelu(tanh)", 768, 3072, True, True),
                                          ("mlp relu", 768, 3072, False, False)):
            out.append((f"epilogue {label} M={m} K={k} N={n}",
                        lambda m=m, k=k, n=n, gelu=gelu, conv1d=conv1d: epilogue_case(m, k, n, dtype, gelu, conv1d)))
    for m in (TOKENS, 32 * 197):
        for label, k, n in LINEARS:
            out.append((f"bias {label} M={m} K={k} N={n}", lambda m=m, k=k, n=n: bias_case(m, k, n, dtype)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.extern_gemms",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--only", default="", help="cases whose label starts with this (pad, concat, epilogue, bias)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (the rewrites are about cuBLAS)")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    print(f"{'case':<58} {'before ms':>10} {'after ms':>10} {'ratio':>7}")
    for label, run in cases(dtype):
        if not label.startswith(args.only):
            continue
        old, new = run()
        print(f"{label:<58} {old:>10.4f} {new:>10.4f} {old / new:>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
