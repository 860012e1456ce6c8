"""Readable kernel names: the ops a kernel fuses, then a content hash.

``k_rsqrt_hardtanh_mean_3f2a9b1c04de`` names a kernel fusing a batch norm (its rsqrt), a hardswish
(its clamp) and a mean, in generated code and in profiler traces alike. The hash of the kernel's
source stays in the name: kernels of equal source share one name, so Triton builds and tunes them
once, and kernels that differ never share one (the runtime keys tuned launch configs by name).

The ops are ATen ops after decomposition (a kernel's ``origins``). Bookkeeping ops (views, casts)
and plain arithmetic say little about a kernel, so the name lists the first few others in program
order, and falls back to the arithmetic when that is all the kernel does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Arithmetic and comparisons: named only when a kernel holds nothing else.
PLAIN = frozenset({"add", "sub", "mul", "div", "neg", "where", "eq", "ne", "lt", "le", "gt", "ge", "abs",
                   "bitwise_and", "bitwise_or", "bitwise_not", "logical_not", "logical_and", "logical_or",
                   "remainder", "floor_divide", "pow", "reciprocal", "maximum", "minimum", "fill", "full",
                   "scalar_tensor", "zeros_like", "ones_like", "full_like", "lift_fresh_copy"})
# Moving or relabelling data: never named.
BOOKKEEPING = frozenset({"view", "reshape", "expand", "permute", "unsqueeze", "squeeze", "clone", "getitem",
                         "convert_element_type", "_to_copy", "copy", "alias", "slice", "select", "t",
                         "transpose", "contiguous", "_unsafe_view", "as_strided", "detach", "unbind", "split",
                         "split_with_sizes", "iota", "arange"})
# Shorter spellings of long op names.
SHORT = {"clamp": "clamp", "clamp_min": "relu", "clamp_max": "clamp", "var_mean": "varmean",
         "native_layer_norm": "ln", "native_batch_norm": "bn", "_native_batch_norm_legit_no_training": "bn",
         "constant_pad_nd": "pad", "max_pool2d_with_indices": "maxpool", "avg_pool2d": "avgpool",
         "_adaptive_avg_pool2d": "avgpool", "adaptive_avg_pool2d": "avgpool",
         "_softmax": "softmax", "_log_softmax": "logsoftmax", "sigmoid": "sigmoid", "hardtanh": "hardtanh",
         "index": "gather", "index_select": "gather", "scatter_add": "scatter"}
MAX_OPS = 3
HASH_CHARS = 12  # 48 bits: names key the tuned-config table, so two kernels must never collide
_IDENT = re.compile(r"[^a-z0-9]+")


def op_word(origin: str) -> str:
    """``"amax.default"`` -> ``"amax"``: the op's name, without its overload, as an identifier part."""
    name = origin.split(".", 1)[0].lower()
    name = SHORT.get(name, name)
    return _IDENT.sub("", name.strip("_")) or "op"


def kernel_name_words(origins: Sequence[str]) -> list[str]:
    words = [op_word(o) for o in dict.fromkeys(origins)]
    words = [w for w in dict.fromkeys(words) if w not in BOOKKEEPING]
    telling = [w for w in words if w not in PLAIN]
    return (telling or words)[:MAX_OPS]


def kernel_symbol(origins: Sequence[str], digest: str) -> str:
    """``k_<ops>_<hash>``; ``k_<hash>`` for a kernel with no recorded ops."""
    words = kernel_name_words(origins)
    return "_".join(["k", *words, digest[:HASH_CHARS]])
