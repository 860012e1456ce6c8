"""Calls of ATen ops captured from OpInfo sample inputs: the cases of decomposition rules whose op
the fuzzer's op table does not generate (``crucible fuzz-decomps``), cached on disk per torch version.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from typing import Any

import torch

from harness.fuzz.decomp_subject import perturb
from harness.fuzz.decomps import decomposition_rules
from harness.fuzz.specs import OP_SPECS


def capture_opinfo_calls(ops: set) -> dict[Any, list]:
    """Calls of ``ops`` made by OpInfo sample inputs (forward, and backward where differentiable)."""
    import warnings

    from torch.testing._internal import common_methods_invocations as invocations
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: dict[Any, list] = {}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            if func in ops and len(calls.setdefault(func, [])) < 8:
                calls[func].append(perturb((args, kwargs), None, 0))
            return func(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info, count in _infos(invocations):
            try:
                samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=info.supports_autograd))[:count]
            except Exception:  # noqa: BLE001 -- a sample generator this torch cannot run
                continue
            for s in samples:
                try:
                    with Recorder():
                        out = info.op(s.input, *s.args, **s.kwargs)
                        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                                if isinstance(o, torch.Tensor) and o.requires_grad]
                        ins = [x for x in (s.input, *s.args) if isinstance(x, torch.Tensor) and x.requires_grad]
                        if outs and ins:
                            torch.autograd.grad(sum(o.float().sum() for o in outs), ins, allow_unused=True)
                except Exception:  # noqa: BLE001 -- samples that fail in eager are not cases
                    pass
    return calls


def _infos(invocations: Any) -> list[tuple[Any, int]]:
    """Every OpInfo with how many of its samples to run: two of ``op_db``'s, six of the foreach
    OpInfos' (kept in lists of their own; each overload, ``.Scalar``, ``.List``, ``.ScalarList``,
    ``.Tensor``, is reached by other samples)."""
    foreach = [info for name in ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
                                 "foreach_reduce_op_db", "foreach_other_op_db")
               for info in getattr(invocations, name, [])]
    return [(info, 2) for info in invocations.op_db] + [(info, 6) for info in foreach]


# Bump when capture_opinfo_calls changes what it records: cached captures of older versions are ignored.
CAPTURE_FORMAT = 2
_LOADED: dict = {}  # cache file -> its captures, once per process (each -j worker checks many rules)


def cached_opinfo_calls(ops: set) -> dict[Any, list]:
    """``capture_opinfo_calls`` for ``ops``, through an on-disk cache under the cache root.

    Capturing runs every OpInfo's samples whatever ops are asked for (about 60 s on a 2-core
    machine), so a miss captures the calls of every rule without an op spec at once and stores
    them, keyed by torch's version and that op set: a later ``--rule NAME`` loads them in about
    a second. The cache directory is private (``compiler.config.private_cache_dir``), as the file
    is a pickle that loading would run."""
    from compiler.config import private_cache_dir

    wanted = set(ops) | {r.op for r in decomposition_rules().values() if str(r.op) not in OP_SPECS}
    names = sorted(str(op) for op in wanted)
    digest = hashlib.sha1("\n".join([torch.__version__, str(CAPTURE_FORMAT), *names]).encode()).hexdigest()[:16]
    path = private_cache_dir("fuzz-decomps") / f"opinfo-calls-{torch.__version__.replace('+', '_')}-{digest}.pt"
    by_name = _LOADED.get(path)
    if by_name is None and path.exists():
        try:
            by_name = torch.load(path, weights_only=False)
        except Exception as exc:  # noqa: BLE001 -- a truncated or foreign file: capture again
            print(f"ignoring an unreadable OpInfo capture cache {path}: {exc}", file=sys.stderr)
    if by_name is None:
        print(f"capturing OpInfo sample calls for {len(wanted)} ops (cached for this torch version)...",
              file=sys.stderr)
        by_name = {str(op): [c for c in calls if _picklable(c)] for op, calls in capture_opinfo_calls(wanted).items()}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            torch.save(by_name, tmp)
            os.replace(tmp, path)  # atomic: a concurrent run reads the old file or the whole new one
        finally:
            tmp.unlink(missing_ok=True)
    _LOADED[path] = by_name
    return {op: by_name[str(op)] for op in ops if str(op) in by_name}


def _picklable(call: Any) -> bool:
    try:
        torch.save(call, io.BytesIO())
    except Exception:  # noqa: BLE001 -- a call holding a module or a lambda: not cacheable, dropped
        return False
    return True
