"""Targets: what a subject is compiled with and where it runs, parsed and validated once.

``eager`` runs the model as written. The ``crucible-*`` targets compile with our backend in strict
mode (a compiler error is an error, never a silent fallback to eager). Any other name is a
registered Dynamo backend. A name may carry backend options after a colon
(``crucible-interpret:extern=none``, ``inductor:max_autotune=true``); they reach the compiler on
every path that compiles: corpus entries, fuzz graphs, minimizer cases.

``parse_target`` reads a name without importing torch; ``validate_target`` (the command line calls
it before anything runs) also checks that the backend exists, that it accepts the options, and
that the device is there; ``Target.compile`` is the one function that compiles for a target.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Every Crucible target poisons the buffers its wrappers allocate (NaN, an integer's largest value), so a
# kernel leaving part of an output unwritten fails on every run, not only when the allocator's memory
# held something else than the right values (``crucible-cpp:poison=false`` turns it off).
CRUCIBLE_TARGETS: dict[str, dict[str, Any]] = {
    # launch configs tuned in the first call, so a parity check runs the config later calls keep
    "crucible-triton": {"codegen": "triton", "strict": True, "tuning": "first_call", "poison": True},
    "crucible-interpret": {"codegen": "triton", "strict": True, "poison": True},
    # the interpreter's kernels, checked by simulator/ (which marks fresh bytes unwritten instead)
    "crucible-sim": {"codegen": "triton", "strict": True, "poison": True},
    "crucible-cpp": {"codegen": "cpp", "strict": True, "poison": True},
}
# Targets whose interpreted Triton kernels run under the simulator's memory checks.
CHECKED_TARGETS = ("crucible-sim",)

# Where the float64 reference run happens: "auto" = the target's device, falling back to the CPU
# when that fails (a GPU computes the fp64 reference of a large model in a fraction of the CPU's
# time); "cpu"; "device" (no fallback); "none" (parity against eager only).
REFERENCE_CHOICES = ("auto", "cpu", "device", "none")
# What one run of an entry does: a forward, or a forward, a seeded loss and a backward (harness.training).
MODES = ("inference", "train")
# How a function reaches the compiler: through Dynamo (``torch.compile``, as a model is), or as an
# ATen FX graph handed to the backend directly (fuzz graphs and minimizer cases: no bytecode analysis).
CAPTURES = ("dynamo", "fx")


class TargetError(ValueError):
    """A target that cannot be used as written: unknown, bad options, or its device is missing."""


class TargetUnavailable(RuntimeError):
    """The target cannot run in this process (raised in a worker: the result is ``fail_compile``)."""


@dataclass(frozen=True)
class Target:
    name: str  # as given, options included: results are stored under it
    device: str  # "cpu" | "cuda"
    backend: str | None  # Dynamo backend name ("crucible" for ours); None for eager
    options: dict = field(default_factory=dict)

    @property
    def base(self) -> str:
        """The name without its options (``crucible-interpret`` for ``crucible-interpret:extern=none``)."""
        return self.name.partition(":")[0]

    @property
    def is_crucible(self) -> bool:
        return self.backend == "crucible"

    @property
    def checked(self) -> bool:
        """Its interpreted kernels run under the simulator's memory checks."""
        return self.base in CHECKED_TARGETS

    def compile(self, fn: Callable[..., Any], inputs: list | tuple = (), *, capture: str = "dynamo",
                dynamic: bool = False, wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
                ) -> Callable[..., Any]:
        """``fn`` compiled for this target, with every option of the target; the callable runs it.

        ``capture="dynamo"``: through ``torch.compile`` (``dynamic=True`` compiles with dynamic shapes;
        a crucible target otherwise specializes on static shapes, so Dynamo recompiles for a new
        shape instead of handing it symbolic sizes); ``wrap`` replaces a crucible target's backend by
        ``wrap(backend)`` (the capture analysis rides along that way). ``capture="fx"``: ``fn`` (an
        ATen FX graph, or a function of ``inputs`` traced to one with Crucible's decompositions for
        crucible targets) goes straight to the backend: no bytecode analysis."""
        if capture not in CAPTURES:
            raise ValueError(f"capture={capture!r}: choose one of {', '.join(CAPTURES)}")
        if self.backend is None:
            return fn
        check_available(self)
        import torch

        if capture == "dynamo":
            backend: Any = self.backend
            if self.is_crucible:
                backend = _crucible_backend() if wrap is None else wrap(_crucible_backend())
            shapes = True if dynamic else (False if self.is_crucible else None)
            return torch.compile(fn, backend=backend, options=dict(self.options) or None, dynamic=shapes)
        if self.is_crucible:
            import compiler

            gm = fn if _is_graph(fn) else compiler.trace_aten(fn, *inputs)
            return compiler.compile_graph(gm, list(inputs), **self.options)
        gm = fn if _is_graph(fn) else torch.fx.symbolic_trace(fn)
        return _backend_callable(self)(gm, list(inputs))


def _is_graph(fn: Any) -> bool:
    import torch.fx

    return isinstance(fn, torch.fx.GraphModule)


def parse_target(name: str, device: str | None = None) -> Target:
    """A Target for ``name``; cheap (imports no torch), so the parent process can call it.

    ``device`` chooses where ``eager`` and Dynamo-backend targets run (default CPU); the crucible
    targets fix their device. Options after a colon: ``key=value`` pairs, comma-separated;
    ``true``/``false`` are booleans, integers and decimals numbers, anything else a string.
    Raises TargetError on syntax only: ``validate_target`` checks the rest."""
    base, _, spec = name.partition(":")
    if not base.strip():
        raise TargetError(f"target {name!r}: no name before ':' (e.g. crucible-interpret, inductor)")
    options = _parse_options(name, spec)
    if base == "eager":
        if options:
            raise TargetError(f"target {name!r}: eager takes no options")
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
            raise TargetError(f"target {name!r}: option {item!r} is not key=value "
                              f"(e.g. crucible-interpret:extern=none)")
        options[key.strip()] = _option_value(value.strip())
    if ":" in name and not options:
        raise TargetError(f"target {name!r}: nothing after ':' (e.g. crucible-interpret:extern=none)")
    return options


def _option_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def validate_target(name: str, device: str | None = None) -> Target:
    """The Target for ``name``, or a TargetError whose one line names the problem and what to do:
    unknown name, options the backend refuses, a CUDA target on a machine without a GPU."""
    target = parse_target(name, device)
    if target.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise TargetError(f"target {name!r} needs a CUDA GPU and none is available "
                              f"(on this machine use crucible-interpret, crucible-cpp or --device cpu)")
    if target.backend is None:
        return target
    if target.is_crucible:
        from compiler.config import Options

        try:
            Options.parse(target.options)
        except ValueError as exc:
            raise TargetError(f"target {name!r}: {exc}") from None
        return target
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if target.backend not in known:
        close = difflib.get_close_matches(target.backend, [*known, "eager", *CRUCIBLE_TARGETS], n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise TargetError(f"unknown target {target.base!r}: not 'eager', a crucible target "
                          f"({', '.join(CRUCIBLE_TARGETS)}) or a registered Dynamo backend{hint}")
    if target.options:
        _check_backend_options(target)
    return target


def _check_backend_options(target: Target) -> None:
    """Build the backend as ``torch.compile`` would with the target's options: Inductor checks the
    names and types of its options then; any other backend must accept an ``options`` argument."""
    try:
        backend = _backend_callable(target)
    except RuntimeError as exc:  # Inductor: "Unexpected optimization option X, known options are [...]"
        text = str(exc)
        if text.startswith("Unexpected optimization option"):
            bad = text.split()[3].rstrip(",")
            import torch._inductor.config as inductor_config

            close = difflib.get_close_matches(bad, list(inductor_config.get_config_copy()), n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else " (see torch._inductor.config)"
            raise TargetError(f"target {target.name!r}: Inductor has no option {bad!r}{hint}") from None
        raise TargetError(f"target {target.name!r}: {text.splitlines()[0][:300]}") from None
    if target.backend == "inductor":
        return
    # Any other backend receives the options as ``options=`` (as torch.compile passes them); whether it
    # takes them shows only when it compiles, so compile a one-op function with them now. AOTAutograd's
    # backends (aot_eager, ...) accept and drop them with a logged warning: that is a refusal too.
    import logging

    import torch
    import torch._dynamo

    dropped: list[str] = []

    class _Dropped(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "ignoring extra kwargs" in record.getMessage():
                dropped.append(record.getMessage())

    handler, log = _Dropped(logging.WARNING), logging.getLogger("torch._dynamo")
    log.addHandler(handler)
    torch._dynamo.reset()
    try:
        torch.compile(lambda x: x.sin(), backend=backend)(torch.ones(2))
        if dropped:
            raise TargetError(f"target {target.name!r}: the Dynamo backend {target.backend!r} takes no options "
                              f"(it ignores {target.options}); drop ':{target.name.partition(':')[2]}'")
    except TargetError:
        raise
    except Exception as exc:  # noqa: BLE001 -- whatever the backend says, it refused these options
        inner = exc
        while getattr(inner, "inner_exception", None) is not None or inner.__cause__ is not None:
            inner = getattr(inner, "inner_exception", None) or inner.__cause__
        raise TargetError(f"target {target.name!r}: the Dynamo backend {target.backend!r} refuses the options "
                          f"{target.options} ({type(inner).__name__}: {str(inner).splitlines()[0][:200]})") from None
    finally:
        log.removeHandler(handler)
        torch._dynamo.reset()


def _backend_callable(target: Target) -> Callable[..., Any]:
    """The backend as ``torch.compile(backend=..., options=...)`` builds it (options applied), for
    graphs handed to it directly."""
    import torch

    options = dict(target.options) or None
    if target.backend == "inductor":
        return torch._TorchCompileInductorWrapper(None, options, False)
    return torch._TorchCompileWrapper(resolve_backend(target), None, options, False)


def default_target() -> str:
    """The best target for this machine: our Triton kernels on a GPU, else the interpreter."""
    import torch

    return "crucible-triton" if torch.cuda.is_available() else "crucible-interpret"


def check_available(target: Target) -> None:
    """Raise TargetUnavailable with a clear reason when ``target`` cannot run in this process."""
    import torch

    if target.device == "cuda" and not torch.cuda.is_available():
        raise TargetUnavailable(f"{target.name} needs a CUDA GPU and none is available")
    if target.backend is not None:
        resolve_backend(target)


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
