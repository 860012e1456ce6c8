"""Which launch-config candidates win, from tuning caches kept by ``harness.bench.models --keep-tuning``.

Every candidate a kernel offers is built (``load``, most of a cold compile) and timed (``tuning``) in
its first call; a candidate that never wins costs both for nothing. The tuning cache keeps every
candidate's time beside the pick (``compiler.tuning_cache``), so the lists can be pruned from data:

    python -m harness.bench.models --backends crucible --keep-tuning DIR ...   (on the GPU)
    python -m harness.bench.tuning_report DIR [--keep 3] [--by-rows]           (anywhere)

Kernels are grouped by kind (pointwise, persistent or looped reduction: the keys their configs have,
and how many candidates they offer). Per group it prints how often each candidate wins, labelled by
what the renderer chose it by (a reduction's elements per program and per warp, a pointwise kernel's
block and warps), and the best subsets of up to ``--keep`` labels: the summed time of each kernel's
fastest candidate in the subset, over the summed time of its fastest overall (1.00: nothing lost).
Each kernel counts once, whatever its launch count.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path

Label = str


def label(meta: dict) -> Label:
    """What a candidate was chosen by: a reduction's elements per program and per warp (its X and R
    blocks follow from the kernel's sizes), else its launch meta-parameters."""
    if "RBLOCK" in meta:
        elems = meta.get("XBLOCK", 1) * meta["RBLOCK"]
        return f"{elems} elements, {elems // meta['num_warps']} per warp"
    return " ".join(f"{k}={v}" for k, v in sorted(meta.items()) if k != "enable_reflect_ftz")


def kernels(directory: Path, by_rows: bool = False) -> dict[str, list[dict[Label, float]]]:
    """Group -> per kernel, candidate label -> microseconds (candidates that did not build left out);
    ``by_rows``: reductions also grouped by their row length padded to a power of two (``RBLOCK``),
    what the renderer's rule for a persistent reduction's program reads (``triton_tiles``)."""
    groups: dict[str, list[dict[Label, float]]] = defaultdict(list)
    for path in sorted(directory.glob("*.json")):
        for key, entry in json.loads(path.read_text()).get("entries", {}).items():
            candidates = entry.get("candidates")
            if not candidates:
                continue
            metas = [ast.literal_eval(m) for m, _ in candidates]
            times = {label(m): us for m, (_, us) in zip(metas, candidates) if us is not None}
            if not times:
                continue
            family = key.split(" | ")[-1].split()[0]
            kind = family if family != "kernel" else ("reduction" if "RBLOCK" in metas[0] else "pointwise")
            rows = f", rows of {metas[0]['RBLOCK']}" if by_rows and "RBLOCK" in metas[0] else ""
            groups[f"{kind}{rows}, {len(metas)} candidates"].append(times)
    return groups


def subset_cost(group: list[dict[Label, float]], subset: tuple[Label, ...]) -> float:
    """Summed best time within ``subset`` over the summed best time (a kernel offering none of the
    subset's labels keeps its own best: the subset does not apply to it)."""
    best = sum(min(t.values()) for t in group)
    kept = sum(min([t[s] for s in subset if s in t] or [min(t.values())]) for t in group)
    return kept / best if best else 1.0


def report(groups: dict[str, list[dict[Label, float]]], keep: int) -> str:
    lines = []
    for name, group in sorted(groups.items()):
        wins = Counter(min(t, key=t.get) for t in group)
        labels = sorted({lab for t in group for lab in t})
        lines.append(f"{name}: {len(group)} kernels")
        for lab, n in wins.most_common():
            lines.append(f"  wins {n:4d}  {lab}")
        for size in range(1, min(keep, len(labels)) + 1):
            ranked = sorted((subset_cost(group, s), s) for s in itertools.combinations(labels, size))
            for cost, subset in ranked[:2]:
                lines.append(f"  keep {size}: {cost:.3f}  {list(subset)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.tuning_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="tuning caches (models --keep-tuning DIR)")
    parser.add_argument("--keep", type=int, default=3, help="largest candidate subset to rank (default 3)")
    parser.add_argument("--by-rows", action="store_true",
                        help="group reductions by their padded row length too (RBLOCK)")
    args = parser.parse_args(argv)
    groups = kernels(args.directory, args.by_rows)
    if not groups:
        print(f"no tuning cache entries with candidate times under {args.directory}")
        return 2
    print(report(groups, args.keep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
