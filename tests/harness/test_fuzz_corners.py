"""Generation that reaches the corners (``GraphLimits.corners``): each corner is shown twice, by
a property of the generated graphs (the generator reaches the case with the corner on and not
with it off) and by a short campaign that finds a bug planted for it (tests/harness/fuzz_plants.py)
with the corner on and misses it with the corner off."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from harness.fuzz import campaign as campaign_module
from harness.fuzz.builder import CORNERS, GraphLimits, graphs
from harness.fuzz.campaign import CampaignRequest, run_campaign
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.sizes import MAX_ROW, target_blocks
from harness.fuzz.specs import select_specs
from harness.fuzz.values import make_input
from harness.fuzz.workers import InProcessRunner
from tests.harness import fuzz_plants


@functools.cache
def _graphs(ops: str, count: int, off: str = "", target: str = "crucible-interpret", max_nodes: int = 3,
            seed: int = 1) -> tuple[FuzzGraph, ...]:
    """``count`` graphs of ``ops`` drawn as a campaign on ``target`` draws them, corner ``off`` left out
    (cached: tests that look at the same draw share it; no test changes a graph)."""
    limits = GraphLimits(max_nodes=max_nodes, blocks=target_blocks(target), corners=CORNERS - {off})
    out: list[FuzzGraph] = []

    @settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(graphs(select_specs(ops), limits))
    def collect(graph: FuzzGraph) -> None:
        out.append(graph)

    collect()
    return tuple(out)


# -- sizes ---------------------------------------------------------------------------------------
def test_size_classes_come_from_the_targets_blocks() -> None:
    from compiler.capabilities import MAX_PERSISTENT_RNUMEL
    from compiler.codegen import cpp_plan

    interpret = target_blocks("crucible-interpret")
    assert {8192, MAX_PERSISTENT_RNUMEL} <= set(interpret.reduction) and interpret.pointwise == (65536,)
    classes = interpret.classes("reduction")
    assert {1, 8191, 8192, 8193, 3 * 8192 + 7, MAX_PERSISTENT_RNUMEL + 1} <= set(classes)
    assert max(classes) <= MAX_ROW and classes == tuple(sorted(classes))
    cpp = target_blocks("crucible-cpp")
    assert {cpp_plan.LANE_BYTES // 4, cpp_plan.SPLIT_MIN_RNUMEL, cpp_plan.WINDOW_MAX_RNUMEL} <= set(cpp.reduction)
    assert target_blocks("inductor").source == "generic"
    # targets that split reductions draw rows from the lengths where they start to split
    from compiler import split_reductions

    for target in ("crucible-interpret:split_reductions=true", "crucible-cpp:split_reductions=true"):
        assert {split_reductions.COLUMN_MIN_RNUMEL, split_reductions.MIN_RNUMEL} <= set(target_blocks(target).reduction)
    assert split_reductions.COLUMN_MIN_RNUMEL not in interpret.reduction
    # ... and favour them: a row takes one of them one draw in two
    favoured = target_blocks("crucible-interpret:split_reductions=true").favoured
    assert split_reductions.COLUMN_MIN_RNUMEL in favoured and not interpret.favoured


def _reduced_lengths(graph: FuzzGraph) -> list[int]:
    """The elements each ``sum.dim_IntList`` node of ``graph`` reduces per output, over its inputs."""
    shapes = {f"x{i}": d["shape"] for i, d in enumerate(graph.inputs)}
    out = []
    for node in graph.nodes:
        call = re.match(r"aten\.sum\.dim_IntList\((x\d+), (\[[-\d, ]*\])", node.expr)
        if call and call.group(1) in shapes:
            shape = shapes[call.group(1)]
            out.append(math.prod(shape[d] for d in set(eval(call.group(2)))) if shape else 1)  # noqa: S307
    return out


def test_reductions_reach_past_the_persistent_limit_with_a_partial_block() -> None:
    """crucible-interpret loops over blocks of 8192 past 32768 elements a row: rows that long and not
    a whole number of blocks are drawn with the sizes corner, never without it."""
    def partial(off: str) -> int:
        lengths = [n for g in _graphs("sum.dim_IntList", 120, off, max_nodes=1) for n in _reduced_lengths(g)]
        return sum(n > 32768 and n % 8192 != 0 for n in lengths)

    assert partial("") >= 2
    assert partial("sizes") == 0


def test_a_long_row_comes_alone_and_shorter_rows_share_a_bounded_tensor() -> None:
    """The oracle's cost grows with the elements: a tensor with a row holds at most
    ``max_rows_numel`` elements, or its row alone when that is longer (the rest of its dims 1)."""
    limit = GraphLimits().max_rows_numel
    shapes = [d["shape"] for g in _graphs("sum.dim_IntList", 120, max_nodes=1) for d in g.inputs]
    assert any(max(s, default=0) > limit for s in shapes)  # long rows are drawn
    assert all(math.prod(s) <= max(limit, max(s, default=0)) for s in shapes)
    assert all(math.prod(s) == max(s) for s in shapes if s and max(s) > limit)


# -- optionals -------------------------------------------------------------------------------------
def test_norm_weight_and_bias_eps_and_pooling_attributes_vary_independently() -> None:
    def seen(ops: str, pattern: str, off: str = "") -> int:
        return sum(bool(re.search(pattern, n.expr)) for g in _graphs(ops, 60, off) for n in g.nodes)

    bias_only = r"native_layer_norm\.default\(\w+, \[[\d, ]*\], None, x\d+"
    assert seen("native_layer_norm.default", bias_only) and not seen("native_layer_norm.default", bias_only, "optionals")
    assert seen("native_layer_norm.default", r", 0\.1\)|, 1\.0\)")
    assert seen("native_group_norm.default", r"\(x\d+, None, x\d+")
    assert seen("max_pool2d*", r"dilation=\[2\]") and seen("max_pool2d*", r"ceil_mode=True")
    assert seen("avg_pool2d*", r"divisor_override=")
    assert seen("cumsum*", r"dtype=") and not seen("cumsum*", r"dtype=", "optionals")


def test_inf_norm_is_never_drawn_over_an_empty_dim() -> None:
    """ATen rejects the inf norm of an empty dim (no identity): 2-3% of linalg_vector_norm draws were
    spec errors, counted against the generator, until an inf norm took nonempty inputs only."""
    rejected = [e for g in _graphs("linalg_vector_norm.default", 150, max_nodes=1, seed=3) for _, e in g.rejected]
    assert not rejected, rejected[:3]


def test_attention_draws_scale_masks_and_causal_with_other_key_counts() -> None:
    # seed 2: with the small and shifted value profiles the draws of seed 1 had no causal call with
    # fewer queries than keys among 80 (seeds 2-5 each had)
    exprs = [n.expr for g in _graphs("*attention*", 80, max_nodes=1, seed=2) for n in g.nodes]
    assert any("scale=" in e for e in exprs)
    assert any(re.search(r"\(x\d+, x\d+, x\d+, x\d+", e) for e in exprs)  # a mask given positionally
    assert any("attn_mask=" in e for e in exprs)
    causal = [g for g in _graphs("*attention*", 80, max_nodes=1, seed=2) if "is_causal=True" in g.nodes[0].expr
              or re.search(r", True[,)]", g.nodes[0].expr)]
    assert any(g.inputs[0]["shape"][-2] != g.inputs[1]["shape"][-2] for g in causal)


# -- repeats ---------------------------------------------------------------------------------------
LAYER_NORM = re.compile(r"aten\.native_layer_norm\.default\((\w+, \[[\d, ]*\], \w+, \w+), ([\d.e-]+)\)")


def _norms_differing_only_in_eps(graph: FuzzGraph) -> bool:
    """Two layer norms of one input, normalized shape, weight and bias, with different eps."""
    calls = [LAYER_NORM.match(n.expr) for n in graph.nodes]
    calls = [c for c in calls if c]
    return any(a.group(1) == b.group(1) and a.group(2) != b.group(2) for a in calls for b in calls)


def test_repeated_ops_read_the_same_values_with_other_attributes() -> None:
    """A repeated norm takes its input, normalized shape, weight and bias over (mostly) and draws eps
    again: pairs differing only in eps, what a result cached without eps gets wrong, are several
    times as common as without the repeats corner (which reaches them only by chance)."""
    on = sum(map(_norms_differing_only_in_eps, _graphs("native_layer_norm.default", 100, max_nodes=2)))
    off = sum(map(_norms_differing_only_in_eps, _graphs("native_layer_norm.default", 100, "repeats", max_nodes=2)))
    assert on >= 4 and 3 * off <= on, (on, off)


def test_values_feed_several_consumers_and_an_output() -> None:
    """A node's result read by two nodes and returned too, with the repeats corner; without it no
    value that a node reads is ever an output."""
    def shared(graph: FuzzGraph) -> tuple[bool, bool]:
        reads = [v for n in graph.nodes for v in set(re.findall(r"\bv\d+(?:_\d+)?\b", n.expr))]
        return (any(reads.count(o) >= 2 and o in graph.outputs for o in set(reads)),
                any(o in reads for o in graph.outputs))

    ops = "exp.default,add.Tensor,mm.default,sum.dim_IntList"
    # seed 3: with the small and shifted value profiles seed 1's 150 draws had none (seeds 2-4: 4-6)
    assert sum(both for both, _ in map(shared, _graphs(ops, 150, max_nodes=5, seed=3))) >= 2
    assert not any(returned for _, returned in map(shared, _graphs(ops, 150, "repeats", max_nodes=5, seed=3)))


# -- layouts and values ----------------------------------------------------------------------------
def test_narrowed_inputs_are_slices_of_wider_tensors() -> None:
    x = make_input({"shape": [4, 1, 5], "dtype": "float32", "layout": "narrowed", "seed": 1})
    assert x.stride() == (15, 5, 1) and x.storage_offset() == 5 and not x.is_contiguous()
    column = make_input({"shape": [6, 1], "dtype": "float32", "layout": "narrowed", "seed": 1})
    assert column.stride() == (3, 1) and not column.is_contiguous()
    layouts = [d["layout"] for g in _graphs("add.Tensor", 60) for d in g.inputs]
    assert "narrowed" in layouts and "narrowed" not in [d["layout"] for g in _graphs("add.Tensor", 60, "layouts")
                                                        for d in g.inputs]


def test_value_profiles_reach_ties_extreme_divisors_and_accumulation_overflow() -> None:
    ties = make_input({"shape": [256], "dtype": "float32", "profile": "ties", "seed": 3})
    to_bf16 = ties.to(torch.bfloat16).float()
    truncated = (ties.view(torch.int32) & ~0xFFFF).view(torch.float32)
    assert (to_bf16 != truncated).any()  # halfway values: round-half-even is not truncation
    ints = make_input({"shape": [64], "dtype": "int32", "profile": "ties", "seed": 3})
    assert (ints.float().double() != ints.double()).any()  # int -> float32 rounds
    acc = make_input({"shape": [64], "dtype": "int32", "profile": "accumulation", "seed": 3})
    assert acc.sum(dtype=torch.int64) > torch.iinfo(torch.int32).max
    half = make_input({"shape": [64], "dtype": "float16", "profile": "accumulation", "seed": 3})
    assert half.float().sum() > torch.finfo(torch.float16).max  # past float16's range in a float16 accumulator
    divisors = [d for g in _graphs("div.Tensor", 80, max_nodes=1) for d in g.inputs if d["profile"] == "tiny_huge"]
    assert any(d["shape"] and d["shape"][-1] == 1 for d in divisors)
    assert not any(d["profile"] == "tiny_huge" for g in _graphs("div.Tensor", 80, "values", max_nodes=1)
                   for d in g.inputs)


# -- campaigns: a planted bug found with the corner on, missed with it off --------------------------
def _campaign(monkeypatch: Any, target: str, ops: str, examples: int, corners: frozenset[str], seed: int,
              max_nodes: int) -> list[str]:
    """Signatures a short in-process campaign finds generating ``corners`` only (no shrinking: the
    finding is the point, not its smallest graph)."""
    with monkeypatch.context() as patch:
        patch.setattr(campaign_module, "GraphLimits", functools.partial(GraphLimits, corners=corners))
        request = CampaignRequest(target=target, examples=examples, seed=seed, ops=ops, max_nodes=max_nodes,
                                  shrink_seconds=0, max_findings=1)
        summary = run_campaign(request, InProcessRunner(target))
    return list(summary.findings)


# Each campaign is as short as the A/B allows (CI time): one op, crucible-interpret (no C++ to
# build), the fewest nodes the plant needs, and a seed whose campaign finds the plant at the last of
# ``examples`` graphs with the corner on; the same seed and graph count with the corner off must
# miss it. Plants other than the sizes one leave the long rows out of both runs: they are beside
# the point there and cost the interpreter most of its time. A change to the generator changes the
# draws: then choose the seeds again (the first that finds each plant within ~10 graphs).
PLANTS = [  # plant, ops, max nodes, seed, examples, the corner that finds it
    ("looped_reduction_drops_last_block", "sum.dim_IntList", 1, 2, 6, "sizes"),
    ("layer_norm_bias_needs_weight", "native_layer_norm.default", 1, 0, 6, "optionals"),
    ("extern_drops_keyword_dtype", "cumsum.default", 1, 0, 6, "optionals"),
    ("sliced_unit_dims_taken_dense", "add.Tensor", 1, 3, 10, "layouts"),
    ("norm_rule_cached_without_eps", "native_layer_norm.default", 2, 8, 10, "repeats"),
]


@pytest.mark.parametrize(("plant", "ops", "max_nodes", "seed", "examples", "corner"), PLANTS, ids=[p[0] for p in PLANTS])
def test_planted_bug_is_found_with_its_corner_and_missed_without(monkeypatch, plant: str, ops: str, max_nodes: int,
                                                                 seed: int, examples: int, corner: str) -> None:
    corners = CORNERS if corner == "sizes" else CORNERS - {"sizes"}
    with monkeypatch.context() as patch:
        _undo_on_exit(patch)
        getattr(fuzz_plants, plant)()
        found = _campaign(patch, "crucible-interpret", ops, examples, corners, seed, max_nodes)
        missed = _campaign(patch, "crucible-interpret", ops, examples, corners - {corner}, seed, max_nodes)
    assert found, f"{plant}: not found with every corner on"
    assert not missed, f"{plant}: found without the {corner} corner: {missed}"


def _undo_on_exit(patch: Any) -> None:
    """Record what each plant replaces, so the monkeypatch context puts it back."""
    from compiler import late_decompositions, lowering, pipeline
    from compiler.codegen.triton import TritonRenderer
    from compiler.decompositions import RULES

    patch.setattr(TritonRenderer, "render", TritonRenderer.render)
    patch.setitem(RULES, "crucible:layer_norm_overflow_safe", RULES["crucible:layer_norm_overflow_safe"])
    patch.setattr(lowering.GraphLowering, "extern", lowering.GraphLowering.extern)
    patch.setattr(lowering.GraphLowering, "lower_placeholder", lowering.GraphLowering.lower_placeholder)
    patch.setattr(late_decompositions, "_layout_key", late_decompositions._layout_key)
    patch.setattr(pipeline, "expand_late_decompositions", pipeline.expand_late_decompositions)
    patch.setattr(late_decompositions, "_TRACED", {})  # no trace made under a plant outlives it
