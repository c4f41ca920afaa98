"""Plain `ls`, `show FP`, `lineage FP`, `explain FP` and `--version`, answered without Typer,
Click or pydantic: Typer reads every option value through pydantic (~0.1 s of CPU, more than a
warm listing; docs/performance.md). The grammar is read from the declarations the Typer commands
are made from (`cachetool.cli.common.command`); a command line it does not read entirely (help,
an unknown, abbreviated or repeated option, a value Typer would refuse, `--`, a TAB,
`CACHETOOL_DEBUG`) is left to the Typer app.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cachetool.cli.common import COMMANDS, REQUIRED, Param, invoke, params_of
from cachetool.cli.output import OutputFormat, debug_enabled

#: The commands read here.
COMMANDS = {name: COMMANDS[name] for name in ("ls", "show", "lineage", "explain")}


def _kind(p: Param) -> str:
    """How option `p` is read here: flag; text; many (text, repeatable); count (digits); path (a
    Path, unchecked); `human|json|...` (one of these formats); typer (left to the Typer app)."""
    if any(key in p.extra for key in ("envvar", "nargs", "count")) or any("/" in f for f in p.flags):
        return "typer"
    kinds = {str: "text", str | None: "text", list[str] | None: "many"}
    if p.type is bool:
        return "flag" if p.default is False else "typer"
    if p.type in (int, int | None) and p.extra.get("min") == 0 and "max" not in p.extra:
        return "count"
    if p.type == Path | None and "parser" in p.extra:  # no PATH checks
        return "path"
    if p.type is OutputFormat:
        return str(p.extra["metavar"])
    return kinds.get(p.type, "typer")


def parse(params: dict[str, Param], args: Sequence[str]) -> dict[str, Any] | None:
    """Every parameter's value (its default where `args` do not give it), or None when the
    command line is not read entirely here."""
    values = {name: p.default for name, p in params.items()}
    options = {flag: (name, _kind(p)) for name, p in params.items() for flag in p.flags}
    arguments = [(name, p.type in (Path, Path | None)) for name, p in params.items() if not p.flags]
    given: set[str] = set()
    positional: list[str] = []
    rest = list(args)
    while rest:
        token = rest.pop(0)
        if token and not token.startswith("-"):
            positional.append(token)
            continue
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        dest, kind = options.get(name, ("", "typer"))
        if kind == "typer" or (kind == "flag" and eq):
            return None  # an option left to Typer or unknown, `--`, `-`, an empty argument
        if kind == "flag":
            values[dest] = True
            continue
        if not eq:
            if not rest:
                return None
            value = rest.pop(0)
        if not value.strip() or value.startswith("-") or (dest in given and kind != "many"):
            return None  # Typer keeps the last of a repeated option; rare enough to leave to it
        given.add(dest)
        if kind == "many":
            values[dest] = [*(values[dest] or []), value]
        elif kind == "count" and value.isascii() and value.isdigit():
            values[dest] = int(value)
        elif kind in ("path", "text"):
            values[dest] = Path(value) if kind == "path" else value
        elif kind != "count" and value in kind.split("|"):
            values[dest] = OutputFormat(value)
        else:
            return None
    required = sum(params[name].default is REQUIRED for name, _ in arguments)
    if not required <= len(positional) <= len(arguments):
        return None
    for (name, path), text in zip(arguments, positional, strict=False):
        if path and os.path.exists(text) and not os.access(text, os.R_OK):
            return None  # Typer's PATH arguments refuse a path that cannot be read
        values[name] = Path(text) if path else text
    return values


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of the command line `argv` answered here, or None: the Typer app answers it."""
    from cachetool.cli import completing

    # At a TAB the app completes; with CACHETOOL_DEBUG the traceback asked for is the app's.
    if completing() or debug_enabled() or not argv:
        return None
    if list(argv) in (["--version"], ["-V"]):
        from cachetool import __version__

        return invoke(functools.partial(print, f"cachetool {__version__}", flush=True), {})
    if argv[0] not in COMMANDS:
        return None
    module, name, _ = COMMANDS[argv[0]]
    func = getattr(importlib.import_module(f"cachetool.cli.{module}"), name)
    values = parse(params_of(func), argv[1:])
    return None if values is None else invoke(func, values)
