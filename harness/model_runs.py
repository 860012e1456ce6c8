"""One run of an entry's model: a fresh copy of model and inputs on a device in a dtype, seeded,
inference or a training step; and the float64 reference runs the oracle grades against.

Every run (eager twice, the reference, capture analysis, the compiled run) gets its own copy of the
model and of the inputs: a run may update buffers or mutate its inputs in place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from corpus.entry import Entry
from harness.errors import describe_error
from harness.oracle import outputs_identical
from harness.training import train_step

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}


def cast(value: Any, device: str, dtype: torch.dtype | None) -> Any:
    """Move tensors to ``device``; floating tensors also to ``dtype`` (when given)."""
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device=device)
    if isinstance(value, (list, tuple)):
        items = [cast(v, device, dtype) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return type(value)((k, cast(v, device, dtype)) for k, v in value.items())
    return value


class ModelCopies:
    """Hands out a fresh copy of an entry's model for every run (eager, reference, capture, compiled).

    No run may change another's model: the float64 reference converts its copy in place, eager runs
    update buffers (running stats, caches). The built model itself is never run. When
    ``copy.deepcopy`` fails (an attribute that raises on copy: a config whose ``__getattr__`` raises,
    a lock, an open file), each copy is rebuilt from the entry's seeded factory instead, which gives
    the same weights."""

    def __init__(self, entry: Entry, scale: str, model: Any) -> None:
        self.entry, self.scale, self.model = entry, scale, model
        self.copy_error: str | None = None

    def fresh(self, device: str, dtype: torch.dtype | None) -> Any:
        model = None
        if self.copy_error is None:
            try:
                model = copy.deepcopy(self.model)
            except Exception as exc:  # noqa: BLE001 -- any attribute may refuse to be copied
                self.copy_error = describe_error(exc)[0]
        if model is None:
            model = self.entry.build(self.scale).model
        if isinstance(model, torch.nn.Module):
            model = model.to(device=device)
            if dtype is not None:
                model = model.to(dtype=dtype)
        return model


def _copy(value: Any) -> Any:
    # Inputs: a model may mutate them in place, so every run gets its own copy.
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001
        return value


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def call_seeded(model: Any, args: tuple, kwargs: dict, seed: int) -> Any:
    torch.manual_seed(seed)
    return model(*args, **kwargs)


def fresh_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    # A model may mutate its inputs in place: every run gets its own copy.
    return _copy(args), _copy(kwargs)


@dataclass
class StepOutput:
    """What one run of an entry produced: outputs, and in train mode the gradients."""

    out: Any
    grads: dict[str, torch.Tensor] | None = None
    backward_graphs: int | None = None


# Train mode with gradients of the parameters only: for models whose eager backward fails when
# their inputs require grad (they mutate an input in place, or call .numpy() on it).
TRAIN_PARAMS = "train-params"


def step(mode: str, model: Any, args: tuple, kwargs: dict, seed: int,
          on_backward: Callable[[], None] = lambda: None) -> StepOutput:
    if mode in ("train", TRAIN_PARAMS):
        return StepOutput(*train_step(model, args, kwargs, seed, on_backward, input_grads=mode == "train"))
    return StepOutput(call_seeded(model, args, kwargs, seed))


def identical(a: StepOutput, b: StepOutput) -> bool:
    return outputs_identical(a.out, b.out) and (a.grads is None or outputs_identical(a.grads, b.grads))


def reference_runs(models: ModelCopies, sizes: list[tuple[Any, tuple, dict]], seed: int, device: str, where: str,
               result: dict, mode: str) -> list[StepOutput | None]:
    """The float64 run at every size (None per size without one); ``result["reference"]`` says where
    it was computed or why there is none (the oracle compares on the CPU either way)."""
    if where == "none":
        result["reference"] = "none (not requested)"
        return [None] * len(sizes)
    devices = {"cpu": ["cpu"], "device": [device], "auto": list(dict.fromkeys([device, "cpu"]))}[where]
    errors = []
    for dev in devices:
        model64 = None
        try:
            model64 = models.fresh(dev, torch.float64)
            outs = []
            for _, args, kwargs in sizes:
                if outs and isinstance(model64, torch.nn.Module):
                    # every size from a fresh copy, as eager runs it: gradients must not accumulate,
                    # nor state a model updates in forward (a step counter, running statistics)
                    model64 = models.fresh(dev, torch.float64)
                outs.append(step(mode, model64, cast(args, dev, torch.float64),
                                  cast(kwargs, dev, torch.float64), seed))
            synchronize(dev)
            result["reference"] = "float64" if dev == "cpu" else f"float64 on {dev}"
            return outs
        except Exception as exc:  # noqa: BLE001 (e.g. no float64 kernel: compare with eager only)
            errors.append(f"{dev}: {describe_error(exc)[0][:200]}")
        finally:
            model64 = None
            if dev == "cuda":
                torch.cuda.empty_cache()
    result["reference"] = f"none ({'; '.join(errors)})"
    return [None] * len(sizes)
