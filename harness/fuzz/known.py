"""Known findings: failures already written up (``harness/FINDINGS.md``) that a campaign reports
as ``known`` instead of new, so a CI gate stays green on them without hiding them.

Each entry matches a failure (a ``harness.result.Result``) by target (glob), status, op (glob) and
a substring of the error, and carries the reason and the FINDINGS.md section. A localized result (the campaign
localizes a failure before deciding to shrink it) is matched on ``diverged``, the first
intermediate value that differs and why, rather than on the graph output that showed it: so a
known difference is recognised in the unshrunk graph, whatever ops came after it. Known findings
still appear in every summary, report and store, with their hit counts; they never change the
exit status.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from harness.result import Result


@dataclass(frozen=True)
class KnownFinding:
    target: str  # glob over target names
    status: str
    op: str  # glob over "aten.<op>.<overload>"
    error: str  # substring of the error message, any case ("" matches any)
    reason: str  # one line, with the FINDINGS.md section it is written up in
    output: str = ""  # suffix the failing output's name must end with ("_1": a tuple's second output)


KNOWN_FINDINGS: list[KnownFinding] = [
    KnownFinding("crucible-*", "fail_accuracy", "aten.var_mean.correction", "NaN positions",
                 "ATen's CPU var_mean returns mean NaN for inputs holding +-inf (torch.mean gives +-inf); "
                 "FINDINGS.md: 'var_mean's mean is NaN where mean is inf'"),
    KnownFinding("inductor", "fail_accuracy", "aten.var_mean.correction", "NaN positions",
                 "as for crucible-* (ATen's CPU var_mean: mean NaN for inputs holding +-inf, Inductor's +-inf; "
                 "crucible fuzz --target inductor -j 2 --seed 2); FINDINGS.md: 'var_mean's mean is NaN where mean is inf'"),
    KnownFinding("aot_eager", "fail_accuracy", "aten.upsample_bilinear2d.vec", "NaN positions",
                 "torch's upsample_bilinear2d decomposition: 0 * inf from a zero-weight neighbour; "
                 "FINDINGS.md: 'upsample_bilinear2d: torch's decomposition gives NaN'"),
    KnownFinding("inductor", "fail_accuracy", "aten.upsample_bilinear2d.vec", "NaN positions",
                 "as for aot_eager (the same decomposition); FINDINGS.md: 'upsample_bilinear2d'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.upsample_bilinear2d.vec", "NaN positions",
                 "torch's upsample_bilinear2d rule, which Crucible applies: v1 + (v2 - v1) * w is NaN next to an "
                 "infinite neighbour where the kernel's weighted sum is inf; FINDINGS.md: 'upsample_bilinear2d'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.upsample_bilinear2d.vec", "relative error",
                 "torch's upsample_bilinear2d rule, which Crucible applies: v1 + (v2 - v1) * w is ~5x further "
                 "from float64 than the kernel's weighted sum (aot_eager and Inductor too); FINDINGS.md: "
                 "'upsample_bilinear2d'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::gelu", "inf positions",
                 "ATen's CPU gelu kernel gives NaN for +inf and inf at finfo.max; the rule is right; "
                 "FINDINGS.md: 'ATen's CPU gelu gives NaN for +inf'"),
    KnownFinding("decompositions", "fail_accuracy", "crucible:layer_norm_overflow_safe", "out[1]: NaN positions",
                 "a row holding +-inf: ATen's Welford mean is NaN (in float64 too), the rule's +-inf (torch's "
                 "rule's too); FINDINGS.md: 'native_layer_norm's mean is NaN where mean is inf'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.native_layer_norm.default", "NaN positions",
                 "ATen's layer_norm kernels return mean NaN for a row holding +-inf (Welford), torch's "
                 "decomposition +-inf; FINDINGS.md: 'native_layer_norm's mean is NaN where mean is inf'", output="_1"),
    KnownFinding("inductor", "fail_accuracy", "aten.native_layer_norm.default", "NaN positions",
                 "as for crucible-* (torch's decomposition); FINDINGS.md: 'native_layer_norm's mean'", output="_1"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::hardswish_backward", "NaN positions",
                 "ATen's CPU hardswish_backward gives NaN for a NaN input in its vectorized loop and grad in its "
                 "scalar tail (the rule: grad); FINDINGS.md: 'hardswish_backward of NaN depends on the length'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::native_layer_norm_backward", "NaN positions",
                 "an infinite weight: kernel and float64 give NaN, torch's rule -inf; "
                 "FINDINGS.md: 'native_layer_norm_backward with an infinite weight'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::native_group_norm", "NaN positions",
                 "a group's variance overflows float32 (values near finfo.max): kernel NaN, torch's rule 0, float64 "
                 "finite; FINDINGS.md: 'native_group_norm when the variance overflows'"),
    KnownFinding("crucible-[ci]*", "fail_accuracy", "aten.logit.default", "inf positions",
                 "ATen's CPU logit rounds the clamp bound 1 - eps to float16/bfloat16 (1 - 1e-6 is 1.0: inf), "
                 "its CUDA kernel and torch's decomposition clamp in float32; FINDINGS.md: 'logit with eps'"),
    KnownFinding("crucible-[ci]*", "fail_accuracy", "aten.div.Tensor_mode", "RMSE",
                 "ATen's CPU bfloat16 trunc division rounds the quotient to bfloat16 before truncating in its "
                 "vectorized loop only (14.99 -> 15) and not in its scalar tail; FINDINGS.md: 'div trunc bfloat16'"),
    KnownFinding("crucible-[ci]*", "fail_accuracy", "aten.scaled_dot_product_attention.default", "NaN positions",
                 "ATen's CPU flash attention returns 0 for a query row whose scores are all NaN (math path and "
                 "Crucible's template: NaN); FINDINGS.md: 'CPU flash attention: a query row whose scores are all NaN'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.scaled_dot_product_attention.default",
                 "eager 3.4028234663852886e+38, target",
                 "an attention output whose exact value is float32's max (values at max) rounds to max or overflows "
                 "by chance, ATen's kernels too (inf in about half the draws); FINDINGS.md: 'Attention whose exact "
                 "output is finfo.max'"),
    KnownFinding("decompositions", "fail_accuracy", "core:aten::soft_margin_loss_backward", "worse than the op",
                 "torch's rule computes sigmoid(y * x) - 1, which cancels (14% off where the kernel is exact); "
                 "FINDINGS.md: 'Torch decomposition rules triaged from crucible fuzz-decomps'"),
    KnownFinding("decompositions", "fail_accuracy", "core:aten::logit_backward", "inf positions",
                 "at x = -0.0 ATen's scalar loop gives +inf, its vectorized loop and torch's rule -inf; "
                 "FINDINGS.md: 'Torch decomposition rules triaged from crucible fuzz-decomps'"),
    KnownFinding("decompositions", "fail_accuracy", "core:aten::upsample_linear1d*", "NaN positions",
                 "torch's rule: 0 * inf from a zero-weight neighbour (as upsample_bilinear2d); "
                 "FINDINGS.md: 'Torch decomposition rules triaged from crucible fuzz-decomps'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::native_group_norm_backward", "out[1]: NaN positions",
                 "grad_weight (ds - db * mean) * rstd gives NaN at mean -3.4e38, rstd inf (kernel, float64: -inf); "
                 "FINDINGS.md: 'Torch decomposition rules triaged from crucible fuzz-decomps'"),
    KnownFinding("inductor", "fail_accuracy", "aten.cumprod.default", "NaN positions",
                 "Inductor's GPU scan reassociates the product: an overflow before a zero gives NaN where "
                 "eager's ordered product is 0; FINDINGS.md: 'Inductor (GPU): cumprod reassociates the product'"),
    KnownFinding("inductor", "fail_accuracy", "aten.max_pool2d_with_indices.default", "integer",
                 "Inductor's max-pool index: the first of several NaNs in a window (ATen: the last) and a padded "
                 "(negative) position for a window of -inf; FINDINGS.md: 'Inductor: max-pool indices'", output="_1"),
    KnownFinding("crucible-*", "fail_accuracy", "aten._native_batch_norm_legit_no_training.default", "positions",
                 "ATen's CPU inference batch norm folds to x * alpha + beta (NaN where alpha overflows) for "
                 "contiguous running stats and computes (x - mean) * invstd * w + b for strided ones (Crucible: the "
                 "fold); FINDINGS.md: 'the CPU kernel's order depends on the running statistics' strides'"),
    KnownFinding("crucible-[ci]*", "fail_accuracy", "aten.fmod.*", "NaN positions",
                 "ATen's CPU float32 fmod is NaN where the quotient overflows, in its vectorized loop only (its "
                 "scalar loop and C's fmod: the exact remainder, as Crucible); FINDINGS.md: 'float32 fmod is NaN'"),
    KnownFinding("crucible-interpret", "fail_accuracy", "aten.copysign.*", "RMSE",
                 "Triton's interpreter computes log (and other NaN-making math) with numpy, whose NaN for a "
                 "negative argument has the sign bit set (ATen's: clear); copysign by it flips the sign; "
                 "FINDINGS.md: 'log of a negative number is a NaN with the sign bit set'"),
    KnownFinding("crucible-interpret", "fail_accuracy", "aten.copysign.*", "relative error",
                 "as the RMSE entry above, for flipped values small enough that the oracle's relative check "
                 "fails first (copysign(4.4e-9, log(-0.22)): -4.4e-9 interpreted; campaign 581); FINDINGS.md: "
                 "'log of a negative number is a NaN with the sign bit set'"),
    KnownFinding("decompositions", "fail_accuracy", "crucible:batch_norm_inference", "NaN positions",
                 "ATen's CPU inference batch norm takes another order for strided running statistics (the rule "
                 "is the contiguous path's fold); FINDINGS.md: 'the CPU kernel's order depends on the running statistics' strides'"),
    KnownFinding("decompositions", "fail_accuracy", "core:aten::hardtanh_backward", "NaN positions",
                 "a NaN input gives 0 in the kernel (out of range), grad in torch's rule; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("decompositions", "fail_accuracy", "core:aten::nll_loss_backward", "NaN positions",
                 "an infinite grad_output times the one-hot's zeros: NaN in torch's rule, 0 in the kernel; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::sigmoid_backward", "inf positions",
                 "torch's rule multiplies y * (1 - y) first, which overflows near finfo.max; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("decompositions", "fail_accuracy", "*:aten::std*", "inf positions",
                 "sqrt(var) overflows where the kernel's std of values near finfo.max is finite; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("decompositions", "fail_accuracy", "torch:aten::_softmax_backward_data", "NaN positions",
                 "near finfo.max the kernel gives inf, torch's rule inf - inf; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("decompositions", "fail_accuracy", "core:aten::smooth_l1_loss_backward", "NaN positions",
                 "a NaN target gives grad 0 in torch's rule, NaN in the kernel; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("crucible-[ci]*", "fail_accuracy", "aten.prod.*", "eager overflowed there",
                 "ATen's CPU float16 prod rounds every partial product to float16 (overflows on the way; CUDA and "
                 "Crucible accumulate in float32); FINDINGS.md: 'a float16 product accumulates in float16'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.native_group_norm.default", "NaN positions",
                 "a group's variance overflows float32: ATen's kernel NaN, torch's rule (Crucible's lowering) 0, "
                 "float64 finite; FINDINGS.md: 'native_group_norm when the variance overflows'"),
    KnownFinding("crucible-interpret", "fail_accuracy", "aten.signbit.*", "integer/bool values",
                 "the interpreter's NaN of a negative log/asin argument has the sign bit set (numpy's), ATen's "
                 "not; FINDINGS.md: 'log of a negative number is a NaN with the sign bit set'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.std.correction", "inf positions",
                 "torch's std rule (which Crucible applies) is sqrt(var), which overflows where the kernel's std "
                 "of values near finfo.max is finite; FINDINGS.md: 'More torch rule findings'"),
    KnownFinding("decompositions", "fail_accuracy", "crucible:group_norm_centred", "NaN positions",
                 "a group of one element near finfo.max: ATen's kernel x * a - mean * a overflows (NaN) and cancels "
                 "in float64 (-2.3e24), the centred rule's exact 0 is right; FINDINGS.md: 'torch's native_group_norm rule'"),
    KnownFinding("inductor", "fail_accuracy", "aten.remainder.Scalar", "",
                 "Inductor's a - floor(a / b) * b overflows for float64 values near finfo.max (-inf where eager's "
                 "exact remainder is 2.0); FINDINGS.md: 'Inductor: float64 remainder of a value near finfo.max'"),
    KnownFinding("inductor", "fail_accuracy", "aten._native_batch_norm_legit_no_training.default", "inf positions",
                 "Inductor's (x - mean) * invstd overflows before the weight where ATen's fold is finite; "
                 "FINDINGS.md: 'Inductor: inference batch norm (x - mean) * invstd overflows'"),
    KnownFinding("inductor", "fail_accuracy", "aten.div.Tensor_mode", "NaN positions",
                 "Inductor's GPU floor division of +-inf by a finite value gives +-inf, ATen's div_floor (through "
                 "fmod) NaN; FINDINGS.md: 'Inductor (GPU): floor division of +-inf'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.softshrink.*", "signs of zeros",
                 "ATen's CPU softshrink gives +0 in its vectorized loop and a zero of its input's sign in its scalar "
                 "tail (torch's rule: x * 0, the input's sign); FINDINGS.md: 'ATen (CPU): softshrink's zero and float64 exp2'"),
    KnownFinding("inductor", "fail_accuracy", "aten.softshrink.*", "signs of zeros",
                 "as for crucible-* (torch's softshrink rule); FINDINGS.md: 'ATen (CPU): softshrink's zero'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.native_layer_norm.default", "signs of zeros",
                 "ATen's CPU layer norm with a weight and no bias gives +0 where the weight is 0 (x * scale + 0), "
                 "torch's rule and Inductor -0 below the mean ((x - mean) * rstd * w); FINDINGS.md: "
                 "'ATen (CPU): layer norm's zeros'"),
    KnownFinding("inductor", "fail_accuracy", "aten.native_layer_norm.default", "signs of zeros",
                 "as for crucible-* (torch's rule); FINDINGS.md: 'ATen (CPU): layer norm's zeros'"),
    KnownFinding("inductor", "fail_accuracy", "aten.softshrink.*", "NaN positions",
                 "torch 2.11's Inductor on the GPU gives softshrink(NaN) = 0 where ATen (and torch's rule, a * 0) "
                 "keep NaN; FINDINGS.md: 'Inductor (GPU, torch 2.11): softshrink of NaN is 0'"),
    KnownFinding("inductor", "fail_accuracy", "aten.cumprod.*", "inf positions",
                 "Inductor's GPU cumprod overflows to inf where ATen's sequential product of the same float32 "
                 "values stays finite (1.3e38); FINDINGS.md: 'Inductor (GPU): cumprod overflows'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.remainder.*", "NaN positions",
                 "ATen's CPU remainder is NaN where the quotient overflows, in its vectorized loop only (its scalar "
                 "loop: the exact remainder, as Crucible); FINDINGS.md: 'ATen (CPU): remainder is NaN'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.[sc][io][ns]h.default", "inf positions",
                 "ATen's CPU float64 sinh and cosh overflow to +-inf for |x| in (709.78, 710.48) in their "
                 "vectorized loop only (e^x first; the scalar loop and Crucible: the finite value); "
                 "FINDINGS.md: 'ATen (CPU): float64 sinh and cosh overflow'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.convolution.default", "eager nan, target",
                 "ATen's CPU convolution of a channels-last input (Crucible's layout for CPU graphs with oneDNN "
                 "convolutions) skips some padded taps, so a NaN or inf weight leaves the border finite where the "
                 "contiguous input's 0 * NaN (eager's, float64's) is NaN; matched only where eager has the NaN; "
                 "FINDINGS.md: 'ATen (CPU): a channels-last convolution skips padded taps'"),
    KnownFinding("crucible-*", "fail_accuracy", "aten.gelu.default", "positions",
                 "ATen's CPU gelu gives NaN for +inf and inf at finfo.max (Crucible: inf and finfo.max, as torch's "
                 "rule and float64); FINDINGS.md: 'ATen's CPU gelu gives NaN for +inf'"),
]


# Targets that run another target's kernels (with checks around them): its known findings are theirs.
RUNS_THE_KERNELS_OF = {"crucible-sim": "crucible-interpret"}


def match_known(target: str, result: Result) -> str | None:
    """The reason of the known finding ``result`` matches, or None."""
    error = result.diverged or result.error or ""
    base, _, options = target.partition(":")
    names = {target, RUNS_THE_KERNELS_OF.get(base, base) + (f":{options}" if options else "")}
    for known in KNOWN_FINDINGS:
        if (any(fnmatch.fnmatchcase(name, known.target) for name in names) and result.status == known.status
                and fnmatch.fnmatchcase(result.op or "", known.op)
                and known.error.lower() in error.lower() and error.split(":")[0].endswith(known.output)):
            return known.reason
    return None
