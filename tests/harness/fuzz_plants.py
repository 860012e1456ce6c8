"""Bugs planted in the compiler for the fuzzer's CI tier (tests/harness/test_fuzz_ci.py).

Not a test module: the fuzz worker imports it through ``crucible fuzz --import
tests.harness.fuzz_plants:<function>``, so the bug is live inside the isolated worker.
Each function patches one registry entry, the way tests/compiler/test_errors.py plants a
broken lowering.
"""

from __future__ import annotations

import re
from typing import Any

import torch

aten = torch.ops.aten


def var_without_bessel() -> None:
    """var/var_mean lowered with correction 0 whatever the graph asks (a dropped Bessel correction)."""
    import compiler.lowerings  # noqa: F401  (register every rule before patching)
    from compiler.lowering import LOWERINGS

    for op in (aten.var.correction, aten.var_mean.correction):
        original = LOWERINGS[op]

        def biased(ctx: Any, node: Any, x: Any, dims: Any = None, *, original: Any = original, **kw: Any) -> Any:
            kw["correction"] = 0
            return original(ctx, node, x, dims, **kw)

        LOWERINGS[op] = biased


def clamp_drops_nan() -> None:
    """clamp lowered as sel(v > low, v, low): NaN inputs come out as the lower bound."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowering import LOWERINGS
    from compiler.lowerings import pointwise as pw

    def clamp(ctx: Any, node: Any, x: Any, lo: Any = None, hi: Any = None) -> Any:
        if node.target.overloadpacket is aten.clamp_max:
            lo, hi = None, lo
        common = pw.promote(x, lo, hi)

        def fn(v: Any, *bounds: Any) -> Any:
            it = iter(bounds)
            if lo is not None:
                low = next(it)
                v = pw.sel(v > low, v, low)
            if hi is not None:
                high = next(it)
                v = pw.sel(v > high, high, v)
            return v

        return pw.pointwise(node, fn, x, *[b for b in (lo, hi) if b is not None], compute=common)

    for op in (aten.clamp, aten.clamp_min, aten.clamp_max):
        LOWERINGS[op] = clamp


def hardsigmoid_rule_off_by_a_bit() -> None:
    """The hardsigmoid decomposition rule with 1/5 for 1/6 in its slope."""
    from compiler.decompositions import RULES, DecompRule

    name = "torch:aten::hardsigmoid"

    def wrong(x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x / 5 + 0.5, 0, 1)

    RULES[name] = DecompRule(name, aten.hardsigmoid.default, wrong, "torch")


def exp_lowering_raises() -> None:
    """The exp lowering raises (a lowering bug that fails the compile, not the numbers)."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowering import LOWERINGS

    def broken(ctx: Any, node: Any, *args: Any, **kw: Any) -> Any:
        raise KeyError("planted: exp has no lowering")

    LOWERINGS[aten.exp.default] = broken


def gpu_exp_misspelled() -> None:
    """The GPU rendering of float32 exp calls a libdevice function that does not exist: the
    interpreter (numpy's exp) never sees it, only Triton's GPU build does."""
    from compiler.codegen import triton as renderer
    from compiler.ir import Op

    renderer.PRECISE_FP32[Op.EXP] = "libdevice.exp_no_such_function"


def loads_past_the_end(source: str) -> str:
    """Triton kernel source whose loads read one lane past ``xnumel`` (stores stay masked): an
    out-of-bounds read the interpreter does not notice (the values land in lanes never stored) and
    the simulator's bounds checks report. Pointwise kernels only (their loads are ``mask=xmask,``)."""
    return (source.replace("    xmask = xindex < xnumel\n", "    xmask = xindex < xnumel\n    lmask = xindex <= xnumel\n")
            .replace("mask=xmask,", "mask=lmask,"))


def planted_render(render: Any) -> Any:
    """``TritonRenderer.render`` with ``loads_past_the_end`` applied to what it renders (for a
    monkeypatch in this process, or ``kernel_loads_past_the_end`` in a worker)."""
    import dataclasses

    def planted(self: Any, kernel: Any) -> Any:
        out = render(self, kernel)
        return dataclasses.replace(out, source=loads_past_the_end(out.source))

    return planted


def kernel_loads_past_the_end() -> None:
    """Every generated Triton kernel reads one element past its inputs (``loads_past_the_end``)."""
    from compiler.codegen.triton import TritonRenderer

    TritonRenderer.render = planted_render(TritonRenderer.render)


def hardshrink_rule_aborts() -> None:
    """The hardshrink decomposition rule aborts its process (a rule that crashes its worker)."""
    import os

    from compiler.decompositions import RULES, DecompRule

    name = "torch:aten::hardshrink"

    def abort(x: torch.Tensor, lambd: float = 0.5) -> torch.Tensor:
        os.abort()

    RULES[name] = DecompRule(name, aten.hardshrink.default, abort, "torch")


def aot_exp_as_expm1(aot_module_simplified: Any) -> Any:
    """``aot_module_simplified`` handing its forward compiler a graph with every ``exp`` turned into
    ``expm1``: a wrong graph from AOTAutograd's layer, which the compiler under test and ``aot_eager``
    both run as given and Dynamo's ``eager`` backend never sees."""

    def wrong_graph(compile_graph: Any) -> Any:
        def compile_wrong(graph: Any, inputs: Any) -> Any:
            for node in graph.graph.nodes:
                if node.target is aten.exp.default:
                    node.target = aten.expm1.default
            graph.recompile()
            return compile_graph(graph, inputs)

        return compile_wrong

    def planted(gm: Any, example_inputs: Any, **kw: Any) -> Any:
        for key in ("fw_compiler", "inference_compiler"):
            if kw.get(key) is not None:
                kw[key] = wrong_graph(kw[key])
        return aot_module_simplified(gm, example_inputs, **kw)

    return planted


def aot_layer_rewrites_exp() -> None:
    """``aot_exp_as_expm1`` in every caller of AOTAutograd (the crucible backend, aot_eager, Inductor)."""
    import torch._dynamo.backends.common as common
    import torch._functorch.aot_autograd as aot

    planted = aot_exp_as_expm1(aot.aot_module_simplified)
    aot.aot_module_simplified = planted
    common.aot_module_simplified = planted


# float32 -> bfloat16 by dropping the low 16 bits (toward zero) instead of rounding to nearest even:
# an immediately called C++ lambda, so it renders where ``crucible::float_to_bf16`` would.
TRUNCATING_BF16 = "[](float v) { return uint16_t(crucible::float_to_bits(v) >> 16); }"


def bf16_cast_truncates() -> None:
    """Generated C++ converts float32 to bfloat16 by truncation (casts and 16-bit stores alike): at
    most one ulp off, within every RMSE ratio, but half an ulp toward zero on average."""
    from compiler.codegen import cpp_lang

    cpp_lang.FROM_FLOAT[torch.bfloat16] = TRUNCATING_BF16


def abs_off_by_an_ulp_rule() -> Any:
    """An abs lowering giving |x| * (1 + 2^-23) where 1 < |x| < 2^100 (float32; not near the top, where
    it would overflow into inf, which the tolerance check sees): one or two ulp off for some inputs,
    within the tolerance check, not equal to eager's exact result."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowerings import pointwise as pw
    from compiler.lowerings.formulas import sel, vabs

    def off(x: Any) -> Any:
        if x.e.dtype != torch.float32:
            return vabs(x)
        return sel(vabs(x) > 1, sel(vabs(x) < 2.0 ** 100, vabs(x) * (1 + 2.0 ** -23), vabs(x)), vabs(x))

    return pw._unary_same(off)


def abs_off_by_an_ulp() -> None:
    """abs lowered by ``abs_off_by_an_ulp_rule``."""
    from compiler.lowering import LOWERINGS

    LOWERINGS[aten.abs] = abs_off_by_an_ulp_rule()



def neg_of_a_fused_operand() -> None:
    """neg dropped when its operand is an unrealized fused expression (another op's result) rather
    than a buffer: a rule that mishandles a fused operand. Graphs of one op never reach it; graphs
    grown from coverage seeds do (tests/harness/test_fuzz_coverage.py)."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowering import LOWERINGS
    from compiler.lowerings.rules import Lazy

    original = LOWERINGS[aten.neg]

    def neg(ctx: Any, node: Any, x: Any, *rest: Any, **kw: Any) -> Any:
        if isinstance(x, Lazy):
            return x
        return original(ctx, node, x, *rest, **kw)

    LOWERINGS[aten.neg] = neg

# -- plants for the generation corners (tests/harness/test_fuzz_corners.py) -------------------------
LOOP_HEAD = re.compile(r"for roffset in range\(0, (\d+), RBLOCK\):")


def drop_last_partial_block(source: str) -> str:
    """Triton source whose looped reductions stop at the last whole block (``rnumel - rnumel % RBLOCK``):
    rows that fit one block (persistent reductions) and whole numbers of blocks come out right."""
    return LOOP_HEAD.sub(lambda m: f"for roffset in range(0, {m.group(1)} - {m.group(1)} % RBLOCK, RBLOCK):", source)


def looped_reduction_drops_last_block() -> None:
    """Every looped Triton reduction loses its last partial block (``drop_last_partial_block``)."""
    import dataclasses

    from compiler.codegen.triton import TritonRenderer

    render = TritonRenderer.render

    def planted(self: Any, kernel: Any) -> Any:
        out = render(self, kernel)
        return dataclasses.replace(out, source=drop_last_partial_block(out.source))

    TritonRenderer.render = planted


def norm_rule_cached_without_eps() -> None:
    """The late decompositions' trace cache keyed without the calls' float constants: the second of two
    norms with one input layout, normalized shape, weight and bias that differ only in eps gets the
    first one's ops. The cache is emptied for each graph, so only a graph with both norms shows it.
    (The fuzzer's fx graphs reach the norms' rules through that pass, as corpus runs do:
    ``harness.fuzz.subject.capture_aten``.)"""
    from compiler import late_decompositions as late
    from compiler import pipeline

    key, expand = late._layout_key, pipeline.expand_late_decompositions

    def without_floats(value: Any) -> Any:
        return ("value",) if isinstance(value, float) else key(value)

    def per_graph(gm: Any) -> Any:
        late._TRACED.clear()
        return expand(gm)

    late._layout_key = without_floats
    pipeline.expand_late_decompositions = per_graph


def layer_norm_bias_needs_weight() -> None:
    """The layer norm rule adds the bias only when there is a weight (``if weight is not None:
    out = out * w + b``): a norm with a bias and no weight loses its bias."""
    from compiler.decompositions import RULES, DecompRule

    name = "crucible:layer_norm_overflow_safe"
    rule = RULES[name]

    def wrong(x: torch.Tensor, shape: Any, weight: Any, bias: Any, eps: float) -> Any:
        return rule.fn(x, shape, weight, bias if weight is not None else None, eps)

    RULES[name] = DecompRule(name, rule.op, wrong, rule.origin)


def extern_drops_keyword_dtype() -> None:
    """Extern (library) calls lose a keyword-only ``dtype=`` argument (cumsum(x, 0, dtype=f64) runs as
    cumsum(x, 0)): the call is rebuilt from the positional arguments and the other keywords."""
    from compiler.lowering import GraphLowering

    extern = GraphLowering.extern

    def planted(self: Any, node: Any, args: tuple, kwargs: dict, *rest: Any, **kw: Any) -> Any:
        return extern(self, node, args, {k: v for k, v in kwargs.items() if k != "dtype"}, *rest, **kw)

    GraphLowering.extern = planted


def sliced_unit_dims_taken_dense() -> None:
    """An input with a size-1 dim and a storage offset (a slice of a wider tensor: ``x[:, 1:2]``) is
    read as if it were dense: its strides are recomputed from its shape."""
    from compiler.graph import contiguous_strides
    from compiler.lowering import GraphLowering, Strided

    lower = GraphLowering.lower_placeholder

    def planted(self: Any, node: Any) -> Any:
        out = lower(self, node)
        val = node.meta.get("val")
        if isinstance(out, Strided) and 1 in tuple(val.shape) and val.storage_offset() != 0:
            return Strided(out.buffer, out.shape, contiguous_strides(tuple(out.shape)), out.offset, out.dtype)
        return out

    GraphLowering.lower_placeholder = planted


# -- plants for mutants that survived `crucible mutate` (tests/harness/test_fuzz_mutant_plants.py) ----
def _redefine(module: Any, name: str, old: str, new: str) -> None:
    """Redefine ``module.name`` from its source with ``old`` replaced by ``new`` (once, exactly as the
    mutant's edit), in the module's namespace, so every caller that looks the name up gets the mutant."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(getattr(module, name)))
    if source.count(old) != 1:
        raise AssertionError(f"plant: {old!r} is not once in {module.__name__}.{name}")
    namespace = vars(module)
    exec(compile(source.replace(old, new), inspect.getsourcefile(module), "exec"), namespace)  # noqa: S102


def log1p_series_cubic_off() -> None:
    """float32/16-bit log1p's series for |x| < 0.05 with 2/3 for 1/3 in its cubic term (mutant
    ``formulas.py`` ``1 / 3`` -> ``2 / 3``): a relative error near x^2/3, at most 1e-3 at |x| = 0.05."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowerings import formulas, pointwise

    from compiler.lowering import LOWERINGS

    _redefine(formulas, "log1p", "x * (1 / 3 + ", "x * (2 / 3 + ")
    LOWERINGS[aten.log1p] = pointwise._unary_float(formulas.log1p)  # the table was built at import


def shifted_variance_drops_a_square() -> None:
    """The norms' shifted-data variance subtracts the first moment s1 instead of its square (mutant
    ``decompositions.py`` ``- s1 * s1`` -> ``- s1``): s1 is the first mean's rounding error in units
    of the row's magnitude, ~1e-7, which only matters where the spread of a row is small against its
    mean (a row of 1000 + noise)."""
    from compiler import decompositions

    _redefine(decompositions, "_normalized", "/ n - s1 * s1, 0)", "/ n - s1, 0)")


def float64_exp_through_float32() -> None:
    """float64 exp computed in float32 (as the interpreter's float64 fmas were by the mutant of
    ``triton.py`` that sent them through the float32 path): a relative error of ~6e-8, under float64's
    absolute floor of 1e-7 for values below 1."""
    import compiler.lowerings  # noqa: F401
    from compiler import ir
    from compiler.lowering import LOWERINGS
    from compiler.lowerings import formulas, pointwise

    def exp(x: Any) -> Any:
        if x.e.dtype != torch.float64:
            return formulas.vexp(x)
        return formulas.V(ir.cast(formulas.vexp(formulas.V(ir.cast(x.e, torch.float32))).e, torch.float64))

    LOWERINGS[aten.exp] = pointwise._unary_float(exp)


def lerp_branch_swapped() -> None:
    """lerp from the farther end (``0.5 < |w|`` for ``|w| < 0.5``, mutant of ``formulas.py``): the same
    value but for rounding, which cancels where the step is small against the end."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowerings import formulas, pointwise

    _redefine(formulas, "lerp", "small = vabs(weight) < 0.5", "small = 0.5 < vabs(weight)")
    pointwise.lerp = formulas.lerp  # lower_lerp reads the name from its own module


def pow_of_minus_one_to_inf() -> None:
    """pow's special case (-1) ** +-inf = 1 tested on a base of -2 (mutant of ``powers.py``): (-1) ** inf
    comes out NaN from exp(inf * log 1). Only the interpreter uses this formula (C++ calls C's pow)."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowerings import pointwise, powers

    _redefine(powers, "pow_", "(x.eq(-1) & vabs(y).eq(math.inf))", "(x.eq(-2) & vabs(y).eq(math.inf))")
    pointwise.pow_ = powers.pow_  # the pow lowerings read the name from their own module


# -- plants for the dynamic-shape mode (tests/harness/test_fuzz_dynamic.py) -----------------------------
def launch_config_kept_from_first_call() -> None:
    """A size-generic Triton kernel keeps the grid and block sizes its first launch chose (a launch
    config cached per kernel where it must be chosen per size): a later, larger size runs too few
    programs, or a persistent reduction too short a block, and leaves part of its output unwritten.
    Static kernels never take this path, and the first size always comes out right."""
    from compiler.codegen import triton_tiles

    candidates = triton_tiles.SizeLaunch.candidates
    kept: dict[Any, Any] = {}

    def planted(self: Any, xnumel: int, rnumel: int) -> Any:
        if self not in kept:
            kept[self] = candidates(self, xnumel, rnumel)
        return kept[self]

    triton_tiles.SizeLaunch.candidates = planted


def placeholders_specialize_sizes() -> None:
    """Lowering reads every input size as a Python int (``int(symint)``), which specializes each symbolic
    size to its first value: Dynamo installs the guard and recompiles at every other size."""
    from compiler.lowering import GraphLowering

    lower = GraphLowering.lower_placeholder

    def planted(self: Any, node: Any) -> Any:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            [int(s) for s in val.shape]
        return lower(self, node)

    GraphLowering.lower_placeholder = planted


def add_fails_on_symbolic_sizes() -> None:
    """add.Tensor's lowering raises a plain RuntimeError when its operands have symbolic sizes (not the
    typed refusal): the graph falls back with ``compiler_error``, and compiles with static sizes."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowering import LOWERINGS
    from compiler.lowerings.symbolic import has_symbolic_sizes

    original = LOWERINGS[aten.add]

    def planted(ctx: Any, node: Any, *args: Any, **kwargs: Any) -> Any:
        if has_symbolic_sizes([a.meta.get("val") for a in node.all_input_nodes]):
            raise RuntimeError("planted: add over symbolic sizes")
        return original(ctx, node, *args, **kwargs)

    LOWERINGS[aten.add] = planted


def add_refuses_symbolic_sizes() -> None:
    """add.Tensor's lowering refuses symbolic sizes with the typed reason (``DynamicUnsupported``):
    a counted fallback, never a finding."""
    import compiler.lowerings  # noqa: F401
    from compiler.lowering import LOWERINGS
    from compiler.lowerings.symbolic import DynamicUnsupported, has_symbolic_sizes

    original = LOWERINGS[aten.add]

    def planted(ctx: Any, node: Any, *args: Any, **kwargs: Any) -> Any:
        if has_symbolic_sizes([a.meta.get("val") for a in node.all_input_nodes]):
            raise DynamicUnsupported("planted_feature", "add over symbolic sizes")
        return original(ctx, node, *args, **kwargs)

    LOWERINGS[aten.add] = planted


def empty_product_identity_off() -> None:
    """A product over an empty dim gives 2, not its identity 1 (mutant ``reductions.py``
    ``ReduceOp.PROD: 1`` -> ``2``: survived 1,723 graphs of a mutation campaign, which drew a reduction
    over an empty dim about once in a thousand graphs)."""
    from compiler.lowerings import reductions

    _redefine(reductions, "reduce_to", "ReduceOp.PROD: 1,", "ReduceOp.PROD: 2,")
