"""JUnit XML of a run, for CI systems' test views: one testcase per entry.

A ``testsuite`` per corpus source, testcases named by entry (``classname`` = ``crucible.<target>.<source>``
so runs of several targets sit side by side). What a testcase says comes from the result's
``harness.status.Status`` and phase, never from a list of statuses here:

- a failure of the compiler under test (``Result.against_compiler``) is a ``<failure>`` whose ``type``
  is the status and whose ``message`` is the error signature the report clusters by;
- everything else that did not pass is ``<skipped>`` with the reason: the model's own problems (eager
  failed or is nondeterministic, or it crashed, hung or ran out of memory while building or running
  in eager), entries that do not run here, and expected failures (``xfail``, with what was expected);
- a pass is a plain testcase; an ``xpass`` (expected to fail, passed) also carries the property
  ``improved``.

Testcase properties are the result fields flagged ``junit`` in ``harness.result`` (``JUNIT_FIELDS``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.report import error_signature, expectation_of
from harness.result import JUNIT_FIELDS, Result
from harness.status import Status

# Characters XML 1.0 forbids (ANSI escapes and other control codes appear in compiler output).
_INVALID_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _INVALID_XML.sub("?", text)


def skip_reason(result: Result) -> str | None:
    """Why a result that is no failure of the compiler and no pass is skipped; None otherwise.
    (The pytest plugin skips with the same words.)"""
    if result.status.passed or result.against_compiler:
        return None
    message = result.error or ""
    if result.status == Status.XFAIL:
        expected, reason = expectation_of(result)
        return f"xfail: expected {expected} ({reason}): {message}"
    if result.status.failed:  # a worker death while only the model ran
        return f"{result.status} in {result.phase} (the model's own, not the compiler's): {message}"
    return f"{result.status}: {message}"


def properties(result: Result) -> list[tuple[str, str]]:
    """(name, value) of the result's ``JUNIT_FIELDS`` that are set, and ``improved`` for an xpass."""
    props = [(name, str(getattr(result, name))) for name in JUNIT_FIELDS if getattr(result, name) is not None]
    if result.status == Status.XPASS:
        expected, reason = expectation_of(result)
        props.append(("improved", f"expected {expected} ({reason}), now passes: update the expected file"))
    return props


def _testcase(result: Result, source: str, target: str) -> ET.Element:
    case = ET.Element("testcase", name=_clean(result.name), classname=f"crucible.{target}.{source}",
                      time=f"{result.wall_s or 0.0:.3f}")
    skipped = skip_reason(result)
    if skipped is not None:
        ET.SubElement(case, "skipped", message=_clean(skipped[:1000]))
    elif result.against_compiler:
        message = result.error or ""
        failure = ET.SubElement(case, "failure", type=result.status.value,
                                message=_clean(f"{result.status} in {result.phase}: {error_signature(message)}"))
        failure.text = _clean("\n".join(filter(None, [message, result.error_detail or ""])))
    props = ET.SubElement(case, "properties")
    for name, value in properties(result):
        ET.SubElement(props, "property", name=name, value=_clean(value))
    return case


def junit_document(run: dict[str, Any], results: list[Result]) -> ET.ElementTree:
    root = ET.Element("testsuites", name=f"crucible {run['id']}")
    by_source: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_source[r.suite or run["suite"]].append(r)
    totals: dict[str, int] = defaultdict(int)
    for source in sorted(by_source):
        items = by_source[source]
        counts = {"tests": len(items), "failures": sum(r.against_compiler for r in items),
                  "skipped": sum(skip_reason(r) is not None for r in items), "errors": 0}
        suite = ET.SubElement(root, "testsuite", name=f"{source} on {run['target']}",
                              time=f"{sum(r.wall_s or 0.0 for r in items):.3f}",
                              **{k: str(v) for k, v in counts.items()})
        suite.extend(_testcase(r, source, run["target"]) for r in items)
        for k, v in counts.items():
            totals[k] += v
    for k, v in totals.items():
        root.set(k, str(v))
    return ET.ElementTree(root)


def write_junit(path: str | Path, run: dict[str, Any], results: list[Result]) -> None:
    tree = junit_document(run, results)
    ET.indent(tree)
    tree.write(str(path), encoding="utf-8", xml_declaration=True)
