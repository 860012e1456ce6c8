"""The models of ``harness.bench.models``: timm vision nets and transformers language models,
built from their configs with random weights (nothing is downloaded), each with its inputs.

Full size is what the GPU issue measures (batch 32 at 224 px, or 8 sequences of 512 tokens);
``tiny`` swaps each for a stand-in of the same family that compiles in seconds on a CPU (timm's
``test_*`` models, two-layer transformer configs), for smoke checks of the benchmark itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "timm" | "transformers"
    tiny_name: str  # the stand-in built with ``tiny``

    def build(self, dtype: torch.dtype, device: str, tiny: bool, train: bool = False) -> tuple[torch.nn.Module, tuple]:
        """The model in inference mode (eval, no grad needed) and its example inputs; with ``train``,
        in training mode with gradients and every dropout off (a training step is then deterministic,
        so compiled steps can be compared with eager's)."""
        maker = _timm if self.family == "timm" else _TRANSFORMERS[self.name]
        with torch.device(device):  # weights initialized where they run (a ~1B model on a CPU core: seconds)
            model, inputs = maker(self, tiny)
        if train:
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
            for attr in ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout"):
                config = getattr(getattr(model, "model", None), "config", None)
                if config is not None and hasattr(config, attr):
                    setattr(config, attr, 0.0)
            for module in model.modules():  # attention modules keep their own copy of the rate
                for attr in ("dropout_prob", "attention_dropout"):
                    if isinstance(getattr(module, attr, None), float):
                        setattr(module, attr, 0.0)
            return model.train().requires_grad_(True).to(device=device, dtype=dtype), \
                tuple(t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype) for t in inputs)
        model = model.eval().requires_grad_(False).to(device=device, dtype=dtype)
        inputs = tuple(t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype) for t in inputs)
        return model, inputs


VISION = ("resnet50", "mobilenetv3_large_100", "efficientnet_b0", "convnext_tiny", "vit_base_patch16_224",
          "swin_tiny_patch4_window7_224")
TINY_VISION = {"resnet50": "test_resnet", "mobilenetv3_large_100": "test_efficientnet",
               "efficientnet_b0": "test_efficientnet_evos", "convnext_tiny": "test_convnext",
               "vit_base_patch16_224": "test_vit", "swin_tiny_patch4_window7_224": "test_vit2"}


def _timm(spec: ModelSpec, tiny: bool) -> tuple[torch.nn.Module, tuple]:
    import timm

    name = spec.tiny_name if tiny else spec.name
    model = timm.create_model(name, pretrained=False)
    channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
    batch = 2 if tiny else 32
    return model, (torch.randn(batch, channels, height, width),)


class _FirstOutput(torch.nn.Module):
    """A transformers model returning its first output tensor (hidden states or logits) alone."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def _tokens(config, tiny: bool) -> tuple[torch.Tensor]:
    batch, length = (2, 16) if tiny else (8, 512)
    return (torch.randint(0, config.vocab_size, (batch, length)),)


def _bert(spec: ModelSpec, tiny: bool) -> tuple[torch.nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    config = BertConfig(**(_TINY_TRANSFORMER if tiny else {}))
    return _FirstOutput(BertModel(config, add_pooling_layer=False)), _tokens(config, tiny)


def _gpt2(spec: ModelSpec, tiny: bool) -> tuple[torch.nn.Module, tuple]:
    from transformers import GPT2Config, GPT2LMHeadModel

    sizes = {"n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 1000, "bos_token_id": 0, "eos_token_id": 0} \
        if tiny else {}
    config = GPT2Config(**sizes)
    return _FirstOutput(GPT2LMHeadModel(config)), _tokens(config, tiny)


def _llama(spec: ModelSpec, tiny: bool) -> tuple[torch.nn.Module, tuple]:
    from transformers import LlamaConfig, LlamaForCausalLM

    # ~0.95B parameters: 16 layers of width 2048 (TinyLlama's width and MLP, fewer layers)
    sizes = (dict(_TINY_TRANSFORMER, num_key_value_heads=2) if tiny else
             {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000})
    config = LlamaConfig(**sizes)
    return _FirstOutput(LlamaForCausalLM(config)), _tokens(config, tiny)


_TINY_TRANSFORMER = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "vocab_size": 1000}
_TRANSFORMERS: dict[str, Callable[[ModelSpec, bool], tuple[torch.nn.Module, tuple]]] = {
    "bert_base": _bert, "gpt2": _gpt2, "llama_1b": _llama}

MODELS: dict[str, ModelSpec] = {
    **{name: ModelSpec(name, "timm", TINY_VISION[name]) for name in VISION},
    "bert_base": ModelSpec("bert_base", "transformers", "bert_tiny"),
    "gpt2": ModelSpec("gpt2", "transformers", "gpt2_tiny"),
    "llama_1b": ModelSpec("llama_1b", "transformers", "llama_tiny"),
}
