"""CPU benchmark: eager vs Inductor (its C++ backend) vs Crucible's C++ codegen.

    python -m harness.bench.cpu [--repeat N] [--only NAME ...] [--threads 2 all] [--models] [--no-profile]

For each case and thread count: the median run time over ``--repeat`` timed calls after warmup,
the three contenders interleaved round by round, and the cold compile time at that count (the
first call, with fresh cache directories for both compilers and ``torch._dynamo.reset()``). Ratios are speed-ups
of Crucible: eager/Crucible and Inductor/Crucible run time (above 1 = Crucible faster). Kernel
cases (pointwise chains, softmax, layer norm, a column sum, MLPs, an encoder layer, a small CNN)
run by default; ``--models`` adds whole models (torchvision resnet18/50 and mobilenet_v3_large,
timm's vit_tiny, small transformers BERT and GPT-2), each skipped with a message where its
library is missing. ``--threads`` takes counts and ``all`` (every core this process may use);
``torch.set_num_threads`` bounds eager, Inductor's and Crucible's kernels alike (one OpenMP runtime).
A row below 1.0x eager or Inductor is profiled (each contender's longest pieces of a call, after the table;
a row at more than 1 thread also gives each piece's time at 1 thread, in brackets: how it scales).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tabulate import tabulate


@dataclass
class Case:
    name: str
    build: Callable[[], tuple[Callable, tuple]]  # -> (function or module, inputs)
    model: bool = False  # a whole model: run with --models only (minutes of cold compile each)


def pointwise_chain(n: int) -> tuple[Callable, tuple]:
    def chain(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid((x * 1.5 + y).relu() - z)  # mul, add, relu, sub, sigmoid

    return chain, tuple(torch.randn(n) for _ in range(3))


def transcendental_chain(n: int) -> tuple[Callable, tuple]:
    """One of each transcendental eager vectorizes (exp, tanh, erf, log, sigmoid) in one pointwise
    kernel: what the C++ path's math functions cost against ATen's vector math."""
    def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * torch.sigmoid(y) + torch.erf(x * 0.5) * torch.exp(-y * y) + torch.log(x * x + 1.0)

    return chain, (torch.randn(n), torch.randn(n))


def softmax(rows: int, cols: int) -> tuple[Callable, tuple]:
    return (lambda x: torch.softmax(x, dim=-1)), (torch.randn(rows, cols),)


def layer_norm(rows: int, cols: int) -> tuple[Callable, tuple]:
    w, b = torch.randn(cols), torch.randn(cols)
    return (lambda x: F.layer_norm(x, (cols,), w, b)), (torch.randn(rows, cols),)


def column_sum(rows: int, cols: int) -> tuple[Callable, tuple]:
    return (lambda x: x.sum(dim=0)), (torch.randn(rows, cols),)


def mlp() -> tuple[Callable, tuple]:
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.GELU(approximate="tanh"), torch.nn.Linear(1024, 10)).eval()
    return model, (torch.randn(256, 512),)


def gelu_mlp(tokens: int, width: int) -> tuple[Callable, tuple]:
    """A transformer's feed-forward block: up-projection, exact GELU (erf), down-projection."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).eval()
    return model, (torch.randn(tokens, width),)


def encoder_layer(batch: int, length: int, width: int) -> tuple[Callable, tuple]:
    """``nn.TransformerEncoderLayer`` as a user runs it for inference (eval, no grad): PyTorch's fast
    path, one fused ATen op (``_transformer_encoder_layer_fwd``) that Dynamo captures; Inductor calls it
    as it is, Crucible decomposes it (``crucible:transformer_encoder_layer``) into its linears,
    attention and norms."""
    model = torch.nn.TransformerEncoderLayer(width, nhead=8, dim_feedforward=4 * width, dropout=0.0,
                                             batch_first=True).eval()
    return model, (torch.randn(batch, length, width),)


def cnn() -> tuple[Callable, tuple]:
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()
    return model, (torch.randn(32, 3, 64, 64),)


class SkipCase(Exception):
    """A case this machine cannot build (a model library not installed); the message says which."""


VISION_BATCH = 2  # images of 224x224 per call: a 2-core machine runs resnet50 eager in ~0.1 s
TEXT_SHAPE = (2, 128)  # sequences x tokens


def torchvision_model(name: str, **kwargs) -> tuple[Callable, tuple]:
    try:
        import torchvision.models
    except ImportError as e:
        raise SkipCase(f"torchvision is not installed ({e}); pip install torchvision") from None
    model = getattr(torchvision.models, name)(weights=None, **kwargs).eval()
    return model, (torch.randn(VISION_BATCH, 3, 224, 224),)


def timm_model(name: str) -> tuple[Callable, tuple]:
    try:
        import timm
    except ImportError as e:
        raise SkipCase(f"timm is not installed ({e}); pip install timm") from None
    model = timm.create_model(name, pretrained=False).eval()
    return model, (torch.randn(VISION_BATCH, 3, 224, 224),)


class FirstOutput(torch.nn.Module):
    """A transformers model returning its first output (hidden states or logits) alone."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def transformers_model(kind: str) -> tuple[Callable, tuple]:
    """A small BERT (encoder) or GPT-2 (decoder) with random weights: 4 layers of width 256."""
    try:
        import transformers
    except ImportError as e:
        raise SkipCase(f"transformers is not installed ({e}); pip install transformers") from None
    if kind == "bert":
        config = transformers.BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                         intermediate_size=1024, hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
        model = transformers.BertModel(config)
    else:
        config = transformers.GPT2Config(n_embd=256, n_layer=4, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
    inputs = torch.randint(0, config.vocab_size, TEXT_SHAPE)
    return FirstOutput(model).eval(), (inputs,)


CASES = [
    Case("pointwise chain 16M", lambda: pointwise_chain(16 * 1024 * 1024)),
    Case("transcendental chain 4M", lambda: transcendental_chain(4 * 1024 * 1024)),
    Case("softmax 8192x1024", lambda: softmax(8192, 1024)),
    Case("softmax 1024x8192", lambda: softmax(1024, 8192)),
    Case("layer_norm 8192x1024", lambda: layer_norm(8192, 1024)),
    Case("layer_norm 1024x8192", lambda: layer_norm(1024, 8192)),
    Case("column sum 4096x4096", lambda: column_sum(4096, 4096)),
    Case("MLP 256x512", mlp),
    Case("GELU MLP 256x1024", lambda: gelu_mlp(256, 1024)),
    Case("encoder layer 4x128x512", lambda: encoder_layer(4, 128, 512)),
    Case("CNN 32x3x64x64", cnn),
    Case("resnet18", lambda: torchvision_model("resnet18"), model=True),
    Case("resnet50", lambda: torchvision_model("resnet50"), model=True),
    Case("mobilenet_v3_large", lambda: torchvision_model("mobilenet_v3_large"), model=True),
    Case("vit_tiny_patch16_224", lambda: timm_model("vit_tiny_patch16_224"), model=True),
    Case("bert 4x256", lambda: transformers_model("bert"), model=True),
    Case("gpt2 4x256", lambda: transformers_model("gpt2"), model=True),
]


WARMUP_S = 3.0  # seconds of interleaved warmup rounds per case before timing


def compile_cold(fn: Callable, inputs: tuple, backend: str, cache_env: str,
                 profiled: bool = False) -> tuple[Callable, float]:
    """``fn`` compiled by ``backend`` with an empty cache directory, and the seconds its first
    call took (tracing, compiling, building, loading). ``profiled``: each generated kernel is timed
    (Crucible's ``CRUCIBLE_KERNEL_TIMES``) or shows in ``torch.profiler`` (Inductor's
    ``cpp.enable_kernel_profile``)."""
    if backend == "crucible":
        import compiler  # noqa: F401  (registers the backend)
        from compiler import cpp_build

        cpp_build.clear_memory_cache()
    from compiler import config

    # Inductor's C++ kernels fix their thread count when generated. With the default (-1: the count at
    # code generation) torch 2.11's Inductor ran its 1-thread kernel in the 16-thread compile that
    # followed (softmax 9.02 ms at 1 thread, 9.03 at 16, on the GPU host; torch 2.14 keys its FX graph
    # cache on the count). The count set explicitly generates the same code and is in every version's
    # cache keys (Inductor's config is).
    import torch._inductor.config

    inductor = {"cpp.threads": torch.get_num_threads(), **({"cpp.enable_kernel_profile": True} if profiled else {})}
    threads = torch._inductor.config.patch(inductor) if backend == "inductor" else contextlib.nullcontext()
    timed = config.environment_override("CRUCIBLE_KERNEL_TIMES", "1") if profiled and backend == "crucible" \
        else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix=f"bench-{backend}-") as cache, \
            config.environment_override(cache_env, cache), threads, timed:
        opt = torch.compile(fn, backend=backend)
        start = time.perf_counter()
        opt(*inputs)
        return opt, time.perf_counter() - start


def warm_up(variants: dict[str, Callable], inputs: tuple, warmup_s: float | None = None, min_rounds: int = 5) -> None:
    """Interleaved rounds of every variant for ``warmup_s`` seconds (``WARMUP_S``), at least ``min_rounds``."""
    deadline = time.perf_counter() + (WARMUP_S if warmup_s is None else warmup_s)
    rounds = 0
    while rounds < min_rounds or time.perf_counter() < deadline:
        for fn in variants.values():
            fn(*inputs)
        rounds += 1


def median_ms(variants: dict[str, Callable], inputs: tuple, repeat: int, warmup_s: float | None = None,
              min_warmup: int = 5) -> dict[str, float]:
    """Median wall time per variant. Variants are timed in interleaved rounds, so load from
    other processes on a shared machine hits them alike. Warmup is interleaved rounds for
    ``warmup_s`` seconds (at least ``min_warmup`` rounds): on this virtual machine the first
    ~20 calls that touch a fresh 32 MiB output run up to 6x slower than the steady state (memory
    the host backs lazily), far more than three warmup calls absorb."""
    warm_up(variants, inputs, warmup_s, min_warmup)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn(*inputs)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def max_error(got: object, expected: object) -> float:
    """Largest absolute difference relative to the largest magnitude of ``expected``."""
    got, expected = torch.as_tensor(got).double(), torch.as_tensor(expected).double()
    return float((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30))


def run_case(case: Case, repeat: int, threads: list[int], profile: bool = True) -> list[dict]:
    """One row per thread count. Both compilers compile cold at each count: Inductor's C++ kernels
    fix their thread count when generated (``#pragma omp parallel num_threads(N)``), so a kernel
    compiled at one count and timed at another would not be what a user at that count gets. A row
    below ``SLOW`` against eager or Inductor carries each contender's profile (``profile_row``)."""
    import torch._dynamo

    fn, inputs = case.build()
    rows = []
    with torch.no_grad():
        for n in threads:
            torch.set_num_threads(n)
            expected = fn(*inputs)
            compiled, compile_s, error = {}, {}, {}
            for backend, env in (("inductor", "TORCHINDUCTOR_CACHE_DIR"), ("crucible", "CRUCIBLE_CACHE_DIR")):
                torch._dynamo.reset()
                compiled[backend], compile_s[backend] = compile_cold(fn, inputs, backend, env)
                got = compiled[backend](*inputs)
                error[backend] = max_error(got, expected)
                if not case.model:
                    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
            ms = median_ms({"eager": fn, **compiled}, inputs, repeat)
            rows.append({
                "case": case.name, "threads": n, "eager ms": ms["eager"], "inductor ms": ms["inductor"],
                "crucible ms": ms["crucible"], "vs eager": ms["eager"] / ms["crucible"],
                "vs inductor": ms["inductor"] / ms["crucible"], "inductor vs eager": ms["eager"] / ms["inductor"],
                "inductor compile s": compile_s["inductor"], "crucible compile s": compile_s["crucible"],
                "err crucible": error["crucible"], "err inductor": error["inductor"]})
            if profile and min(rows[-1]["vs eager"], rows[-1]["vs inductor"]) < SLOW:
                try:
                    rows[-1]["profile"] = profile_row(fn, inputs, repeat)
                    if n > 1:  # each piece at 1 thread too: a kernel that does not scale is the row's lead
                        rows[-1]["profile_one_thread"] = profile_at(1, fn, inputs, repeat)
                except Exception as why:  # noqa: BLE001  (the row's timings stand without its profile)
                    rows[-1]["profile_error"] = f"{type(why).__name__}: {why}".splitlines()[0][:200]
    return rows


SLOW = 1.0  # a row below this speed-up over eager or Inductor gets a profile of each contender
PROFILE_TOP = 4  # pieces listed per contender
PROFILE_CALLS = 20  # calls profiled per contender, at least (sums over calls: one slow call weighs less)


def _profiler_pieces(call: Callable, inputs: tuple, calls: int) -> list[tuple[str, float]]:
    """(name, us per call) of every range ``torch.profiler`` saw over ``calls`` calls, by self time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            call(*inputs)
    pieces = [("Inductor's graph call" if e.key.startswith("## Call CompiledFxGraph") else e.key,
               e.self_cpu_time_total / calls) for e in prof.key_averages()]
    return sorted(pieces, key=lambda p: -p[1])


def _crucible_pieces(compiled: Callable, inputs: tuple, calls: int) -> list[tuple[str, float]]:
    """(name, us per call) of a compiled-for-timing Crucible function: its kernels and extern calls,
    the rest of its graph call (the wrapper, allocation) and what lies outside the graph (Dynamo's
    guards, AOTAutograd's wrapper), from ``compiler.kernel_times``."""
    from compiler import kernel_times

    kernel_times.restart()
    start = time.perf_counter()
    for _ in range(calls):
        compiled(*inputs)
    wall = time.perf_counter() - start
    pieces, graphs = [], 0.0
    for _report, seconds, graph_calls, rows in kernel_times.kernel_times():
        if graph_calls:
            graphs += seconds / graph_calls
            inside = sum(r.seconds for r in rows) / graph_calls
            pieces += [(f"{r.kernel} ({', '.join(dict.fromkeys(r.ops))[:40]})", r.seconds / graph_calls * 1e6)
                       for r in rows if r.calls]
            pieces.append(("rest of the graph call", (seconds / graph_calls - inside) * 1e6))
    kernel_times.clear()
    pieces.append(("outside the graph (Dynamo, AOTAutograd)", (wall / calls - graphs) * 1e6))
    return sorted(pieces, key=lambda p: -p[1])


def profile_row(fn: Callable, inputs: tuple, calls: int) -> dict[str, list[tuple[str, float]]]:
    """Where one call's time goes, per contender, at the thread count in force: eager's ATen ops and
    Inductor's kernels from ``torch.profiler`` (Inductor compiled again with its kernels named in the
    profile), Crucible's kernels from its own per-kernel timer (compiled again with it on). Profiled
    calls run slower than the table's; read the shares, not the sums against the table. Each contender
    is warmed up as the table's are, then profiled over ``calls`` calls (at least ``PROFILE_CALLS``)."""
    import torch._dynamo

    from compiler import kernel_times

    calls = max(calls, PROFILE_CALLS)
    out = {"eager": _profiler_pieces(fn, inputs, calls)}
    kernel_times.clear()
    for backend, env in (("inductor", "TORCHINDUCTOR_CACHE_DIR"), ("crucible", "CRUCIBLE_CACHE_DIR")):
        torch._dynamo.reset()
        compiled, _ = compile_cold(fn, inputs, backend, env, profiled=True)
        # as long as the table's: a 32 MiB output's first calls fault its pages in (a 16-thread layer
        # norm profiled after 3 calls took 1.0 ms a call in its kernel, 0.61 in the table)
        warm_up({backend: compiled}, inputs)
        out[backend] = _profiler_pieces(compiled, inputs, calls) if backend == "inductor" else \
            _crucible_pieces(compiled, inputs, calls)
    torch._dynamo.reset()
    return out


def profile_at(threads: int, fn: Callable, inputs: tuple, calls: int) -> dict[str, list[tuple[str, float]]]:
    """``profile_row`` at ``threads`` (Inductor compiled again for that count), the count in force restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return profile_row(fn, inputs, calls)
    finally:
        torch.set_num_threads(previous)


def _piece_key(name: str) -> str:
    """A profile piece's name without the graph numbers a recompile changes (Inductor's ``graph_12_``
    kernel prefix, Dynamo's ``0/0`` frame ids), to find the same piece in a profile at another count."""
    return re.sub(r"\d+/\d+", "", re.sub(r"^graph_\d+_", "", name))


def where_time_goes(rows: list[dict]) -> list[str]:
    """One line per contender of every profiled row: its total and its longest pieces (us per call), and
    where the row was also profiled at 1 thread, each one's time there in brackets: how it scales."""
    lines = []
    for r in rows:
        if "profile" not in r and "profile_error" not in r:
            continue
        lines.append(f"{r['case']} at {r['threads']} thread{'s' if r['threads'] > 1 else ''} (vs eager "
                     f"{r['vs eager']:.3g}, vs inductor {r['vs inductor']:.3g}):")
        if "profile_error" in r:
            lines.append(f"  profile failed: {r['profile_error']}")
            continue
        single = r.get("profile_one_thread", {})
        for backend, pieces in r["profile"].items():
            # pieces of one name (two calls of the same extern op) are matched largest to largest
            alone: dict[str, list[float]] = {}
            for name, us in sorted(single.get(backend, []), key=lambda p: -p[1]):
                alone.setdefault(_piece_key(name), []).append(us)
            whole = sum(us for _, us in single[backend]) if single.get(backend) else None
            top = "; ".join(f"{name} {us:.0f}{_one_thread((alone.get(_piece_key(name)) or [None]).pop(0))}"
                            for name, us in pieces[:PROFILE_TOP])
            lines.append(f"  {backend} {sum(us for _, us in pieces):.0f}{_one_thread(whole)} us: {top}")
    return lines


def _one_thread(us: float | None) -> str:
    """A piece's time at 1 thread, in brackets after its own (nothing where it was not profiled there)."""
    return "" if us is None else f" [1 thread {us:.0f}]"


def pin_allocator() -> str:
    """Take fresh pages out of the measurement. By default glibc serves large blocks with mmap (a
    32 MiB output then costs ~8 ms of page faults per call, more than the kernel) and moves that
    threshold as blocks are freed, so whether a case paid it depended on the cases run before
    (the CNN measured 2.9 ms in the full run and 9 ms alone; Inductor's layer_norm 3.7 or 11 ms).
    With mmap off and no trimming, every call of every contender reuses heap memory: the table
    compares kernels, not the allocator's state."""
    try:
        libc = ctypes.CDLL(None)
        # M_MMAP_MAX = 0 (no mmap), M_TRIM_THRESHOLD = 1 GiB (freed memory stays in the heap)
        if libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 1 << 30) == 1:
            return "glibc: mmap off, no trimming (no page faults after warmup)"
    except (OSError, AttributeError):
        pass
    return "allocator not pinned (not glibc): page-fault costs may depend on case order"


def available_cores() -> int:
    """The cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_counts(spec: list[str]) -> list[int]:
    """``--threads`` values (integers, or ``all`` for every available core), deduplicated in order;
    a count above the available cores is kept (oversubscription is a measurement too) with a note."""
    cores = available_cores()
    counts: list[int] = []
    for word in spec:
        if word == "all":
            n = cores
        else:
            try:
                n = int(word)
            except ValueError:
                raise SystemExit(f"--threads: {word!r} is neither a positive integer nor 'all'") from None
            if n < 1:
                raise SystemExit(f"--threads: {n} is not a positive thread count")
            if n > cores:
                print(f"note: --threads {n} is more than the {cores} available cores (oversubscribed)")
        if n not in counts:
            counts.append(n)
    return counts


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per measurement (median)")
    parser.add_argument("--only", nargs="*", help="run the cases whose name contains one of these")
    parser.add_argument("--threads", nargs="+", default=["2", "all"],
                        help="thread counts to time each case at: integers or 'all' (every available core); "
                             "default: 2 and all")
    parser.add_argument("--models", action="store_true",
                        help="also run the whole models (torchvision, timm, transformers; minutes each)")
    parser.add_argument("--no-profile", action="store_true",
                        help=f"skip the profile of each row below {SLOW}x eager or Inductor")
    args = parser.parse_args(argv)
    threads = thread_counts(args.threads)
    allocator = pin_allocator()
    cases = [c for c in CASES if (args.models or not c.model) and (not args.only or any(o in c.name for o in args.only))]
    if not cases:
        raise SystemExit("no case matches --only (models need --models); cases: " + ", ".join(c.name for c in CASES))
    rows, skipped = [], []
    for case in cases:
        try:
            done = run_case(case, args.repeat, threads, not args.no_profile)
        except SkipCase as e:
            skipped.append(f"{case.name}: {e}")
            print(f"skipped: {case.name}: {e}", flush=True)
            continue
        rows += done
        for r in done:  # as it goes: a run cut short keeps what it measured
            print(f"done: {case.name} at {r['threads']} threads: eager {r['eager ms']:.3g} ms, inductor "
                  f"{r['inductor ms']:.3g}, crucible {r['crucible ms']:.3g} (vs eager {r['vs eager']:.3g}, "
                  f"vs inductor {r['vs inductor']:.3g})", flush=True)
        for line in where_time_goes(done):
            print(f"  {line}", flush=True)
    torch.set_num_threads(threads[0])
    print(f"torch {torch.__version__}, {available_cores()} cores available, threads {threads}; run time = median of "
          f"{args.repeat} interleaved calls after {WARMUP_S:g} s of interleaved warmup; 'vs eager' and 'vs inductor' "
          f"are speed-ups of Crucible (above 1 = Crucible faster); compile = first call with empty caches "
          f"(the first case also pays each compiler's one-time start-up); err = max |compiled - eager| / max |eager|; "
          f"{allocator}")
    print(tabulate([{k: v for k, v in r.items() if not k.startswith("profile")} for r in rows], headers="keys",
                   floatfmt=".3g"))
    for n in threads:
        for label, keep in (("kernels", lambda name: not next(c for c in CASES if c.name == name).model),
                            ("models", lambda name: next(c for c in CASES if c.name == name).model)):
            picked = [r for r in rows if r["threads"] == n and keep(r["case"])]
            if picked:
                print(f"geomean at {n} threads over {len(picked)} {label}: vs eager "
                      f"{geomean([r['vs eager'] for r in picked]):.3g}, vs inductor "
                      f"{geomean([r['vs inductor'] for r in picked]):.3g}")
    slow = where_time_goes(rows)
    if slow:
        print(f"\nwhere the time goes in rows below {SLOW}x eager or Inductor (us per call, profiled calls; "
              f"Crucible's kernels by its own timer, the others' by torch.profiler):")
        print("\n".join(slow))
    for line in skipped:
        print(f"skipped {line}")


if __name__ == "__main__":
    main()
