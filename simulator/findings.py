"""What a checked launch can find, and how it is reported.

A ``Finding`` is one defect at one place (kernel, source line, kind, argument);
repeats at the same place are counted, and the first occurrence is kept as the
example (program id, lane, address). ``SimulatorMemoryError`` carries every
finding of a launch plus the launch's accounting, and prints as a report a
compiler engineer can act on, ending with a one-command repro.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class Kind:
    """Finding kinds (the planted-bug suite checks each one)."""

    OUT_OF_BOUNDS = "out_of_bounds"  # an active lane outside the argument its pointer derives from
    WRONG_BUFFER = "wrong_buffer"  # ... and inside another argument (one buffer read through another's pointer)
    POISON = "poison"  # a masked-off lane's value (masked load without ``other``) reached a store or reduction
    UNINITIALIZED = "uninitialized"  # a read of output/workspace bytes nothing has written
    RACE_WRITE_WRITE = "race_write_write"  # two program ids wrote the same byte
    RACE_READ_WRITE = "race_read_write"  # one program id read a byte another one wrote
    ORDER_DEPENDENT = "order_dependent"  # the outputs change when the programs run in a shuffled order
    LIVENESS = "liveness"  # a program that does not finish under sequential semantics


ALL_KINDS = (Kind.OUT_OF_BOUNDS, Kind.WRONG_BUFFER, Kind.POISON, Kind.UNINITIALIZED, Kind.RACE_WRITE_WRITE,
             Kind.RACE_READ_WRITE, Kind.ORDER_DEPENDENT, Kind.LIVENESS)


@dataclass
class Finding:
    kind: str
    kernel: str
    line: int | None  # source line in the kernel's file
    source: str  # that line's text
    message: str  # what happened, in the domain's words (argument, shape/strides, offset, distance)
    program_id: tuple[int, int, int] | None = None
    lane: tuple[int, ...] | None = None  # index of the first offending lane inside the block
    arg: str | None = None
    access: str | None = None  # "load" | "store" | "atomic" | "reduce"
    count: int = 1  # offending lanes at this place, over the whole launch

    def key(self) -> tuple:
        return (self.kind, self.line, self.arg, self.access)

    def describe(self) -> str:
        where = f"{self.kernel}:{self.line}" if self.line is not None else self.kernel
        pid = f" program {self.program_id}" if self.program_id is not None else ""
        lane = f" lane {self.lane}" if self.lane is not None else ""
        more = f" ({self.count} lanes)" if self.count > 1 else ""
        text = f"[{self.kind}] {where}{pid}{lane}: {self.message}{more}"
        if self.source:
            text += f"\n    {self.line} | {self.source.strip()}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "kernel": self.kernel, "line": self.line, "message": self.message,
                "program_id": self.program_id, "lane": self.lane, "arg": self.arg, "access": self.access,
                "count": self.count}


@dataclass
class FindingLog:
    """Findings of one launch, merged by place."""

    findings: dict[tuple, Finding] = field(default_factory=dict)

    def add(self, finding: Finding) -> None:
        seen = self.findings.get(finding.key())
        if seen is None:
            self.findings[finding.key()] = finding
        else:
            seen.count += finding.count

    def __bool__(self) -> bool:
        return bool(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def all(self) -> list[Finding]:
        return list(self.findings.values())


class SimulatorMemoryError(RuntimeError):
    """A checked launch found memory-safety defects; ``findings`` lists them, ``repro`` reruns one."""

    def __init__(self, kernel: str, findings: list[Finding], repro: str | None = None,
                 accounting: Any = None) -> None:
        self.kernel = kernel
        self.findings = findings
        self.repro = repro
        self.accounting = accounting
        kinds = sorted({f.kind for f in findings})
        head = f"memory error in kernel {kernel}: {len(findings)} finding(s) ({', '.join(kinds)})"
        body = "\n".join(f.describe() for f in findings[:20])
        if len(findings) > 20:
            body += f"\n... and {len(findings) - 20} more"
        tail = f"\nrepro: {repro}" if repro else ""
        super().__init__(f"{head}\n{body}{tail}")

    @property
    def kinds(self) -> set[str]:
        return {f.kind for f in self.findings}


class SimulatorLivenessError(SimulatorMemoryError):
    """A program did not finish under sequential semantics (it spins or loops without end)."""
