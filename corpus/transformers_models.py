"""Hugging Face transformers source: every model type buildable from its config alone.

Names are ``transformers/<model_type>``; the family is the model type. Each entry builds
the type's base model class (``MODEL_MAPPING_NAMES``, else its first task head) from the
type's default config shrunk to a tiny one by ``shrink_config_dict`` (2 layers, hidden
32, vocab 1024; see the shrinker below), with random weights and no hub access.
Inputs follow the model's ``main_input_name``: token ids plus attention mask (plus
decoder ids for encoder-decoders), pixel values, audio features or raw waveforms.
Scale "small" uses short sequences and shrunk images; "full" a longer sequence, batch 2
and the config's own image size (the layer/width shrink stays: full-size weights of
hundreds of LLMs do not fit one GPU).

Types whose tiny model cannot be built are not entries; the catalog keeps each with
the reason (``crucible corpus check --report`` prints them).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import signal
from typing import Any

from corpus.entry import Built, Entry, EntryUnavailable
from corpus.tiers import assign_tiers, load_catalog, tiers_for

# --- the config shrinker --------------------------------------------------------------
# A type's default config describes the released model (Llama: 32 layers of 4096).
# shrink_config_dict caps the sizes every family names the same way (layers, hidden sizes,
# heads, vocabulary), recursing into sub-configs (text_config, vision_config, ...);
# FAMILY_FIXES holds the per-type exceptions, each with the reason it is needed.
LAYERS = 2
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 64
VOCAB = 1024
SMALL_IMAGE = 32

_LAYER_KEYS = {
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
    "num_encoder_layers", "num_decoder_layers", "num_blocks", "depth", "num_hidden_groups",
    "text_layers", "vision_layers", "num_text_layers", "num_vision_layers", "num_stacks",
}
_HIDDEN_KEYS = {
    "hidden_size", "d_model", "n_embd", "dim", "embed_dim", "hidden_dim", "embedding_size",
    "projection_dim", "word_embed_proj_dim", "d_embed", "hidden_size_per_head_x_heads",
    "encoder_hidden_size", "text_hidden_size", "vision_hidden_size", "cross_attention_hidden_size",
}
_HEAD_KEYS = {
    "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads",
    "num_heads", "num_encoder_attention_heads", "num_decoder_attention_heads",
}
_KV_HEAD_KEYS = {"num_key_value_heads", "n_kv_heads", "multi_query_group_num", "num_kv_heads"}
_INTERMEDIATE_KEYS = {
    "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff",
    "dim_feedforward", "moe_intermediate_size", "shared_expert_intermediate_size", "ffn_hidden_size",
    "mlp_dim", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim",
}
_EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}
_LIST_DEPTH_KEYS = {"depths", "num_layers_per_stage", "layers_per_block"}
_LIST_WIDTH_KEYS = {"hidden_sizes", "embed_dims", "widths", "channels"}
_LIST_HEAD_KEYS = {"num_heads", "num_attention_heads"}

# Per model type: config keys to force after the generic pass, and why.
FAMILY_FIXES: dict[str, tuple[dict[str, Any], str]] = {
    "reformer": ({"axial_pos_shape": [4, 4], "axial_pos_embds_dim": [16, 16]},
                 "axial position shape must multiply to the sequence length, dims to the hidden size"),
    "funnel": ({"block_sizes": [1, 1], "d_head": 8}, "block_sizes replace num_hidden_layers"),
    "longformer": ({"attention_window": 8}, "the window must be even and divide the padded sequence"),
    "led": ({"attention_window": 8}, "the window must be even and divide the padded sequence"),
    "big_bird": ({"attention_type": "original_full"}, "block-sparse attention needs long sequences"),
    "bigbird_pegasus": ({"attention_type": "original_full"}, "block-sparse attention needs long sequences"),
    "transfo-xl": ({"cutoffs": [100, 500], "div_val": 1}, "adaptive softmax cutoffs must lie below vocab"),
}


# Multimodal-RoPE text models split each head's rotary dimensions into sections fixed in
# the modeling code (e.g. [16, 24, 24]) when the config names none: they get one head of
# the size those sections expect.
_MROPE_TEXT_TYPES = {
    "qwen2_vl_text", "qwen2_5_vl_text", "glm4v_text", "glm4v_moe_text", "glm_image_text", "glm_ocr_text",
    "paddleocr_vl_text",
}
_MROPE_HALF_HEAD_TYPES = {"glm4v_text", "glm_image_text", "glm_ocr_text"}  # sections span half a head
for _type in _MROPE_TEXT_TYPES:
    _head = 64 if _type in _MROPE_HALF_HEAD_TYPES else 128
    FAMILY_FIXES[_type] = (
        {"hidden_size": _head, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": _head},
        f"multimodal RoPE sections are sized for a {_head}-wide head",
    )


def _cap(value: Any, limit: int) -> Any:
    return min(value, limit) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else value


def _is_config_dict(value: Any) -> bool:
    return isinstance(value, dict) and "model_type" in value


def shrink_config_dict(d: dict[str, Any], image_size: int | None) -> dict[str, Any]:
    """A shrunk copy of a config dict (``config.to_dict()``); sub-configs recursively.

    ``image_size`` replaces image sizes when given (scale "small"); None keeps them.
    """
    out = dict(d)
    for key, value in d.items():
        if _is_config_dict(value):
            out[key] = shrink_config_dict(value, image_size)
        elif key in _LAYER_KEYS:
            out[key] = _cap(value, LAYERS)
        elif key in _HIDDEN_KEYS:
            out[key] = _cap(value, HIDDEN)
        elif key in _HEAD_KEYS and isinstance(value, int):
            out[key] = _cap(value, HEADS)
        elif key in _KV_HEAD_KEYS:
            out[key] = _cap(value, KV_HEADS)
        elif key in _INTERMEDIATE_KEYS:
            out[key] = _cap(value, INTERMEDIATE)
        elif key in _EXPERT_KEYS:
            out[key] = _cap(value, 4)
        elif key in ("n_group", "topk_group") and isinstance(value, int):
            out[key] = 1  # MoE routing groups must divide the (capped) expert count
        elif key == "rotary_dim" and isinstance(value, int):
            out[key] = _cap(value, 4)  # at most the shrunk head dimension (8)
        elif key in ("mamba_n_heads", "mamba_n_groups", "n_groups") and isinstance(value, int):
            out[key] = _cap(value, 1 if key != "mamba_n_heads" else 4)
        elif key in ("num_experts_per_tok", "top_k", "moe_topk"):
            out[key] = _cap(value, 2)
        elif key == "vocab_size":
            out[key] = _cap(value, VOCAB)
        elif key == "head_dim" and isinstance(value, int):
            out[key] = None  # recomputed below from the shrunk hidden size
        elif key in _LIST_DEPTH_KEYS and isinstance(value, list):
            out[key] = [1 for _ in value]
        elif key in _LIST_WIDTH_KEYS and isinstance(value, list) and all(isinstance(v, int) for v in value):
            out[key] = [16 * 2**i for i in range(len(value))]
        elif key in _LIST_HEAD_KEYS and isinstance(value, list):
            out[key] = [min(v, 2**i) for i, v in enumerate(value)] if all(isinstance(v, int) for v in value) else value
        elif key == "conv_dim" and isinstance(value, list):
            out[key] = [HIDDEN for _ in value]  # wav2vec2-style feature extractor widths
        elif key in ("num_conv_pos_embeddings", "num_conv_pos_embedding_groups") and isinstance(value, int):
            out[key] = _cap(value, 16 if key == "num_conv_pos_embeddings" else 2)
        elif key == "window_size" and isinstance(value, int) and image_size is not None:
            out[key] = _cap(value, 4)  # windows must fit the shrunk image's patch grid
        elif key == "max_source_positions" and isinstance(value, int):
            out[key] = _cap(value, 32)  # Whisper reads exactly 2x this many frames
        elif key == "image_size" and image_size is not None and isinstance(value, int) and value > image_size:
            out[key] = image_size
    _fix_token_ids(out)
    _fix_heads(out, d)
    _fix_per_layer_lists(out, d)
    _fix_rope(out)
    if _layers(out) != _layers(d) or out.get("depths") != d.get("depths"):
        for key in ("out_features", "out_indices"):  # backbone stages of the unshrunk depth
            if key in out:
                out[key] = None
    fixes = FAMILY_FIXES.get(d.get("model_type", ""))
    if fixes:
        out.update(fixes[0])
    return out


def _layers(d: dict[str, Any]) -> int | None:
    return next((d[k] for k in sorted(_LAYER_KEYS) if isinstance(d.get(k), int)), None)


def _fix_per_layer_lists(out: dict[str, Any], original: dict[str, Any]) -> None:
    """Lists with one item per layer (``layer_types``, ...) must match the new depth.

    The first occurrence of each distinct item is kept, so a hybrid model (attention and
    mamba layers, sliding and full attention) keeps one layer of every kind; the depth
    grows to hold them when needed.
    """
    before, after = _layers(original), _layers(out)
    if not before or not after or before == after:
        return
    depth = after
    for key, value in original.items():
        if isinstance(value, list) and len(value) == before and key not in _LIST_DEPTH_KEYS:
            kept = list(dict.fromkeys(v for v in value if isinstance(v, (str, int, float, bool))))
            if len(kept) != len(set(map(repr, value))):  # unhashable or mixed items: plain cut
                kept = value[:after]
            depth = max(depth, len(kept))
    for key, value in original.items():
        if isinstance(value, list) and len(value) == before and key not in _LIST_DEPTH_KEYS:
            distinct = list(dict.fromkeys(value)) if all(isinstance(v, (str, int, float, bool)) for v in value) else []
            kept = distinct if distinct and len(distinct) <= depth else value[:depth]
            out[key] = (kept + value[len(kept):])[:depth] if len(kept) < depth else kept[:depth]
    for key in _LAYER_KEYS:
        if out.get(key) == after and original.get(key) == before:
            out[key] = depth
    # Per-layer overrides keyed by layer index: drop those of layers that no longer exist.
    per_layer = original.get("per_layer_config")
    if isinstance(per_layer, dict):
        out["per_layer_config"] = {k: v for k, v in per_layer.items() if str(k).isdigit() and int(k) < depth}


def _fix_rope(out: dict[str, Any]) -> None:
    """Multimodal RoPE splits head_dim/2 into three sections; rescale them to the new head."""
    rope = out.get("rope_parameters") or out.get("rope_scaling")
    head_dim = out.get("head_dim")
    if not isinstance(head_dim, int):
        hidden, heads = out.get("hidden_size"), out.get("num_attention_heads")
        head_dim = hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None
    if isinstance(rope, dict) and isinstance(rope.get("mrope_section"), list) and head_dim:
        sections = len(rope["mrope_section"])
        half = head_dim // 2
        base = [half // sections] * sections
        base[0] += half - sum(base)
        out["rope_parameters" if "rope_parameters" in out else "rope_scaling"] = {**rope, "mrope_section": base}


def _fix_heads(out: dict[str, Any], original: dict[str, Any]) -> None:
    """Keep head counts consistent with the shrunk hidden size (head_dim, kv groups)."""
    hidden = next((out[k] for k in ("hidden_size", "d_model", "n_embd", "dim") if isinstance(out.get(k), int)), None)
    heads = next((out[k] for k in ("num_attention_heads", "n_head", "n_heads", "num_heads")
                  if isinstance(out.get(k), int)), None)
    if "head_dim" in original and isinstance(original["head_dim"], int):
        out["head_dim"] = (hidden // heads) if hidden and heads else 8
    for key in _KV_HEAD_KEYS:
        if isinstance(out.get(key), int) and heads and heads % out[key]:
            out[key] = 1
    for key in ("d_kv", "attention_head_size", "kv_channels", "qk_rope_head_dim", "qk_nope_head_dim",
                "v_head_dim", "d_head"):
        if isinstance(out.get(key), int):
            out[key] = min(out[key], 8)
    if isinstance(out.get("kv_lora_rank"), int):
        out["kv_lora_rank"] = min(out["kv_lora_rank"], 16)
        # Multi-head latent attention expands every head from the latent: no kv groups,
        # and the derived query head size must follow the shrunk parts.
        for key in _KV_HEAD_KEYS:
            if isinstance(out.get(key), int) and heads:
                out[key] = heads
        if isinstance(out.get("qk_head_dim"), int):
            out["qk_head_dim"] = (out.get("qk_nope_head_dim") or 0) + (out.get("qk_rope_head_dim") or 0)
    if isinstance(out.get("q_lora_rank"), int):
        out["q_lora_rank"] = min(out["q_lora_rank"], 16)


def _fix_token_ids(out: dict[str, Any]) -> None:
    """Special token ids past the shrunk vocabulary would index out of the embedding."""
    vocab = out.get("vocab_size")
    if not isinstance(vocab, int):
        return
    for key, value in list(out.items()):
        if not key.endswith("token_id") and not key.endswith("token_ids") and key != "image_token_index":
            continue
        if isinstance(value, int) and value >= vocab:
            out[key] = vocab - 1
        elif isinstance(value, list):
            out[key] = [v if not isinstance(v, int) or v < vocab else vocab - 1 for v in value]


# --- entries ---------------------------------------------------------------------------

SOURCE = "transformers"
SEQ = {"small": 16, "full": 128}
BATCH = {"small": 1, "full": 2}
AUDIO_SAMPLES = {"small": 4000, "full": 16000}
CATALOG_BUILD_TIMEOUT_S = 60
# Task mappings tried, in order, when a type has no base model class.
_TASK_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_CTC_MAPPING_NAMES", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES", "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "MODEL_FOR_BACKBONE_MAPPING_NAMES", "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES",
)
_MODALITY = {
    "input_ids": "nlp", "pixel_values": "vision", "input_features": "audio", "input_values": "audio",
    "past_values": "time-series",
}


def _offline() -> None:
    # No download ever: a missing local file must fail, not fetch from the hub.
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(key, "1")


def unavailable() -> str | None:
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (pip install 'crucible[corpus]')"
    return None


def model_class_name(model_type: str) -> str | None:
    """The class an entry builds: the base model, else the first task head."""
    from transformers.models.auto import modeling_auto

    for mapping in ("MODEL_MAPPING_NAMES", *_TASK_MAPPINGS):
        names = getattr(modeling_auto, mapping, {})
        if model_type in names:
            value = names[model_type]
            return value[0] if isinstance(value, (list, tuple)) else value
    return None


def _model_types() -> list[str]:
    from transformers.models.auto import modeling_auto

    types: set[str] = set()
    for attr in dir(modeling_auto):
        if attr.startswith("MODEL_") and attr.endswith("MAPPING_NAMES"):
            types |= set(getattr(modeling_auto, attr))
    return sorted(types)


def tiny_config(model_type: str, scale: str) -> Any:
    _offline()
    from transformers import AutoConfig

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        import transformers

        raise EntryUnavailable(f"transformers {transformers.__version__} has no model type {model_type!r}")
    default = AutoConfig.for_model(model_type)
    shrunk = shrink_config_dict(default.to_dict(), SMALL_IMAGE if scale == "small" else None)
    shrunk.pop("transformers_version", None)
    return type(default).from_dict(shrunk)


def construct(model_type: str, scale: str) -> Any:
    import transformers

    config = tiny_config(model_type, scale)
    class_name = model_class_name(model_type)
    if class_name is None or not hasattr(transformers, class_name):
        raise LookupError(f"no model class for {model_type!r}")
    return getattr(transformers, class_name)(config).eval()


def _find(config: Any, *keys: str) -> Any:
    """First value of ``keys`` in the config or its vision/audio/text sub-configs."""
    for cfg in (config, *(getattr(config, s, None) for s in ("vision_config", "audio_config", "text_config",
                                                             "encoder", "backbone_config"))):
        if cfg is None:
            continue
        for key in keys:
            value = getattr(cfg, key, None)
            if value is not None:
                return value
    return None


def _as_int(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return int(value) if isinstance(value, int) else default


# Input recipes, tried in this order per main input name; the catalog records the first
# one whose forward runs, so entries never guess at run time.
RECIPES = {
    "input_ids": ("text", "text+image"),
    "pixel_values": ("image", "text+image"),
    "input_features": ("audio_features", "audio_features_channels_first"),
    "input_values": ("audio_values", "audio_values_one_channel"),
}


def recipes_for(model: Any) -> tuple[str, ...]:
    return RECIPES.get(getattr(model, "main_input_name", ""), ("text", "image", "text+image"))


def make_inputs(model: Any, scale: str, recipe: str) -> dict[str, Any]:
    """Deterministic inputs for ``model`` (random under the caller's seed)."""
    import torch

    config = model.config
    batch, seq = BATCH[scale], SEQ[scale]
    params = inspect.signature(model.forward).parameters
    vocab = _as_int(_find(config, "vocab_size"), 1024)
    kwargs: dict[str, Any] = {}
    if "text" in recipe:
        kwargs["input_ids"] = torch.randint(0, vocab, (batch, seq))
        if "attention_mask" in params:
            kwargs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
    if "image" in recipe:
        size = _as_int(_find(config, "image_size", "img_size"), 224)
        channels = _as_int(_find(config, "num_channels", "in_channels"), 3)
        kwargs["pixel_values"] = torch.randn(batch, channels, size, size)
    if recipe.startswith("audio_features"):
        mel = _as_int(_find(config, "num_mel_bins", "feature_size", "input_feat_per_channel"), 80)
        source_positions = _find(config, "max_source_positions")
        if getattr(config, "model_type", "") == "whisper" and source_positions:
            kwargs["input_features"] = torch.randn(batch, mel, 2 * source_positions)  # exact length
        elif recipe.endswith("channels_first"):
            kwargs["input_features"] = torch.randn(batch, mel, seq * 4)
        else:
            kwargs["input_features"] = torch.randn(batch, seq * 4, mel)
    if recipe == "audio_values":
        kwargs["input_values"] = torch.randn(batch, AUDIO_SAMPLES[scale])
    if recipe == "audio_values_one_channel":  # codecs take (batch, channels, samples)
        kwargs["input_values"] = torch.randn(batch, 1, AUDIO_SAMPLES[scale])
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        kwargs["decoder_input_ids"] = torch.randint(0, vocab, (batch, max(seq // 2, 4)))
    if "use_cache" in params:
        kwargs["use_cache"] = False  # caches are objects, not tensors: keep outputs comparable
    return {k: v for k, v in kwargs.items() if k in params or "kwargs" in params}


def build(model_type: str, recipe: str, scale: str) -> Built:
    model = construct(model_type, scale)
    return Built(model, (), make_inputs(model, scale, recipe))


def _describe(model_type: str) -> dict[str, Any]:
    """Build the tiny model once (seeded) to learn it builds, its size and modality."""
    import torch

    torch.manual_seed(0)
    model = construct(model_type, "small")
    config = model.config
    recipe, error = None, None
    for candidate in recipes_for(model):
        try:
            with torch.no_grad():
                model(**make_inputs(model, "small", candidate))
            recipe = candidate
            break
        except Exception as exc:  # noqa: BLE001 - next recipe; keep the first error
            error = error or f"{type(exc).__name__}: {str(exc).strip()}"[:300]
    tags = {_MODALITY.get(getattr(model, "main_input_name", ""), "other")}
    if getattr(config, "is_encoder_decoder", False):
        tags.add("encoder-decoder")
    if hasattr(config, "vision_config") and hasattr(config, "text_config"):
        tags.add("multimodal")
    return {
        "class": type(model).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "main_input": getattr(model, "main_input_name", None),
        "tags": sorted(tags),
        "recipe": recipe or recipes_for(model)[0],
        "forward_error": None if recipe else error,
    }


class _BuildTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _BuildTimeout()


def catalog() -> dict[str, Any]:
    """Try every model type's tiny build (a few minutes); record entries and refusals."""
    _offline()
    import torch
    import transformers

    torch.set_num_threads(1)
    models: dict[str, Any] = {}
    unbuildable: dict[str, str] = {}
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for model_type in _model_types():
            signal.alarm(CATALOG_BUILD_TIMEOUT_S)
            try:
                models[model_type] = _describe(model_type)
            except _BuildTimeout:
                unbuildable[model_type] = f"tiny build took over {CATALOG_BUILD_TIMEOUT_S} s"
            except Exception as exc:  # noqa: BLE001 - any failure is recorded as data
                unbuildable[model_type] = f"{type(exc).__name__}: {str(exc).strip()}"[:300]
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return {
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "models": models,
        "unbuildable": unbuildable,
    }


def _models() -> dict[str, Any]:
    data = load_catalog(SOURCE)
    return (data or catalog())["models"]


@functools.lru_cache(maxsize=1)
def _entries() -> tuple[Entry, ...]:
    models = _models()
    names = {f"{SOURCE}/{m}": m for m in models}
    metas = assign_tiers(SOURCE, {n: models[m]["params"] for n, m in names.items()}, {n: m for n, m in names.items()})
    # One family per model type: spread smoke over modalities instead.
    groups = {n: "+".join(models[m]["tags"]) for n, m in names.items()}
    tiers = tiers_for(SOURCE, metas, groups=groups)
    result = []
    for name, model_type in names.items():
        info = models[model_type]
        result.append(
            Entry(
                name=name,
                source=SOURCE,
                family=model_type,
                factory=functools.partial(build, model_type, info["recipe"]),
                tier=tiers[name],
                tags=frozenset(info["tags"]),
                params=metas[name].params,
                eager_ms=metas[name].eager_ms,
                description=f"transformers.{info['class']} from a tiny {model_type} config",
            )
        )
    return tuple(result)


def entries() -> list[Entry]:
    if unavailable():
        return []
    return list(_entries())
