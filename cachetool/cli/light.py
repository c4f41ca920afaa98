"""Plain command lines answered without building the Typer app (no Typer, Click or pydantic):
`ls`, `show FP`, `lineage FP`, `explain FP` with their usual options, and `--version`.

Building the Typer app costs more than a warm `ls` of thousands of files: Typer, Click, Rich
and, through Typer's option conversion, pydantic. The commands people run most, in their plain
forms, are read here instead, by a strict grammar: every option of the command is known by its
exact name (`--limit 5` or `--limit=5`), each takes a value of the form Typer would accept
without a word (a value starting with `-` is not one), and anything else at all (help, an unknown
or abbreviated option, a value Typer would refuse or convert, a repeated option, `--`, shell
completion, `CACHETOOL_DEBUG`) returns None, and the Typer app answers the command line as it
always has. What is answered here is answered by the same functions as the Typer commands call,
so the bytes and the exit code are the same (tests/test_light.py runs both).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Grammar:
    """A command's options as Typer reads them: flags, options with one value each (`repeat`:
    the ones that may be given many times, collected in a list), and at most `arguments`
    positional arguments, of which `required` must be given. tests/test_light.py compares each
    with the Typer command's options (names, values, repeats, formats, bounds, defaults)."""

    flags: dict[str, str]
    values: dict[str, str]
    repeat: frozenset[str] = frozenset()
    arguments: int = 0
    required: int = 0
    formats: tuple[str, ...] = ("human", "json", "quiet")
    counts: frozenset[str] = field(default_factory=frozenset)  # `--limit`-like: digits only
    paths: bool = False  # the arguments are Typer PATHs: an unreadable one is its usage error
    defaults: dict[str, str] = field(default_factory=dict)  # of valued options given no value


def parse(grammar: Grammar, args: Sequence[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The options (by destination) and the positional arguments of `args`, or None when the
    grammar does not cover the command line entirely."""
    options: dict[str, Any] = {dest: [] for dest in grammar.repeat}
    positional: list[str] = []
    rest = list(args)
    while rest:
        token = rest.pop(0)
        if token in grammar.flags:
            options[grammar.flags[token]] = True
            continue
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in grammar.values:
            if not eq:
                if not rest:
                    return None
                value = rest.pop(0)
            dest = grammar.values[name]
            if not value.strip() or value.startswith("-"):
                return None
            if dest in grammar.counts and not (value.isascii() and value.isdigit()):
                return None
            if dest == "fmt" and value not in grammar.formats:
                return None
            if dest in grammar.repeat:
                options[dest].append(value)
            elif dest in options:
                return None  # Typer keeps the last; rare enough to leave to it
            else:
                options[dest] = value
            continue
        if token.startswith("-") or not token:
            return None  # an option we do not know, `--`, `-` or an empty argument
        positional.append(token)
    if not grammar.required <= len(positional) <= grammar.arguments:
        return None
    if grammar.paths and not all(map(_readable_path, positional)):
        return None
    return options, positional


LS = Grammar(
    flags={"--json": "as_json", "-q": "quiet", "--quiet": "quiet", "--no-truncate": "no_truncate"},
    values={
        "--cache-dir": "cache_dir",
        "--filter": "filter",
        "-f": "filter",
        "--sort": "sort",
        "--limit": "limit",
        "--format": "fmt",
    },
    repeat=frozenset({"filter"}),
    arguments=1,
    counts=frozenset({"limit"}),
    paths=True,
)


def _readable_path(text: str) -> bool:
    """Typer's PATH arguments refuse a path that exists but cannot be read (a usage error)."""
    try:
        os.stat(text)
    except (OSError, ValueError):
        return True
    return os.access(text, os.R_OK)


def _format(options: dict[str, Any]) -> Any:
    from cachetool.cli.output import OutputFormat, choose_format

    fmt = OutputFormat(options.get("fmt", "human"))
    return choose_format(fmt, bool(options.get("as_json")), bool(options.get("quiet")))


def _ls(options: dict[str, Any], positional: list[str]) -> int | None:
    from cachetool.cli.ls import run_ls

    limit = options.get("limit")
    run_ls(
        Path(positional[0]) if positional else None,
        _cache_dir(options),
        options["filter"],
        options.get("sort"),
        None if limit is None else int(limit),
        _format(options),
        bool(options.get("no_truncate")),
    )
    return None


SHOW = Grammar(
    flags={"--json": "as_json", "-q": "quiet", "--quiet": "quiet", "--no-truncate": "no_truncate"},
    values={"--cache-dir": "cache_dir", "--format": "fmt"},
    arguments=1,
    required=1,
)


def _show(options: dict[str, Any], positional: list[str]) -> int | None:
    from cachetool.cli.show import run_show

    run_show(positional[0], _cache_dir(options), _format(options), bool(options.get("no_truncate")))
    return None


LINEAGE = Grammar(
    flags={
        "--descendants": "descendants",
        "-d": "descendants",
        "--all": "all",
        "-a": "all",
        "--internal": "internal",
        "--all-roots": "all_roots",
        "--json": "as_json",
        "-q": "quiet",
        "--quiet": "quiet",
    },
    values={"--cache-dir": "cache_dir", "--format": "fmt"},
    arguments=1,
    required=1,
    formats=("human", "json", "quiet", "dot", "mermaid"),
)


def _lineage(options: dict[str, Any], positional: list[str]) -> int | None:
    from cachetool.cli.lineage import run_lineage

    flags = {k: bool(options.get(k)) for k in ("descendants", "all", "internal", "all_roots")}
    run_lineage(positional[0], _cache_dir(options), _format(options), **flags)
    return None


EXPLAIN = Grammar(
    flags={
        "--last": "last",
        "--all-roots": "all_roots",
        "--json": "as_json",
        "-q": "quiet",
        "--quiet": "quiet",
    },
    values={"--cache-dir": "cache_dir", "--format": "fmt", "--history": "history"},
    arguments=1,
    counts=frozenset({"history"}),
    defaults={"history": "3"},
)


def _explain(options: dict[str, Any], positional: list[str]) -> int | None:
    from cachetool.cli.explain import run_explain

    return run_explain(
        positional[0] if positional else None,
        bool(options.get("last")),
        None,
        int(options.get("history", EXPLAIN.defaults["history"])),
        _cache_dir(options),
        _format(options),
        bool(options.get("all_roots")),
    )


def _version(options: dict[str, Any], positional: list[str]) -> int | None:
    from cachetool import __version__

    sys.stdout.write(f"cachetool {__version__}\n")
    sys.stdout.flush()
    return None


def _cache_dir(options: dict[str, Any]) -> Path | None:
    return Path(options["cache_dir"]) if "cache_dir" in options else None


#: Each command's grammar, and what answers it once read.
_COMMANDS: dict[str, tuple[Grammar, Callable[[dict[str, Any], list[str]], int | None]]] = {
    "ls": (LS, _ls),
    "show": (SHOW, _show),
    "lineage": (LINEAGE, _lineage),
    "explain": (EXPLAIN, _explain),
}


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of the command line `argv` answered here, or None: the Typer app answers it."""
    from cachetool.cli import completing

    if completing():  # the app completes
        return None
    from cachetool.cli.output import debug_enabled

    if debug_enabled():  # the traceback a user is asked for is the Typer app's
        return None
    if list(argv) in (["--version"], ["-V"]):
        command: Callable[[dict[str, Any], list[str]], int | None] = _version
        parsed: tuple[dict[str, Any], list[str]] | None = ({}, [])
    elif argv and argv[0] in _COMMANDS:
        grammar, command = _COMMANDS[argv[0]]
        parsed = parse(grammar, argv[1:])
    else:
        return None
    if parsed is None:
        return None
    from cachetool.cli.output import report_exception

    try:
        code = command(*parsed)
    except (Exception, KeyboardInterrupt) as e:  # the boundary of the Typer commands, the same
        code = report_exception(e)
        if code is None:
            raise
        return code
    return code or 0
