"""Train mode: one forward, a seeded scalar loss, one backward; the gradients are the outputs graded.

The loss is ``sum_i <out_i, W_i>`` over the floating outputs, with ``W_i`` drawn from a generator
seeded by the entry's seed and the output's position. A plain ``sum`` would hand every output a
gradient of ones, which is blind to whole classes of bugs (softmax's backward of a constant is zero,
so a wrong softmax backward would pass); random weights exercise every element's gradient.
The weights are drawn in float64 and rounded to each output's dtype, so the float64 reference and
the working-dtype runs minimize the same function.

Gradients are those of the floating inputs (made leaves that require grad) and of the parameters
that require grad, keyed ``input[i]``, ``kwarg.<name>`` and ``param.<name>``; the parity oracle
compares these dictionaries like any other output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.oracle import flatten_outputs
from harness.targets import MODES  # noqa: F401 -- re-exported: the modes this module implements


def _requires_grad(value: Any) -> Any:
    """Floating tensors become fresh leaves that require grad (so their gradients can be graded)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.detach().clone().requires_grad_(True)
        return value
    if isinstance(value, (list, tuple)):
        items = [_requires_grad(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return type(value)((k, _requires_grad(v)) for k, v in value.items())
    return value


def seeded_loss(outputs: Any, seed: int) -> torch.Tensor | None:
    """The scalar loss of ``outputs``; None when no output depends on anything that requires grad."""
    total = None
    for i, (_, leaf) in enumerate(flatten_outputs(outputs)):
        if not (isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex())
                and leaf.requires_grad):
            continue
        if leaf.is_complex():  # fft and friends: the loss weighs the real and imaginary parts
            leaf = torch.view_as_real(leaf.resolve_conj())
        gen = torch.Generator().manual_seed(seed * 1_000_003 + i)
        weight = torch.randn(leaf.shape, generator=gen, dtype=torch.float64).to(leaf.device, leaf.dtype)
        term = (leaf * weight).sum()
        total = term if total is None else total + term.to(total.dtype)
    return total


def _grads_of(args: tuple, kwargs: dict, model: Any) -> dict[str, torch.Tensor]:
    grads: dict[str, torch.Tensor] = {}
    for path, leaf in flatten_outputs(list(args), "input") + flatten_outputs(dict(kwargs), "kwarg"):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.grad is not None:
            grads[path] = leaf.grad
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper: the names of the model's own
    if isinstance(model, torch.nn.Module):
        for name, p in model.named_parameters():
            if p.requires_grad and p.grad is not None:
                grads[f"param.{name}"] = p.grad
    return grads


class NoGradient(RuntimeError):
    """No output of the model depends on a parameter or an input: there is no backward to test."""


def train_step(model: Any, args: tuple, kwargs: dict, seed: int,
               on_backward: Callable[[], None] = lambda: None, input_grads: bool = True,
               ) -> tuple[Any, dict[str, torch.Tensor], int]:
    """(outputs, gradients, compiled backward graphs) of one forward and backward; ``on_backward``
    is called between them (the harness's phase switch). ``input_grads=False``: parameters only."""
    if input_grads:
        args, kwargs = _requires_grad(args), _requires_grad(kwargs)
    if isinstance(model, torch.nn.Module):
        model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        torch.manual_seed(seed)
        out = model(*args, **kwargs)
        loss = seeded_loss(out, seed)
        if loss is None:
            raise NoGradient("no floating output requires grad (no parameters or floating inputs reach it)")
        backward_graphs = count_backward_graphs(out)
        on_backward()
        loss.backward()
    grads = {k: g.detach() for k, g in _grads_of(args, kwargs, model).items()}
    return _detach(out), grads, backward_graphs


def _detach(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_detach(v) for v in value)
    if isinstance(value, dict):
        try:
            return type(value)((k, _detach(v)) for k, v in value.items())
        except Exception:  # noqa: BLE001 -- a ModelOutput-like mapping that refuses rebuilding
            return {k: _detach(v) for k, v in value.items()}
    return value


def count_backward_graphs(outputs: Any) -> int:
    """Compiled backward graphs reachable from ``outputs``' autograd graph.

    AOTAutograd-based backends (crucible, inductor, aot_eager) wrap each captured forward graph in
    one ``CompiledFunction``; its backward node is where the compiled backward graph runs. Counting
    them from the autograd graph works for any such backend, with no backend-specific report."""
    seen: set[int] = set()
    stack = [leaf.grad_fn for _, leaf in flatten_outputs(outputs)
             if isinstance(leaf, torch.Tensor) and leaf.grad_fn is not None]
    found = 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if "CompiledFunction" in type(node).__name__:
            found += 1
        stack.extend(fn for fn, _ in node.next_functions)
    return found
