"""torchvision source: every model of ``torchvision.models.list_models()``, weights=None.

Names are ``torchvision/<model>``; the family is the module that defines the builder
(``resnet``, ``faster_rcnn``, ...) and the task is a tag (classification, detection,
segmentation, video, optical_flow, quantized). Backbone weights are disabled too
(``weights_backbone=None``): the default would download ImageNet weights.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

from corpus.entry import Built, Entry
from corpus.tiers import assign_tiers, load_catalog, tiers_for

SOURCE = "torchvision"
TASK_MODULES = {
    "classification": "torchvision.models",
    "detection": "torchvision.models.detection",
    "segmentation": "torchvision.models.segmentation",
    "video": "torchvision.models.video",
    "optical_flow": "torchvision.models.optical_flow",
    "quantized": "torchvision.models.quantization",
}
TASK_TAGS = {
    "classification": {"vision", "classification"},
    "detection": {"vision", "detection"},
    "segmentation": {"vision", "segmentation"},
    "video": {"vision", "video"},
    "optical_flow": {"vision", "optical_flow"},
    "quantized": {"vision", "classification", "quantized"},
}
# Natural input per task, (C, H, W) or (C, T, H, W), and the reduced "small" one.
NATURAL = {
    "classification": (3, 224, 224),
    "quantized": (3, 224, 224),
    "detection": (3, 480, 640),  # the model's transform resizes to min_size=800 itself
    "segmentation": (3, 520, 520),
    "video": (3, 16, 112, 112),
    "optical_flow": (3, 368, 496),  # a multiple of 8, as RAFT requires
}
SMALL = {
    "classification": (3, 64, 64),
    "quantized": (3, 64, 64),
    "detection": (3, 128, 128),
    "segmentation": (3, 64, 64),
    "video": (3, 8, 64, 64),
    "optical_flow": (3, 128, 128),  # RAFT's 4-level correlation pyramid needs >= 128
}
# Per-model natural sizes that differ from the task's.
NATURAL_OVERRIDES = {
    "inception_v3": (3, 299, 299),
    "quantized_inception_v3": (3, 299, 299),
    "s3d": (3, 16, 224, 224),
    "mvit_v1_b": (3, 16, 224, 224),
    "mvit_v2_s": (3, 16, 224, 224),
    "swin3d_t": (3, 16, 224, 224),
    "swin3d_s": (3, 16, 224, 224),
    "swin3d_b": (3, 16, 224, 224),
}
SMALL_OVERRIDES = {
    "inception_v3": (3, 96, 96),  # needs >= 75 pixels
    "quantized_inception_v3": (3, 96, 96),
    "vit_h_14": (3, 56, 56),  # a multiple of its 14-pixel patch
    "s3d": (3, 16, 64, 64),  # temporal kernels need >= 14 frames
}


def unavailable() -> str | None:
    if importlib.util.find_spec("torchvision") is None:
        return "torchvision is not installed (pip install 'crucible[corpus]')"
    return None


def catalog() -> dict[str, Any]:
    """Enumerate torchvision live, with meta-device parameter counts."""
    import torch
    import torchvision
    from torchvision.models import get_model_builder, list_models

    models: dict[str, Any] = {}
    for task, module_name in TASK_MODULES.items():
        module = importlib.import_module(module_name)
        for name in list_models(module=module):
            if name in models:
                continue
            family = get_model_builder(name).__module__.rsplit(".", 1)[-1]
            info: dict[str, Any] = {"task": task, "family": family, "params": None}
            try:
                info["params"] = _count_params(name, task)
            except Exception as exc:  # noqa: BLE001 - any failure is recorded as data
                info["catalog_error"] = f"{type(exc).__name__}: {exc}"[:300]
            models[name] = info
    return {"versions": {"torchvision": torchvision.__version__, "torch": torch.__version__}, "models": models}


def _count_params(name: str, task: str) -> int:
    import torch
    from torchvision.models import get_model

    try:
        with torch.device("meta"):
            model = _construct(name, task, "full")
    except Exception:  # noqa: BLE001 - any failure is recorded as data
        # Some builders touch data (regnet's width rounding, int8 conversion); count the
        # float model on the CPU instead. A quantized model's own parameters are packed.
        kwargs = {**_builder_kwargs(name, task, "full"), **({"quantize": False} if task == "quantized" else {})}
        model = get_model(name, **kwargs)
    return sum(p.numel() for p in model.parameters())


def _builder_kwargs(name: str, task: str, scale: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"weights": None}
    if task in ("detection", "segmentation") or name.startswith(("deeplab", "fcn", "lraspp")):
        kwargs["weights_backbone"] = None
    if task == "quantized":
        kwargs["quantize"] = True  # fused and int8-converted; CPU (fbgemm/qnnpack) only
    if task == "detection" and scale == "small" and not name.startswith("ssd"):
        side = SMALL["detection"][-1]
        kwargs.update(min_size=side, max_size=side)  # else images are resized to 800
    if scale == "small" and name.startswith("vit_"):
        kwargs["image_size"] = _input_shape(name, task, scale)[-1]  # position table size
    return kwargs


def _construct(name: str, task: str, scale: str) -> Any:
    from torchvision.models import get_model

    return get_model(name, **_builder_kwargs(name, task, scale))


def _input_shape(name: str, task: str, scale: str) -> tuple[int, ...]:
    if scale == "small":
        return SMALL_OVERRIDES.get(name, SMALL[task])
    return NATURAL_OVERRIDES.get(name, NATURAL[task])


def _inputs(task: str, shape: tuple[int, ...], batch: int) -> tuple:
    import torch

    if task == "detection":  # a list of images, as the detection API takes
        return ([torch.rand(shape) for _ in range(batch)],)
    if task == "optical_flow":  # two frames
        return (torch.rand(batch, *shape), torch.rand(batch, *shape))
    return (torch.randn(batch, *shape),)


def build(name: str, task: str, scale: str) -> Built:
    import torch

    batch = 1 if scale == "small" else 2
    if scale == "small" and SMALL_OVERRIDES.get(name, SMALL[task]) != NATURAL_OVERRIDES.get(name, NATURAL[task]):
        state = torch.random.get_rng_state()
        try:
            model = _construct(name, task, "small").eval()
            inputs = _inputs(task, _input_shape(name, task, "small"), batch)
            with torch.no_grad():
                model(*inputs)  # some models only accept their natural size (maxvit_t)
            return Built(model, inputs)
        except Exception:  # noqa: BLE001 - any failure is recorded as data
            # Deterministic fallback to the natural size, RNG rewound (see timm_models).
            torch.random.set_rng_state(state)
    model = _construct(name, task, "full").eval()
    return Built(model, _inputs(task, _input_shape(name, task, "full"), batch))


def _models() -> dict[str, Any]:
    data = load_catalog(SOURCE)
    return (data or catalog())["models"]


@functools.lru_cache(maxsize=1)
def _entries() -> tuple[Entry, ...]:
    models = _models()
    names = {f"{SOURCE}/{m}": m for m in models}
    metas = assign_tiers(
        SOURCE,
        {n: models[m]["params"] for n, m in names.items()},
        {n: models[m]["family"] for n, m in names.items()},
    )
    cpu_only = [n for n, m in names.items() if models[m]["task"] == "quantized"]
    tiers = tiers_for(SOURCE, metas, smoke_excluded=cpu_only)
    result = []
    for name, model_name in names.items():
        info = models[model_name]
        result.append(
            Entry(
                name=name,
                source=SOURCE,
                family=info["family"],
                factory=functools.partial(build, model_name, info["task"]),
                tier=tiers[name],
                tags=frozenset(TASK_TAGS[info["task"]]),
                devices=("cpu",) if info["task"] == "quantized" else ("cpu", "cuda"),
                params=metas[name].params,
                eager_ms=metas[name].eager_ms,
                description=f"torchvision.models.get_model({model_name!r}, weights=None)",
            )
        )
    return tuple(result)


def entries() -> list[Entry]:
    if unavailable():
        return []
    return list(_entries())
