"""Build, cache and load layer for generated C++ kernels (compiler/cpp_build.py)."""

import ctypes
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import cache_files, cpp_build
from compiler.cpp_build import CppCompileError, build_library, call_kernel, safe_comment, sanitize_identifier

REPO = Path(__file__).resolve().parents[1]

AFFINE = r"""
#include <cstdint>
extern "C" void affine(const float* x, const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * a[i] + b[i];
}
extern "C" int openmp_enabled() {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
"""
AFFINE_ARGS = [ctypes.c_void_p] * 4 + [ctypes.c_int64]


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test gets an empty cache directory and a process with nothing loaded."""
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CRUCIBLE_CPP_FLAGS", raising=False)
    cpp_build.clear_memory_cache()
    cpp_build.stats.reset()
    return tmp_path / "cache" / "cpp"


def entry_files(cache: Path, suffix: str) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.name.endswith(suffix))


def run_affine(lib):
    x, a, b = (torch.randn(100_003) for _ in range(3))
    out = torch.empty_like(x)
    call_kernel(lib.function("affine", AFFINE_ARGS), x, a, b, out, x.numel())
    return out, x * a + b


def test_kernel_matches_torch_bitwise_with_openmp(fresh_cache):
    lib = build_library(AFFINE, "affine")
    out, expected = run_affine(lib)
    # Bitwise: a contracted FMA (one rounding) would differ from ATen's mul-then-add.
    assert torch.equal(out, expected)
    assert lib.function("openmp_enabled", [], ctypes.c_int)() == 1
    assert cpp_build.stats.compiles == 1
    assert (fresh_cache.stat().st_mode & 0o777) == 0o700


def test_second_build_hits_disk_then_memory(fresh_cache):
    first = build_library(AFFINE, "affine")
    cpp_build.clear_memory_cache()
    cpp_build.stats.reset()
    second = build_library(AFFINE, "affine")
    assert (cpp_build.stats.compiles, cpp_build.stats.disk_hits) == (0, 1)
    assert second.path == first.path
    assert build_library(AFFINE, "affine") is second
    assert cpp_build.stats.memory_hits == 1
    assert torch.equal(*run_affine(second))


def test_flags_are_part_of_the_key(fresh_cache, monkeypatch):
    build_library(AFFINE, "affine")
    build_library(AFFINE, "affine", extra_flags=("-DVARIANT=1",))
    monkeypatch.setenv("CRUCIBLE_CPP_FLAGS", "-O1")
    build_library(AFFINE, "affine")
    assert cpp_build.stats.compiles == 3
    assert len(entry_files(fresh_cache, ".so")) == 3


CHILD = r"""
import ctypes, json, os, sys, time
from compiler import cpp_build
source = '''
#include <cstdint>
extern "C" int64_t sum_below(int64_t n) {
  int64_t total = 0;
#pragma omp parallel for reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += i;
  return total;
}
'''
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.002)
lib = cpp_build.build_library(source, "race")
value = lib.function("sum_below", [ctypes.c_int64], ctypes.c_int64)(100000)
print(json.dumps({"value": value, "compiles": cpp_build.stats.compiles,
                  "disk_hits": cpp_build.stats.disk_hits}))
"""


def test_two_processes_build_the_same_kernel(fresh_cache, tmp_path):
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(go)], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    for child in children:
        assert child.stdout.readline().strip() == "ready"
    go.touch()  # both start building at the same moment
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results.append(json.loads(out.splitlines()[-1]))
    assert [r["value"] for r in results] == [100000 * 99999 // 2] * 2
    # The lock makes the second builder wait and reuse the first one's library.
    assert sorted((r["compiles"], r["disk_hits"]) for r in results) == [(0, 1), (1, 0)]
    assert not entry_files(fresh_cache, ".tmp")


def truncate(path: Path) -> None:
    data = path.read_bytes()
    tmp = path.with_name("replacement")
    tmp.write_bytes(data[: len(data) // 3])
    os.replace(tmp, path)  # a new inode: the copy mapped in this process stays intact


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2: len(data) // 2 + 16] = b"\xff" * 16
    tmp = path.with_name("replacement")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, path)


def drop_sidecar(path: Path) -> None:
    path.with_suffix(".json").unlink()


@pytest.mark.parametrize("damage", [truncate, flip_bytes, drop_sidecar])
def test_damaged_cache_entry_is_rebuilt(fresh_cache, damage, capfd):
    first = build_library(AFFINE, "affine")
    damage(first.path)
    cpp_build.clear_memory_cache()
    cpp_build.stats.reset()
    capfd.readouterr()
    lib = build_library(AFFINE, "affine")
    assert (cpp_build.stats.rebuilds, cpp_build.stats.compiles) == (1, 1)
    assert capfd.readouterr().err.startswith(f"crucible: rebuilt the C++ kernel library {lib.path}: ")
    assert torch.equal(*run_affine(lib))
    meta = json.loads(lib.path.with_suffix(".json").read_text())
    assert meta["size"] == lib.path.stat().st_size


def test_unloadable_library_raises_load_error_without_rebuilding():
    # `omp error` needs GOMP_5.1, newer than the libgomp torch wheels bundle (and load first).
    source = """extern "C" int f(int warn) {
  if (warn) {
#pragma omp error at(execution) severity(warning) message("never")
  }
  return 1;
}"""
    for _ in range(2):
        try:
            lib = build_library(source, "needs_gomp51")
        except cpp_build.CppLoadError as error:
            assert "GOMP_5.1" in str(error) and "OpenMP 4.5" in str(error)
        else:  # a libgomp new enough was loaded first: the kernel must then work
            assert lib.function("f", [ctypes.c_int], ctypes.c_int)(0) == 1
    assert cpp_build.stats.compiles == 1


def test_compile_error_names_kernel_command_and_errors(fresh_cache):
    source = "extern \"C\" void broken(float* x) { x[0] = undeclared_thing; }\n"
    with pytest.raises(CppCompileError) as caught:
        build_library(source, "broken_kernel")
    error = caught.value
    message = str(error)
    assert "'broken_kernel'" in message
    assert "-fopenmp" in message and "-ffp-contract=off" in message
    assert "undeclared_thing" in message and "error" in message
    assert error.command[0].endswith(("g++", "c++")) and "-fopenmp" in error.command
    assert not entry_files(fresh_cache, ".so") and not entry_files(fresh_cache, ".tmp")
    assert entry_files(fresh_cache, ".cpp")  # kept so the failing source can be read
    copy = pickle.loads(pickle.dumps(error))  # harness workers send errors across processes
    assert (str(copy), copy.command, copy.output) == (message, error.command, error.output)


def test_error_output_is_cut_to_the_first_lines(fresh_cache):
    source = "".join(f"int f{i}() {{ return missing_{i}; }}\n" for i in range(200))
    with pytest.raises(CppCompileError) as caught:
        build_library(source, "many_errors")
    assert "missing_0" in str(caught.value)
    assert "missing_199" not in str(caught.value) and "missing_199" in caught.value.output


def test_missing_compiler_from_cxx(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/bin/crucible-g++")
    with pytest.raises(CppCompileError, match="not found.*\n.*crucible-g\\+\\+"):
        build_library(AFFINE, "affine")
    assert cpp_build.stats.compiles == 0


def test_missing_compiler_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CppCompileError, match="no C\\+\\+ compiler"):
        build_library(AFFINE, "affine")


def test_cache_dir_writable_by_others_is_refused(fresh_cache):
    fresh_cache.mkdir(parents=True)
    fresh_cache.chmod(0o777)
    with pytest.raises(cpp_build.CppBuildError, match="not writable by others"):
        build_library(AFFINE, "affine")


HOSTILE = [
    'x */ system("rm -rf /"); /*',
    "first line\nint injected = 1;\n",
    "ends in a line splice \\",
    "splice \\\n int injected2 = 2;",
    "trigraph splice ??/",
    "héllo wörld \u2211 \u2028 \u202e evil",
    "\x00\x1b[31m control \r\t",
    "*/", "/*", "*", "/", "//", "**//**", "/*/",
    "int", "main", "errno", "NULL",
    "__reserved", "_Upper", "123abc", "",
    "a" * 500,
    "a" * 499 + "b",
    "aten.add.Tensor",
]


def test_hostile_strings_compile_safely(fresh_cache):
    names = [sanitize_identifier(text) for text in HOSTILE]
    lines = ['#include "cpp_prelude.h"']
    for i, (text, name) in enumerate(zip(HOSTILE, names)):
        comment = safe_comment(text)
        # A comment that ends early injects code; one that runs on swallows the function.
        lines += [f"// {comment}",
                  f"/*{comment}*/ extern \"C\" int f{i}() {{ int {name} = {i}; return {name}; }} //{comment}"]
    # Sanitized names also work as exported functions (several texts map to "v_": not injective).
    lines += [f'extern "C" int {name}() {{ return {len(name)}; }}' for name in dict.fromkeys(names)]
    lib = build_library("\n".join(lines) + "\n", "hostile", extra_flags=("-Wall", "-Werror"))
    for i, name in enumerate(names):
        assert lib.function(f"f{i}", [], ctypes.c_int)() == i
        assert lib.function(name, [], ctypes.c_int)() == len(name)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_sanitizers_properties(text):
    name = sanitize_identifier(text)
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name)
    assert "__" not in name and name not in cpp_build._CPP_KEYWORDS
    comment = safe_comment(text)
    assert all(" " <= c <= "~" for c in comment) and len(comment) <= cpp_build.MAX_COMMENT
    for bad in ("*/", "/*", "\\", "??"):
        assert bad not in comment


PRELUDE_CHECKS = r"""
#include <cstdint>
#include "cpp_prelude.h"
using namespace crucible;
extern "C" void half_bits_to_float(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(x[i]);
}
extern "C" void float_to_half_bits(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(x[i]);
}
extern "C" void bf16_bits_to_float(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(x[i]);
}
extern "C" void float_to_bf16_bits(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i]);
}
extern "C" void maximum(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = max_propagate_nan(a[i], b[i]);
}
extern "C" void minimum(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = min_propagate_nan(a[i], b[i]);
}
"""


def same_bits_or_both_nan(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    ours_f, theirs_f = ours.float(), theirs.float()
    both_nan = ours_f.isnan() & theirs_f.isnan()
    return bool((both_nan | (ours.view(torch.int16) == theirs.view(torch.int16))).all())


def test_prelude_conversions_and_nan_propagation_match_aten():
    lib = build_library(PRELUDE_CHECKS, "prelude_checks")
    unary = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    every_bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    for low, dtype, to_float, from_float in [
        (every_bits, torch.float16, "half_bits_to_float", "float_to_half_bits"),
        (every_bits, torch.bfloat16, "bf16_bits_to_float", "float_to_bf16_bits"),
    ]:
        out = torch.empty(low.numel())
        call_kernel(lib.function(to_float, unary), low, out, low.numel())
        expected = low.view(dtype).float()
        assert torch.equal(out.view(torch.int32)[~expected.isnan()],
                           expected.view(torch.int32)[~expected.isnan()])
        assert torch.equal(out.isnan(), expected.isnan())
        # Random float32 bit patterns cover every exponent, subnormals, inf and NaN.
        floats = torch.randint(-(2**31), 2**31 - 1, (200_000,), dtype=torch.int32).view(torch.float32)
        floats = torch.cat([floats, torch.tensor([0.0, -0.0, 65504.0, 65520.0, 1e-8, -1e-8])])
        bits = torch.empty(floats.numel(), dtype=torch.int16)
        call_kernel(lib.function(from_float, unary), floats, bits, floats.numel())
        assert same_bits_or_both_nan(bits.view(dtype), floats.to(dtype))
    nan = float("nan")
    a = torch.tensor([1.0, nan, 2.0, nan, -1.0, float("inf")])
    b = torch.tensor([nan, 1.0, 3.0, nan, -2.0, 5.0])
    for symbol, reference in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
        out = torch.empty_like(a)
        call_kernel(lib.function(symbol, [ctypes.c_void_p] * 3 + [ctypes.c_int64]), a, b, out, a.numel())
        assert torch.equal(out.nan_to_num(7.0), reference(a, b).nan_to_num(7.0))


def test_threads_building_one_kernel_compile_it_once():
    with ThreadPoolExecutor(4) as pool:
        libraries = list(pool.map(lambda _: build_library(AFFINE, "affine"), range(4)))
    assert all(lib is libraries[0] for lib in libraries)
    assert (cpp_build.stats.compiles, cpp_build.stats.memory_hits) == (1, 3)


PRELUDE_USER = '#include "cpp_prelude.h"\nextern "C" float twice(float x) { return x + x; }\n'


def _gcc() -> bool:
    return "Free Software Foundation" in cpp_build.compiler_identity(tuple(cpp_build.find_compiler()))


@pytest.mark.skipif(not _gcc(), reason="the precompiled prelude is GCC's .gch mechanism")
def test_kernels_use_the_precompiled_prelude(fresh_cache):
    """The first build makes ``pch_<key>/cpp_prelude.h.gch`` with the kernels' flags; GCC takes it
    in place of the header (``-H`` marks a used precompiled header with ``!``)."""
    lib = build_library(PRELUDE_USER, "twice")
    assert lib.function("twice", [ctypes.c_float], ctypes.c_float)(1.5) == 3.0
    (where,) = [p for p in fresh_cache.iterdir() if p.name.startswith("pch_")]
    assert (where / "cpp_prelude.h.gch").stat().st_size > 0 and not (where / "failed.txt").exists()
    flags = [*cpp_build.SEMANTIC_FLAGS, *cpp_build.config.cpp_tuning_flags()]
    src = fresh_cache / "probe.cpp"
    src.write_text(PRELUDE_USER)
    done = subprocess.run([*cpp_build.find_compiler(), *flags, "-H", "-Winvalid-pch", "-I", str(where), "-I",
                           str(cpp_build.PRELUDE.parent), str(src), "-o", str(fresh_cache / "probe.so")],
                          capture_output=True, text=True, check=True)
    assert f"! {where / 'cpp_prelude.h.gch'}" in done.stderr, done.stderr[:400]


def test_a_prelude_that_does_not_precompile_leaves_kernels_building(fresh_cache, monkeypatch, tmp_path):
    """A compiler that refuses ``-x c++-header`` (or CRUCIBLE_CPP_PCH=0): kernels parse the header,
    and the refusal is kept next to where the precompiled header would be."""
    real = shutil.which("g++") or shutil.which("c++")
    fake = tmp_path / "cxx-without-pch"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = c++-header ] && exit 3; done\nexec {real} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    lib = build_library(PRELUDE_USER, "twice")
    assert lib.function("twice", [ctypes.c_float], ctypes.c_float)(2.0) == 4.0
    if _gcc():
        (where,) = [p for p in fresh_cache.iterdir() if p.name.startswith("pch_")]
        assert (where / "failed.txt").exists() and not (where / "cpp_prelude.h.gch").exists()
    cpp_build.clear_memory_cache()
    monkeypatch.setenv("CRUCIBLE_CPP_PCH", "0")
    assert cpp_build.precompiled_prelude(tuple(cpp_build.find_compiler()), tuple(cpp_build.SEMANTIC_FLAGS)) is None


def _pch_dir(cache: Path) -> Path:
    (where,) = [p for p in cache.iterdir() if p.name.startswith("pch_")]
    return where


def drop_digest_record(path: Path) -> None:
    (path.parent / "digest.json").unlink()


@pytest.mark.skipif(not _gcc(), reason="the precompiled prelude is GCC's .gch mechanism")
@pytest.mark.parametrize("damaged, damage", [("cpp_prelude.h.gch", truncate), ("cpp_prelude.h.gch", flip_bytes),
                                             ("cpp_prelude.h", truncate), ("cpp_prelude.h.gch", drop_digest_record)])
def test_damaged_precompiled_prelude_is_rebuilt(fresh_cache, damaged, damage, capfd):
    """Regression: a truncated ``pch_<key>/cpp_prelude.h.gch`` failed every later C++ kernel build ("cannot
    read PCH file") until the user deleted the cache by hand. The prelude and its .gch are checked
    against the digest.json written with them and rebuilt, with one line on stderr."""
    build_library(PRELUDE_USER, "twice")
    where = _pch_dir(fresh_cache)
    record = where / "digest.json"
    files = {"header": where / "cpp_prelude.h", "gch": where / "cpp_prelude.h.gch"}
    assert cache_files.matches_digest(record, files)
    damage(where / damaged)
    assert not cache_files.matches_digest(record, files)
    cpp_build.clear_memory_cache()
    cpp_build.stats.reset()
    capfd.readouterr()
    lib = build_library(PRELUDE_USER.replace("twice", "thrice"), "thrice")
    assert lib.function("thrice", [ctypes.c_float], ctypes.c_float)(1.5) == 3.0
    assert cpp_build.stats.rebuilds == 1 and cache_files.matches_digest(record, files)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"crucible: rebuilt the precompiled C++ prelude {files['gch']}: ")
    cpp_build.clear_memory_cache()  # intact now: the next process uses it as it is
    build_library(PRELUDE_USER.replace("twice", "again"), "again")
    assert cpp_build.stats.rebuilds == 1 and not capfd.readouterr().err


PCH_CHILD = r"""
import ctypes, os, sys, time
from compiler import cpp_build
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.002)
name = sys.argv[2]
lib = cpp_build.build_library('#include "cpp_prelude.h"\nextern "C" float ' + name + '(float x) { return x + x; }\n', name)
print(lib.function(name, [ctypes.c_float], ctypes.c_float)(2.0), cpp_build.stats.rebuilds)
"""


@pytest.mark.skipif(not _gcc(), reason="the precompiled prelude is GCC's .gch mechanism")
def test_two_processes_meeting_a_damaged_prelude_rebuild_it_once(fresh_cache, tmp_path):
    """The check and the rebuild happen under the prelude's lock: of two processes that find it
    truncated at once, one rebuilds it and the other waits and uses the rebuilt one."""
    build_library(PRELUDE_USER, "twice")
    truncate(_pch_dir(fresh_cache) / "cpp_prelude.h.gch")
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [subprocess.Popen([sys.executable, "-c", PCH_CHILD, str(go), name], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for name in ("left", "right")]
    for child in children:
        assert child.stdout.readline().strip() == "ready"
    go.touch()
    results, errors = [], ""
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        results.append(out.split())
        errors += err
    assert sorted(results) == [["4.0", "0"], ["4.0", "1"]]
    assert errors.count("rebuilt the precompiled C++ prelude") == 1
