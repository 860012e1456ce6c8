"""The README and ``docs/`` against the code they describe.

Every reference table of ``docs/*.md`` is checked against its source of truth: the backend options
(``compiler.config.Options``), the environment variables the compiler and the harness read, the debug
levels, the pipeline's passes, the targets, statuses, phases, exit statuses and tolerances of the
harness, the option tables of every ``crucible`` sub-command and of the pytest plugin (against their
argparse parsers: every option documented, no documented option that does not exist, stated defaults
equal to the parser's), the corpus's sources and tiers, the fuzzer's oracle allowances and the
simulator's finding kinds. Commands quoted anywhere in the docs use only options that exist, and every
relative link, repository path and dotted module name they mention exists.

These tests read text, parsers and module attributes: no model is built and nothing is compiled.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from compiler import config
from tests.test_hygiene import variables_config_reads

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
PAGES = ("compiler", "harness", "fuzzing", "minimizing", "simulator", "corpus", "cluster", "benchmarks")
PACKAGES = ("compiler", "harness", "simulator", "corpus")
README_MAX_LINES = 200


# --- reading the docs --------------------------------------------------------------------------------

@cache
def text(name: str) -> str:
    """``docs/<name>.md``, or the README for ``"README"``."""
    return (README if name == "README" else DOCS / f"{name}.md").read_text()


def all_docs() -> dict[str, str]:
    return {"README": text("README"), **{page: text(page) for page in PAGES}}


def table(page: str, header: str) -> list[list[str]]:
    """The body rows of the table in ``page`` whose first header cell is ``header`` (cells stripped;
    ``\\|`` inside a cell is a literal bar)."""
    lines = text(page).splitlines()
    start = next((i for i, line in enumerate(lines[:-1])
                  if _cells(line)[:1] == [header] and lines[i + 1].startswith("|---")), None)
    assert start is not None, f"docs/{page}.md has no table headed {header!r}"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


def _cells(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def column(rows: list[list[str]], index: int = 0) -> list[str]:
    return [row[index].strip("`") for row in rows]


def squash(value: str) -> str:
    return " ".join(value.split())


def section(page: str, heading: str) -> str:
    """The text under ``heading`` (a markdown heading line) up to the next heading of any level."""
    body = text(page).split(f"\n{heading}\n", 1)
    assert len(body) == 2, f"docs/{page}.md has no heading {heading!r}"
    return re.split(r"\n#+ ", body[1], maxsplit=1)[0]


def code_spans(doc: str) -> list[str]:
    """Inline code spans (whitespace squashed: a span may wrap) and the lines of fenced code blocks
    (comments after ``  #`` dropped)."""
    spans, prose, fenced = [], [], False
    for line in doc.splitlines() + ["```"]:
        if line.startswith("```"):
            if not fenced:
                spans += [squash(span) for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
                prose = []
            fenced = not fenced
        elif fenced:
            spans.append(line.split("  #")[0].strip())
        else:
            prose.append(line)
    return [span for span in spans if span]


def prose(doc: str) -> str:
    """``doc`` without its fenced code blocks and inline code spans."""
    return re.sub(r"`[^`]+`", "", re.sub(r"^```.*?^```", "", doc, flags=re.S | re.M))


# --- the README --------------------------------------------------------------------------------------

def test_readme_is_short() -> None:
    lines = len(text("README").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; reference material goes to docs/"


def test_readme_links_every_doc_page() -> None:
    linked = set(re.findall(r"\]\(docs/([\w-]+)\.md[)#]", text("README")))
    assert linked == set(PAGES), f"README links {sorted(linked)}; docs/ has {sorted(PAGES)}"
    assert {p.stem for p in DOCS.glob("*.md")} == set(PAGES), "a page in docs/ this test does not know"


def test_readme_holds_the_commands_ci_runs() -> None:
    """``.ci/run`` runs exactly the README's test command, and the main job is the one documented."""
    ci_command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci_command.startswith("python -m pip install -e '.[test,corpus]'")
    readme = text("README")
    assert f"\n{ci_command}\n" in readme
    assert "\npython -m pip install -e '.[corpus]' && crucible run\n" in readme
    assert "the same command plus `--device cuda` also runs the GPU-only tests" in readme
    nightly = (REPO / ".ci" / "nightly").read_text().strip().splitlines()[-1]
    assert nightly == f"{ci_command} --nightly", "the nightly job is the README's test command plus --nightly"
    assert "`--nightly` adds the" in readme


def test_docs_mention_no_machine_paths() -> None:
    for name, doc in all_docs().items():
        found = re.findall(r"(?<![\w.~<>])/(?:home|tmp|work|root|Users|mnt|opt)/\S*", doc)
        assert not found, f"{name}: machine paths {found}"


# --- the compiler ------------------------------------------------------------------------------------

def test_options_table_matches_config() -> None:
    documented = column(table("compiler", "option"))
    assert documented == [f.name for f in dataclasses.fields(config.Options)]
    for name in documented:  # every documented option is accepted, and unknown ones are named
        config.Options.parse({name: None if name in ("codegen", "extern") else False})
    with pytest.raises(ValueError, match=r"unknown crucible option\(s\) \['nope'\]; known: codegen, strict, "
                                         r"cudagraphs, extern, fold_weights, layout"):
        config.Options.parse({"nope": 1})
    values = {row[0].strip("`"): row[1] for row in table("compiler", "option")}
    for name, choices in (("codegen", config.CODEGENS), ("extern", config.EXTERN_MODES),
                          ("layout", config.LAYOUTS), ("tuning", config.TUNING_MODES),
                          ("partition", config.PARTITIONS)):
        assert values[name] == ", ".join(f'`"{c}"`' for c in choices), name


def test_environment_table_matches_config() -> None:
    rows = {name: effect for name, effect, *_ in table("compiler", "variable")}
    documented = {name.strip("`") for name in rows}
    read = variables_config_reads()
    assert {"CRUCIBLE_DEBUG", "CRUCIBLE_CACHE_DIR", "CXX"} <= read  # the source scan found the reads
    assert documented == read, (f"docs/compiler.md's environment table and compiler/config.py disagree: "
                                f"undocumented {sorted(read - documented)}, not read {sorted(documented - read)}")
    effects = {name.strip("`"): effect for name, effect in rows.items()}  # the defaults it states are config's
    assert f"`{' '.join(config.DEFAULT_CPP_TUNING_FLAGS)}`" in effects["CRUCIBLE_CPP_FLAGS"]
    assert f"at most {config.MAX_DEFAULT_COMPILE_THREADS}" in effects["CRUCIBLE_COMPILE_THREADS"]


def test_debug_levels_table_matches_config() -> None:
    documented = {int(level.strip("`")): squash(adds) for level, adds in table("compiler", "`CRUCIBLE_DEBUG`")}
    assert documented == {level: squash(adds) for level, adds in config.DEBUG_LEVELS.items()}


def _pipeline_passes() -> set[str]:
    """Pass names of ``compiler/pipeline.py``: ``run_pass("name", ...)``, ``run_rewrite("name", ...)``
    and the ``("name", fn, args)`` entries of its pass lists."""
    names = set()
    for node in ast.walk(ast.parse((REPO / "compiler" / "pipeline.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("run_pass", "run_rewrite") and node.args \
                and isinstance(node.args[0], ast.Constant):
            names.add(node.args[0].value)
        elif isinstance(node, ast.Tuple) and len(node.elts) >= 2 and isinstance(node.elts[0], ast.Constant) \
                and isinstance(node.elts[1], ast.Name) and node.elts[0].value == node.elts[1].id:
            names.add(node.elts[0].value)
    return names


def test_pass_table_matches_the_pipeline() -> None:
    documented = set(column(table("compiler", "pass")))
    assert {"select_renderer", "lower", "wrap"} <= _pipeline_passes()
    assert documented == _pipeline_passes()


# --- the harness: targets, statuses, phases, exit statuses, oracle, environment -------------------------

def test_targets_table_matches_the_harness() -> None:
    from harness.targets import CRUCIBLE_TARGETS, parse_target

    rows = {row[0].strip("`"): row for row in table("harness", "target")}
    assert {"eager", "any other name"} <= set(rows)
    assert {name for name in rows if name.startswith("crucible-")} == set(CRUCIBLE_TARGETS)
    for name, options in CRUCIBLE_TARGETS.items():
        _, device, compiles_with, _ = rows[name]
        assert device == parse_target(name).device, name
        assert compiles_with.strip("`") == ", ".join(f"{k}={v!r}" for k, v in options.items()), name


def test_statuses_table_matches_the_enum() -> None:
    """Every member of ``Status``, in legend order, with its kind and its meaning as the enum says it."""
    from harness.status import Status

    documented = [(s.strip("`"), kind, squash(meaning)) for s, kind, meaning in table("harness", "status")]
    assert documented == [(s.value, s.kind.value, squash(s.meaning)) for s in Status]


def test_phases_table_matches_the_enum() -> None:
    from harness.status import Phase

    documented = [(p.strip("`"), eager_side) for p, eager_side, _ in table("harness", "phase")]
    assert documented == [(p.value, "yes" if p.eager_side else "no") for p in Phase]


def test_exit_statuses_match_the_command() -> None:
    from harness import cli

    documented = {int(code.strip("`")) for code in column(table("harness", "exit status"))}
    assert documented == {value for name, value in vars(cli).items() if name.startswith("EXIT_")}


def test_tolerance_table_matches_the_oracle() -> None:
    from harness.oracle import DEFAULT_TOLERANCES, HUGE_NUMEL

    documented = {dtype: tuple(float(v) for v in values) for dtype, *values in table("harness", "dtype")}
    assert documented == {dtype: (t.rmse_ratio, t.cosine, t.atol, t.rtol) for dtype, t in DEFAULT_TOLERANCES.items()}
    assert f"above {HUGE_NUMEL // 1_000_000}M elements" in squash(text("harness"))


def test_result_fields_named_in_the_docs_exist() -> None:
    from harness.result import FIELD_NAMES

    bullets = [item.split("\n\n")[0] for item in section("harness", "### Result fields").split("\n- ")[1:]]
    named = {name for item in bullets for name in re.findall(r"`([a-z][a-z0-9_]*)`", item)}
    assert len(named) > 60 and named <= FIELD_NAMES, sorted(named - FIELD_NAMES)


def _harness_variables() -> set[str]:
    """``CRUCIBLE_*`` names the harness (its benchmarks aside) spells as string constants: the variables
    it reads or sets that are not the compiler's."""
    found = set()
    for path in (REPO / "harness").rglob("*.py"):
        if "bench" in path.relative_to(REPO).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"CRUCIBLE_[A-Z0-9_]+", node.value):
                found.add(node.value)
    return found - variables_config_reads()


def test_harness_environment_table_matches_the_harness() -> None:
    documented = set(column(table("harness", "variable")))
    read = _harness_variables()
    assert {"CRUCIBLE_GPUS", "CRUCIBLE_MINIFY_PLUGINS"} <= read
    assert read <= documented, f"undocumented harness variables: {sorted(read - documented)}"
    tests_read = {name for path in (REPO / "tests").rglob("*.py") for name in documented
                  if f'"{name}"' in path.read_text()}
    assert documented <= read | tests_read, f"documented but never read: {sorted(documented - read - tests_read)}"
    assert not documented & variables_config_reads(), "compiler variables belong in docs/compiler.md"


# --- command-line options ----------------------------------------------------------------------------

# sub-command -> (page, headers of the tables that document its options)
COMMAND_TABLES: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {
    ("list",): ("harness", ("selection option", "`crucible list` option")),
    ("run",): ("harness", ("selection option", "`crucible run` option")),
    ("report",): ("harness", ("`crucible report` option",)),
    ("diff",): ("harness", ("`crucible diff` option",)),
    ("merge",): ("harness", ("`crucible merge` option",)),
    ("fuzz",): ("fuzzing", ("`crucible fuzz` option",)),
    ("fuzz-decomps",): ("fuzzing", ("`crucible fuzz-decomps` option",)),
    ("mutate",): ("fuzzing", ("`crucible mutate` option",)),
    ("minify",): ("minimizing", ("`crucible minify` option",)),
    ("corpus", "check"): ("corpus", ("`crucible corpus check` option",)),
}


@cache
def crucible_parser() -> argparse.ArgumentParser:
    from harness.cli import _parser

    return _parser()


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def command_parser(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = crucible_parser()
    for name in path:
        parser = subcommands(parser)[name]
    return parser


def documented_arguments(rows: list[list[str]]) -> tuple[set[str], set[str]]:
    """(options, positionals) in the first column of an options table: ``--long``/``-x`` spellings, and
    upper-case words in code spans that do not start with a dash."""
    options, positionals = set(), set()
    for row in rows:
        for span in re.findall(r"`([^`]+)`", row[0]):
            first = span.split()[0]
            if first.startswith("-"):
                options |= {word for word in span.split() if re.fullmatch(r"--?[A-Za-z][\w-]*", word)}
            elif re.fullmatch(r"[A-Z][A-Z_]*", first):
                positionals.add(first)
    return options, positionals


def parser_arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help != argparse.SUPPRESS
            and not isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))]


def test_every_subcommand_has_an_options_table() -> None:
    assert set(subcommands(crucible_parser())) == {path[0] for path in COMMAND_TABLES}
    assert set(subcommands(command_parser(("corpus",)))) == {"check"}


@pytest.mark.parametrize("path", list(COMMAND_TABLES), ids=" ".join)
def test_options_table_matches_the_parser(path: tuple[str, ...]) -> None:
    """Every option of ``crucible <path>`` is documented, every documented one exists, and a default the
    table states (``default N``) is the parser's."""
    page, headers = COMMAND_TABLES[path]
    rows = [row for header in headers for row in table(page, header)]
    options, positionals = documented_arguments(rows)
    actions = parser_arguments(command_parser(path))
    known = {s for a in actions for s in a.option_strings}
    undocumented = [a.option_strings for a in actions if a.option_strings and not set(a.option_strings) & options]
    assert not undocumented, f"crucible {' '.join(path)}: options missing from docs/{page}.md: {undocumented}"
    assert options <= known, f"crucible {' '.join(path)}: documented but no such option: {sorted(options - known)}"
    assert positionals == {(a.metavar or a.dest).upper() for a in actions if not a.option_strings}
    for row in rows:
        stated = re.search(r"\bdefault (\d+(?:\.\d+)?)\b", row[1])
        spelled, _ = documented_arguments([row])
        action = next((a for a in actions if set(a.option_strings) & spelled), None)
        if stated and action is not None and isinstance(action.default, (int, float)) \
                and not isinstance(action.default, bool):
            assert float(stated.group(1)) == action.default, f"{row[0]}: the parser's default is {action.default}"


class _OptionRecorder:
    """Stands in for pytest's parser and option group: records ``addoption`` calls."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict]] = []

    def getgroup(self, *args: object, **kwargs: object) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **kwargs: object) -> None:
        self.options.append((names, kwargs))


def test_pytest_plugin_options_table_matches_the_plugin() -> None:
    from harness import pytest_plugin

    recorder = _OptionRecorder()
    pytest_plugin.pytest_addoption(recorder)
    options, _ = documented_arguments(table("harness", "pytest option"))
    assert options == {name for names, _ in recorder.options for name in names}
    for row in table("harness", "pytest option"):
        stated = re.search(r"\bdefault (\d+(?:\.\d+)?)\b", row[1])
        if stated:
            (names, kwargs), = [o for o in recorder.options if set(o[0]) & documented_arguments([row])[0]]
            assert float(stated.group(1)) == kwargs["default"], names


def _commands(prefix: str) -> list[tuple[str, list[str]]]:
    """(page, words) of every quoted command line starting with ``prefix``, environment settings before it
    dropped."""
    found = []
    for page, doc in all_docs().items():
        for span in code_spans(doc):
            words = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", span).split()
            if words[:len(prefix.split())] == prefix.split():
                found.append((page, words))
    return found


def _flags(words: list[str]) -> set[str]:
    return {re.sub(r"[\]|].*$", "", w.lstrip("[")) for w in words
            if re.fullmatch(r"\[?--?[A-Za-z][\w-]*[\]|]?.*", w)}


def test_quoted_crucible_commands_use_existing_options() -> None:
    commands = _commands("crucible")
    assert len(commands) > 30
    for page, words in commands:
        path: tuple[str, ...] = ()
        parser = crucible_parser()
        for word in words[1:]:
            if word not in subcommands(parser):
                break
            path, parser = path + (word,), subcommands(parser)[word]
        known = {s for a in parser._actions for s in a.option_strings}
        unknown = _flags(words[1 + len(path):]) - known
        assert not unknown, f"{page}: `{' '.join(words)}` uses {sorted(unknown)}, not options of crucible {' '.join(path)}"


def test_quoted_pytest_commands_use_existing_plugin_options() -> None:
    from harness import pytest_plugin

    recorder = _OptionRecorder()
    pytest_plugin.pytest_addoption(recorder)
    known = {name for names, _ in recorder.options for name in names}
    commands = _commands("pytest")
    assert commands
    for page, words in commands:
        unknown = {f for f in _flags(words) if f.startswith("--crucible")} - known
        assert not unknown, f"{page}: `{' '.join(words)}` uses {sorted(unknown)}"


def module_file(name: str) -> Path | None:
    """The source file of project module ``name`` (a package's ``__init__.py``), or None."""
    base = REPO.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_quoted_python_m_commands_exist_with_their_options() -> None:
    """``python -m MODULE --flag ...``: the module runs as a script and spells every flag quoted."""
    commands = [(page, words) for page, words in _commands("python -m")
                if words[2].split(".")[0] in PACKAGES and not re.search(r"[*<]", words[2])]
    assert len(commands) > 20
    for page, words in commands:
        module = words[2]
        path = module_file(module)
        script = path.parent / "__main__.py" if path is not None and path.name == "__init__.py" else path
        assert script is not None and script.is_file(), f"{page}: no module {module} to run"
        source = script.read_text()
        assert '__name__ == "__main__"' in source or script.name == "__main__.py", f"{page}: {module} is no script"
        missing = {f for f in _flags(words[3:]) if f'"{f}"' not in source}
        assert not missing, f"{page}: `{' '.join(words)}`: {module} has no option {sorted(missing)}"


def test_every_benchmark_script_is_documented() -> None:
    documented = set(re.findall(r"python -m harness\.bench\.(\w+)", text("benchmarks"))) | \
        set(re.findall(r"`harness/bench/(\w+)\.py`", text("benchmarks")))
    scripts = {p.stem for p in (REPO / "harness" / "bench").glob("*.py")
               if '__name__ == "__main__"' in p.read_text()} | {"render_check"}
    assert scripts <= documented, f"benchmark scripts missing from docs/benchmarks.md: {sorted(scripts - documented)}"


# --- the corpus, the fuzzer, the simulator -------------------------------------------------------------

def test_sources_and_tiers_tables_match_the_corpus() -> None:
    import corpus.zoo
    from corpus import SOURCES, tiers
    from corpus.entry import TIERS

    assert set(column(table("corpus", "source"))) == set(SOURCES)
    assert f"{len(corpus.zoo.entries())} hand-written modules" in squash(text("corpus"))
    rules = {tier.strip("`"): squash(rule) for tier, rule in table("corpus", "tier")}
    assert list(rules) == list(TIERS)
    smoke = [f"eager <= {tiers.SMOKE_MAX_EAGER_MS:g} ms", f"<= {tiers.SMOKE_MAX_PARAMS / 1e6:g}M parameters",
             f"a budget share of {tiers.SMOKE_BUDGET_S:g} s",
             f"{tiers.SMOKE_FIXED_S:g} s + {tiers.SMOKE_S_PER_EAGER_MS:g} s per eager millisecond",
             ", ".join(f"{source} {quota}" for source, quota in tiers.SMOKE_QUOTA.items())]
    nightly_cpu = [f"eager <= {tiers.NIGHTLY_CPU_MAX_EAGER_MS:g} ms", f"<= {tiers.NIGHTLY_CPU_MAX_PARAMS / 1e6:g}M"]
    for tier, facts in (("smoke", smoke), ("nightly-cpu", nightly_cpu),
                        ("nightly-gpu", [f"{tiers.GPU_MAX_PARAMS / 1e9:g}B parameters"])):
        assert all(fact in rules[tier] for fact in facts), (tier, [f for f in facts if f not in rules[tier]])
    assert f"<= {tiers.UNMEASURED_CPU_MAX_PARAMS / 1e6:g}M parameters is `nightly-cpu`" in squash(text("corpus"))


def test_corpus_check_statuses_match_its_records() -> None:
    from harness.corpus_check import CHECK_MAX_PARAMS, STATUS_COLUMNS

    assert column(table("corpus", "measured status")) == list(STATUS_COLUMNS)
    assert f"above {CHECK_MAX_PARAMS / 1e9:g}B are not built" in squash(text("corpus"))


def test_fuzz_allowances_table_matches_the_oracle() -> None:
    """The allowances ``harness.fuzz.subject.compare_outputs`` grants (each ``allow(NAME)``)."""
    from harness.fuzz import subject
    from harness.fuzz.specs import OP_SPECS

    names = {node.args[0].id for node in ast.walk(ast.parse(Path(subject.__file__).read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "allow"
             and node.args and isinstance(node.args[0], ast.Name)}
    granted = {getattr(subject, name) for name in names}
    assert len(granted) >= 6
    assert set(column(table("fuzzing", "allowance"))) == granted
    assert f"{len(OP_SPECS)} ATen overloads today" in squash(text("fuzzing"))


def test_finding_kinds_table_matches_the_simulator() -> None:
    tree = ast.parse((REPO / "simulator" / "findings.py").read_text())
    kind_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Kind")
    kinds = {t.id: n.value.value for n in kind_class.body if isinstance(n, ast.Assign) for t in n.targets}
    all_kinds = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", None) == "ALL_KINDS")
    assert column(table("simulator", "kind")) == [kinds[e.attr] for e in all_kinds.elts]


# --- links, paths and module names ---------------------------------------------------------------------

def slug(heading: str) -> str:
    """A markdown heading's anchor, as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if re.match(r"#+ ", line)}


def test_relative_links_resolve() -> None:
    for name, doc in all_docs().items():
        base = REPO if name == "README" else DOCS
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(doc)):
            if re.match(r"\w+://", target):
                continue
            file, _, anchor = target.partition("#")
            path = (base / file).resolve() if file else (README if name == "README" else DOCS / f"{name}.md")
            assert path.exists(), f"{name}: link to {target}: no such file"
            if anchor:
                assert anchor in anchors(path), f"{name}: link to {target}: no such heading in {path.name}"


TOP_LEVEL = {p.name for p in REPO.iterdir() if not p.name.startswith(".") or p.name == ".ci"}
SOURCE_SUFFIXES = (".py", ".md", ".h", ".toml")


def mentioned_paths(doc: str) -> set[str]:
    """Code spans that name a file or folder of the repository: ``top/...`` paths, and bare source file
    names. Spans with placeholders (``<source>``, ``*``, ``...``, ``DIR``) are templates, not paths."""
    found = set()
    for span in code_spans(doc):
        for word in span.split():
            word = word.rstrip(",;:)")
            if re.search(r"[<>*]|\.\.\.", word) or not re.fullmatch(r"[\w./-]+", word):
                continue
            if "/" in word and word.split("/")[0] in TOP_LEVEL:
                found.add(word)
            elif "/" not in word and word.endswith(SOURCE_SUFFIXES) and word.count(".") == 1:
                found.add(word)
    return found


def test_mentioned_paths_exist() -> None:
    missing = []
    for name, doc in all_docs().items():
        for path in mentioned_paths(doc):
            exists = (REPO / path).exists() if "/" in path else any(REPO.rglob(path))
            if not exists:
                missing.append(f"{name}: {path}")
    assert not missing, "paths the docs mention that do not exist: " + ", ".join(sorted(missing))


@cache
def defined_names(path: Path) -> frozenset[str]:
    """Names a module defines at top level (defs, classes, assignments, imports, ``__all__``)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
            if any(getattr(t, "id", None) == "__all__" for t in targets) and isinstance(node.value, ast.List):
                names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def mentioned_modules(doc: str) -> set[str]:
    """Dotted names of project modules and their attributes in code spans (``compiler.inspect``)."""
    found = set()
    for span in code_spans(doc):
        for word in re.findall(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)", span):
            found.add(word)
    return found


def test_mentioned_modules_and_names_exist() -> None:
    missing = []
    for name, doc in all_docs().items():
        for dotted in mentioned_modules(doc):
            parts = dotted.split(".")
            depth = max((i for i in range(1, len(parts) + 1) if module_file(".".join(parts[:i]))), default=0)
            if depth == 0:
                missing.append(f"{name}: {dotted}")
            elif depth < len(parts) and parts[depth] not in defined_names(module_file(".".join(parts[:depth]))):
                missing.append(f"{name}: {dotted} ({parts[depth]} not in {'.'.join(parts[:depth])})")
    assert not missing, "names the docs mention that do not exist: " + ", ".join(sorted(missing))


def test_link_and_path_checks_see_their_mistakes() -> None:
    """The scanners find what they look for (so an empty result means something)."""
    sample = ("`harness/nosuch.py` and `compiler.nosuch` and `harness.status.Nope` and "
              "`corpus/data/<source>.json` and `DIR/repro.py`\n```\ncrucible run --nope  # a comment --x\n```\n")
    assert mentioned_paths(sample) == {"harness/nosuch.py"}
    assert mentioned_modules(sample) == {"compiler.nosuch", "harness.status.Nope"}
    assert slug("CUDA-free mode (kernel templates)") == "cuda-free-mode-kernel-templates"
    assert slug("`crucible run`") == "crucible-run"
    assert _flags(shlex.split("crucible run --nope [--db DB] [-j N] --x|--y X")) == {"--nope", "--db", "-j", "--x"}
    assert documented_arguments([["`-j N`, `--jobs N`"], ["`RUN_A`, `RUN_B`"], ["`--device cpu|cuda`"]]) == \
        ({"-j", "--jobs", "--device"}, {"RUN_A", "RUN_B"})
