"""The harness on a CUDA machine: crucible-triton through the CLI (run with --device cuda)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.gpu
def test_zoo_on_crucible_triton(tmp_path: Path, cli, load_json) -> None:
    out = tmp_path / "gpu.json"
    proc = cli("run", "--suite", "zoo", "--target", "crucible-triton", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = load_json(out)
    assert doc["run"]["gpu"]  # the GPU's name is recorded
    mlp = doc["by_name"]["zoo/mlp"]
    assert mlp["status"] == "pass", mlp["error"]
    assert mlp["kernels"] and mlp["kernels"] > 0
    # the Linear layers' matmuls are the vendor library's, recorded with their reason
    assert ("aten.addmm.default", "library_kernel") in {(r["op"], r["reason"]) for r in mlp["extern_ops"]}
    assert mlp["fallbacks"] == []
    # Whatever the compiler's state, the harness itself must not lose an entry.
    assert not [e["name"] for e in doc["entries"] if e["status"] in ("crash", "timeout", "oom")]
