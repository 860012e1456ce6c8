"""The result of running one subject (a corpus entry, a generated graph, a minimizer case, a corpus
check, a decomposition-rule case) on one target: one frozen, typed record.

Its fields are the single definition of what a result holds. The store's ``results`` columns
(``harness.store``), the JSON export, JUnit's properties, the HTML report and the pytest plugin
read them from here: a new field is added here, with its one-line description, and nowhere else.
A field's type says how it is stored: text, a number, or JSON (lists and dicts).

The engine (``harness.engine``) fills a ``Draft`` (a dict that refuses names that are no field)
while a subject runs and freezes it into a ``Result`` at the end.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from harness.status import Phase, Status, against_compiler, counts, status_of


def _f(doc: str, *, junit: bool = False, stored: bool = True) -> Any:
    """A result field: None unless set; ``junit``: also a JUnit property and a pytest user property;
    ``stored=False``: not a column of ``results`` (joined from another table when read, or only
    travelling from a worker to its campaign)."""
    return field(default=None, metadata={"doc": doc, "junit": junit, "stored": stored})


@dataclass(frozen=True)
class Result:
    # -- what ran where, and how it ended
    name: str = field(metadata={"doc": "the subject's name: an entry name, fuzz/<hash>, decomp/<rule>, ..."})
    target: str = field(metadata={"doc": "the target it ran on, with its options (crucible-interpret:extern=none)"})
    status: Status = field(metadata={"doc": "how it ended (harness.status.Status)"})
    phase: str | None = _f("the phase it ended in (harness.status.Phase)", junit=True)
    suite: str | None = _f("the entry's source (zoo, timm, ...)")
    mode: str | None = _f("inference, or train: gradients graded too", junit=True)
    dynamic: int | None = _f("1 when compiled with dynamic shapes and run at several sizes")
    expected: str | None = _f("for xfail and xpass: the status that was expected, and why")
    error: str | None = _f("the one-line error, or why the oracle failed it")
    error_detail: str | None = _f("the traceback's tail, or a crashed worker's log")
    failing_layer: str | None = _f("failures of the target: the layer it is in, capture, aot_autograd, target or "
                                   "unknown (harness.status.Layer)", junit=True)
    attribution_s: float | None = _f("seconds re-running the failure on the layers below the target")
    # -- capture analysis
    graphs: int | None = _f("graphs Dynamo captured", junit=True)
    graph_breaks: int | None = _f("graph breaks", junit=True)
    capture_coverage: float | None = _f("ATen ops run inside captured graphs / ATen ops of the eager run", junit=True)
    captured_ops: int | None = _f("ATen ops run inside captured graphs")
    eager_ops: int | None = _f("ATen ops of the eager run")
    break_reasons: list | None = _f("graph breaks: [{reason, category, frame}]")
    capture_error: str | None = _f("why the capture analysis failed (information, not the verdict)")
    # -- the parity oracle
    max_abs_err: float | None = _f("largest absolute difference from eager")
    max_rel_err: float | None = _f("largest relative difference from eager")
    rmse_ratio: float | None = _f("compiled RMSE / eager RMSE against float64 (worst output)", junit=True)
    cosine: float | None = _f("cosine similarity with eager (worst output)")
    reference: str | None = _f("where the float64 reference ran, or why there is none")
    grads: int | None = _f("train mode: gradients graded")
    grad_max_abs_err: float | None = _f("train mode: largest absolute gradient difference from eager")
    grad_max_rel_err: float | None = _f("train mode: largest relative gradient difference from eager")
    grad_rmse_ratio: float | None = _f("train mode: gradients' RMSE ratio against float64", junit=True)
    grad_cosine: float | None = _f("train mode: gradients' cosine similarity with eager")
    grad_note: str | None = _f("train mode: why only the parameters' gradients are graded")
    # -- where the time went
    wall_s: float | None = _f("seconds from dispatch to result, in the worker")
    load_s: float | None = _f("seconds the worker took to find the subject (listing its source)")
    build_s: float | None = _f("seconds building the model and its inputs")
    eager_s: float | None = _f("seconds of the eager phase")
    eager_calls_s: list | None = _f("seconds of each eager call, in order")
    reference_s: float | None = _f("seconds of the float64 reference")
    capture_s: float | None = _f("seconds of the capture analysis when it ran apart")
    compile_s: float | None = _f("seconds of the first compiled call (compile included)", junit=True)
    run_s: float | None = _f("seconds of the second compiled call", junit=True)
    # -- what the compiler's own reports say (crucible targets)
    kernels: int | None = _f("generated kernels", junit=True)
    externs: int | None = _f("extern (ATen) calls left in compiled graphs", junit=True)
    extern_ops: list | None = _f("extern calls: [{op, reason, calls, message}]")
    fallbacks: list | None = _f("graphs that fell back to eager: [{graph, kind, reason, pass, message}]")
    refused_fusions: list | None = _f("refused fusions: [{reason, count, example}]")
    failed_pass: str | None = _f("the compiler pass that raised (crucible targets)")
    # -- the simulator (crucible-sim), for the run phase
    bytes_moved: float | None = _f("bytes the run phase's kernels loaded and stored")
    ideal_bytes: float | None = _f("bytes they would move reading inputs once and writing outputs once")
    est_h200_s: float | None = _f("roofline estimate of their time on an H200")
    traffic_ratio: float | None = _f("the worst kernel's bytes moved / ideal bytes")
    traffic_kernel: str | None = _f("the kernel with the worst traffic ratio")
    memory_kernels: str | None = _f("kernels with memory findings, comma-separated")
    # -- train mode and dynamic shapes
    backward_graphs: int | None = _f("train mode: compiled backward graphs reached from the outputs")
    sizes: list | None = _f("--dynamic: per size {batch, status, rmse_ratio, graphs, error}")
    recompiles: int | None = _f("--dynamic: graphs compiled after the first size", junit=True)
    guard_failures: int | None = _f("--dynamic: guards that failed")
    dynamic_note: str | None = _f("--dynamic: sizes dropped, or why it ran at one size")
    # -- the model and the worker
    model_copy: str | None = _f("how the runs got their copies of the model when deepcopy failed")
    params: int | None = _f("parameters of the model")
    input_shapes: list | None = _f("shapes of the first input tensors")
    worker_threads: int | None = _f("torch threads of the worker that ran it")
    worker_gpu: str | None = _f("the CUDA device the worker was pinned to")
    worker_host: str | None = _f("cluster runs: the machine that ran it, and its worker's address")
    worker_build: str | None = _f("cluster runs: the worker's commit, sources digest, torch and triton")
    # -- generated graphs, minimizer cases and decomposition rules
    op: str | None = _f("the op a failure is charged to")
    diverged: str | None = _f("the first value that diverges when every intermediate is an output, and why")
    prefix: int | None = _f("nodes of the shortest prefix failing the same way")
    failing_outputs: list | None = _f("indices of the output leaves that failed the oracle")
    allowances: dict | None = _f("oracle allowances a pass needed: {allowance: outputs}")
    rounding_spread: float | None = _f("the rounding-noise references' error the oracle allowed")
    cases: int | None = _f("decomposition rules: valid generated cases")
    failing_case: str | None = _f("decomposition rules: the failing case, as text")
    repro: str | None = _f("decomposition rules: a standalone script reproducing the failure")
    covered: str | None = _f("fuzz --coverage: the compiler lines this run executed first in its worker "
                             "(harness.fuzz.coverage.CoverageMap JSON); merged into the campaign's map, never "
                             "a column of results", stored=False)
    # -- joined from the store's ``minimized`` table (crucible minify), never a column of ``results``
    minimized: dict | None = _f("the minimized repro of this failure", stored=False)

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", status_of(self.status))
        if isinstance(self.phase, Phase):
            object.__setattr__(self, "phase", self.phase.value)

    @property
    def counts(self) -> bool:
        """Counts in pass rates: its eager run worked and it ran here (``harness.status.counts``)."""
        return counts(self.status, self.phase)

    @property
    def against_compiler(self) -> bool:
        """A failure of the compiler under test (``harness.status.against_compiler``)."""
        return against_compiler(self.status, self.phase)

    def replace(self, **changes: Any) -> Result:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON export's form: every field, the status as its value; no None fields dropped."""
        out = {f.name: getattr(self, f.name) for f in FIELDS}
        out["status"] = self.status.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """A result from a stored row or a JSON export (unknown keys, from other versions, are ignored)."""
        return cls(**{k: v for k, v in data.items() if k in FIELD_NAMES})


FIELDS: tuple[dataclasses.Field, ...] = dataclasses.fields(Result)
FIELD_NAMES = frozenset(f.name for f in FIELDS)
_HINTS = typing.get_type_hints(Result)


def field_type(name: str) -> str:
    """How a field is stored: "text", "integer", "real" or "json"."""
    hint = str(_HINTS[name])
    if "list" in hint or "dict" in hint:
        return "json"
    if "int" in hint:
        return "integer"
    if "float" in hint:
        return "real"
    return "text"


STORED_FIELDS = tuple(f.name for f in FIELDS if f.metadata.get("stored", True))
JSON_FIELDS = tuple(name for name in STORED_FIELDS if field_type(name) == "json")
JUNIT_FIELDS = tuple(f.name for f in FIELDS if f.metadata.get("junit"))


class Draft(dict):
    """A result being filled in: a dict that refuses a name no ``Result`` field has (a typo would
    otherwise be a value silently lost)."""

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in FIELD_NAMES:
            raise KeyError(f"{key!r} is not a field of harness.result.Result")
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def freeze(self) -> Result:
        return Result(**self)
