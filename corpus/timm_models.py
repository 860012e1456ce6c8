"""timm source: every architecture of ``timm.list_models()``, random weights.

Names are ``timm/<model>``; the family is the timm module that defines the model
(``resnet``, ``vision_transformer``, ...). Scale "full" feeds the model's default_cfg
input size; scale "small" a reduced square image (``SMALL_IMAGE``), passed to the model
as ``img_size`` when its cfg says the input size is fixed (ViT-like position tables).
Models that refuse the reduced size are built at their natural size instead.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

from corpus.entry import Built, Entry, EntryUnavailable
from corpus.tiers import assign_tiers, load_catalog, tiers_for

SOURCE = "timm"
SMALL_IMAGE = 96
SMALL_BATCH = 1
FULL_BATCH = 2
# Families whose input is not a 3-channel image classification batch at default size.
_TAGS_BY_FAMILY = {
    "vision_transformer": {"transformer"},
    "swin_transformer": {"transformer"},
    "swin_transformer_v2": {"transformer"},
    "eva": {"transformer"},
    "deit": {"transformer"},
    "beit": {"transformer"},
}


def unavailable() -> str | None:
    if importlib.util.find_spec("timm") is None:
        return "timm is not installed (pip install 'crucible[corpus]')"
    return None


def catalog() -> dict[str, Any]:
    """Enumerate timm live: names, family, input sizes and a meta-device parameter count.

    Slow (every model is instantiated on the meta device, ~0.2 s each); run through
    ``crucible corpus check --catalog``, never while listing.
    """
    import timm
    import torch

    models: dict[str, Any] = {}
    for module in timm.list_modules():
        for name in timm.list_models(module=module):
            cfg = timm.models.get_pretrained_cfg(name)
            info: dict[str, Any] = {
                "family": module,
                "input_size": list(cfg.input_size) if cfg else [3, 224, 224],
                "min_input_size": list(cfg.min_input_size) if cfg and cfg.min_input_size else None,
                "fixed_input_size": bool(cfg.fixed_input_size) if cfg else False,
                "params": None,
            }
            try:
                with torch.device("meta"):
                    model = timm.create_model(name, pretrained=False)
                info["params"] = sum(p.numel() for p in model.parameters())
            except Exception as exc:  # noqa: BLE001 - listed anyway; the check records it
                info["catalog_error"] = f"{type(exc).__name__}: {exc}"[:300]
            models[name] = info
    return {"versions": {"timm": timm.__version__, "torch": torch.__version__}, "models": models}


def _small_size(info: dict[str, Any]) -> int:
    natural = info["input_size"][-1]
    minimum = (info.get("min_input_size") or [0, 0, 0])[-1]
    return min(natural, max(SMALL_IMAGE, minimum))


def build(model_name: str, info: dict[str, Any], scale: str) -> Built:
    import timm
    import torch

    if not timm.is_model(model_name):
        raise EntryUnavailable(f"timm {timm.__version__} has no model {model_name!r}")
    channels, height, width = info["input_size"]
    batch = FULL_BATCH
    if scale == "small":
        batch = SMALL_BATCH
        size = _small_size(info)
        if size != height or size != width:
            state = torch.random.get_rng_state()
            try:
                kwargs = {"img_size": size} if info["fixed_input_size"] else {}
                model = timm.create_model(model_name, pretrained=False, **kwargs).eval()
                inputs = torch.randn(batch, channels, size, size)
                with torch.no_grad():
                    model(inputs)  # a model that only works at its natural size fails here
                return Built(model, (inputs,))
            except Exception:  # noqa: BLE001 - any failure is recorded as data
                # Deterministic fallback: the same model always takes this path, and the
                # RNG is rewound so the natural-size weights match a fresh seeded build.
                torch.random.set_rng_state(state)
    model = timm.create_model(model_name, pretrained=False).eval()
    return Built(model, (torch.randn(batch, channels, height, width),))


def _models() -> dict[str, Any]:
    data = load_catalog(SOURCE)
    if data is None:  # no generated file: enumerate live (slow, but correct)
        data = catalog()
    return data["models"]


@functools.lru_cache(maxsize=1)
def _entries() -> tuple[Entry, ...]:
    models = _models()
    names = {f"{SOURCE}/{m}": m for m in models}
    metas = assign_tiers(
        SOURCE,
        {n: models[m]["params"] for n, m in names.items()},
        {n: models[m]["family"] for n, m in names.items()},
    )
    tiers = tiers_for(SOURCE, metas)
    entries = []
    for name, model_name in names.items():
        info = models[model_name]
        family = info["family"]
        entries.append(
            Entry(
                name=name,
                source=SOURCE,
                family=family,
                factory=functools.partial(build, model_name, info),
                tier=tiers[name],
                tags=frozenset({"vision", "classification", *_TAGS_BY_FAMILY.get(family, ())}),
                params=metas[name].params,
                eager_ms=metas[name].eager_ms,
                description=f"timm.create_model({model_name!r}), input {info['input_size']}",
            )
        )
    return tuple(entries)


def entries() -> list[Entry]:
    if unavailable():
        return []
    return list(_entries())
