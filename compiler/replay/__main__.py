"""``python -m compiler.replay --capture | --check | --update``: see ``compiler.replay``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiler import replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler.replay",
                                     description=replay.__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--capture", action="store_true",
                      help="run the compiler's tests, record their graphs, write graphs and kernels")
    mode.add_argument("--check", action="store_true",
                      help="regenerate every kernel; print diffs and exit 1 on any change")
    mode.add_argument("--update", action="store_true",
                      help="rewrite the golden kernels from the recorded graphs (after an intended change)")
    parser.add_argument("--dir", type=Path, default=replay.GOLDEN_DIR,
                        help="directory of graphs.jsonl and kernels.txt (default: tests/compiler/golden)")
    parser.add_argument("pytest_args", nargs="*",
                        help="with --capture, after --: pytest arguments "
                             f"(default: {' '.join(replay.TEST_ARGS)})")
    args = parser.parse_args(argv)
    graphs_path, golden_path = args.dir / "graphs.jsonl", args.dir / "kernels.txt"
    if args.pytest_args and not args.capture:
        parser.error("pytest arguments are only taken with --capture")
    if args.capture:
        args.dir.mkdir(parents=True, exist_ok=True)
        graphs = replay.capture(args.pytest_args, graphs_path)
    else:
        if not graphs_path.exists() or (args.check and not golden_path.exists()):
            print(f"replay: no recorded graphs in {args.dir}; run python -m compiler.replay --capture",
                  file=sys.stderr)
            return 2
        graphs = replay.read_graphs(graphs_path)
    skip = replay.unavailable(graphs)
    if skip:
        ops = sorted({op for missing in skip.values() for op in missing})
        print(f"replay: skipped {len(skip)} graphs using ops this torch lacks: {', '.join(ops[:5])}",
              file=sys.stderr)
    sources = replay.regenerate(graphs, skip)
    if args.check:
        diffs = replay.diff_sources(replay.read_golden(golden_path), sources, skip)
        for d in diffs:
            print(d)
        print(f"replay: {len(diffs)} kernels changed ({len(sources)} sources from {len(graphs) - len(skip)} "
              "graphs)")
        return 1 if diffs else 0
    if skip and golden_path.exists():  # keep what was recorded for graphs this torch cannot rebuild
        old = replay.read_golden(golden_path)
        sources |= {k: v for k, v in old.items() if k.split("/", 1)[0] in skip}
    replay.write_golden(golden_path, sources)
    errors = sorted(k for k in sources if k.endswith("/error"))
    print(f"replay: wrote {len(sources)} sources from {len(graphs)} graphs to {golden_path} "
          f"({len(errors)} compile errors recorded as outcomes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
