"""Which attention kernel SDPA picks on this GPU, for real tensors and for the fake tensors that
AOTAutograd traces with, and why the fused ones are refused.

    python -m harness.bench.sdpa_choice

On the H200, BERT-base bf16 compiled by Crucible held SDPA's math decomposition (float32 ``bmm``
and softmax, 2.85 ms of a 5.07 ms call) while GPT-2's graph kept one cuDNN attention call per
layer (``harness/bench/RESULTS.md``). This prints, per case (BERT's and GPT-2's query/key/value
layouts at 8 x 512 tokens, and a dense one): ``torch._fused_sdp_choice`` for real and fake tensors,
the refusal reasons of each fused backend (``can_use_*(debug=True)`` warnings), and which attention
op a small BERT and GPT-2 traced with Crucible's decompositions hold.
"""

from __future__ import annotations

import warnings

import torch

CASES = {  # (name, qkv storage width per token): BERT's separate projections, GPT-2's fused one
    "bert (3 linears)": (768, None), "gpt2 (fused qkv)": (2304, None), "dense": (None, None),
    "gpt2 + [B,1,L,L] mask": (2304, "mask"),
}


def _qkv(width: int | None, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Query, key, value [8, 12, 512, 64] as the models' projections lay them out."""
    b, h, length, d = 8, 12, 512, 64
    if width is None:
        return tuple(torch.randn(b, h, length, d, device="cuda", dtype=dtype) for _ in range(3))
    bases = [torch.randn(b, length, width, device="cuda", dtype=dtype) for _ in range(3 if width == 768 else 1)]
    slices = list(bases) if width == 768 else [bases[0][..., i * 768:(i + 1) * 768] for i in range(3)]
    return tuple(t.view(b, length, h, d).transpose(1, 2) for t in slices)


def _choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> str:
    try:
        return torch.nn.attention.SDPBackend(torch._fused_sdp_choice(q, k, v, mask, 0.0, False, scale=0.125)).name
    except Exception as why:  # noqa: BLE001  (a refusal is the answer)
        return f"error {type(why).__name__}: {str(why)[:120]}"


def _refusals(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> list[str]:
    params = torch.backends.cuda.SDPAParams(q, k, v, mask, 0.0, False, False)
    lines = []
    for name in ("can_use_cudnn_attention", "can_use_flash_attention", "can_use_efficient_attention"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ok: object = getattr(torch.backends.cuda, name)(params, True)
            except Exception as why:  # noqa: BLE001
                ok = f"error {type(why).__name__}"
        lines.append(f"  {name}: {ok} {'; '.join(str(w.message)[:160] for w in caught)}")
    return lines


def _traced_attention_ops(family: str) -> str:
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.decompositions import decomposition_table_for_compiler

    if family == "bert":
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig(hidden_size=128, num_attention_heads=2, num_hidden_layers=1,
                                     intermediate_size=256), add_pooling_layer=False)
    else:
        from transformers import GPT2Config, GPT2Model

        model = GPT2Model(GPT2Config(n_embd=128, n_head=2, n_layer=1))
    model = model.eval().requires_grad_(False).cuda().to(torch.bfloat16)
    ids = torch.randint(0, 100, (2, 64), device="cuda")
    with torch.no_grad():
        gm = make_fx(lambda i: model(input_ids=i, use_cache=False, return_dict=False)[0],
                     decomposition_table=decomposition_table_for_compiler(), tracing_mode="fake",
                     _allow_non_fake_inputs=True)(ids)
    ops = sorted({str(n.target) for n in gm.graph.nodes if "attention" in str(n.target) or "bmm" in str(n.target)})
    return ", ".join(ops) or "none"


def _dynamo_sdpa_args() -> list[str]:
    """The SDPA calls of the benchmark's BERT-base bf16 as Dynamo hands them to a backend (mask,
    strides, flags), and each fused backend's verdict on them for real and for fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from harness.bench.zoo import MODELS

    model, inputs = MODELS["bert_base"].build(torch.bfloat16, "cuda", False)
    calls: list = []

    def record(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        for n in gm.graph.nodes:
            if n.op == "call_function" and "scaled_dot_product" in str(n.target) and not calls:
                calls.append(n)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=record)(*inputs)
    if not calls:
        return ["dynamo bert: no scaled_dot_product_attention call in the captured graphs"]
    node = calls[0]

    def real(a: object) -> object:
        val = a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a
        if isinstance(val, torch.Tensor):
            return torch.randn(val.shape, device="cuda", dtype=val.dtype).as_strided(val.shape, val.stride()) \
                if val.dtype.is_floating_point else torch.ones(val.shape, dtype=val.dtype, device="cuda")
        return val

    args = [real(a) for a in node.args]
    kwargs = {k: real(v) for k, v in node.kwargs.items()}
    desc = [f"{tuple(t.shape)} {t.stride()} {t.dtype}" if isinstance(t, torch.Tensor) else repr(t)
            for t in [*args, *kwargs.values()]]
    lines = [f"dynamo bert: {node.target} args {desc} kwargs {list(kwargs)}"]
    q, k, v = args[:3]
    mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
    lines.append(f"  real choice {_choice(q, k, v, mask)}")
    lines += _refusals(q, k, v, mask)
    mode = FakeTensorMode()
    fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
    fmask = mode.from_tensor(mask) if isinstance(mask, torch.Tensor) else None
    with mode:
        lines.append(f"  fake choice {_choice(fq, fk, fv, fmask)}")
        lines += [f"  fake {line.strip()}" for line in _refusals(fq, fk, fv, fmask)]
    return lines


def main() -> int:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    from torch._subclasses.fake_tensor import FakeTensorMode

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for name, (width, mask_kind) in CASES.items():
        q, k, v = _qkv(width, torch.bfloat16)
        mask = torch.zeros(8, 1, 512, 512, device="cuda", dtype=torch.bfloat16) if mask_kind else None
        mode = FakeTensorMode()
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fmask = mode.from_tensor(mask) if mask is not None else None
        with mode:
            fake = _choice(fq, fk, fv, fmask)
        print(f"{name}: q stride {q.stride()}: real {_choice(q, k, v, mask)}, fake {fake}")
        print("\n".join(_refusals(q, k, v, mask)))
        with mode:
            print("\n".join(f"  fake {line.strip()}" for line in _refusals(fq, fk, fv, fmask)))
    try:
        print("\n".join(_dynamo_sdpa_args()))
    except Exception as why:  # noqa: BLE001
        print(f"dynamo bert: failed {type(why).__name__}: {str(why)[:300]}")
    for family in ("bert", "gpt2"):
        try:
            print(f"traced {family}: {_traced_attention_ops(family)}")
        except Exception as why:  # noqa: BLE001
            print(f"traced {family}: failed {type(why).__name__}: {str(why)[:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
