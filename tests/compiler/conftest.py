"""Shared fixtures of the compiler tests: one test body, every codegen of the device."""

from __future__ import annotations

import pytest


def codegens_for(device: str) -> list[str]:
    return ["triton"] if device == "cuda" else ["triton", "cpp"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "codegen" in metafunc.fixturenames:
        device = metafunc.config.getoption("--device")
        metafunc.parametrize("codegen", codegens_for(device))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True, scope="session")
def private_kernel_cache(tmp_path_factory: pytest.TempPathFactory):
    import os

    os.environ.setdefault("CRUCIBLE_CACHE_DIR", str(tmp_path_factory.mktemp("crucible-cache")))
    yield
