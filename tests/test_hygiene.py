"""Project hygiene: one module reads the environment, the README's tables match config, one cache root.

These tests read source text and the README; they import no Dynamo and run in milliseconds.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

import pytest

from compiler import config

REPO = Path(__file__).resolve().parents[1]
COMPILER = REPO / "compiler"
CONFIG = COMPILER / "config.py"
ENV_FUNCTIONS = {"getenv", "putenv", "unsetenv", "getenvb"}
ENV_NAMES = {"environ", "environb"}


def environment_reads(source: str) -> list[int]:
    """Line numbers where ``source`` touches the process environment through ``os``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES | ENV_FUNCTIONS:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ENV_NAMES | ENV_FUNCTIONS for alias in node.names):
                lines.append(node.lineno)
    return lines


def test_environment_read_detector_sees_every_spelling() -> None:
    spellings = ["os.environ.get('X')", "os.environ['X']", "os.getenv('X')", "'X' in os.environ",
                 "from os import environ", "from os import getenv as g", "os.environ.setdefault('X', '')"]
    for text in spellings:
        assert environment_reads(text), text
    assert not environment_reads("config.cache_root()\nenviron_like = 1")


def test_only_config_reads_the_environment() -> None:
    offenders = [f"{path.relative_to(REPO)}:{line}" for path in sorted(COMPILER.rglob("*.py")) if path != CONFIG
                 for line in environment_reads(path.read_text())]
    assert not offenders, ("read the environment through compiler/config.py, not directly: "
                           + ", ".join(offenders))


def variables_config_reads() -> set[str]:
    """Names of the environment variables config.py reads, from its source."""
    names = set()
    for node in ast.walk(ast.parse(CONFIG.read_text())):
        func = node.func if isinstance(node, ast.Call) else None
        is_read = isinstance(func, ast.Attribute) and (
            func.attr == "getenv" or (func.attr == "get" and getattr(func.value, "attr", None) == "environ"))
        if is_read and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and getattr(node.value, "attr", None) == "environ":
            names.add(node.slice.value)
    return names


def readme_table(header: str) -> dict[str, str]:
    """First column (backticks stripped) -> second column of the README table whose header row
    starts with ``| header |``."""
    lines = (REPO / "README.md").read_text().splitlines()
    start = next((i for i, line in enumerate(lines[:-1])
                  if line.startswith(f"| {header} |") and lines[i + 1].startswith("|---")), None)
    assert start is not None, f"README has no table headed {header!r}"
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1]
    return rows


def test_readme_environment_table_matches_config() -> None:
    documented = set(readme_table("variable"))
    read = variables_config_reads()
    assert {"CRUCIBLE_DEBUG", "CRUCIBLE_CACHE_DIR", "CXX"} <= read  # the source scan found the reads
    assert documented == read, (f"README's environment table and compiler/config.py disagree: "
                                f"undocumented {sorted(read - documented)}, not read {sorted(documented - read)}")
    table = readme_table("variable")  # the defaults it states are config's
    assert f"`{' '.join(config.DEFAULT_CPP_TUNING_FLAGS)}`" in table["CRUCIBLE_CPP_FLAGS"]
    assert f"at most {config.MAX_DEFAULT_COMPILE_THREADS}" in table["CRUCIBLE_COMPILE_THREADS"]


def test_readme_options_table_matches_config() -> None:
    documented = set(readme_table("option"))
    assert documented == {f.name for f in dataclasses.fields(config.Options)}
    for name in documented:  # every documented option is accepted, and unknown ones are named
        config.Options.parse({name: None if name in ("codegen", "extern") else False})
    with pytest.raises(ValueError, match=r"unknown crucible option\(s\) \['nope'\]; known: codegen, strict, cudagraphs, extern, fold_weights, layout"):
        config.Options.parse({"nope": 1})


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_readme_debug_levels_match_config() -> None:
    documented = readme_table("`CRUCIBLE_DEBUG`")
    assert {int(k): _squash(v) for k, v in documented.items()} == \
        {k: _squash(v) for k, v in config.DEBUG_LEVELS.items()}


def test_code_uses_only_documented_debug_levels() -> None:
    """Every ``debug_level() >= N`` (or ``level >= N`` on its value) names a level of DEBUG_LEVELS."""
    used = set()
    for path in COMPILER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            left = node.left
            is_level = (isinstance(left, ast.Call) and getattr(left.func, "attr", None) == "debug_level") \
                or (isinstance(left, ast.Name) and left.id == "level")
            if is_level:
                used |= {c.value for c in node.comparators if isinstance(c, ast.Constant)
                         and type(c.value) is int}  # not a kernel's store level ("x", "xr")
    assert used and used <= set(config.DEBUG_LEVELS), sorted(used)


@pytest.mark.parametrize("variable", ["CRUCIBLE_CACHE_DIR", "XDG_CACHE_HOME"])
def test_cache_root_expands_home(variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Regression: the C++ cache expanded ``~`` in CRUCIBLE_CACHE_DIR and the Triton cache did not,
    so one setting put the two caches in different trees (one of them a literal ``~`` directory)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CRUCIBLE_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, "~/kernels")
    expected = tmp_path / "kernels" if variable == "CRUCIBLE_CACHE_DIR" else tmp_path / "kernels" / "crucible"
    assert config.cache_root() == expected
    from compiler import cpp_build, runtime

    assert cpp_build.cache_dir() == expected / "cpp"
    assert runtime.triton_source_dir() == expected / "triton"


def test_triton_cache_refuses_a_directory_others_can_write(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """Regression: the Triton module cache imported files from a world-writable directory, which
    the C++ cache already refused (importing a module runs its code)."""
    from compiler import runtime

    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path))
    path = runtime.triton_source_dir()
    assert path.stat().st_mode & 0o777 == 0o700
    path.chmod(0o777)
    with pytest.raises(config.UnsafeCacheDir, match="not writable by others"):
        runtime.load_module("X = 1\n", "hygiene_probe")


def test_environment_override_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", "/before")
    with config.environment_override("CRUCIBLE_CACHE_DIR", "/during"):
        assert str(config.cache_root()) == "/during"
    assert str(config.cache_root()) == "/before"
    monkeypatch.delenv("CRUCIBLE_CACHE_DIR")
    with config.environment_override("CRUCIBLE_CACHE_DIR", "/during"):
        pass
    assert "CRUCIBLE_CACHE_DIR" not in os.environ


def test_cpp_tuning_flags_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRUCIBLE_CPP_FLAGS", raising=False)
    assert config.cpp_tuning_flags() == config.DEFAULT_CPP_TUNING_FLAGS
    monkeypatch.setenv("CRUCIBLE_CPP_FLAGS", "-O2 '-DNAME=a b'")
    assert config.cpp_tuning_flags() == ("-O2", "-DNAME=a b")
    monkeypatch.setenv("CRUCIBLE_CPP_FLAGS", "")
    assert config.cpp_tuning_flags() == ()



def test_debug_level_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: an unparsable CRUCIBLE_DEBUG (``=yes``, ``=-1``) silently meant level 1; it is
    now a one-line error naming the variable and the levels, like CRUCIBLE_COMPILE_THREADS."""
    for value, level in (("", 0), (" ", 0), ("0", 0), ("2", 2), ("3", 3)):
        monkeypatch.setenv("CRUCIBLE_DEBUG", value)
        assert config.debug_level() == level
    monkeypatch.delenv("CRUCIBLE_DEBUG")
    assert config.debug_level() == 0
    for bad in ("yes", "-1"):
        monkeypatch.setenv("CRUCIBLE_DEBUG", bad)
        with pytest.raises(ValueError, match=rf"CRUCIBLE_DEBUG='{bad}': expected a level 0-3"):
            config.debug_level()
