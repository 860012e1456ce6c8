"""Project-wide test options.

``--device cuda`` runs the compiler's parity tests on CUDA tensors with compiled
Triton kernels and enables tests marked ``gpu``; the default (cpu) runs Triton
kernels in Triton's interpreter and the C++ codegen.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default="cpu", choices=("cpu", "cuda"),
                     help="device for compiler parity tests; cuda also enables tests marked gpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--device") == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run with --device cuda")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def seeded_torch() -> None:
    """Every test draws its random tensors from seed 0, whatever ran before it on its worker:
    a test's inputs do not depend on how pytest-xdist spread the tests (they did, and a one-in-
    forty input passed locally and failed in CI)."""
    import torch

    torch.manual_seed(0)


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--device")
