"""``python -m simulator repro FILE``: replay a checked launch saved when it had findings.

The simulator's benchmarks (checked vs plain interpreter, roofline estimate vs measured GPU time)
are ``python -m harness.bench.simulator``."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def repro(path: Path) -> int:
    import torch

    from simulator.findings import SimulatorMemoryError
    from simulator.launch import check_launch
    from simulator.memory import mark_uninitialized, shadow_for

    if not path.is_file():
        print(f"error: no repro file {path}", file=sys.stderr)
        return 2
    doc = torch.load(path, weights_only=False)
    spec = importlib.util.spec_from_file_location(f"simulator_repro_{path.stem.replace('-', '_')}", doc["file"])
    if spec is None or spec.loader is None or not Path(doc["file"]).exists():
        print(f"error: the kernel's source {doc['file']} is gone; rerun what produced the repro", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    kernel = getattr(module, doc["name"])
    names = list(getattr(kernel, "arg_names", None) or kernel.__code__.co_varnames)
    for name, written in doc.get("uninitialized", {}).items():
        t = doc["args"][names.index(name)] if name in names[:len(doc["args"])] else doc["meta"].get(name)
        mark_uninitialized(t)
        shadow = shadow_for(t.untyped_storage().data_ptr())
        shadow.written[:] = written
    try:
        report = check_launch(kernel, doc["grid"], tuple(doc["args"]), doc["meta"])
    except SimulatorMemoryError as e:
        print(e)
        return 1
    print(f"no findings in {report.kernel}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m simulator", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("repro", help="replay a saved launch with every check on")
    rp.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    return repro(args.file)


if __name__ == "__main__":
    sys.exit(main())
