"""Decomposition rules: one registry, every rule addressable by name.

The table handed to AOTAutograd is PyTorch's core-ATen decompositions plus the
rules named here. A rule is either taken from ``torch._decomp`` (origin
"torch") for an op that is core ATen but that our lowering prefers as smaller
ops (softmax, layer_norm, ...), or written here (origin "crucible"). A fuzzer
can look a rule up with ``RULES[name]`` and check it against the op it replaces.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._decomp import core_aten_decompositions, decomposition_table

from compiler.foreach import foreach_ops, per_tensor_rule

aten = torch.ops.aten


@dataclass(frozen=True)
class DecompRule:
    name: str
    op: Any  # the OpOverload it replaces
    fn: Callable[..., Any]
    origin: str  # "torch" | "crucible"


RULES: dict[str, DecompRule] = {}


def rule(name: str, op: Any) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable) -> Callable:
        if name in RULES:
            raise ValueError(f"decomposition rule {name!r} is defined twice")
        RULES[name] = DecompRule(name, op, fn, "crucible")
        return fn

    return wrap


# Core-ATen ops that our lowering wants as smaller pieces, decomposed by torch's own rules.
# Random ops (native_dropout, ...) are deliberately absent: as extern calls they draw from
# the generator exactly like eager, so a seeded compiled run matches a seeded eager run.
_TORCH_RULES = [
    aten._softmax.default, aten._log_softmax.default, aten.native_group_norm.default,
    aten.gelu.default, aten.silu.default, aten.mish.default,
    aten.hardswish.default, aten.hardsigmoid.default, aten.hardtanh.default, aten.leaky_relu.default,
    aten.elu.default, aten.softplus.default, aten.std.correction,
    aten.logit.default, aten.masked_fill.Scalar,
    aten.masked_fill.Tensor, aten.rsub.Scalar, aten.clamp.Tensor, aten.hardshrink.default,
    aten.softshrink.default, aten.threshold.default, aten.xlogy.Tensor, aten.log_sigmoid_forward.default,
    aten.glu.default, aten.nan_to_num.default,
    aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
    aten.native_layer_norm_backward.default, aten.gelu_backward.default, aten.silu_backward.default,
    aten.tanh_backward.default, aten.sigmoid_backward.default, aten.threshold_backward.default,
    aten.hardswish_backward.default, aten.native_group_norm_backward.default,
    # training batch norm: batch statistics, normalization and the running-stat update as reductions
    # and pointwise ops, so the norm fuses with its neighbours and the min-cut partitioner can recompute
    # its output in the backward instead of saving it (as an extern ATen call it could do neither)
    aten._native_batch_norm_legit_functional.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats, aten.native_batch_norm.default,
]
for _op in _TORCH_RULES:
    if _op in decomposition_table:
        _name = f"torch:{_op.name()}"
        RULES[_name] = DecompRule(_name, _op, decomposition_table[_op], "torch")


# foreach ops (a compiled optimizer step) as the same op on each tensor: ``compiler.foreach``
for _op in foreach_ops():
    _name = f"crucible:per_tensor:{_op.name().removeprefix('aten::')}"
    RULES[_name] = DecompRule(_name, _op, per_tensor_rule(_op), "crucible")


@rule("crucible:var_mean_to_var_and_mean", aten.var_mean.dim)
def var_mean_dim(x: torch.Tensor, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> Any:
    return aten.var_mean.correction(x, dim, correction=1 if unbiased else 0, keepdim=keepdim)


@rule("crucible:mish_from_softplus_tanh", aten.mish.default)
def mish(x: torch.Tensor) -> torch.Tensor:
    # in float32 for 16-bit inputs, rounded once, as ATen's kernel: each step rounded to bfloat16
    # (softplus, then tanh) put 489 of 1025 small values an ulp off, biased by -0.25 ulp (fuzzer,
    # crucible-cpp, seed 173)
    wide = x.to(_accumulation_dtype(x.dtype))
    return (wide * torch.tanh(torch.nn.functional.softplus(wide))).to(x.dtype)


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@rule("crucible:batch_norm_inference", aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(x: torch.Tensor, weight: Any, bias: Any, running_mean: torch.Tensor,
                         running_var: torch.Tensor, momentum: float, eps: float) -> Any:
    # Pure and functional (torch's rule re-enters the mutating training op). Folded per channel
    # as ATen's CPU kernel does, out = x * alpha + beta: (x - mean) * invstd overflowed to inf for
    # a running mean near float32's max where eager (and the float64 reference) stay finite, and
    # the folded form's overflow (alpha = inf for a weight near max) is eager's too.
    shape = [1, -1] + [1] * (x.dim() - 2)
    acc = _accumulation_dtype(x.dtype)
    alpha = torch.rsqrt(running_var.to(acc) + eps)
    if weight is not None:
        alpha = alpha * weight.to(acc)
    beta = -running_mean.to(acc) * alpha
    if bias is not None:
        beta = bias.to(acc) + beta
    out = x.to(acc) * alpha.reshape(shape) + beta.reshape(shape)
    empty = x.new_empty((0,))
    return out.to(x.dtype), empty, empty


def _normalized(xa: torch.Tensor, dims: list[int], eps: float, summed_mean: bool = False) -> tuple[torch.Tensor, ...]:
    """(xa - mean) * rstd, mean, rstd and the biased variance over ``dims`` (kept), in ``xa``'s dtype. Torch's rules give a
    float32 row whose variance overflows (a value near max) rstd 0 and so every output 0, where
    float64 gives the normalized row (fuzzer, crucible-cpp, seed 22). Three passes over a row, all in
    ``xa``'s dtype: a first mean (mean's lowering scales the sum: the plain one overflows near max) and
    the mean magnitude; the deviations from the mean scaled by a power of two s ~ 1 / magnitude,
    summed, and their squares (neither overflows nor loses bits to subnormals; the first sum corrects
    the mean); then the output. Scaling by a power of two is exact, so rows of equal values still
    normalize to exactly 0. ``summed_mean``: the mean of a row holding +-inf is that inf, as ATen's
    batch norm sums it (its layer and group norm kernels, Welford's, give NaN; as the deviations do
    here). (The ninth session summed unscaled deviations in float64: right, but
    float64 conversions made the H200's layer norms 1.4-2.5x Inductor's time; the eighth's summed big
    rows again scaled by 2^-66: five reductions a row.)"""
    n = math.prod(xa.shape[d] for d in dims)
    if xa.dtype == torch.float64 or n == 0:  # var_mean's lowering scales its sums near float64's max,
        # and an empty row's variance is NaN (rstd NaN, as ATen's; fuzzer, crucible-cpp, seed 26)
        var, mean = torch.var_mean(xa, dim=dims, correction=0, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        plain = torch.mean(xa, dim=dims, keepdim=True) if summed_mean and n else mean
        return (xa - mean) * rstd, torch.where(torch.isinf(plain), plain, mean), rstd, var
    # mean's lowering sums x * 2^-k, 2^k >= n; the two means are sibling sums of one pass
    mean0 = _scaled_mean(xa, dims, n)
    magnitude = _scaled_mean(torch.abs(xa), dims, n)  # not amax: NaN-propagating max
    # reductions take a second reduction; any NaN makes the row NaN through mean0 anyway
    # s = 2^-e, e = floor(log2(magnitude)) kept where s and 1 / s are normal (0, subnormals, inf and NaN
    # give the bounds): |x * s| < 2n, |d * s| < 4n, and the squares' sum (< 16n^3) is finite. e is the
    # float32 exponent field and s is built from its bits. (exp2(-floor(log2(m))) took two libm calls a
    # row: on the CPU a layer norm over rows of 1024 spent ~15% of its time there, rows of 64 most of it.)
    assert xa.dtype == torch.float32, xa.dtype  # float64 took var_mean above; 16-bit rows arrive widened
    e = torch.clamp(torch.bitwise_and(magnitude.view(torch.int32) >> 23, 0xFF) - 127, -126, 126)
    s = ((127 - e) << 23).view(torch.float32)
    # x * s - mean0 * s is (x - mean0) * s rounded once (both products are exact but for subnormals,
    # rounding <= 2^-150) and never overflows where x - mean0 does (values near max of both signs)
    ds = xa * s - mean0 * s
    s1 = torch.sum(ds, dim=dims, keepdim=True) / n
    var_s = torch.clamp_min(torch.sum(ds * ds, dim=dims, keepdim=True) / n - s1 * s1, 0)
    mean = mean0 + s1 / s
    var = var_s / s / s
    # where var leaves float32's range, rstd = s * rsqrt(var_s) (eps is below var's rounding there;
    # with eps = 0 also where var underflows)
    exact = var < math.inf if eps > 0 else (var < math.inf) & ((var >= torch.finfo(xa.dtype).tiny) | (var_s == 0))
    rstd = torch.where(exact, torch.rsqrt(var + eps), s * torch.rsqrt(var_s))
    # the output, two operations an element: (x * a - b) * c with a row's a, b, c. Scaled, (x * s -
    # mean * s) * (rstd / s), (x - mean) * rstd rounded alike; where rstd / s overflows (rstd > 1, so
    # std < 1 and |x - mean| < sqrt(n)) x - mean cannot overflow, and the row takes a = 1, b = mean, c = rstd.
    # (The elementwise form, x - mean and from halves where that overflowed, took eight: a CPU layer norm
    # over 8192x1024 values ran 0.8x eager.)
    k = rstd / s
    scaled = torch.abs(k) < math.inf
    out = (xa * torch.where(scaled, s, 1.0) - torch.where(scaled, mean * s, mean)) * torch.where(scaled, k, rstd)
    return out, torch.where(torch.isinf(mean0), mean0, mean) if summed_mean else mean, rstd, var


def _scaled_mean(xa: torch.Tensor, dims: list[int], n: Any) -> torch.Tensor:
    """A float32 mean (kept dims) as Crucible lowers one, (sum of x * 2^-k) / n * 2^k with 2^k >= n, so
    that the rule means the same run eagerly (``crucible fuzz-decomps``; ATen's plain float32 sum of
    values near max overflows to inf, and a layer norm of such a row was NaN there)."""
    if not isinstance(n, int):  # a symbolic count: the lowering scales at run time
        return torch.mean(xa, dim=dims, keepdim=True)
    scale = 2.0 ** math.ceil(math.log2(n))
    total = torch.sum(xa * (1 / scale), dim=dims, keepdim=True)
    return total if scale == n else total / n * scale


def _affine(out: torch.Tensor, weight: Any, bias: Any, shape: list[int]) -> torch.Tensor:
    """out * weight + bias as one rounding (addcmul is lowered as a fused multiply-add), as ATen's
    norm kernels fuse it: torch's rules round the product, inf near finfo.max where ATen is finite."""
    if weight is not None and bias is not None:
        return torch.addcmul(bias.to(out.dtype).reshape(shape), out, weight.to(out.dtype).reshape(shape))
    if weight is not None:
        return out * weight.to(out.dtype).reshape(shape)
    if bias is not None:
        return out + bias.to(out.dtype).reshape(shape)
    return out


@rule("crucible:batch_norm_training", aten._native_batch_norm_legit_functional.default)
def batch_norm_training(x: torch.Tensor, weight: Any, bias: Any, running_mean: torch.Tensor,
                        running_var: torch.Tensor, training: bool, momentum: float, eps: float) -> Any:
    # The batch statistics as layer and group norm take theirs (``_normalized``: three passes in
    # float32). Torch's rule goes through var_mean, whose lowering sums the deviations in float64:
    # every GPU kernel of resnet50's training batch norms held float64 conversions, and a float32
    # channel whose variance overflows (a value near max) normalized to 0 where float64 gives the
    # normalized values (fuzzer, crucible-cpp, seed 600). The running statistics are torch's rule's
    # (the unbiased variance as var * n / (n - 1)).
    n = x.numel() // x.shape[1] if x.dim() > 1 and x.shape[1] else 0
    if not training or n < 2:  # (eval statistics; one value a channel: torch's rule, as before)
        out = decomposition_table[aten._native_batch_norm_legit_functional.default](
            x, weight, bias, running_mean, running_var, training, momentum, eps)
        if training:
            return out
        # eval: the running statistics pass through; the output folded as the inference rule's
        # (torch's rule overflowed to +-inf where ATen's fold and float64 give NaN for a weight of
        # inf; fuzzer, crucible-cpp, seed 600)
        return (batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps)[0], *out[1:])
    dims = [0, *range(2, x.dim())]
    out, mean, rstd, var = _normalized(x.to(_accumulation_dtype(x.dtype)), dims, eps, summed_mean=True)
    out = _affine(out, weight, bias, [x.shape[1]] + [1] * (x.dim() - 2))
    save_mean, save_rstd = torch.squeeze(mean, dims), torch.squeeze(rstd, dims)
    # (in the running statistics' dtype, as ATen's op returns them; torch's rule gave float32 for bf16)
    new_mean = (momentum * save_mean + (1 - momentum) * running_mean).to(running_mean.dtype)
    new_var = (momentum * (torch.squeeze(var, dims) * (n / (n - 1))) + (1 - momentum) * running_var).to(running_var.dtype)
    if x.device.type == "cpu":  # torch's rule and ATen: saved statistics in the input's dtype on CPU only
        save_mean, save_rstd = save_mean.to(x.dtype), save_rstd.to(x.dtype)
    return out.to(x.dtype), save_mean, save_rstd, new_mean, new_var


@rule("crucible:split_of_an_empty_dim", aten.split.Tensor)
def split(x: torch.Tensor, split_size: int, dim: int = 0) -> Any:
    # torch 2.11's rule indexes the last of zero chunks over a 0-size dim (IndexError; fuzzer,
    # crucible-triton on torch 2.11, seed 10); newer torch returns the whole (empty) tensor as the
    # one chunk, as ATen does
    if x.shape[dim] == 0:
        return (x.detach(),)
    return decomposition_table[aten.split.Tensor](x, split_size, dim)


@rule("crucible:layer_norm_overflow_safe", aten.native_layer_norm.default)
def layer_norm(x: torch.Tensor, normalized_shape: Any, weight: Any, bias: Any, eps: float) -> Any:
    axis = x.dim() - len(normalized_shape)
    out, mean, rstd, _ = _normalized(x.to(_accumulation_dtype(x.dtype)), list(range(axis, x.dim())), eps)
    out = _affine(out, weight, bias, list(x.shape[axis:]))
    if math.prod(x.shape[axis:]) == 0:
        mean = torch.zeros_like(mean)  # ATen's mean of an empty row is 0 (var_mean's NaN)
    if x.device.type == "cpu":  # torch's rule and ATen: mean and rstd in the input's dtype on CPU only
        mean, rstd = mean.to(x.dtype), rstd.to(x.dtype)
    # contiguous, as ATen's: the elementwise form kept a transposed input's strides, and a later view
    # of the output failed to trace (fuzzer, crucible-cpp, seed 26)
    return out.to(x.dtype).contiguous(), mean, rstd


@rule("crucible:addcdiv_in_atens_order", aten.addcdiv.default)
def addcdiv(x: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor, *, value: Any = 1) -> torch.Tensor:
    # ATen's CPU kernel computes x + value * t1 / t2 left to right ((value * t1) / t2, torch's rule), its
    # CUDA kernel x + value * (t1 / t2): value * t1 overflows where t1 / t2 does not, and the reverse,
    # so the two orders put inf in different places (fuzzer, crucible-triton, seed 161, H200:
    # addcdiv's inf positions differed from eager's on torch's rule)
    if x.device.type == "cuda":
        return x + value * (tensor1 / tensor2)
    return decomposition_table[aten.addcdiv.default](x, tensor1, tensor2, value=value)


@rule("crucible:group_norm_centred", aten.native_group_norm.default)
def group_norm_centred(x: torch.Tensor, weight: Any, bias: Any, n: int, c: int, inner: int, groups: int,
                       eps: float) -> Any:
    # (x - mean) * rstd, then the weight and bias, on every device: torch's rule takes ATen's CPU
    # form x * (rstd * w) + (-mean * rstd * w) on CPU, whose separate product overflowed to inf for
    # a weight of 3.4e38 where ATen's fused multiply-add (and float64) stay finite (fuzzer,
    # crucible-cpp, seed 21); the centred form also loses no bits to -mean * w cancelling x * w.
    grouped = x.to(_accumulation_dtype(x.dtype)).reshape(n, groups, c // groups, inner)
    out, mean, rstd, _ = _normalized(grouped, [2, 3], eps)
    out = _affine(out.reshape(x.shape), weight, bias, [1, c] + [1] * (x.dim() - 2))
    return (out.to(x.dtype).contiguous(), mean.reshape(n, groups).to(x.dtype),  # contiguous, as ATen's
            rstd.reshape(n, groups).to(x.dtype))


@rule("crucible:native_multi_head_attention", aten._native_multi_head_attention.default)
def native_multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
                                num_head: int, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor,
                                proj_weight: torch.Tensor, proj_bias: torch.Tensor, mask: Any = None,
                                need_weights: bool = True, average_attn_weights: bool = True,
                                mask_type: Any = None) -> Any:
    # ``nn.MultiheadAttention``'s inference fast path, one ATen op (reached through the encoder layer's
    # op or called directly; Dynamo traces the module's other path): as its linears, attention and
    # projection, the compiler packs the linears' weights (oneDNN on the CPU) and fuses around them
    # where the op's own kernel runs each step alone. A mask (ATen's masked softmax gives a fully
    # masked row 0, not NaN) and nested inputs keep the op.
    if mask is not None or query.is_nested:
        return NotImplemented
    batch, length, dim = query.shape[0], query.shape[1], embed_dim // num_head
    if query is key and key is value:  # self-attention: one GEMM for q, k and v, as ATen's
        q, k, v = torch.nn.functional.linear(query, qkv_weight, qkv_bias).chunk(3, -1)
    else:
        weights, biases = qkv_weight.chunk(3), qkv_bias.chunk(3)
        q, k, v = (torch.nn.functional.linear(t, w, b) for t, w, b in zip((query, key, value), weights, biases))
    q, k, v = (t.reshape(batch, -1, num_head, dim).transpose(1, 2) for t in (q, k, v))
    if need_weights:  # ATen's math path: the softmax of q k^T / sqrt(dim), averaged over heads if asked
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dim), -1)
        out, weights_out = attn @ v, (attn.sum(1) / num_head if average_attn_weights else attn)
    else:
        out, weights_out = torch.nn.functional.scaled_dot_product_attention(q, k, v), query.new_empty((0,))
    out = torch.nn.functional.linear(out.transpose(1, 2).reshape(batch, length, embed_dim), proj_weight, proj_bias)
    return out, weights_out


@rule("crucible:transformer_encoder_layer", aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer(src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
                              qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
                              use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
                              norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
                              ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
                              ffn_bias_2: torch.Tensor, mask: Any = None, mask_type: Any = None) -> Any:
    # ``nn.TransformerEncoderLayer``'s inference fast path, in ATen's order (its transformer.cpp):
    # attention, residual, norm, feed-forward, residual, norm (the norms first with ``norm_first``);
    # ATen runs each step as its own kernel, the compiler fuses the norms, residuals and activation
    # into its kernels and packs the linears (CPU encoder layer 4x128x512: 1.2-1.3x eager's fast path)
    if mask is not None or src.is_nested:
        return NotImplemented

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                    None, False)[0] + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    y = norm(x, norm_weight_2, norm_bias_2) if norm_first else x
    y = torch.nn.functional.linear(y, ffn_weight_1, ffn_bias_1)
    y = torch.nn.functional.gelu(y) if use_gelu else torch.relu(y)
    y = torch.nn.functional.linear(y, ffn_weight_2, ffn_bias_2) + x
    return y if norm_first else norm(y, norm_weight_2, norm_bias_2)


# Core-ATen rules we do not apply: torch's rule for CPU flash attention returns the attention
# weights where the op returns its logsumexp (wrong shape as a second output).
KEEP_AS_EXTERN = [aten._scaled_dot_product_flash_attention_for_cpu.default]
# ... nor those the lowering computes as ATen's kernels do, where torch's rule does not: lerp and
# addcmul are fused multiply-adds in ATen (torch's rules' separate products overflow to inf near
# finfo.max, and lose the low bits of t1 * t2 - self)
# frac: torch's rule, x - trunc(x), gave frac(-0.0) = -0.0 in the compiled GPU kernel where ATen's is
# +0.0 (H200, crucible-triton, fuzzer seed 187); the lowering sets zero results to +0.0
# clamp_min and clamp_max: torch's rule, where(x < bound, bound, x), gave clamp_min(-0.0, +0.0) = -0.0 in
# the compiled GPU kernel where ATen's CUDA max gives +0.0 (H100, test_fuzz_regressions); the lowering
# takes the device's ordered max and min there (``Capabilities.ordered_zeros``), as it does for clamp
LOWERED_AS_IS = [aten.lerp.Scalar, aten.lerp.Tensor, aten.addcmul.default, aten.frac.default,
                 aten.clamp_min.default, aten.clamp_min.Tensor, aten.clamp_max.default, aten.clamp_max.Tensor]


@functools.cache
def _core_aten_table() -> dict[Any, Callable]:
    # materializing torch's lazy table takes ~0.14 s; it never changes within a process
    return dict(core_aten_decompositions())


def decomposition_table_for_compiler() -> dict[Any, Callable]:
    """core-ATen table + every rule in RULES (our own win over torch's for the same op); RULES is
    read on every call, so a rule registered (or planted by a test) later takes effect."""
    table = dict(_core_aten_table())
    for op in KEEP_AS_EXTERN + LOWERED_AS_IS:
        table.pop(op, None)
    for r in sorted(RULES.values(), key=lambda r: r.origin != "torch"):
        table[r.op] = r.fn
    return table


# Ops whose rules run after capture, once per distinct call (``compiler.late_decompositions``): pure
# rules of many ops each, whose outputs a graph reads through ``getitem``; the norms' overflow-safe rules
# emit about 30 ops a call, which AOTAutograd traced call by call.
LATE_OPS = frozenset({aten.native_layer_norm.default, aten.native_group_norm.default})


def capture_decomposition_table() -> dict[Any, Callable]:
    """The table AOTAutograd decomposes with while it captures: ``decomposition_table_for_compiler``
    less the ops whose rules run after capture, once per distinct call (``compiler.late_decompositions``)."""
    table = decomposition_table_for_compiler()
    for op in LATE_OPS:
        table.pop(op, None)
    return table
