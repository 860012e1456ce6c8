"""Hugging Face transformers source: every model type buildable from its config alone.

Names are ``transformers/<model_type>``; the family is the model type. Each entry builds
the type's base model class (``MODEL_MAPPING_NAMES``, else its first task head) from the
type's default config shrunk to a tiny one by ``shrink_config_dict`` (2 layers, hidden
32, vocab 1024; see transformers_shrink), with random weights and no hub access.
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

from corpus.entry import Built, Entry
from corpus.tiers import assign_tiers, load_catalog, tiers_for
from corpus.transformers_shrink import SMALL_IMAGE, shrink_config_dict

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
    "input_features": ("audio_features",),
    "input_values": ("audio_values",),
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
    if recipe == "audio_features":
        mel = _as_int(_find(config, "num_mel_bins", "feature_size", "input_feat_per_channel"), 80)
        source_positions = _find(config, "max_source_positions")
        if getattr(config, "model_type", "") == "whisper" and source_positions:
            kwargs["input_features"] = torch.randn(batch, mel, 2 * source_positions)  # exact length
        else:
            kwargs["input_features"] = torch.randn(batch, seq * 4, mel)
    if recipe == "audio_values":
        kwargs["input_values"] = torch.randn(batch, AUDIO_SAMPLES[scale])
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
    tiers = tiers_for(SOURCE, metas)
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
