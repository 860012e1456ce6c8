"""Variable-length workloads: models whose callers change the input sizes from call to call.

Each entry carries its own size schedule (``Built.sizes``): the inputs of every call a real caller
makes, in order. ``crucible run --suite dynamic --dynamic`` runs and grades each call and counts the
graphs compiled after the first (``recompiles``), so a compiler that specializes on a length shows
here as recompiles rather than as a pass; without ``--dynamic`` each entry runs its first call only.

- ``dynamic/bert_encoder_lengths``: a BERT-style encoder (embeddings, post-norm attention blocks
  with a padding mask) at eight sequence lengths, as a server batching requests of varying length.
- ``dynamic/causal_lm_prefill``: a Llama-style decoder (RMS norm, gated SiLU MLP, causal attention)
  over prompts of six lengths.
- ``dynamic/llm_decode_kv_cache``: the same decoder generating 64 tokens one at a time with a
  growing KV cache. Each step's inputs are what the loop hands the model at that step: the token,
  its position, and the cache as the decoder's own prefill built it (taken once, in eager, from the
  full sequence, so a step's grading does not depend on the compiled previous steps).
- ``dynamic/detection_filter``: a detection-style head that keeps the boxes whose score passes a
  threshold (a data-dependent size: Dynamo breaks the graph there) and refines the kept boxes;
  calls with 32 to 96 anchors and 3 to 40 kept boxes.

Sizes start above 1 (Dynamo specializes sizes 0 and 1, which would count as a recompile on every
compiler) and stay within the position tables. The small scale (CPU, interpreter) uses short
lengths and a narrow model; the full scale (GPU) realistic ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from corpus.entry import Built, Entry, SizedInputs

DECODE_STEPS = 64
PREFILL = 4  # the prompt the decode loop starts from (cache length PREFILL at the first step)


def _dims(scale: str) -> dict[str, int]:
    if scale == "full":
        return {"hidden": 256, "heads": 4, "layers": 4, "vocab": 1000, "positions": 1024, "batch": 8}
    return {"hidden": 32, "heads": 2, "layers": 2, "vocab": 100, "positions": 128, "batch": 2}


class EncoderBlock(nn.Module):
    """Post-norm self-attention and GELU MLP, as BERT's layers."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads) + bias
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
        x = self.norm1(x + self.out(attn))
        return self.norm2(x + self.mlp(x))


class BertLikeEncoder(nn.Module):
    """Token and position embeddings, then encoder blocks; padded positions masked out."""

    def __init__(self, hidden: int, heads: int, layers: int, vocab: int, positions: int) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.blocks = nn.ModuleList(EncoderBlock(hidden, heads) for _ in range(layers))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(pos))
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -1e4
        for block in self.blocks:
            x = block(x, bias)
        return x


class RMSNorm(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class DecoderBlock(nn.Module):
    """Pre-norm causal attention over a KV cache and a gated SiLU MLP, as Llama's layers."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(hidden, 2 * hidden, bias=False), nn.Linear(hidden, 2 * hidden, bias=False)
        self.down = nn.Linear(2 * hidden, hidden, bias=False)
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        return x.view(b, t, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.norm1(x)
        q = self.split(self.q(h))
        k = torch.cat([k_cache, self.split(self.k(h))], dim=2)
        v = torch.cat([v_cache, self.split(self.v(h))], dim=2)
        t, total = q.shape[2], k.shape[2]
        # query i (at position total - t + i) sees keys up to its own position
        rows = torch.arange(t, device=x.device)[:, None] + (total - t)
        causal = torch.arange(total, device=x.device)[None, :] <= rows
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(x.shape))
        x = x + self.down(nn.functional.silu(self.gate(self.norm2(x))) * self.up(self.norm2(x)))
        return x, k, v


class TinyLlama(nn.Module):
    """A decoder over a KV cache: ``(ids, start, k_cache, v_cache) -> (logits, k_cache, v_cache)``;
    ``start`` (a one-element tensor, so its value is data, not a specialized constant) is the
    position of ``ids``'s first token; the caches are ``[layers, batch, heads, length, head_dim]``."""

    def __init__(self, hidden: int, heads: int, layers: int, vocab: int, positions: int) -> None:
        super().__init__()
        self.embed, self.positions = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
        self.blocks = nn.ModuleList(DecoderBlock(hidden, heads) for _ in range(layers))
        self.norm, self.head = RMSNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def empty_cache(self, batch: int) -> torch.Tensor:
        block = self.blocks[0]
        hidden = self.embed.embedding_dim
        return torch.zeros(len(self.blocks), batch, block.heads, 0, hidden // block.heads)

    def forward(self, ids: torch.Tensor, start: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pos = start + torch.arange(ids.shape[1], device=ids.device)
        x = self.embed(ids) + self.positions(pos)
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, k_cache[i], v_cache[i])
            ks.append(k)
            vs.append(v)
        return self.head(self.norm(x)), torch.stack(ks), torch.stack(vs)


def bert_encoder_lengths(scale: str) -> Built:
    d = _dims(scale)
    model = BertLikeEncoder(d["hidden"], d["heads"], d["layers"], d["vocab"], d["positions"]).eval()
    lengths = (64, 96, 128, 160, 192, 256, 384, 512) if scale == "full" else (8, 12, 16, 20, 24, 32, 40, 48)
    calls = []
    for t in lengths:
        ids = torch.randint(0, d["vocab"], (d["batch"], t))
        mask = torch.ones(d["batch"], t, dtype=torch.long)
        mask[0, t - t // 4:] = 0  # the first sequence padded by a quarter
        calls.append(SizedInputs(d["batch"], t, (ids, mask)))
    return Built(model, calls[0].inputs, sizes=tuple(calls))


def _decoder(scale: str) -> tuple[TinyLlama, dict[str, int]]:
    d = _dims(scale)
    return TinyLlama(d["hidden"], d["heads"], d["layers"], d["vocab"], d["positions"]).eval(), d


def causal_lm_prefill(scale: str) -> Built:
    model, d = _decoder(scale)
    lengths = (32, 64, 128, 256, 384, 512) if scale == "full" else (6, 10, 16, 24, 32, 48)
    empty = model.empty_cache(d["batch"])
    calls = tuple(SizedInputs(d["batch"], t, (torch.randint(0, d["vocab"], (d["batch"], t)), torch.tensor([0]),
                                              empty, empty)) for t in lengths)
    return Built(model, calls[0].inputs, sizes=calls)


def llm_decode_kv_cache(scale: str) -> Built:
    model, d = _decoder(scale)
    ids = torch.randint(0, d["vocab"], (d["batch"], PREFILL + DECODE_STEPS))
    empty = model.empty_cache(d["batch"])
    with torch.no_grad():  # the caches the loop would hold: one eager prefill over the whole sequence
        _, k, v = model(ids, torch.tensor([0]), empty, empty)
    calls = tuple(SizedInputs(d["batch"], t, (ids[:, t:t + 1], torch.tensor([t]), k[:, :, :, :t].contiguous(),
                                              v[:, :, :, :t].contiguous()))
                  for t in range(PREFILL, PREFILL + DECODE_STEPS))
    return Built(model, calls[0].inputs, sizes=calls)


class DetectionFilter(nn.Module):
    """Scores and boxes from a convolutional head; the boxes above a threshold (a data-dependent
    count) are refined by an MLP and returned with the kept scores."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten())
        self.refine = nn.Sequential(nn.Linear(4 + channels, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, image: torch.Tensor, scores: torch.Tensor, boxes: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        feature = self.head(image)[0]
        keep = scores > 0.5
        kept, kept_scores = boxes[keep], scores[keep]
        inputs = torch.cat([kept, feature.expand(kept.shape[0], -1)], dim=1)
        return kept + self.refine(inputs), kept_scores.sigmoid()


def detection_filter(scale: str) -> Built:
    side = 64 if scale == "full" else 16
    calls = []
    for anchors, kept in ((32, 3), (48, 10), (64, 17), (96, 40)):
        scores = torch.rand(anchors) * 0.5  # below the threshold ...
        scores[torch.randperm(anchors)[:kept]] += 0.5  # ... but for ``kept`` of them
        calls.append(SizedInputs(1, None, (torch.randn(1, 3, side, side), scores, torch.rand(anchors, 4)),
                                 label=f"{anchors} anchors, {kept} kept"))
    return Built(DetectionFilter().eval(), calls[0].inputs, sizes=tuple(calls))


_FACTORIES: dict[str, tuple[Callable[[str], Built], str, str]] = {
    "bert_encoder_lengths": (bert_encoder_lengths, "text", "a BERT-style encoder at eight sequence lengths"),
    "causal_lm_prefill": (causal_lm_prefill, "text", "a Llama-style decoder over prompts of six lengths"),
    "llm_decode_kv_cache": (llm_decode_kv_cache, "text",
                            f"{DECODE_STEPS} decode steps of a Llama-style decoder with a growing KV cache"),
    "detection_filter": (detection_filter, "detection", "boxes kept by a score threshold (a data-dependent count)"),
}


def entries() -> list[Entry]:
    return [Entry(name=f"dynamic/{name}", source="dynamic", family=family, factory=factory, tier="nightly-cpu",
                  tags=frozenset(("dynamic", family)), eager_ms=5.0, description=description)
            for name, (factory, family, description) in _FACTORIES.items()]
