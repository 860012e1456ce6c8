"""Expected results: the known failures of one suite on one target and device, as a CSV file.

A run reads the file of its suite, target and device (``crucible run --expected FILE``, else
``corpus/data/expected/<suite>.<target>.<device>.csv`` when it exists): an entry listed with a
status that fails that way is ``xfail``; one that passes is ``xpass`` (improved: the file is out of
date); one that fails otherwise, or an entry not listed that fails, is a failure of the run. So a
nightly job gates on new failures only, as PyTorch's benchmark runner does with its expected CSVs.
``crucible run --update-expected`` rewrites the file from the run (rows of entries the run did not
run are kept; a row whose status is unchanged keeps its reason, which is meant to be edited).

    # crucible expected results: suite smoke, target crucible-interpret, device cpu
    # made with torch 2.14.1, triton 3.8.0
    name,status,reason
    zoo/python_random,fail_accuracy,Dynamo's first compiled call draws from the state before random.seed

An entry's own ``ExpectedFailure`` (in its corpus source) is for failures by design, whatever the
suite (Inductor draws random numbers differently from eager); the file is for known bugs at a
version, and wins where both speak of an entry.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.engine import Expectation
from harness.result import Result
from harness.status import Kind, Status, status_of

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "corpus" / "data" / "expected"
_HEADER = ("name", "status", "reason")


@dataclass
class ExpectedResults:
    suite: str
    target: str
    device: str
    versions: str = ""  # "torch X, triton Y": what the file was made with
    rows: dict[str, Expectation] = field(default_factory=dict)


def default_path(suite: str, target: str, device: str) -> Path:
    """``corpus/data/expected/<suite>.<target>.<device>.csv`` (a target's options kept, made file-safe)."""
    safe = re.sub(r"[^A-Za-z0-9._=+-]", "_", target.replace(":", "@").replace(",", "+"))
    return DEFAULT_DIR / f"{suite}.{safe}.{device}.csv"


def load(path: str | Path, suite: str, target: str, device: str) -> ExpectedResults:
    """Read an expected-results file; a malformed one is a ValueError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"expected-results file {path}: {exc.strerror or exc}") from None
    expected = ExpectedResults(suite, target, device)
    lines = text.splitlines()
    for line in lines:
        if line.startswith("# made with "):
            expected.versions = line.removeprefix("# made with ").strip()
    body = [line for line in lines if not line.startswith("#") and line.strip()]
    reader = csv.reader(body)
    header = next(reader, None)
    if header is None:
        return expected
    if tuple(h.strip() for h in header) != _HEADER:
        raise ValueError(f"expected-results file {path}: the first row must be {','.join(_HEADER)}, got {header}")
    for number, row in enumerate(reader, start=2):
        if len(row) != 3:
            raise ValueError(f"expected-results file {path}, row {number}: want name,status,reason, got {row}")
        name, status, reason = (cell.strip() for cell in row)
        try:
            parsed = status_of(status)
        except ValueError as exc:
            raise ValueError(f"expected-results file {path}, row {number}: {exc}") from None
        if parsed.kind is not Kind.FAILED:
            raise ValueError(f"expected-results file {path}, row {number}: {status!r} is not a failure status; "
                             f"list only failures (an entry not listed is expected to pass)")
        expected.rows[name] = Expectation(parsed.value, reason)
    return expected


def updated(expected: ExpectedResults, results: list[Result], versions: str) -> tuple[ExpectedResults, list[str]]:
    """The file rewritten from ``results`` (rows of other entries kept) and the changes, one line each."""
    rows = dict(expected.rows)
    changes = []
    for r in results:
        before = rows.get(r.name)
        if r.status == Status.XFAIL:  # as the file says, or as the entry's own ExpectedFailure says
            continue
        status = _failure_of(r)
        if status is None:
            if before is not None and r.counts:
                del rows[r.name]
                changes.append(f"- {r.name}: {before.status} -> {r.status} (removed)")
            continue
        if before is not None and before.status == status:
            continue
        reason = (r.error or "").splitlines()[0][:200] if r.error else status
        rows[r.name] = Expectation(status, reason)
        changes.append(f"+ {r.name}: {before.status if before else 'pass'} -> {status}")
    return ExpectedResults(expected.suite, expected.target, expected.device, versions, rows), changes


def _failure_of(result: Result) -> str | None:
    """The failure status the file should list for this result, or None (passes, or not the compiler's)."""
    return result.status.value if result.against_compiler else None


def dump(expected: ExpectedResults) -> str:
    out = io.StringIO()
    out.write(f"# crucible expected results: suite {expected.suite}, target {expected.target}, "
              f"device {expected.device}\n")
    out.write(f"# made with {expected.versions}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_HEADER)
    for name in sorted(expected.rows):
        writer.writerow([name, expected.rows[name].status, expected.rows[name].reason])
    return out.getvalue()
