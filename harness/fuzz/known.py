"""Known findings: failures already written up (``harness/FINDINGS.md``) that a campaign reports
as ``known`` instead of new, so a CI gate stays green on them without hiding them.

Each entry matches a failure record by target (glob), status, op (glob) and a substring of the
error, and carries the reason and the FINDINGS.md section. Known findings still appear in every
summary, report and store, with their hit counts; they never change the exit status.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KnownFinding:
    target: str  # glob over target names
    status: str
    op: str  # glob over "aten.<op>.<overload>"
    error: str  # substring of the error message ("" matches any)
    reason: str  # one line, with the FINDINGS.md section it is written up in


KNOWN_FINDINGS: list[KnownFinding] = [
    KnownFinding("crucible-*", "fail_accuracy", "aten.var_mean.correction", "NaN positions",
                 "ATen's CPU var_mean returns mean NaN for inputs holding +-inf (torch.mean gives +-inf); "
                 "FINDINGS.md: 'var_mean's mean is NaN where mean is inf'"),
    KnownFinding("aot_eager", "fail_accuracy", "aten.upsample_bilinear2d.vec", "NaN positions",
                 "torch's upsample_bilinear2d decomposition: 0 * inf from a zero-weight neighbour; "
                 "FINDINGS.md: 'upsample_bilinear2d: torch's decomposition gives NaN'"),
    KnownFinding("inductor", "fail_accuracy", "aten.upsample_bilinear2d.vec", "NaN positions",
                 "as for aot_eager (the same decomposition); FINDINGS.md: 'upsample_bilinear2d'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::gelu", "inf positions",
                 "ATen's CPU gelu kernel gives NaN for +inf and inf at finfo.max; the rule is right; "
                 "FINDINGS.md: 'ATen's CPU gelu gives NaN for +inf'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::native_layer_norm", "out[1]: NaN positions",
                 "empty normalized shape: kernel's mean 0, rule's NaN; "
                 "FINDINGS.md: 'native_layer_norm over an empty normalized shape'"),
]


def match_known(target: str, record: dict[str, Any]) -> str | None:
    """The reason of the known finding ``record`` matches, or None."""
    for known in KNOWN_FINDINGS:
        if (fnmatch.fnmatchcase(target, known.target) and record.get("status") == known.status
                and fnmatch.fnmatchcase(record.get("op") or "", known.op)
                and known.error in (record.get("error") or "")):
            return known.reason
    return None
