"""SDPA masks that are constants of the graph, recognized at compile time (the ``attention_masks`` pass).

A decoder's causal mask is usually built inside the traced graph from ``arange`` comparisons
(transformers 5 also compares packed-sequence ids derived from an in-graph ``arange``), and an
encoder called without a padding mask may still get an all-true one from ``torch.ones``. Traced
as data, such a mask is read by every attention call: the library takes its masked kernel (cuDNN
with a bias, 0.43 ms for GPT-2's 12 layers on the H200, or the math path in float32), the
attention template evaluates the mask's expression per score and visits every key block.

``simplify_attention_masks`` evaluates each SDPA call's ``attn_mask`` that depends on no graph
input (no placeholder among its ancestors; static shapes; nothing mutates it; the same value on a
second evaluation, so no random op) and rewrites the call:

- the mask allows exactly SDPA's top-left causal pattern (key ``j`` for query ``i`` iff
  ``j <= i``): ``attn_mask=None, is_causal=True``, which the library runs as flash attention and
  the template by skipping the key blocks past the diagonal;
- the mask allows every key: ``attn_mask=None``.

A float mask allows a key where it is 0 and forbids it where it is at most ``FORBIDDEN`` (``-inf``
or a dtype's lowest value, which the softmax turns into an exact 0 as long as a row keeps a key,
as both patterns do); any other value keeps the mask. The rewrite changes no result beyond the
summation order of the kernel that runs it.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from compiler.fused_attention import SDPA_TARGETS, bound_sdpa_args

PASS_NAME = "attention_masks"
FORBIDDEN = -1e4  # a float mask entry at most this forbids its key (fp16's lowest is -65504)
MAX_ELEMENTS = 1 << 28  # a larger constant mask is left alone (evaluating it costs memory)


def simplify_attention_masks(gm: torch.fx.GraphModule) -> int:
    """Rewrite, in place, the SDPA calls of ``gm`` (a Dynamo graph) whose constant mask is causal or
    allows every key; the number of calls rewritten."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SDPA_TARGETS:
            continue
        args = bound_sdpa_args(node)
        if args is None or not isinstance(args["attn_mask"], torch.fx.Node) or args["is_causal"] is not False:
            continue
        q, k = (_example(args[n]) for n in ("query", "key"))
        if not all(isinstance(t, torch.Tensor) and _static(t) for t in (q, k)):
            continue
        mask = _constant_value(gm, args["attn_mask"], node)
        pattern = _pattern(mask, q.shape[-2], k.shape[-2]) if mask is not None else None
        if pattern is None:
            continue
        args.update(attn_mask=None, is_causal=pattern == "causal")
        node.args = (args["query"], args["key"], args["value"])
        node.kwargs = {n: v for n, v in args.items() if n not in ("query", "key", "value")}
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count


def _example(node: object) -> object:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else node


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in t.shape)


_INPLACE_OPERATORS = frozenset([operator.setitem] + [getattr(operator, "i" + name) for name in (
    "add", "and", "concat", "floordiv", "lshift", "mod", "mul", "matmul", "or", "pow", "rshift", "sub",
    "truediv", "xor")])


def _mutates(node: torch.fx.Node) -> bool:
    """An in-place call (``x.masked_fill_(...)``, ``torch.relu_(x)``, ``x[i] = v``, ``x &= m``,
    ``out=``): a value it touches is not what its creating node computed."""
    if "out" in node.kwargs or node.target in _INPLACE_OPERATORS:
        return True
    if node.op == "call_function" and getattr(node.target, "__module__", None) in ("_operator", "operator"):
        return False  # operator.and_ and its kind are out of place
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    return isinstance(name, str) and name.endswith("_") and not name.endswith("__")


def _upstream(nodes: list[torch.fx.Node]) -> set[torch.fx.Node]:
    """``nodes`` and every node they are computed from."""
    seen: set[torch.fx.Node] = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def _constant_subgraph(node: torch.fx.Node, reader: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The nodes that compute ``node``'s value as ``reader`` sees it, in graph order: its ancestors,
    and every in-place call before ``reader`` that writes a tensor computed from them (with what that
    call reads; over-inclusive for a write to a tensor merely derived from them, never missing one
    through a view). None when one of these is an input or not a plain call."""
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    writes = [n for n in node.graph.nodes if order[n] < order[reader] and _mutates(n)]
    nodes = _upstream([node])
    changed = True
    while changed:
        changed = False
        for w in writes:
            written = [a for a in (*w.args[:1], w.kwargs.get("out")) if isinstance(a, torch.fx.Node)]
            if w not in nodes and _upstream(written) & nodes:
                nodes |= _upstream([w])
                changed = True
    if any(n.op not in ("call_function", "call_method", "get_attr") for n in nodes):
        return None
    if any(n.op == "get_attr" for n in nodes) and any(_mutates(n) for n in nodes):
        return None  # evaluating it would write to the module's own tensors
    return sorted(nodes, key=order.__getitem__)


def _constant_value(gm: torch.fx.GraphModule, node: torch.fx.Node, reader: torch.fx.Node) -> torch.Tensor | None:
    """``node``'s value where ``reader`` reads it when the graph computes it from constants alone,
    evaluated now; else None."""
    example = _example(node)
    if not isinstance(example, torch.Tensor) or not _static(example) or example.numel() > MAX_ELEMENTS:
        return None
    nodes = _constant_subgraph(node, reader)
    if nodes is None:
        return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(env[node])
    sub = torch.fx.GraphModule(gm, graph)
    devices = [example.device] if example.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            first, second = sub(), sub()
    except Exception:  # noqa: BLE001  (a subgraph that cannot run alone keeps its mask)
        return None
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor):
        return None
    if first.shape != example.shape or not torch.equal(first, second):
        return None
    return first


def _pattern(mask: torch.Tensor, queries: int, keys: int) -> str | None:
    """"causal" or "all" when ``mask`` (broadcast over [..., queries, keys]) allows exactly that."""
    if mask.dim() < 2 or mask.shape[-2] not in (1, queries) or mask.shape[-1] not in (1, keys):
        return None
    if mask.dtype == torch.bool:
        allowed = mask
    elif mask.is_floating_point():
        allowed = mask == 0
        if not bool((allowed | (mask <= FORBIDDEN)).all()):
            return None
    else:
        return None
    if bool(allowed.all()):
        return "all"
    causal = torch.ones(queries, keys, dtype=torch.bool, device=mask.device).tril()
    return "causal" if bool((allowed == causal).all()) else None
