"""What every command shares: its arguments and options as data (`Param`, declared with `command`
or on the fields of its options dataclass), the options every command spells the same way, and the
error boundary (`invoke`). `app` builds the Typer commands from them, `docs` the command
reference; this module imports Typer only where a value is refused.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from cachetool.cli.output import Output, OutputFormat, report_exception

#: Each command by name: (module under cachetool.cli, the function its `command` declares, the
#: guide in docs/ that explains it)
COMMANDS = {
    "ls": ("ls", "ls_command", "listing.md"),
    "show": ("show", "run_show", "listing.md"),
    "dirs": ("dirs", "dirs_command", "listing.md"),
    "demo": ("demo", "demo_command", "listing.md"),
    "verify": ("verify", "verify_command", "verify.md"),
    "check-determinism": ("check_determinism", "check_determinism_command", "check-determinism.md"),
    "run": ("run", "run_command", "lineage.md"),
    "lineage": ("lineage", "run_lineage", "lineage.md"),
    "gc": ("gc", "gc_command", "gc.md"),
    "pin": ("pin", "pin_command", "gc.md"),
    "unpin": ("pin", "unpin_command", "gc.md"),
    "explain": ("explain", "run_explain", "explain.md"),
    "stats": ("stats", "stats_command", "explain.md"),
    "report": ("report", "report_command", "report.md"),
    "merge": ("merge", "merge_command", "fleet.md"),
    "remote": ("remote", "remote_command", "remote.md"),
}


F = TypeVar("F", bound=Callable[..., Any])
#: The default of an argument the command line must give.
REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One argument (no `flags`) or option of a command: its `typer.Option` or `typer.Argument`
    (`extra`: their other keywords), its Python type and default."""

    flags: tuple[str, ...]
    help: str
    type: Any = bool
    default: Any = False
    extra: dict[str, Any] = field(default_factory=dict)


def opt(*flags: str, help: str, type: Any = bool, default: Any = None, **extra: Any) -> Param:
    """An option; a flag (off unless `default=True`) unless `type` says otherwise."""
    return Param(flags, help, type, False if type is bool and default is None else default, extra)


def arg(help: str, type: Any = str, default: Any = None, **extra: Any) -> Param:
    """An argument (`default=REQUIRED`: the command line must give it)."""
    return Param((), help, type, default, extra)


def command(
    context_settings: dict[str, Any] | None = None, options: str = "", order: str = "", /, **params: Param
) -> Callable[[F], F]:
    """Declares the function's command: its parameters by keyword (in `order` when given: names
    of `params` and of the fields of the dataclass `options` names, `cachetool.errors.option`)
    and its help (the docstring). The function is called with their values (`--format`, `--json`,
    `-q` and `--no-truncate` made one `out: Output` by `invoke`) and returns its exit code (None:
    0). The dataclass is imported only when the parameters are read: `cachetool --help` lists the
    commands without it."""

    def declare(func: F) -> F:
        func.cli = (params, context_settings, options, order)  # type: ignore[attr-defined]
        return func

    return declare


def params_of(func: Callable[..., Any]) -> dict[str, Param]:
    """The parameters `command` declared for `func`."""
    params, settings, options, order = func.cli  # type: ignore[attr-defined]
    if options:
        module, _, name = options.rpartition(".")
        declared = {**_fields(getattr(importlib.import_module(module), name)), **params}
        params = {n: declared[n] for n in order.split()}
        func.cli = (params, settings, "", "")  # type: ignore[attr-defined]
    return params


def _fields(cls: type) -> dict[str, Param]:
    """The parameters the fields of `cls` declare (those with a help)."""
    hints = get_type_hints(cls)
    out = {}
    for f in fields(cls):
        m = f.metadata
        if "help" not in m:
            continue
        keyword = m["keyword"] or f.name
        # a value read from a string (`parse`) is text; a sequence, a repeatable option
        many = f.default == ()
        kind = m["type"] or (str | None if m["parse"] else list[str] | None if many else hints[f.name])
        default = REQUIRED if f.default is MISSING else None if many else m["cli_default"] or f.default
        flags = () if m["argument"] else m["flags"] or ("--" + keyword.replace("_", "-"),)
        out[keyword] = Param(flags, m["help"], kind, default, m["cli"])
    return out


def invoke(func: Callable[..., Any], values: dict[str, Any]) -> int:
    """`func`'s exit code once called with a command line's `values` (`fmt`, `--json`, `-q` and
    `--no-truncate` made the one sink `out`), behind the process boundary (`report_exception`)."""
    given = values
    if "fmt" in values:
        values = dict(values)
        fmt, as_json, quiet = values.pop("fmt"), values.pop("as_json"), values.pop("quiet")
        fmt = OutputFormat.json if as_json else OutputFormat.quiet if quiet else fmt
        values["out"] = Output(fmt, no_truncate=values.pop("no_truncate", False))
    try:
        return int(func(**values) or 0)
    except (Exception, KeyboardInterrupt) as e:  # what it does not handle goes on
        name = getattr(func, "__name__", None)
        command = next((c for c, (_, f, _) in COMMANDS.items() if f == name), None)
        code = report_exception(e, command, typed_words(command, func, given) if command else None)
        if code is None:
            raise
        return code


def typed_words(command: str, func: Callable[..., Any], values: dict[str, Any]) -> list[str]:
    """`command` as its user could type it again from the `values` of its parameters: its name,
    its arguments, then the options whose value is not their default; `--cache-dir` left out (a
    hint adds another)."""
    words, options = [command], []
    for name, p in params_of(func).items():
        value = values.get(name)
        if name == "cache_dir" or value is None or _texts(value) == _texts(p.default):
            continue
        if not p.flags:
            words += _texts(value)
        elif isinstance(value, bool):  # an on/off pair is written `--x/--no-x`
            on, _, off = p.flags[0].partition("/")
            options += [on] if value else [off] if off else []
        else:
            options += [w for t in _texts(value) for w in (p.flags[0], t)]
    return words + options


def _texts(value: Any) -> list[str]:
    values = value if isinstance(value, list | tuple) else [value]
    return [
        str(v.value if isinstance(v, Enum) else os.fsdecode(v) if isinstance(v, Path) else v) for v in values
    ]


_FORMAT_MEANING = {
    "human": "tables and sentences",
    "json": "one document with raw values (docs/json.md)",
    "dot": "a Graphviz graph",
    "mermaid": "a Mermaid graph",
    "github": "GitHub Actions annotations",
}


def output(*extra: str, quiet: str = "one id a line") -> dict[str, Param]:
    """`--format` (human, json, quiet and this command's `extra` formats; `quiet` says what quiet
    mode prints), `--json` and `-q`, which `invoke` makes one sink. A format outside the
    command's own list is a usage error naming the accepted ones."""
    choices = ("human", "json", "quiet", *extra)

    def parse(value: str | OutputFormat) -> OutputFormat:
        text = value.value if isinstance(value, OutputFormat) else str(value)
        if text not in choices:
            import typer

            raise typer.BadParameter(f"'{text}' is not one of {', '.join(choices)}")
        return OutputFormat(text)

    def complete(incomplete: str) -> list[str]:  # Typer passes what its annotation names
        return [c for c in choices if c.startswith(incomplete)]

    meaning = {**_FORMAT_MEANING, "quiet": quiet}
    fmt = opt(
        "--format",
        type=OutputFormat,
        default=OutputFormat.human,
        parser=parse,
        metavar="|".join(choices),
        autocompletion=complete,
        help="; ".join(f"{c}: {meaning[c]}" for c in choices) + ".",
    )
    json, quiet_ = (
        opt("--json", help="Same as --format json."),
        opt("-q", "--quiet", help="Same as --format quiet."),
    )
    return {"fmt": fmt, "as_json": json, "quiet": quiet_}


def _cache_dir(value: str) -> Path:
    """`--cache-dir ''` is a mistake (an unset variable in a script), not the current folder."""
    if not value.strip():
        import typer

        raise typer.BadParameter("is empty (an unset variable?); give a folder, or leave the option out")
    return Path(value)


ALL_ROOTS = opt(
    "--all-roots",
    help="Also read the ledgers of every other cache root this user traced (each step says "
    "its root). By default only this cache's records count, plus the roots its inputs come from.",
)
CACHE_DIR = opt(
    "--cache-dir",
    type=Path | None,
    parser=_cache_dir,
    metavar="DIR",
    help="The datasets cache root. Default: HF_DATASETS_CACHE, else HF_HOME/datasets, "
    "else XDG_CACHE_HOME/huggingface/datasets, else ~/.cache/huggingface/datasets.",
    show_default=False,
)
SHARD = opt(
    "--shard",
    type=str | None,
    metavar="I/N",
    help="Only shard I of N (from 0): an even, stable share of the entries by fingerprint hex "
    "prefix, for N jobs on one or many hosts; join their --json with `cachetool merge`.",
)
NO_TRUNCATE = opt("--no-truncate", help="Show fingerprints, names and paths whole, however wide the table.")
OUTPUT = output()


def is_remote(value: str | os.PathLike[str] | None) -> bool:
    """Whether a command's first argument names a remote (`s3://bucket/prefix`), not a cache."""
    if value is None or ":/" not in os.fspath(value)[:6]:  # a Path keeps one / of `s3://`
        return False
    from cachetool.remote.client import is_remote_url

    return is_remote_url(value)


def confirm(question: str) -> bool:
    """Ask a yes/no question on the terminal (default no). Ctrl-C while it waits is a
    KeyboardInterrupt, as anywhere else (exit 130): Typer would turn it into "Aborted!" and 1.
    Typer's own prompt: Typer bundles its Click, and a separate `click` may not be installed."""
    import typer

    try:
        return typer.confirm(question, default=False)
    except typer.Abort as e:
        # Typer raises Abort `from None` for Ctrl-C and for end of input alike; what it caught
        # stays in __context__.
        if isinstance(e.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise
