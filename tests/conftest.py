"""Project-wide test options.

``--device cuda`` runs the compiler's parity tests on CUDA tensors with compiled
Triton kernels and enables tests marked ``gpu``; the default (cpu) runs Triton
kernels in Triton's interpreter and the C++ codegen. ``--nightly`` adds the tests marked
``nightly``: heavy end-to-end runs (cluster fault injection, pytest-xdist sessions, a training
benchmark row) whose features cheaper tests of the default run cover too; ``.ci/nightly`` runs them.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default="cpu", choices=("cpu", "cuda"),
                     help="device for compiler parity tests; cuda also enables tests marked gpu")
    parser.addoption("--nightly", action="store_true",
                     help="also run the tests marked nightly (the heavy end-to-end tier, .ci/nightly)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = []
    if config.getoption("--device") != "cuda":
        skips.append(("gpu", pytest.mark.skip(reason="needs a CUDA GPU: run with --device cuda")))
    if not config.getoption("--nightly"):
        skips.append(("nightly", pytest.mark.skip(reason="nightly tier: run with --nightly (.ci/nightly)")))
    for item in items:
        for marker, skip in skips:
            if marker in item.keywords:
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
