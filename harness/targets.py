"""Targets: what a corpus entry is compiled with and where it runs.

``eager`` runs the model as written. The ``crucible-*`` targets compile with our
backend in strict mode (a compiler error is an error, never a silent fallback to
eager). Any other name is looked up as a registered Dynamo backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CRUCIBLE_TARGETS: dict[str, dict[str, Any]] = {
    # launch configs tuned in the first call, so a parity check runs the config later calls keep
    "crucible-triton": {"codegen": "triton", "strict": True, "tuning": "first_call"},
    "crucible-interpret": {"codegen": "triton", "strict": True},
    "crucible-sim": {"codegen": "triton", "strict": True},  # the interpreter's kernels, checked by simulator/
    "crucible-cpp": {"codegen": "cpp", "strict": True},
}


@dataclass(frozen=True)
class Target:
    name: str
    device: str  # "cpu" | "cuda"
    backend: str | None  # Dynamo backend name; None for eager
    options: dict = field(default_factory=dict)

    @property
    def is_crucible(self) -> bool:
        return self.name.startswith("crucible")


# Where the float64 reference run happens: "auto" = the target's device, falling back to the CPU
# when that fails (a GPU computes the fp64 reference of a large model in a fraction of the CPU's
# time); "cpu"; "device" (no fallback); "none" (parity against eager only).
REFERENCE_CHOICES = ("auto", "cpu", "device", "none")
# What one run of an entry does: a forward, or a forward, a seeded loss and a backward (harness.training).
MODES = ("inference", "train")


class TargetUnavailable(RuntimeError):
    """The target cannot run on this machine or in this installation."""


class TargetSyntaxError(ValueError):
    """A target name whose ``:key=value`` options cannot be read."""


def parse_target(name: str, device: str | None = None) -> Target:
    """A Target for ``name``; cheap (imports no torch), so the parent process can call it.

    ``device`` chooses where ``eager`` and Dynamo-backend targets run (default CPU);
    the crucible targets fix their device. A name may carry backend options after a colon,
    ``crucible-interpret:extern=none`` or ``inductor:max_autotune=true,coordinate_descent_tuning=true``
    (``true``/``false`` are booleans, anything else a string); they go to ``torch.compile(options=...)``
    and the target keeps its whole name in results. ``check_available`` validates them.
    """
    base, _, spec = name.partition(":")
    options = _parse_options(name, spec)
    if base == "eager":
        if options:
            raise TargetSyntaxError(f"target {name!r}: eager takes no options")
        return Target(name, device or "cpu", None)
    if base in CRUCIBLE_TARGETS:
        where = "cuda" if base == "crucible-triton" else "cpu"
        return Target(name, where, "crucible", {**CRUCIBLE_TARGETS[base], **options})
    return Target(name, device or "cpu", base, options)


def _parse_options(name: str, spec: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise TargetSyntaxError(f"target {name!r}: option {item!r} is not key=value "
                                    f"(e.g. crucible-interpret:extern=none)")
        value = value.strip()
        options[key.strip()] = {"true": True, "false": False}.get(value.lower(), value)
    if ":" in name and not options:
        raise TargetSyntaxError(f"target {name!r}: nothing after ':' (e.g. crucible-interpret:extern=none)")
    return options


def target_options_problem(name: str, device: str | None = None) -> str | None:
    """A one-line problem with the options in a target's name (syntax, or a crucible option the
    compiler refuses), or None. Imports the compiler only when a crucible target carries options."""
    try:
        target = parse_target(name, device)
    except TargetSyntaxError as exc:
        return str(exc)
    if target.backend == "crucible" and ":" in name:
        from compiler.config import Options

        try:
            Options.parse(target.options)
        except ValueError as exc:
            return f"target {name!r}: {exc}"
    return None


def base_name(target: Target) -> str:
    """The target's name without its options (``crucible-interpret`` for ``crucible-interpret:extern=none``)."""
    return target.name.partition(":")[0]


def default_target() -> str:
    """The best target for this machine: our Triton kernels on a GPU, else the interpreter."""
    import torch

    return "crucible-triton" if torch.cuda.is_available() else "crucible-interpret"


def check_available(target: Target) -> None:
    """Raise TargetUnavailable with a clear reason when ``target`` cannot run here."""
    import torch

    if target.device == "cuda" and not torch.cuda.is_available():
        raise TargetUnavailable(f"{target.name} needs a CUDA GPU and none is available")
    if target.backend is not None:
        resolve_backend(target)
    if target.backend == "crucible":
        from compiler.config import Options

        try:
            Options.parse(target.options)
        except ValueError as exc:
            raise TargetUnavailable(f"target {target.name!r}: {exc}") from None


def _crucible_backend() -> Callable[..., Any]:
    import torch._dynamo

    try:
        return torch._dynamo.lookup_backend("crucible")
    except Exception as lookup_error:  # noqa: BLE001
        # Not installed with ``pip install -e .`` (no entry point): import it directly.
        try:
            module = importlib.import_module("compiler.backend")
            return module.crucible_backend
        except Exception as import_error:  # noqa: BLE001 -- a half-written compiler can raise anything
            raise TargetUnavailable(
                f"the crucible backend is unavailable: lookup failed ({lookup_error}); "
                f"importing compiler.backend failed ({type(import_error).__name__}: {import_error})"
            ) from None  # the message already names both causes


def resolve_backend(target: Target) -> Callable[..., Any] | str:
    import torch._dynamo

    if target.backend == "crucible":
        return _crucible_backend()
    if target.backend not in torch._dynamo.list_backends(exclude_tags=()):
        raise TargetUnavailable(f"unknown target {target.name!r}: not 'eager', a crucible-* target "
                                f"or a registered Dynamo backend")
    return target.backend


def compile_model(target: Target, model: Any, dynamic: bool = False,
                  wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> Any:
    """The callable a target runs: the model itself for eager, else torch.compile's wrapper.

    ``dynamic=True`` compiles with dynamic shapes (``torch.compile(dynamic=True)``) for every target.
    ``wrap`` replaces a crucible target's backend by ``wrap(backend)`` (``harness.capture.CaptureProbe``);
    a backend named by string keeps torch's own handling of its options, so it is never wrapped."""
    import torch

    if target.backend is None:
        return model
    backend = resolve_backend(target)
    if wrap is not None and target.is_crucible:
        backend = wrap(backend)
    # The crucible compiler specializes on static shapes: dynamic=False makes Dynamo recompile for
    # a new shape instead of handing it symbolic sizes after the first recompile (detection models
    # call their heads with data-dependent box counts).
    shapes = True if dynamic else (False if target.is_crucible else None)
    return torch.compile(model, backend=backend, options=dict(target.options) or None, dynamic=shapes)

