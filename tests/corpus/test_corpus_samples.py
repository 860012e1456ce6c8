"""Build and run a fixed sample of every source in eager, twice, deterministically.

The sample is pinned by name (cheap entries of several families and modalities), so the
test never depends on which entries the latest measurements put in which tier.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from harness.oracle import flatten_outputs

SAMPLE = {
    "corpus.torchvision_models": [
        "torchvision/squeezenet1_1", "torchvision/mobilenet_v3_small", "torchvision/lraspp_mobilenet_v3_large",
        "torchvision/quantized_shufflenet_v2_x0_5",
    ],
    "corpus.timm_models": ["timm/test_vit", "timm/test_efficientnet", "timm/test_convnext", "timm/lcnet_035"],
    "corpus.transformers_models": [
        "transformers/bert", "transformers/gpt2", "transformers/t5", "transformers/vit",
        "transformers/wav2vec2", "transformers/whisper",
    ],
    "corpus.opinfo_ops": [
        "opinfo/add-float32-0", "opinfo/nn.functional.conv2d-float32-0", "opinfo/sum-float32-0",
        "opinfo/cat-float32-0", "opinfo/mul-int64-0", "opinfo/exp-bfloat16-0",
    ],
}
CASES = [(module, name) for module, names in SAMPLE.items() for name in names]


def output_tensors(value):
    return [leaf for _, leaf in flatten_outputs(value) if isinstance(leaf, torch.Tensor)]


def _entry(module_name: str, name: str):
    module = importlib.import_module(module_name)
    if module.unavailable():
        pytest.skip(module.unavailable())
    return {e.name: e for e in module.entries()}[name]


def _run(entry) -> list[torch.Tensor]:
    built = entry.build("small")
    with torch.no_grad():
        return output_tensors(built.model(*built.inputs, **built.kwargs))


@pytest.mark.parametrize(("module_name", "name"), CASES, ids=[n for _, n in CASES])
def test_sample_builds_and_runs_deterministically(module_name: str, name: str) -> None:
    torch.set_num_threads(1)
    entry = _entry(module_name, name)
    first = _run(entry)
    second = _run(entry)  # a fresh build: same seed, same weights, same inputs
    assert first, f"{name} returned no tensor"
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert torch.equal(a, b), f"{name}: two seeded builds differ"
    floats = [t for t in first if t.is_floating_point()]
    assert all(torch.isfinite(t.float()).all() for t in floats[:4]), f"{name}: non-finite output"


FULL_SCALE = [
    ("corpus.timm_models", "timm/test_vit", (2, 3, 160, 160)),
    ("corpus.torchvision_models", "torchvision/squeezenet1_1", (2, 3, 224, 224)),
    ("corpus.transformers_models", "transformers/bert", (2, 128)),
]


@pytest.mark.parametrize(("module_name", "name", "shape"), FULL_SCALE, ids=[n for _, n, _ in FULL_SCALE])
def test_full_scale_uses_the_natural_input_size(module_name: str, name: str, shape: tuple[int, ...]) -> None:
    torch.set_num_threads(1)
    built = _entry(module_name, name).build("full")
    first_input = output_tensors([built.inputs, built.kwargs])[0]
    assert tuple(first_input.shape) == shape
    with torch.no_grad():
        assert output_tensors(built.model(*built.inputs, **built.kwargs))
