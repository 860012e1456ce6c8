"""The generic transformers config shrinker, on plain config dicts (no model built)."""

from __future__ import annotations

from corpus.transformers_models import HEADS, HIDDEN, LAYERS, VOCAB, shrink_config_dict


def test_sizes_are_capped_and_heads_stay_consistent() -> None:
    d = {"model_type": "x", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 11008, "vocab_size": 32000}
    out = shrink_config_dict(d, image_size=None)
    assert out["num_hidden_layers"] == LAYERS and out["hidden_size"] == HIDDEN
    assert out["num_attention_heads"] == HEADS and HEADS % out["num_key_value_heads"] == 0
    assert out["head_dim"] == HIDDEN // HEADS
    assert out["intermediate_size"] <= 64 and out["vocab_size"] == VOCAB
    assert d["hidden_size"] == 4096  # the input is not modified


def test_special_token_ids_stay_inside_the_shrunk_vocabulary() -> None:
    d = {"model_type": "x", "vocab_size": 50000, "bos_token_id": 49999, "pad_token_id": 0,
         "eos_token_id": [49998, 3]}
    out = shrink_config_dict(d, image_size=None)
    assert out["bos_token_id"] < VOCAB and out["pad_token_id"] == 0
    assert all(t < VOCAB for t in out["eos_token_id"])


def test_per_layer_lists_keep_one_layer_of_each_kind() -> None:
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    d = {"model_type": "x", "num_hidden_layers": 6, "layer_types": kinds * 1}
    out = shrink_config_dict(d, image_size=None)
    assert out["num_hidden_layers"] == len(out["layer_types"]) == LAYERS
    assert set(out["layer_types"]) == {"sliding_attention", "full_attention"}


def test_sub_configs_shrink_recursively_and_images_only_at_small_scale() -> None:
    d = {"model_type": "vlm", "text_config": {"model_type": "t", "hidden_size": 2048, "num_hidden_layers": 24},
         "vision_config": {"model_type": "v", "image_size": 336, "hidden_size": 1024}}
    small = shrink_config_dict(d, image_size=32)
    assert small["text_config"]["hidden_size"] == HIDDEN and small["text_config"]["num_hidden_layers"] == LAYERS
    assert small["vision_config"]["image_size"] == 32
    assert shrink_config_dict(d, image_size=None)["vision_config"]["image_size"] == 336


def test_latent_attention_has_no_kv_groups() -> None:
    d = {"model_type": "mla", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "qk_head_dim": 192}
    out = shrink_config_dict(d, image_size=None)
    assert out["num_key_value_heads"] == out["num_attention_heads"]
    assert out["qk_head_dim"] == out["qk_nope_head_dim"] + out["qk_rope_head_dim"]
