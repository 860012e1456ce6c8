"""The recorder behind golden-kernel replay: ATen graphs as plain data, and back.

A graph is written as its nodes (op, name, target, arguments) and each value's layout
(``meta['val']``: shape, stride, storage offset, dtype): all that lowering reads. While
``python -m compiler.replay --capture`` runs the tests (this module is their pytest plugin),
``observe`` writes every graph ``lower`` sees to the capture directory.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch
import torch.fx


class Unrecordable(Exception):
    """A graph the recorder cannot write as plain data."""


# --- graphs as data --------------------------------------------------------------

def _encode(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return {"n": value.name}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}  # inf and nan are not JSON
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_encode(v) for v in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, (torch.layout, torch.memory_format)):
        return {"torch": str(value).removeprefix("torch.")}
    if isinstance(value, dict):
        return {"dict": [[k, _encode(v)] for k, v in value.items()]}
    raise Unrecordable(f"argument of type {type(value).__name__}")


def _decode(value: Any, env: dict[str, torch.fx.Node]) -> Any:
    if not isinstance(value, dict):
        return value
    (tag, payload), = value.items()
    if tag == "n":
        return env[payload]
    if tag == "float":
        return float(payload)
    if tag == "list":
        return [_decode(v, env) for v in payload]
    if tag == "tuple":
        return tuple(_decode(v, env) for v in payload)
    if tag == "dtype":
        return getattr(torch, payload)
    if tag == "device":
        return torch.device(payload)
    if tag == "torch":
        return getattr(torch, payload)
    if tag == "dict":
        return {k: _decode(v, env) for k, v in payload}
    raise ValueError(f"unknown tag {tag!r} in a recorded graph")


def _encode_val(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        sizes = [*val.shape, *val.stride(), val.storage_offset()]
        if not all(isinstance(s, int) for s in sizes):
            raise Unrecordable("symbolic sizes")
        return {"t": [list(val.shape), list(val.stride()), val.storage_offset(),
                      str(val.dtype).removeprefix("torch.")]}
    if isinstance(val, (list, tuple)):
        return {"list": [_encode_val(v) for v in val]}
    if val is None or isinstance(val, (bool, int)):
        return val
    if isinstance(val, float):
        return {"float": repr(val)}
    raise Unrecordable(f"meta value of type {type(val).__name__}")


def _fake_tensor(mode: Any, shape: list[int], stride: list[int], offset: int, dtype: str) -> torch.Tensor:
    with mode:
        base = torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device="cpu")
        return base if offset == 0 else torch.as_strided(base, shape, stride, offset)


def _decode_val(val: Any, mode: Any) -> Any:
    if not isinstance(val, dict):
        return val
    (tag, payload), = val.items()
    if tag == "t":
        shape, stride, offset, dtype = payload
        return _fake_tensor(mode, shape, stride, offset, dtype)
    if tag == "list":
        return [_decode_val(v, mode) for v in payload]
    if tag == "float":
        return float(payload)
    raise ValueError(f"unknown meta tag {tag!r} in a recorded graph")


def _target_name(target: Any) -> str:
    if target is operator.getitem:
        return "operator.getitem"
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # "aten.add.Tensor"
    raise Unrecordable(f"call target {target!r}")


def _resolve_target(name: str) -> Any:
    if name == "operator.getitem":
        return operator.getitem
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def missing_targets(record: dict) -> list[str]:
    """Call targets of the recorded graph this torch does not have (recorded with another version)."""
    missing = []
    for entry in record["nodes"]:
        if entry["op"] == "call_function":
            try:
                _resolve_target(entry["target"])
            except (AttributeError, RuntimeError, ValueError):
                missing.append(entry["target"])
    return missing


def graph_record(gm: torch.fx.GraphModule) -> dict:
    """``gm`` as plain data: what lowering reads (nodes, targets, arguments, ``meta['val']``)."""
    nodes = []
    constants = {}
    for node in gm.graph.nodes:
        entry: dict[str, Any] = {"op": node.op, "name": node.name}
        if node.op == "call_function":
            entry["target"] = _target_name(node.target)
        elif node.op == "get_attr":
            value = gm
            for part in str(node.target).split("."):
                value = getattr(value, part)
            if not isinstance(value, torch.Tensor):
                raise Unrecordable(f"attribute {node.target} of type {type(value).__name__}")
            # the values do not reach generated code (constants are buffers), only their layout
            constants[node.name] = _encode_val(value)
            entry["target"] = node.name
        elif node.op not in ("placeholder", "output"):
            raise Unrecordable(f"FX node kind {node.op!r}")
        entry["args"] = [_encode(a) for a in node.args]
        if node.kwargs:
            entry["kwargs"] = {k: _encode(v) for k, v in node.kwargs.items()}
        if "val" in node.meta and node.op != "output":
            entry["val"] = _encode_val(node.meta["val"])
        nodes.append(entry)
    return {"nodes": nodes, "constants": constants}


def graph_digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def graph_module(record: dict) -> torch.fx.GraphModule:
    """The recorded graph rebuilt, with fake tensors of the recorded layouts as ``meta['val']``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for entry in record["nodes"]:
        args = tuple(_decode(a, env) for a in entry["args"])
        kwargs = {k: _decode(v, env) for k, v in entry.get("kwargs", {}).items()}
        if entry["op"] == "placeholder":
            node = graph.placeholder(entry["name"])
        elif entry["op"] == "get_attr":
            shape, stride, offset, dtype = record["constants"][entry["name"]]["t"]
            value = torch.zeros(max(offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1, 1),
                                dtype=getattr(torch, dtype))
            setattr(root, entry["name"], torch.as_strided(value, shape, stride, offset))
            node = graph.get_attr(entry["name"])
        elif entry["op"] == "call_function":
            node = graph.call_function(_resolve_target(entry["target"]), args, kwargs)
        else:
            node = graph.output(args[0])
        node.name = entry["name"]
        if "val" in entry:
            node.meta["val"] = _decode_val(entry["val"], mode)
        env[entry["name"]] = node
    return torch.fx.GraphModule(root, graph)


_recorder: dict[str, Any] = {"dir": None, "skipped": 0}
_recorder_lock = threading.Lock()


def _write(directory: str, name: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, Path(directory) / name)  # atomic: xdist workers record into one directory


def observe(gm: torch.fx.GraphModule) -> None:
    """Called by ``lower`` for every graph; records it while capturing."""
    target = _recorder["dir"]
    if target is None:
        return
    if any(n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
           and n.meta["val"].device.type != "cpu" for n in gm.graph.nodes):
        return  # replay lowers for the CPU; a CUDA test's graph has a CPU twin in the CPU run
    try:
        record = graph_record(gm)
    except Unrecordable as why:
        with _recorder_lock:
            _recorder["skipped"] += 1
            count = _recorder["skipped"]
        _write(target, f"skipped-{os.getpid()}-{count}.txt", str(why))
        return
    digest = graph_digest(record)
    if not (Path(target) / f"{digest}.json").exists():
        _write(target, f"{digest}.json", json.dumps(record, sort_keys=True))


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--replay-record-dir", default=None,
                     help="record every ATen graph the compiler compiles into this directory")


def pytest_configure(config: Any) -> None:
    path = config.getoption("--replay-record-dir", None)
    if path:
        _recorder["dir"] = path
