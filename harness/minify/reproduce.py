"""What a written repro script runs: the minimizer's own check of its graph, and its verdict.

Apart from ``harness.minify.check`` (the predicate) and ``harness.minify.worker`` (the isolated
worker), because it needs both: a failure that kills its process (a crash, a hang, memory) is
checked in a worker, anything else in the script's own process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.minify.case import GraphCase
from harness.minify.check import case_device, case_target, check_case, signature
from harness.minify.plugins import set_plugins
from harness.minify.worker import CheckWorker
from harness.status import Status

# Failures a check must not survive in the script's own process.
_DEADLY = (Status.CRASH, Status.TIMEOUT, Status.OOM)


def reproduce_main(forward: Callable[..., Any], inputs: list[Any], target: str, dtype: str,
                   expected: dict[str, Any], plugins: list[str], tolerance: Any = None) -> int:
    """1 when the expected failure (``expected["status"]`` and ``expected["signature"]``) reproduces,
    else 0; prints which."""
    set_plugins(plugins)
    gm = torch.fx.symbolic_trace(forward)
    case = GraphCase(gm, inputs, target, dtype, "repro", tolerance=tolerance)
    if expected["status"] in _DEADLY:
        with CheckWorker(device=case_target(target, case_device(case)).device, target=target) as worker:  # a crash must not be ours
            result = worker.check(case, target)
    else:
        result = check_case(case, target)
    got = signature(result)
    if result.status == expected["status"] and got == expected["signature"]:
        print(f"REPRODUCED on {target}: {got}\n  {result.error or ''}")
        return 1
    print(f"NOT REPRODUCED on {target}: expected {expected['signature']}, got {got}"
          + (f"\n  {result.error}" if result.error else ""))
    return 0
