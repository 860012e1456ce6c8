"""Mutation operators: the small, plausible compiler bugs ``crucible mutate`` plants, one at a time.

Each operator looks at one AST node of a source file and proposes edits of the file's text: a byte
range and what replaces it. Operator tokens are replaced in place (``<`` becomes ``<=`` and
nothing else on the line moves); node-level mutations (swapped operands, dropped terms, shifted
loop bounds) replace the node's span with the mutated node, unparsed. Every edit is checked before
it is offered: the mutated file must parse to exactly the original tree with that one node
changed (an edit whose text would bind differently in its context is parenthesized, or dropped),
so the diff a survivor is reported with is the mutation that ran.

Operators (``OPERATORS``), each a family of bugs the fuzzer should catch:
  boundary   ``<`` / ``<=``, ``>`` / ``>=`` (off-by-one comparisons)
  negate     ``==`` / ``!=``, ``is`` / ``is not``, ``in`` / ``not in``, ``not x`` -> ``x``
  constant   an integer constant n -> n + 1 and n - 1
  loop_bound ``range(..., n)`` -> ``range(..., n + 1)`` and ``range(..., n - 1)``
  swap       operands of a non-commutative operator (``a - b`` -> ``b - a``, ``a < b`` -> ``b < a``)
  drop       a term of a sum or a factor of a product (``a + b`` -> ``a``), a clause of ``and``/``or``
  identity   reduction identities: the sign of ``inf`` (``math.inf``, ``float("inf")``, in emitted
             code too), ``iinfo``/``finfo`` ``min`` / ``max``
  dtype      a dtype attribute (``torch.float32`` -> ``torch.float64``, ``int64`` -> ``int32``, ...)

Mutant ids are digests of (file, byte range, replacement): the same sources give the same ids on
every machine and in every session.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

OPERATORS = ("boundary", "negate", "constant", "loop_bound", "swap", "drop", "identity", "dtype")

_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_NEGATE = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
           ast.In: ast.NotIn, ast.NotIn: ast.In}
_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                 ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
# operators whose operands do not commute
_SWAPPABLE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift, ast.MatMult)
# a term that can be left out: both sides of + and *, the left side of - and /
_DROP_RIGHT_ONLY = (ast.Sub, ast.Div, ast.FloorDiv)
_DROPPABLE = (ast.Add, ast.Mult, *_DROP_RIGHT_ONLY)
_DTYPE_SWAP = {"float32": "float64", "float64": "float32", "float16": "bfloat16", "bfloat16": "float16",
               "int64": "int32", "int32": "int64", "int8": "uint8", "uint8": "int8", "bool": "uint8",
               "half": "float", "float": "double", "double": "float", "long": "int", "int": "long"}
_DTYPE_MODULES = {"torch", "tl", "np", "numpy"}
_INF_MODULES = {"math", "torch", "np", "numpy"}


@dataclass(frozen=True)
class Mutant:
    """One planted bug: replace bytes ``start:end`` of ``file`` (relative to the package's parent
    directory, e.g. ``compiler/lowerings/reductions.py``) by ``replacement``."""

    id: str
    file: str
    line: int  # 1-based line of the edit
    end_line: int
    operator: str
    start: int  # byte offsets into the file
    end: int
    original: str
    replacement: str
    # the first line of the innermost lambda around the edit, None outside one: a lambda's line runs
    # when the lambda is made (a table of ``op: lambda x: ...`` at import), its body only when called
    lambda_line: int | None = None
    # the names the module- or class-level assignment around the edit binds (a table, a constant, a
    # dataclass field's default), () inside a function or lambda: such a line runs at import, so it
    # counts as reached only when a line that ran inside a function reads one of them
    data_names: tuple[str, ...] = ()

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement.encode() + source[self.end:]

    def diff(self, source: bytes) -> str:
        """The unified diff of the file, one line of context."""
        before = source.decode().splitlines(keepends=True)
        after = self.apply(source).decode().splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, f"a/{self.file}", f"b/{self.file}", n=1)).rstrip("\n")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _line_offsets(source: bytes) -> list[int]:
    offsets, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        offsets.append(total)
    return offsets


class _Site:
    """Byte spans of nodes in one file (``ast`` columns are UTF-8 byte offsets)."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.lines = _line_offsets(source)

    def start(self, node: ast.AST) -> int:
        return self.lines[node.lineno - 1] + node.col_offset

    def end(self, node: ast.AST) -> int:
        return self.lines[node.end_lineno - 1] + node.end_col_offset

    def text(self, start: int, end: int) -> str:
        return self.source[start:end].decode()

    def line_of(self, offset: int) -> int:
        low, high = 0, len(self.lines) - 1
        while low < high - 1:
            mid = (low + high) // 2
            if self.lines[mid] <= offset:
                low = mid
            else:
                high = mid
        return low + 1


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """Nodes never mutated: annotations, decorators, f-strings' parts (their spans are not their
    text before 3.12), ``__all__``."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # decorators are configuration (``lru_cache(maxsize=4096)``): a mutant there was
            # equivalent in every sample run
            for decorator in node.decorator_list:
                mark(decorator)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.returns)
        elif isinstance(node, ast.arg):
            mark(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            mark(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            mark(node)
    return skip


def _find_token(site: _Site, start: int, end: int, token: str) -> tuple[int, int] | None:
    """The byte span of the one occurrence of operator ``token`` between two operands; None when
    there is not exactly one (a comment in the gap that spells it too)."""
    gap = site.text(start, end)
    word = r"\b" if token[0].isalpha() else ""
    pattern = word + r"\s+".join(re.escape(w) for w in token.split()) + word + ("(?!=)" if token in "<>" else "")
    hits = list(re.finditer(pattern, gap))
    if len(hits) != 1:
        return None
    i, j = hits[0].span()
    return start + len(gap[:i].encode()), start + len(gap[:j].encode())


def _proposals(node: ast.AST, site: _Site) -> Iterator[tuple[str, int, int, str, ast.AST, ast.AST | None]]:
    """(operator, start, end, replacement, the node replaced, the node that replaces it; None when
    the check is by parsing only)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            left = node.left if i == 0 else node.comparators[i - 1]
            right = node.comparators[i]
            for family, table in (("boundary", _BOUNDARY), ("negate", _NEGATE)):
                if type(op) in table:
                    span = _find_token(site, site.end(left), site.start(right), _COMPARE_TEXT[type(op)])
                    if span:
                        new = copy.deepcopy(node)
                        new.ops[i] = table[type(op)]()
                        yield family, span[0], span[1], _COMPARE_TEXT[table[type(op)]], node, new
        if len(node.ops) == 1 and type(node.ops[0]) in _BOUNDARY:
            new = ast.Compare(left=node.comparators[0], ops=node.ops, comparators=[node.left])
            yield "swap", site.start(node), site.end(node), ast.unparse(new), node, new
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, _SWAPPABLE):
            new = ast.BinOp(left=node.right, op=node.op, right=node.left)
            yield "swap", site.start(node), site.end(node), ast.unparse(new), node, new
        if isinstance(node.op, _DROPPABLE):
            yield "drop", site.start(node), site.end(node), ast.unparse(node.left), node, node.left
            if not isinstance(node.op, _DROP_RIGHT_ONLY):
                yield "drop", site.start(node), site.end(node), ast.unparse(node.right), node, node.right
    elif isinstance(node, ast.BoolOp):
        for i in range(len(node.values)):
            rest = node.values[:i] + node.values[i + 1:]
            new = rest[0] if len(rest) == 1 else ast.BoolOp(op=node.op, values=rest)
            yield "drop", site.start(node), site.end(node), ast.unparse(new), node, new
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "negate", site.start(node), site.end(node), ast.unparse(node.operand), node, node.operand
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_inf(node.operand):
        yield "identity", site.start(node), site.end(node), ast.unparse(node.operand), node, node.operand
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for value in (node.value + 1, node.value - 1):
            new = ast.Constant(value) if value >= 0 else ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-value))
            yield "constant", site.start(node), site.end(node), repr(value), node, new
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "inf" in node.value:
        text = site.text(site.start(node), site.end(node))
        for old, new_text in (("'-inf'", "'inf'"), ('"-inf"', '"inf"'), ("'inf'", "'-inf'"), ('"inf"', '"-inf"')):
            if old in text:
                swapped = text.replace(old, new_text, 1)
                yield "identity", site.start(node), site.end(node), swapped, node, None
                break
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and node.args:
        stop = node.args[0] if len(node.args) == 1 else node.args[1]
        if not isinstance(stop, ast.Constant):  # a constant bound is the constant operator's
            for op in (ast.Add(), ast.Sub()):
                new = ast.BinOp(left=stop, op=op, right=ast.Constant(1))
                yield "loop_bound", site.start(stop), site.end(stop), ast.unparse(new), stop, new
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in _DTYPE_MODULES and node.attr in _DTYPE_SWAP:
            new = ast.Attribute(value=node.value, attr=_DTYPE_SWAP[node.attr], ctx=node.ctx)
            yield "dtype", site.start(node), site.end(node), ast.unparse(new), node, new
        elif _is_inf(node):
            new = ast.UnaryOp(op=ast.USub(), operand=node)
            yield "identity", site.start(node), site.end(node), ast.unparse(new), node, new
    elif isinstance(node, ast.Attribute) and node.attr in ("min", "max") and _is_type_info(node.value):
        new = ast.Attribute(value=node.value, attr="max" if node.attr == "min" else "min", ctx=node.ctx)
        yield "identity", site.start(node), site.end(node), ast.unparse(new), node, new


def _is_inf(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "inf" and isinstance(node.value, ast.Name)
            and node.value.id in _INF_MODULES)


def _is_type_info(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in ("iinfo", "finfo")


def _parents(tree: ast.AST) -> dict[int, tuple[ast.AST, str, int | None]]:
    """id(node) -> (parent, field, index in the field's list or None)."""
    parents = {}
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if isinstance(value, ast.AST):
                parents[id(value)] = (parent, name, None)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        parents[id(item)] = (parent, name, i)
    return parents


def _lambda_line(node: ast.AST, parents: dict) -> int | None:
    """The line of the innermost ``lambda`` ``node`` is in (itself included), or None."""
    while True:
        if isinstance(node, ast.Lambda):
            return node.lineno
        if id(node) not in parents:
            return None
        node = parents[id(node)][0]


def _data_names(node: ast.AST, parents: dict) -> tuple[str, ...]:
    """What the module- or class-level assignment around ``node`` binds (``Mutant.data_names``)."""
    assignment = None
    while id(node) in parents:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return ()
        if assignment is None and isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            assignment = node
        node = parents[id(node)][0]
    if assignment is None:
        return ()
    targets = assignment.targets if isinstance(assignment, ast.Assign) else [assignment.target]
    return tuple(sorted({n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}))


def names_read(source: bytes, lines: set[int]) -> tuple[set[str], set[str]]:
    """The names and attribute names code inside the functions and lambdas of ``source`` reads: all
    of them, and those read on ``lines``."""
    every: set[str] = set()
    on_lines: set[str] = set()
    for scope in ast.walk(ast.parse(source)):
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(scope):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name is not None:
                every.add(name)
                if node.lineno in lines:
                    on_lines.add(name)
    return every, on_lines


def _dump_with(statement: ast.AST, node: ast.AST, new: ast.AST, parents: dict) -> str:
    """``ast.dump`` of the top-level ``statement`` with ``node`` replaced by ``new`` (put back afterwards)."""
    parent, name, index = parents[id(node)]
    if index is None:
        setattr(parent, name, new)
    else:
        getattr(parent, name)[index] = new
    try:
        return ast.dump(statement)
    finally:
        if index is None:
            setattr(parent, name, node)
        else:
            getattr(parent, name)[index] = node


def _checked(expected: str | None, statement: ast.stmt, site: _Site, start: int, end: int,
             replacement: str) -> str | None:
    """The replacement text (parenthesized when it has to be) with which the top-level ``statement``
    parses to the ``expected`` dump (to anything but itself when None); None when no spelling does.
    A top-level statement starts a line and ends one, so parsing it alone is parsing the file: it
    keeps enumerating a package's mutants to seconds."""
    first = min([statement.lineno] + [d.lineno - 1 for d in getattr(statement, "decorator_list", [])])
    low, high = site.lines[first - 1], site.end(statement)
    for text in (replacement, f"({replacement})"):
        try:
            mutated = ast.parse(site.source[low:start] + text.encode() + site.source[end:high])
        except SyntaxError:
            continue
        if len(mutated.body) != 1:
            continue
        dump = ast.dump(mutated.body[0])
        if dump == expected if expected is not None else dump != ast.dump(statement):
            return text
    return None


def mutants_of(source: bytes, file: str, operators: tuple[str, ...] = OPERATORS,
               lines: set[int] | None = None) -> list[Mutant]:
    """Every mutant the operators propose for one file, checked, in file order; with ``lines``,
    only those whose edit touches one of these lines (the lines a campaign covers)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    site = _Site(source)
    skip = _skipped_nodes(tree)
    found: dict[str, Mutant] = {}
    for statement in tree.body:
        for node in ast.walk(statement):
            if id(node) in skip or not hasattr(node, "lineno") or node is statement:
                continue
            if lines is not None and not lines.intersection(range(node.lineno, node.end_lineno + 1)):
                continue
            for family, start, end, replacement, replaced, new in _proposals(node, site):
                if family not in operators or site.text(start, end) == replacement:
                    continue
                if lines is not None and not lines.intersection(range(site.line_of(start),
                                                                      site.line_of(max(start, end - 1)) + 1)):
                    continue
                expected = _dump_with(statement, replaced, new, parents) if new is not None else None
                text = _checked(expected, statement, site, start, end, replacement)
                if text is None:
                    continue
                digest = hashlib.sha1(f"{file}:{start}:{end}:{text}".encode()).hexdigest()[:12]
                found.setdefault(digest, Mutant(digest, file, site.line_of(start), site.line_of(max(start, end - 1)),
                                                family, start, end, site.text(start, end), text,
                                                _lambda_line(node, parents), _data_names(node, parents)))
    return sorted(found.values(), key=lambda m: (m.start, m.end, m.id))
