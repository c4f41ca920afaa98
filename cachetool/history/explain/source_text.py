"""The source text of user functions: the lines that changed between two versions, a function
found in a module's text, and a comparison that ignores comments and blank lines."""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from collections.abc import Mapping
from pathlib import Path

from cachetool.history.explain.answer import LineChange
from cachetool.history.explain.view import first_line
from cachetool.history.records.parts import FunctionRef

_MAX_LINES = 6


def line_changes(sources: Mapping[str, str], fa: FunctionRef, fb: FunctionRef) -> list[LineChange]:
    """The changed lines between two recorded versions of a function (`sources`: recorded texts
    by source hash); none when either text is not recorded."""
    old_text = sources.get(str(fa.source_hash))
    new_text = sources.get(str(fb.source_hash))
    if old_text is None or new_text is None:
        return []
    start_old = first_line(fa)
    start_new = first_line(fb)
    return diff_lines(old_text, new_text, start_old, start_new)


def diff_lines(old: str, new: str, start_old: int = 1, start_new: int = 1) -> list[LineChange]:
    """Changed lines between two versions of a function, numbered in the file (the newer one
    for changed and added lines)."""
    a, b = old.splitlines(), new.splitlines()
    out: list[LineChange] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            before = a[i1 + k].strip() if i1 + k < i2 else None
            after = b[j1 + k].strip() if j1 + k < j2 else None
            line = start_new + j1 + k if after is not None else start_old + i1 + k
            out.append(LineChange(line, before, after))
            if len(out) >= _MAX_LINES:
                return out
    return out


def strip_module(qualname: str, path: str) -> str | None:
    """`pkg.text_helpers.clean_text` in `.../text_helpers.py` -> `clean_text`."""
    stem = Path(path).stem
    marker = f"{stem}."
    idx = qualname.find(marker)
    if stem == "__init__":
        return qualname.rsplit(".", 1)[-1]
    return qualname[idx + len(marker) :] if idx >= 0 else None


def _find_def(tree: ast.AST, qualname: str) -> ast.AST | None:
    node: ast.AST = tree
    for part in qualname.split("."):
        found = None
        for child in getattr(node, "body", ()):
            if (
                isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and child.name == part
            ):
                found = child
        if found is None:
            return None
        node = found
    return node


def def_line(text: str, qualname: str) -> int | None:
    try:
        node = _find_def(ast.parse(text), qualname)
    except SyntaxError:
        return None
    if node is None:
        return None
    decorators = getattr(node, "decorator_list", [])
    return min([getattr(node, "lineno", 1), *(d.lineno for d in decorators)])


def function_source(text: str, qualname: str) -> str | None:
    """The source of the function `qualname` in a module's text, as `inspect.getsource` gives
    it (decorators included), or None when it is not there any more."""
    try:
        node = _find_def(ast.parse(text), qualname)
    except SyntaxError:
        return None
    if node is None or not hasattr(node, "end_lineno"):
        return None
    start = def_line(text, qualname) or 1
    lines = text.splitlines(keepends=True)
    return "".join(lines[start - 1 : getattr(node, "end_lineno", start)])


def tokens(source: str) -> list[tuple[int, str]] | str:
    """The tokens of a piece of source without comments, blank lines and indentation amounts: two
    versions with equal tokens are the same code."""
    import textwrap

    try:
        toks = tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline)
        return [
            (t.type, t.string)
            for t in toks
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return source.strip()
