"""Benchmark: minimize a 1,000+-node transformer graph with a planted bug, print sizes and time.

    python -m harness.bench.minify [--layers 20] [--target crucible-interpret] [--out DIR]

Builds a BERT encoder (random weights, ``--layers`` layers), captures its ATen graph as the target
receives it (Dynamo -> AOTAutograd -> the target's decompositions) and minimizes it with the
test-only planted bug of ``tests.harness.minify_plants`` (tanh 1% high, in the pooler: the last op),
which needs a source checkout. Prints nodes before/after, checks and seconds; the goal (issue 15)
is at most 600 s on 2 CPU cores. ``--device cuda`` with ``--target crucible-triton`` or
``inductor`` runs it on a GPU. It asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any


def _bert_entry(layers: int) -> Any:  # a corpus.entry.Entry (imported lazily, with torch)
    import torch

    from corpus.entry import Built, Entry

    def build(scale: str) -> Built:
        import transformers

        cfg = transformers.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=layers,
                                      num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)
        torch.manual_seed(0)
        model = transformers.BertModel(cfg).eval()
        return Built(model, (torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0)),))

    return Entry(name=f"bench/bert_{layers}_layers", source="bench", family="bert", tier="full", factory=build)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.minify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=20, help="BERT layers (20: about 1,100 ATen nodes)")
    parser.add_argument("--target", default="crucible-interpret", help="a crucible target (the plant is a "
                                                                        "Crucible lowering bug)")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="device for Dynamo-backend targets")
    parser.add_argument("--out", help="where the repro goes (default: a temporary directory)")
    parser.add_argument("--time-limit", type=float, default=600.0, help="reduction budget in seconds")
    args = parser.parse_args(argv)

    from harness.minify.entry_graphs import capture_entry
    from harness.minify.plugins import set_plugins
    from harness.minify.session import minify_case
    from harness.targets import parse_target

    target = parse_target(args.target, args.device)
    if target.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(f"error: target {target.name} needs a CUDA GPU and none is available", file=sys.stderr)
            return 2
    if not target.is_crucible:
        print("error: the planted bug is in a Crucible lowering: choose a crucible-* target", file=sys.stderr)
        return 2
    try:
        set_plugins(["tests.harness.minify_plants"])
    except ValueError as exc:
        print(f"error: {exc} (the benchmark runs from a source checkout)", file=sys.stderr)
        return 2
    start = time.monotonic()
    graphs = capture_entry(_bert_entry(args.layers), target)
    case = max(graphs.cases, key=lambda c: len(c.gm.graph.nodes))
    capture_s = time.monotonic() - start
    out = args.out or tempfile.mkdtemp(prefix="crucible-minify-bench-")
    report = minify_case(case, out, time_limit_s=args.time_limit, verify=True,
                         progress=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    print(report.summary())
    print(f"bench: {args.layers}-layer BERT on {target.name}: nodes {report.nodes_before} -> {report.nodes_after}, "
          f"{report.checks} checks, minimize {report.seconds:.1f}s (capture {capture_s:.1f}s), "
          f"goal <= 600s: {'met' if report.seconds <= 600 and not report.budget_ran_out else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
