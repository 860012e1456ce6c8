"""JUnit XML of a run, for CI systems' test views: one testcase per entry.

A ``testsuite`` per corpus source, testcases named by entry (``classname`` = ``crucible.<target>.<source>``
so runs of several targets sit side by side). Compiler failures (``harness.status.COMPILER_STATUSES``
other than pass) are ``<failure>`` elements whose ``message`` is the error signature the report
clusters by and whose ``type`` is the status; entries that fail eager, are skipped or fail as expected
are ``<skipped>`` with the reason (never counted against the compiler).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.report import error_signature
from harness.status import Status

_SKIPPED = (Status.EAGER_FAIL, Status.EAGER_NONDETERMINISTIC, Status.SKIPPED, Status.XFAIL)
_METRICS = ("phase", "mode", "graphs", "graph_breaks", "capture_coverage", "rmse_ratio", "grad_rmse_ratio",
            "compile_s", "run_s", "kernels", "externs", "recompiles")


# Characters XML 1.0 forbids (ANSI escapes and other control codes appear in compiler output).
_INVALID_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _INVALID_XML.sub("?", text)


def _testcase(result: dict[str, Any], target: str) -> ET.Element:
    case = ET.Element("testcase", name=result["name"], classname=f"crucible.{target}.{result['suite']}",
                      time=f"{result.get('wall_s') or 0.0:.3f}")
    status = result["status"]
    message = result.get("error") or ""
    if status in _SKIPPED:
        ET.SubElement(case, "skipped", message=_clean(f"{status}: {message}"[:1000]))
    elif status != Status.PASS:
        failure = ET.SubElement(case, "failure", type=status,
                                message=_clean(f"{status} in {result.get('phase')}: {error_signature(message)}"))
        failure.text = _clean("\n".join(filter(None, [message, result.get("error_detail") or ""])))
    props = ET.SubElement(case, "properties")
    for key in _METRICS:
        if result.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=str(result[key]))
    return case


def junit_document(run: dict[str, Any], results: list[dict[str, Any]]) -> ET.ElementTree:
    root = ET.Element("testsuites", name=f"crucible {run['id']}")
    by_source: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_source[r.get("suite") or run["suite"]].append(r)
    totals = defaultdict(int)
    for source in sorted(by_source):
        items = by_source[source]
        cases = [_testcase({**r, "suite": source}, run["target"]) for r in items]
        counts = {"tests": len(cases),
                  "failures": sum(r["status"] not in _SKIPPED and r["status"] != Status.PASS for r in items),
                  "skipped": sum(r["status"] in _SKIPPED for r in items), "errors": 0}
        suite = ET.SubElement(root, "testsuite", name=f"{source} on {run['target']}",
                              time=f"{sum(r.get('wall_s') or 0.0 for r in items):.3f}",
                              **{k: str(v) for k, v in counts.items()})
        suite.extend(cases)
        for k, v in counts.items():
            totals[k] += v
    for k, v in totals.items():
        root.set(k, str(v))
    return ET.ElementTree(root)


def write_junit(path: str | Path, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
    tree = junit_document(run, results)
    ET.indent(tree)
    tree.write(str(path), encoding="utf-8", xml_declaration=True)
