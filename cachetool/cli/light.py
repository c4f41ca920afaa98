"""Plain `ls`, `show FP`, `lineage FP`, `explain FP` and `--version`, answered without building the
Typer app (no Typer, Click or pydantic).

Typer reads every option value through pydantic (~45 ms, whatever the option's type) and builds
every command (~15 ms): through it, a warm `ls --json` of 20,000 files takes 2.6 times a Python
scandir walk instead of 1.7 (the goal is 2). The grammar here is read from the declarations the
Typer commands are made from (`cachetool.cli.common.command`); a command line it does not
read entirely (help, an unknown or abbreviated option, a value Typer would refuse, a repeated
option, `--`, a TAB, `CACHETOOL_DEBUG`) is left to the Typer app. What is answered here is
answered by the functions the Typer commands call, with the same values.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cachetool.cli.common import COMMANDS, REQUIRED, Param, invoke, params_of
from cachetool.cli.output import OutputFormat, debug_enabled


def _kind(p: Param) -> str:
    """How the light path reads option `p`: flag; text; many (text, repeatable); count (digits);
    path (a Path, unchecked); `human|json|...` (one of these formats); typer (left to the Typer app)."""
    if any(key in p.extra for key in ("envvar", "nargs", "count")) or any("/" in f for f in p.flags):
        return "typer"
    if p.type is bool:
        return "flag" if p.default is False else "typer"
    if p.type in (str, str | None):
        return "text"
    if p.type == list[str] | None:
        return "many"
    if p.type in (int, int | None) and p.extra.get("min") == 0 and "max" not in p.extra:
        return "count"
    if p.type == Path | None and "parser" in p.extra:  # no PATH checks
        return "path"
    if p.type is OutputFormat:
        return str(p.extra["metavar"])
    return "typer"


def parse(params: dict[str, Param], args: Sequence[str]) -> dict[str, Any] | None:
    """Every parameter's value (its default where `args` do not give it), or None when the light
    path does not read the command line entirely."""
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
        elif kind == "path":
            values[dest] = Path(value)
        elif kind == "text":
            values[dest] = value
        elif kind != "count" and value in kind.split("|"):
            values[dest] = OutputFormat(value)
        else:
            return None
    required = sum(params[name].default is REQUIRED for name, _ in arguments)
    if not required <= len(positional) <= len(arguments):
        return None
    for (name, path), text in zip(arguments, positional, strict=False):
        if path and not _readable_path(text):
            return None
        values[name] = Path(text) if path else text
    return values


def _readable_path(text: str) -> bool:
    """Typer's PATH arguments refuse a path that exists but cannot be read (a usage error)."""
    try:
        os.stat(text)
    except (OSError, ValueError):
        return True
    return os.access(text, os.R_OK)


#: The commands read here.
COMMANDS = {name: COMMANDS[name] for name in ("ls", "show", "lineage", "explain")}


def _version() -> None:
    from cachetool import __version__

    sys.stdout.write(f"cachetool {__version__}\n")
    sys.stdout.flush()


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of the command line `argv` answered here, or None: the Typer app answers it."""
    from cachetool.cli import completing

    # At a TAB the app completes; with CACHETOOL_DEBUG the traceback asked for is the app's.
    if completing() or debug_enabled() or not argv:
        return None
    func: Any = _version
    values: dict[str, Any] | None = {} if list(argv) in (["--version"], ["-V"]) else None
    if values is None and argv[0] in COMMANDS:
        module, name = COMMANDS[argv[0]]
        func = getattr(importlib.import_module(f"cachetool.cli.{module}"), name)
        values = parse(params_of(func), argv[1:])
    if values is None:
        return None
    return invoke(func, values)
