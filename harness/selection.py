"""Choosing entries: the selection options every command shares (``--suite``, ``--source``,
``--tag``, ``--entry`` names or globs, ``--exclude`` globs, ``-k EXPR``, ``--corpus``).

``-k`` takes a pytest-style expression over entry names: words are case-insensitive substrings,
combined with ``and``, ``or``, ``not`` and parentheses (``-k 'resnet and not 50'``). A name or glob
matches an entry's full name (``timm/resnet18``) or the part after its source (``resnet18``).
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import re
import sys
from collections.abc import Callable
from typing import Any

from corpus import SOURCES
from corpus.entry import TIERS, Entry
from corpus.registry import catalog, select
from harness.validation import UsageError, corpus_paths

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def keyword_matcher(expression: str) -> Callable[[str], bool]:
    """A predicate over names for ``-k``; ValueError (naming the expression) when it does not parse."""
    tokens = _TOKEN.findall(expression)
    if not tokens:
        raise ValueError(f"-k {expression!r}: empty expression")
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def either() -> Callable[[str], bool]:
        left = both()
        while peek() == "or":
            take()
            right, prior = both(), left
            left = lambda name, a=prior, b=right: a(name) or b(name)  # noqa: E731
        return left

    def both() -> Callable[[str], bool]:
        left = negation()
        while peek() == "and":
            take()
            right, prior = negation(), left
            left = lambda name, a=prior, b=right: a(name) and b(name)  # noqa: E731
        return left

    def negation() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = negation()
            return lambda name: not inner(name)
        return atom()

    def atom() -> Callable[[str], bool]:
        token = peek()
        if token is None:
            raise ValueError(f"-k {expression!r}: the expression ends where a word or '(' was expected")
        take()
        if token == "(":
            inner = either()
            if peek() != ")":
                raise ValueError(f"-k {expression!r}: a '(' is not closed")
            take()
            return inner
        if token in (")", "and", "or", "not"):
            raise ValueError(f"-k {expression!r}: unexpected {token!r}")
        word = token.lower()
        return lambda name: word in name.lower()

    matcher = either()
    if peek() is not None:
        raise ValueError(f"-k {expression!r}: unexpected {peek()!r}")
    return matcher


def _matches(entry: Entry, pattern: str) -> bool:
    model = entry.name.split("/", 1)[-1]
    return any(name == pattern or fnmatch.fnmatchcase(name, pattern) for name in (entry.name, model))


def select_by_name(entries: list[Entry], names: list[str] | None = None, exclude: list[str] | None = None,
                   keyword: str | None = None, where: str = "the selection") -> list[Entry]:
    """``entries`` filtered by ``--entry`` names/globs, ``--exclude`` globs and ``-k``. A name or glob of
    ``--entry`` that matches nothing is a ValueError (a typo must not run an empty suite)."""
    chosen = entries
    if names:
        for pattern in names:
            if not any(_matches(e, pattern) for e in entries):
                close = difflib.get_close_matches(pattern, [e.name for e in entries], n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise ValueError(f"--entry {pattern!r} matches no entry of {where}{hint}")
        chosen = [e for e in chosen if any(_matches(e, p) for p in names)]
    if exclude:
        chosen = [e for e in chosen if not any(_matches(e, p) for p in exclude)]
    if keyword:
        matcher = keyword_matcher(keyword)
        chosen = [e for e in chosen if matcher(e.name)]
    return chosen


def add_selection(p: argparse.ArgumentParser, default_suite: str | None) -> None:
    p.add_argument("--suite", default=default_suite,
                   help=f"a tier ({', '.join(TIERS)}; cumulative), a source name, or 'all'")
    p.add_argument("--source", help="only entries of this source")
    p.add_argument("--tag", help="only entries with this tag")
    p.add_argument("--entry", nargs="+", metavar="NAME",
                   help="only these entries: names ('source/model' or 'model') or globs ('timm/resnet*')")
    p.add_argument("--exclude", action="append", metavar="GLOB", help="leave out entries matching (repeatable)")
    p.add_argument("-k", dest="keyword", metavar="EXPR",
                   help="only entries whose names match EXPR: substrings with and/or/not, as pytest's -k")
    p.add_argument("--corpus", action="append", metavar="PATH",
                   help="also load an external corpus directory (repeatable)")


def sources_needed(args: argparse.Namespace) -> tuple[bool, list[str] | None]:
    """(load built-in sources?, which ones): listing every source is slow, load only what is selected."""
    if args.source in SOURCES:
        return True, [args.source]
    if args.suite in SOURCES:
        return True, [args.suite]
    if args.corpus and args.suite not in (*TIERS, "all", None) and args.source is None:
        return False, None  # a suite named after an external corpus's source
    return True, None


def selected_entries(args: argparse.Namespace) -> tuple[Any, list]:
    """The catalog and the entries the selection options choose (``--suite`` ... ``-k``)."""
    corpus_paths("--corpus", args.corpus)
    builtin, sources = sources_needed(args)
    cat = catalog(args.corpus, builtin=builtin, sources=sources)
    for name, reason in cat.unavailable.items():
        print(f"source unavailable: {name}: {reason}", file=sys.stderr)
    try:
        entries = select(cat.entries, args.suite, args.source, args.tag)
    except KeyError as exc:  # an unknown suite or source
        raise UsageError(exc.args[0] if exc.args else str(exc)) from None
    where = f"suite {args.suite}" if args.suite else "the corpus"
    entries = select_by_name(entries, args.entry, getattr(args, "exclude", None), getattr(args, "keyword", None),
                             where)
    return cat, entries
