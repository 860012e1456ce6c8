"""The fuzz graph: a small DAG of ATen calls over described inputs, as data.

A ``FuzzGraph`` is JSON-able (it travels to isolated workers and into the results store) and
renders to Python source, one ATen call per line::

    def graph(x0, x1):
        v0 = aten.add.Tensor(x0, x1, alpha=2)
        v1_0, v1_1 = aten.max.dim(v0, 1, True)
        return (v1_0, v1_1)

Dtypes appear in calls as the names ``f16``, ``bf16``, ``f32``, ``f64``, ``i32``, ``i64``,
``b8``: the float64 reference runs the same source in a namespace where every float name
means ``torch.float64``, so casts and ``dtype=`` arguments inside the graph are promoted too.
Each graph gets its own code object (compiled from its own source), so Dynamo's per-code
caches never mix two graphs.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.fuzz.reference_ops import AS_WORKING, ReferenceAten
from harness.fuzz.values import make_input

DTYPE_NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
               "int32": "i32", "int64": "i64", "bool": "b8"}
_TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
                 "i32": torch.int32, "i64": torch.int64, "b8": torch.bool}
_counter = itertools.count()
# op -> its output that sums terms (var_mean's mean is a mean like any other). A correct kernel may
# add them in any order, and each partial sum rounds at its own magnitude, up to the sum of the
# |terms|, not at the result's: where the terms cancel (16,391 values in (-1, 1) whose mean is 1/2190
# of their mean magnitude), summation orders differ by many ulps of the result (fuzzer,
# crucible-interpret, seed 154: Crucible's float32 mean 38 ulps from float64, eager's cascade sum 2.8,
# both within a unit roundoff of the terms' magnitude). The rounding-noise references
# (``FuzzGraph.function(rounding_noise=...)``) perturb such an output by one unit roundoff of the
# accumulating dtype at that magnitude as well; the summation condition number
# (harness.fuzz.conditioning) reads the same table.
ACCUMULATION_NOISE = {**dict.fromkeys(("aten.sum.dim_IntList", "aten.sum.default", "aten.mean.dim",
                                       "aten.mean.default", "aten.cumsum.default", "aten.mm.default",
                                       "aten.bmm.default", "aten.matmul.default", "aten.addmm.default",
                                       "aten.convolution.default",
                                       # with accumulate, its values summed into a row (fuzzer,
                                       # crucible-interpret, seed 258: -inf + (3.4e38 + 3.4e38))
                                       "aten.index_put.default"), 0),
                      # a norm's mean (output 1) is a row's sum too: a two-pass mean's correction is
                      # a sum of deviations rounded at the values' magnitude (fuzzer,
                      # crucible-interpret, seed 247: cos of a layer norm's mean of [-3.4e38, 1e4, ...],
                      # Crucible's mean half an ulp of the row's magnitude from eager's exact one)
                      # (training batch norm's saved mean too: a channel holding +-3.4e38 and values near 1,
                      # whose float32 sums lose the small values beside the huge ones in any order; eager's
                      # mean 0.0146 off float64's -0.0755, Crucible's interpreter 0.0755; fuzzer,
                      # crucible-interpret, seed 607)
                      **dict.fromkeys(("aten.var_mean.correction", "aten.native_layer_norm.default",
                                       "aten.native_group_norm.default",
                                       "aten._native_batch_norm_legit_functional.default"), 1)}
# op -> its output whose formula, the one ATen's kernels and a compiler's rule both evaluate, adds
# terms that cancel. Inference batch norm is x * a + (b - mean * a) with a = w / sqrt(var + eps) in
# ATen's CPU kernel (for contiguous statistics) and Crucible's fold: where x is near the mean the sum
# is far smaller than its terms (fuzzer, crucible-cpp, seed 185: a result of -0.034 from terms near 1,
# 30 ulps off, and digamma's pole at 0 turned that into 1e-4). gelu is 0.5x + 0.5x * erf(x / sqrt 2)
# (tanh for approximate='tanh'), and for x below -4 the two halves cancel to a millionth of |x|. An ulp
# of erf's result, where ATen's and the compiler's erf differ, is then ~10^5 ulps of gelu's (fuzzer,
# crucible-interpret:extern=all, seed 184: float64 gelu 6,150 ulps RMS from eager's, both 2e-11
# relative from the erfc form's value, in opposite directions). The rounding-noise references give
# such an output one unit roundoff at the magnitude of its terms (the op run on |operands|, or
# ``TERMS_OF``), as an accumulation's; not a sum, so the summation condition number
# (harness.fuzz.conditioning) leaves it out.
# Attention's P @ V is a sum too, inside the op: where values of both signs cancel, another key order is
# many ulps of the result off (fuzzer, crucible-interpret --dynamic, seed 207: float64 SDPA 26,500 ulps
# RMS from eager's, terms up to 1.4e6 times the result); its terms come from ``_attention_terms``.
# log_softmax is (x - max) - log(sum): the sum's own rounding, a unit roundoff of a sum near 1 in
# another order, is an absolute error of log(sum), many ulps of an output near 0 (the row's largest
# element where the others are far below it; fuzzer, crucible-cpp, seed 296: a float64 log_softmax
# over rows of 3, -2.1e-5 where the two orders differ by 1e-11 relative, 1,480 ulps RMS); its terms
# come from ``_log_softmax_terms``. (logsumexp, max + log(sum), needed no such terms: a draw where
# another order's sum was 1,020 ulps off passed by the rounding spread already.)
CANCELLING_FORMULAS = {"aten.gelu.default": 0, "aten._native_batch_norm_legit_no_training.default": 0,
                       "aten.scaled_dot_product_attention.default": 0, "aten.var.correction": 0,
                       "aten.cumprod.default": 0, "aten._log_softmax.default": 0}
TERMS_NOISE = {**ACCUMULATION_NOISE, **CANCELLING_FORMULAS}
TAKEN = re.compile(r"\)\[(\d+)\]$")  # a node's call that takes one output of the op's tuple: op(...)[k]
VALUE_NAME = re.compile(r"\b[xv]\d+(?:_\d+)?\b")  # an input (x3) or a node's value (v2, v4_1) in an expr
# a scale factor of an accumulation's terms (addmm's, baddbmm's alpha and beta: keyword-only in ATen)
SCALE_SIGN = re.compile(r"\b((?:alpha|beta)=)-")


def taken_output(node: Node, k: int) -> int | None:
    """Where output ``k`` of ``node``'s op is among the values the node defines: at ``k`` where the
    node defines the op's outputs, at 0 where it takes that one output (``op(...)[k]``), None where the
    graph does not take it. (Only the first held for a time: a training batch norm's mean taken as
    ``op(...)[1]`` had no terms noise and no condition number, and its cancellation of +-3.4e38 was
    judged as a kernel's error; fuzzer, crucible-interpret, seed 607.)"""
    taken = TAKEN.search(node.expr)
    if taken is None:
        return k if k < len(node.outputs) else None
    return 0 if int(taken.group(1)) == k else None


def magnitude_expr(expr: str, absolute: str = "_absolute({}, integers)") -> str:
    """A node's call over its operands' magnitudes (each value name wrapped by ``absolute``) with its
    scale factors' signs dropped: the sum of |terms| of addmm(b, a, m, alpha=-1) is |b| + |a| @ |m|
    (with alpha kept, the bound came out below 0, and an overflowing product was judged as ordinary:
    fuzzer, crucible-sim, seed 433)."""
    return SCALE_SIGN.sub(r"\1", VALUE_NAME.sub(lambda m: absolute.format(m.group(0)), expr))


def _narrower(value: Any, dtype_name: str) -> torch.dtype | None:
    """The working dtype of a float64 reference value when it is a narrower float, else None."""
    dtype = _TORCH_DTYPES[DTYPE_NAMES[dtype_name]] if dtype_name in DTYPE_NAMES else None
    if (not isinstance(value, torch.Tensor) or not value.is_floating_point() or dtype is None
            or not dtype.is_floating_point or torch.finfo(dtype).eps <= torch.finfo(value.dtype).eps):
        return None
    return dtype


def round_step(value: Any, dtype_name: str, index: int) -> Any:
    """``value`` rounded to its working dtype (a ``function`` hook: float64 values of a narrower
    working dtype; others as they are)."""
    dtype = _narrower(value, dtype_name)
    return value if dtype is None else value.to(dtype).to(value.dtype)


def _signs(seed: int, index: int) -> Any:
    """Random signs for noise stream ``index``: ``draw(shape, dtype)``. Antithetic pairs: seeds 2k and
    2k + 1 draw the same signs, the second negated, so two noisy references always move a value both
    ways (a scalar's two independent draws had the same sign one time in two, and its spread was 0;
    seed 214's ceil(var) below)."""
    gen = torch.Generator().manual_seed(seed // 2 * 1_000_003 + index)
    flip = -1 if seed % 2 else 1
    return lambda shape, dtype: (torch.randint(0, 2, shape, generator=gen).to(dtype) * 2 - 1) * flip


def _rounding_noise(seed: int, float64_rounded: frozenset[int] = frozenset()) -> Any:
    def noise(value: Any, dtype_name: str, index: int, terms: Any = None) -> Any:
        dtype = _narrower(value, dtype_name)
        wide = (dtype is None and index in float64_rounded and isinstance(value, torch.Tensor)
                and value.dtype == torch.float64)
        if dtype is None and not wide:
            return value
        draw = _signs(seed, index)
        sign = draw(value.shape, value.dtype)
        if wide:  # a float64 value is its own working dtype: one ulp (half of one would round back)
            dtype = torch.float64
            noisy = value * (1 + sign * torch.finfo(dtype).eps)
        else:
            inexact = value.to(dtype).to(value.dtype) != value  # what the working dtype rounds (NaN: a no-op)
            noisy = torch.where(inexact, value * (1 + sign * (torch.finfo(dtype).eps / 2)), value)
        if isinstance(terms, torch.Tensor) and terms.shape == value.shape:
            # an accumulation's partial sums round at the magnitude of its terms (see ACCUMULATION_NOISE)
            sign = draw(value.shape, value.dtype)
            step = sign * terms * (torch.finfo(_accumulator(dtype)).eps / 2)
            noisy = noisy + torch.where(torch.isfinite(step), step, torch.zeros_like(step))
        return noisy
    return noise


# A layer or group norm's output is (x - mean) * rstd * w + b, every element of a row (a group) sharing
# one mean, which a correct kernel computes to about a unit roundoff of its magnitude in its accumulator
# (float32 for 16-bit floats). Where x is near the mean, that one rounding moves every output of the row
# the same way: a float16 layer norm of 32,767 values 47.5 +- 0.09 (eager's mean 4e-7 off, Crucible's
# -7e-7, both under a float32 ulp of 47.5) put Crucible's outputs +0.10 ulp off on average and eager's
# -0.03 (+0.45 and -0.13 where |out| < 0.1), 24 standard errors apart (fuzzer,
# crucible-interpret:extern=none, seed 333). Per-element noise averages out of such a mean error, so the
# rounding-noise references move each row's output by what shifting its mean a unit roundoff of the
# row's magnitude does, one sign per row (``_shifted_statistics``; the mean itself, output 1, keeps its
# own noise, ACCUMULATION_NOISE).
SHARED_STATISTICS = {"aten.native_layer_norm.default": "layer", "aten.native_group_norm.default": "group"}


def _shifted_statistics(seed: int | None) -> Any:
    """``shifted(working dtype, stream, kind, op, *args)``: ``op`` (a SHARED_STATISTICS op of that
    kind) with its mean shifted as above; ``seed`` None: ``op`` as it is (the references that round
    their steps)."""
    def shifted(dtype_name: str, index: int, kind: str, op: Any, *args: Any) -> Any:
        out, mean, rstd = op(*args)
        dtype = _narrower(out, dtype_name)
        if seed is None or dtype is None or mean.numel() == 0:
            return out, mean, rstd
        x = args[0]
        if kind == "layer":  # (x, normalized_shape, weight, bias, eps); statistics keep x's dims, 1 over the row
            magnitude = x.abs().mean(list(range(x.dim() - len(args[1]), x.dim())), keepdim=True)
        else:  # (x, weight, bias, N, C, HxW, groups, eps); (N, G) statistics
            magnitude = x.abs().reshape(args[3], args[6], -1).mean(-1)
        step = _signs(seed, index)(mean.shape, mean.dtype) * magnitude * (torch.finfo(_accumulator(dtype)).eps / 2)
        step = torch.where(torch.isfinite(step), step, torch.zeros_like(step)) * rstd
        if kind == "layer":
            moved = out - step * (args[2] if args[2] is not None else 1.0)
        else:  # C = G * (C / G) channels on dim 1
            n, c, groups = args[3], args[4], args[6]
            step = step.reshape(n, groups, 1).expand(n, groups, c // groups).reshape(n, c)
            moved = out - (step * (args[1] if args[1] is not None else 1.0)).reshape(n, c, *[1] * (out.dim() - 2))
        return torch.where(torch.isfinite(moved), moved, out), mean, rstd
    return shifted


def _batch_norm_terms(dtype_name: str, x: Any, weight: Any, bias: Any, mean: Any, var: Any, momentum: float,
                      eps: float) -> tuple:
    """The magnitude of inference batch norm's terms, |x| * |a| + |b| + |mean| * |a| (operands are
    already magnitudes; ``_native_batch_norm_legit_no_training``'s signature and tuple result)."""
    shape = [1, -1] + [1] * (x.dim() - 2)
    scale = torch.rsqrt(var + eps) * (weight if weight is not None else 1)
    terms = (x + mean.reshape(shape)) * scale.reshape(shape) + (bias.reshape(shape) if bias is not None else 0)
    return (terms,)


def _attention_terms(dtype_name: str, q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                     is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
    """A bound on the magnitude of attention's terms at each output, sum_j p_j |v_j| <= max_j |v_j|
    (each row's weights sum to 1; operands are already magnitudes, and the weights of |q| and |k|
    are not the op's, so the largest value over the keys stands in for them)."""
    rows = (*torch.broadcast_shapes(q.shape[:-2], v.shape[:-2]), q.shape[-2], v.shape[-1])
    if v.shape[-2] == 0:
        return torch.zeros(rows, dtype=v.dtype)
    top = v.amax(dim=-2, keepdim=True)
    if enable_gqa and v.dim() >= 3 and q.shape[-3] != v.shape[-3]:
        top = top.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    return torch.broadcast_to(top, rows)


def _variance_terms(dtype_name: str, x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    """A variance's rounding scale: its mean is off by about a unit roundoff of the values, which
    leaves a residue of order eps^2 * mean(x^2) where the exact variance is 0 (equal values); as terms,
    8 eps * mean(x^2), which the noise scales by eps / 2 (a one-pass variance's error, eps * mean(x^2),
    stays 2 / eps times larger). ATen's float64 var of 8,191 equal 1.54s was 2e-31, Crucible's 0, and
    ceil made them 1 and 0 (fuzzer, crucible-interpret:extern=all --dynamic, seed 214)."""
    dtype = _TORCH_DTYPES.get(DTYPE_NAMES.get(dtype_name), torch.float64)
    eps = torch.finfo(_accumulator(dtype) if dtype.is_floating_point else torch.float64).eps
    dims = list(range(x.dim())) if dim is None or dim == [] else dim
    return 8 * eps * (x * x).mean(dims, keepdim=keepdim)


def _cumprod_terms(dtype_name: str, x: Any, dim: int, dtype: Any = None) -> Any:
    """A cumprod's k-th value has been rounded k times (each product, by up to a unit roundoff
    relative): as terms, k times the value, so the k-th step carries k unit roundoffs. A scan in
    another order (Triton's tree) is as far from float64 as eager's sequential one, but not at the
    same elements: digamma of a cumprod near its pole at 0 amplified that 1-ulp difference (fuzzer,
    crucible-interpret --dynamic, seed 233: RMSE 98.8 against eager's 33.5 with a spread of 39.3,
    both cumprods 4-5 ulps from float64)."""
    out = torch.cumprod(x, dim, dtype=dtype)
    shape = [1] * out.dim()
    shape[dim] = out.shape[dim]
    return out * torch.arange(1, out.shape[dim] + 1, dtype=out.dtype, device=out.device).reshape(shape)


def _log_softmax_terms(dtype_name: str, x: Any, dim: int, half_to_float: bool = False) -> Any:
    """log_softmax's terms: |x - max| <= |x| + max |x|, plus |log(sum)| <= log(n), plus 1 for the
    sum's own unit roundoff, an absolute error of the log (operands are already magnitudes)."""
    if x.dim() == 0 or x.numel() == 0:
        return x + 1
    return x + x.amax(dim, keepdim=True) + math.log(x.shape[dim]) + 1


# ops whose terms are not the op run on the magnitudes of its operands (that would cancel too); each
# takes the node's working dtype first
TERMS_OF = {"aten._native_batch_norm_legit_no_training.default": "_batch_norm_terms",
            "aten.scaled_dot_product_attention.default": "_attention_terms",
            "aten.var.correction": "_variance_terms", "aten.cumprod.default": "_cumprod_terms",
            "aten._log_softmax.default": "_log_softmax_terms"}


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """The dtype a correct kernel accumulates ``dtype`` sums in (ATen's: float32 for 16-bit floats)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _absolute(value: Any, integers: bool = True) -> Any:
    """``value``'s magnitudes, for ``_terms``: floats' and, with ``integers``, integers' as float64 (a
    float sum of int64 extremes: their int64 ``abs`` would wrap); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.abs()
    if integers and isinstance(value, torch.Tensor) and value.dtype != torch.bool and not value.is_complex():
        return value.double().abs()
    return value


def _terms(compute: Any, k: int) -> Any:
    """Output ``k`` of an accumulation run on the magnitudes of its operands (the sum of |terms| at
    each position), or None where that cannot run. ``compute(integers)`` takes integer operands'
    magnitudes too, or (where the op needs them as integers: index_put's indices) as they are."""
    for integers in (True, False):
        try:
            out = compute(integers)
        except Exception:  # noqa: BLE001, S112 -- then as they are; failing both, only the result's rounding
            continue
        return out[k] if isinstance(out, tuple) else out
    return None


def _resized(desc: dict[str, Any], shape: list[int]) -> dict[str, Any]:
    """An input description at ``shape``: an expanded input's stored dims follow the dims it is not
    broadcast along."""
    out = {**desc, "shape": list(shape)}
    if desc.get("expand_from") is not None:
        out["expand_from"] = [1 if stored == 1 else new for stored, new in zip(desc["expand_from"], shape)]
    return out


def namespace(reference: bool = False) -> dict[str, Any]:
    """Globals the rendered source runs in; ``reference`` maps every float dtype to float64 (and
    ``aten`` to ``harness.fuzz.reference_ops.ReferenceAten``)."""
    ns: dict[str, Any] = {"torch": torch, "aten": ReferenceAten() if reference else torch.ops.aten,
                          "inf": float("inf"), "nan": float("nan")}
    for name, dtype in _TORCH_DTYPES.items():
        ns[name] = torch.float64 if reference and dtype.is_floating_point else dtype
    return ns


@dataclass
class Node:
    op: str  # the spec name, e.g. "aten.add.Tensor"
    expr: str  # the call, over value names (x0, v1, v2_0) and dtype names
    outputs: list[str]  # names of the values it defines (several when it returns a tuple)
    out_meta: list[tuple[list[int], str]]  # (shape, dtype) per output
    returns_tuple: bool = False

    def line(self) -> str:
        lhs = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 and self.returns_tuple else "")
        return f"{lhs} = {self.expr}"


@dataclass
class FuzzGraph:
    inputs: list[dict[str, Any]] = field(default_factory=list)  # harness.fuzz.values descriptions
    nodes: list[Node] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # ``crucible fuzz --dynamic``: the input shapes of the calls after the first, one list of shapes per
    # call (``harness.fuzz.dynamic``); the graph is then compiled once with symbolic sizes and run at each
    calls: list[list[list[int]]] = field(default_factory=list)

    # -- identity -----------------------------------------------------------------------
    def to_json(self) -> str:
        doc: dict[str, Any] = {"inputs": self.inputs, "nodes": [vars(n) for n in self.nodes], "outputs": self.outputs}
        if self.calls:  # only then: a static graph keeps its JSON, its name and its stored signature
            doc["calls"] = self.calls
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict) -> FuzzGraph:
        doc = json.loads(text) if isinstance(text, str) else text
        nodes = [Node(n["op"], n["expr"], list(n["outputs"]), [(list(s), d) for s, d in n["out_meta"]],
                      bool(n.get("returns_tuple"))) for n in doc["nodes"]]
        calls = [[list(shape) for shape in call] for call in doc.get("calls", [])]
        return cls(list(doc["inputs"]), nodes, list(doc["outputs"]), calls)

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    @property
    def dynamic(self) -> bool:
        """Run at further sizes (``calls``) after one compile with symbolic sizes."""
        return bool(self.calls)

    def at_call(self, index: int) -> FuzzGraph:
        """The graph with its inputs at the sizes of further call ``index`` (and no further calls):
        eager, the float64 reference and the oracle's extra references then build their inputs at
        that size. Node metadata keeps the first call's shapes (only dtypes and structure are read)."""
        inputs = [_resized(desc, shape) for desc, shape in zip(self.inputs, self.calls[index])]
        return FuzzGraph(inputs, self.nodes, self.outputs)

    def input_names(self) -> list[str]:
        return [f"x{i}" for i in range(len(self.inputs))]

    # -- rendering ----------------------------------------------------------------------
    def source(self, name: str = "graph", rounding_noise: bool = False, reference: bool = False) -> str:
        """The graph as Python source; ``rounding_noise``: each node's values pass through
        ``_noise(value, working dtype, index)`` (see ``function``); ``reference``: the float64
        reference's (ops whose defaults depend on the dtype take their working dtype's, ``AS_WORKING``)."""
        body = []
        for i, n in enumerate(self.nodes):
            line = n.line()
            if reference and n.op in AS_WORKING:
                line = line.replace(f"{n.op}(", f"{AS_WORKING[n.op].__name__}({n.out_meta[0][1]!r}, ", 1)
            body.append(f"    {line}")
            if not rounding_noise:
                continue
            if n.op in SHARED_STATISTICS:
                body[-1] = body[-1].replace(f"{n.op}(", f"_shifted({n.out_meta[0][1]!r}, {i * 64 + 63}, "
                                                           f"{SHARED_STATISTICS[n.op]!r}, {n.op}, ", 1)
            summed = TERMS_NOISE.get(n.op)
            at = None if summed is None else taken_output(n, summed)  # None: the graph takes another output
            if at is not None:
                magnitudes = magnitude_expr(n.expr)
                if n.op in TERMS_OF:
                    magnitudes = magnitudes.replace(f"{n.op}(", f"{TERMS_OF[n.op]}({n.out_meta[at][1]!r}, ")
                body.append(f"    _t = _terms(lambda integers: {magnitudes}, {summed})")
            # a noise stream of its own per value, the same in every rendering
            body += [f"    {out} = _noise({out}, {dtype!r}, {i * 64 + j}{', _t' if j == at else ''})"
                     for j, (out, (_, dtype)) in enumerate(zip(n.outputs, n.out_meta))]
        outs = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 else "")
        return "\n".join([f"def {name}({', '.join(self.input_names())}):", *body, f"    return ({outs})"]) + "\n"

    def function(self, reference: bool = False, rounding_noise: int | None = None,
                 float64_rounded: frozenset[str] = frozenset(), hook: Callable[..., Any] | None = None) -> Any:
        """The graph as a Python function with a code object of its own.

        ``rounding_noise`` (a seed; with ``reference``): every value a node computes is perturbed
        where its working dtype would have to round it (the float64 value is not representable
        there) by one unit roundoff of that dtype, with a random sign: a Monte Carlo estimate of how
        much the graph amplifies the rounding of its intermediates (``ParityOracle.compare``'s
        ``spread``); ``float64_rounded`` names the float64 values that carry one ulp of noise too
        (the outputs of ops that round: a float64 graph's eager run is its reference's own
        computation, so only this says that log(cosh(x)) near 0 turns cosh's last bit into thousands
        of ulps). ``hook`` (either rendering): every value a node computes is replaced by
        ``hook(value, working dtype name, index)`` (``index``: 64 x the node's position + the
        output's); ``round_step`` as the hook of the reference rounds each value to its working dtype,
        as a correctly rounded eager would (``compare``'s ``rounded_steps``)."""
        ns = namespace(reference)
        ns.update(_terms=_terms, _absolute=_absolute, **{name: globals()[name] for name in TERMS_OF.values()},
                  **{fn.__name__: fn for fn in AS_WORKING.values()})
        ns["_shifted"] = _shifted_statistics(rounding_noise)
        if rounding_noise is not None:
            ns["_noise"] = _rounding_noise(rounding_noise, frozenset(
                i * 64 + j for i, n in enumerate(self.nodes) for j, out in enumerate(n.outputs)
                if out in float64_rounded))
        if hook is not None:
            ns["_noise"] = lambda value, dtype_name, index, terms=None: hook(value, dtype_name, index)
        code = compile(self.source(rounding_noise=rounding_noise is not None or hook is not None, reference=reference),
                       f"<fuzz-graph-{next(_counter)}>", "exec")
        exec(code, ns)  # noqa: S102 -- the source is generated from our own op table
        if not reference:
            return ns["graph"]
        graph = ns["graph"]

        def in_float64(*args: Any) -> Any:
            # integer values an op turns into floats (exp of an int32) get torch's default dtype:
            # float64 here, or the reference would be the float32 computation itself
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                return graph(*args)
            finally:
                torch.set_default_dtype(previous)
        return in_float64

    def make_inputs(self, device: str = "cpu", reference: bool = False) -> list[torch.Tensor]:
        tensors = [make_input(d, device) for d in self.inputs]
        if reference:
            tensors = [t.double() if t.is_floating_point() else t for t in tensors]
        return tensors

    def output_ops(self) -> dict[str, str]:
        """Output value name -> the op that produced it."""
        made = {out: n.op for n in self.nodes for out in n.outputs}
        return {o: made.get(o, "input") for o in self.outputs}

    def upstream(self, names: list[str]) -> set[str]:
        """Every value and input ``names`` are computed from, ``names`` included."""
        made = {out: n for n in self.nodes for out in n.outputs}
        needed: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            node = made.get(name)
            if node is not None:
                todo.extend(VALUE_NAME.findall(node.expr))
        return needed

    def pruned(self, outputs: list[str]) -> FuzzGraph:
        """The graph returning only ``outputs``: without the nodes they do not depend on, and without
        the inputs none of the kept nodes reads (the rest renumbered: x0, x1, ... in order)."""
        needed = self.upstream(outputs)
        nodes = [n for n in self.nodes if any(o in needed for o in n.outputs)]
        used = [i for i in range(len(self.inputs)) if f"x{i}" in needed]
        rename = {f"x{old}": f"x{new}" for new, old in enumerate(used)}

        def renamed(text: str) -> str:
            return VALUE_NAME.sub(lambda m: rename.get(m.group(0), m.group(0)), text)

        kept = [Node(n.op, renamed(n.expr), list(n.outputs), list(n.out_meta), n.returns_tuple) for n in nodes]
        calls = [[call[i] for i in used] for call in self.calls]
        return FuzzGraph([self.inputs[i] for i in used], kept, [renamed(o) for o in outputs], calls)

    def prefix(self, count: int) -> FuzzGraph:
        """The graph of its first ``count`` nodes, returning every value they define (for localization)."""
        nodes = self.nodes[:count]
        return FuzzGraph(self.inputs, nodes, [o for n in nodes for o in n.outputs], self.calls)
