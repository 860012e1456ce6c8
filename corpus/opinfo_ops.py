"""OpInfo source: single-op entries from PyTorch's OpInfo database (op_db).

One entry per op x dtype x sample: ``opinfo/<op>[-<variant>]-<dtype>-<k>`` is the k-th
sample input that ``op.sample_inputs("cpu", dtype)`` yields under ``torch.manual_seed``
of the entry's seed. The factory regenerates the samples under that seed and takes the
k-th, so the tensors are the same every time; the model is a small Module calling the op
with the sample's non-tensor arguments baked in and its tensors as inputs.

Ops with random or uninitialised outputs (dropout, rand*, empty*) are left out: their
outputs cannot be compared. Samples holding sparse or otherwise non-strided tensors are
left out too.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

from corpus.entry import Built, Entry, EntryUnavailable
from corpus.tiers import assign_tiers, load_catalog, tiers_for

SOURCE = "opinfo"
# (dtype, how many samples) per op; float32 gets two samples, the others one.
DTYPE_SAMPLES = (("float32", 2), ("bfloat16", 1), ("int64", 1))
SEED = 0
# Substrings of op names whose outputs are random or uninitialised memory.
RANDOM_OPS = (
    "dropout", "bernoulli", "normal", "rand", "multinomial", "uniform", "cauchy", "exponential",
    "geometric", "log_normal", "empty", "rrelu", "fractional_max_pool", "lowrank",
)
# Ops that cannot be an entry here, with why (the catalog lists them with the reason).
EXCLUDED_OPS = {
    "allclose": "returns a Python bool, not a tensor",
    "equal": "returns a Python bool, not a tensor",
    "item": "returns a Python number, not a tensor",
    "broadcast_shapes": "returns a shape, not a tensor",
    "to_sparse": "returns a sparse tensor",
    "jiterator": "jiterator ops run on CUDA/ROCm only",
}
# OpInfo class -> family, for ops without a namespace prefix (linalg., fft., ...).
_CLASS_FAMILY = {
    "UnaryUfuncInfo": "unary",
    "BinaryUfuncInfo": "binary",
    "ReductionOpInfo": "reduction",
    "ShapeFuncInfo": "shape",
    "ForeachFuncInfo": "foreach",
    "SpectralFuncInfo": "fft",
}


def unavailable() -> str | None:
    # The OpInfo database imports expecttest (a test-only dependency of PyTorch).
    if importlib.util.find_spec("expecttest") is None:
        return "expecttest is not installed (PyTorch's OpInfo database imports it)"
    return None


@functools.lru_cache(maxsize=1)
def _op_table() -> dict[tuple[str, str], Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {(op.name, op.variant_test_name): op for op in op_db}


def _family(op: Any) -> str:
    if op.name.startswith("torch.ops."):
        return "aten"
    if "." in op.name:
        return op.name.rsplit(".", 1)[0]  # linalg, fft, special, nn.functional, ...
    return _CLASS_FAMILY.get(type(op).__name__, "other")


def _samples(op: Any, dtype_name: str, count: int, seed: int) -> list[Any]:
    """The first ``count`` samples of ``op`` at ``dtype`` under ``seed``, RNG restored."""
    import torch

    dtype = getattr(torch, dtype_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        samples = []
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            samples.append(sample)
            if len(samples) == count:
                break
    return samples


def _strided_only(sample: Any) -> bool:
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = tree_leaves((sample.input, sample.args, sample.kwargs))
    return all(t.layout == torch.strided for t in leaves if isinstance(t, torch.Tensor))


def catalog() -> dict[str, Any]:
    """Enumerate op_db x dtypes x first samples (about half a minute)."""
    import torch

    ops: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for (name, variant), op in sorted(_op_table().items()):
        label = f"{name}-{variant}" if variant else name
        if any(word in name for word in RANDOM_OPS):
            skipped[label] = "random or uninitialised output"
            continue
        excluded = next((why for word, why in EXCLUDED_OPS.items() if name.startswith(word)), None)
        if excluded:
            skipped[label] = excluded
            continue
        supported = op.supported_dtypes("cpu")
        for dtype_name, count in DTYPE_SAMPLES:
            if getattr(torch, dtype_name) not in supported:
                continue
            try:
                samples = _samples(op, dtype_name, count, SEED)
            except Exception as exc:  # noqa: BLE001 - any failure is recorded as data
                skipped[f"{label}-{dtype_name}"] = f"sample_inputs failed: {type(exc).__name__}: {exc}"[:200]
                continue
            for k, sample in enumerate(samples):
                if not _strided_only(sample):
                    skipped[f"{label}-{dtype_name}-{k}"] = "sample holds a sparse/non-strided tensor"
                    continue
                ops[f"{label}-{dtype_name}-{k}"] = {
                    "op": name, "variant": variant, "dtype": dtype_name, "sample": k,
                    "family": _family(op), "summary": _summary(sample),
                }
    return {"versions": {"torch": torch.__version__}, "seed": SEED, "ops": ops, "unbuildable": skipped}


def _summary(sample: Any) -> str:
    import torch
    from torch.utils._pytree import tree_leaves

    shapes = [tuple(t.shape) for t in tree_leaves((sample.input, sample.args)) if isinstance(t, torch.Tensor)]
    return " ".join(str(list(s)) for s in shapes[:4])


class OpCall:
    """Calls one op with a sample's constants baked in; tensors are the inputs.

    A plain callable rather than a Module: it has no parameters, and the harness accepts
    any callable. ``torch.compile`` traces it like a function.
    """

    def __init__(self, op: Any, spec: Any, leaves: list[Any], tensor_slots: list[int], label: str) -> None:
        self.op, self.spec, self.leaves, self.tensor_slots, self.label = op, spec, leaves, tensor_slots, label
        self.__name__ = label

    def __call__(self, *tensors: Any) -> Any:
        from torch.utils._pytree import tree_unflatten

        leaves = list(self.leaves)
        for slot, tensor in zip(self.tensor_slots, tensors):
            leaves[slot] = tensor
        sample_input, args, kwargs = tree_unflatten(leaves, self.spec)
        return self.op(sample_input, *args, **kwargs)

    def __repr__(self) -> str:
        return f"OpCall({self.label})"


def build(op_name: str, variant: str, dtype: str, k: int, seed: int, scale: str) -> Built:
    import torch
    from torch.utils._pytree import tree_flatten

    del scale  # op samples are already small; GPU and CPU runs use the same sample
    op = _op_table().get((op_name, variant))
    if op is None:
        label = f"{op_name} ({variant})" if variant else op_name
        raise EntryUnavailable(f"torch {torch.__version__}'s OpInfo database has no {label}")
    samples = _samples(op, dtype, k + 1, seed)
    if len(samples) <= k:
        raise EntryUnavailable(f"{op_name}: sample {k} does not exist at {dtype} in torch {torch.__version__}")
    sample = samples[k]
    leaves, spec = tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = tuple(leaves[i] for i in slots)
    label = f"{op_name}-{variant}" if variant else op_name
    return Built(OpCall(op.op, spec, leaves, slots, label), tensors)


def _ops() -> dict[str, Any]:
    data = load_catalog(SOURCE)
    return (data or catalog())["ops"]


@functools.lru_cache(maxsize=1)
def _entries() -> tuple[Entry, ...]:
    ops = _ops()
    names = {f"{SOURCE}/{key}": key for key in ops}
    metas = assign_tiers(SOURCE, {n: 0 for n in names}, {n: ops[k]["family"] for n, k in names.items()})
    # Smoke takes each op once, at the working dtype (first sample, float32); the other
    # samples and dtypes run from nightly-cpu on.
    not_smoke = [n for n, k in names.items() if ops[k]["dtype"] != "float32" or ops[k]["sample"] != 0]
    tiers = tiers_for(SOURCE, metas, smoke_excluded=not_smoke)
    result = []
    for name, key in names.items():
        info = ops[key]
        result.append(
            Entry(
                name=name,
                source=SOURCE,
                family=info["family"],
                factory=functools.partial(build, info["op"], info["variant"], info["dtype"], info["sample"], SEED),
                tier=tiers[name],
                tags=frozenset({"op", info["family"]}),
                seed=SEED,
                dtype=info["dtype"],
                params=0,
                eager_ms=metas[name].eager_ms,
                description=f"OpInfo {info['op']} {info['variant']} {info['dtype']} sample {info['sample']}: "
                f"{info['summary']}",
            )
        )
    return tuple(result)


def entries() -> list[Entry]:
    if unavailable():
        return []
    return list(_entries())
