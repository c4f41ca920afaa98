"""The Typer options every command shares, written once, and the error boundary of a Typer
command (the output sink and the messages are `cachetool.cli.output`, which imports no Typer)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from cachetool.cli.output import OutputFormat, report_exception

_FORMAT_MEANING = {
    "human": "tables and sentences",
    "json": "one document with raw values (docs/json.md)",
    "dot": "a Graphviz graph",
    "mermaid": "a Mermaid graph",
    "github": "GitHub Actions annotations",
}


def format_option(*extra: str, quiet: str = "one id a line") -> Any:
    """The one `--format` option: human, json and quiet, plus this command's `extra` formats.

    `quiet` says what the command prints in quiet mode. A value outside the command's own list is
    a usage error naming the accepted ones.
    """
    choices = ("human", "json", "quiet", *extra)

    def parse(value: str | OutputFormat) -> OutputFormat:
        text = value.value if isinstance(value, OutputFormat) else str(value)
        if text not in choices:
            raise typer.BadParameter(f"'{text}' is not one of {', '.join(choices)}")
        return OutputFormat(text)

    def complete(incomplete: str) -> list[str]:
        return [c for c in choices if c.startswith(incomplete)]

    meaning = {**_FORMAT_MEANING, "quiet": quiet}
    return typer.Option(
        "--format",
        parser=parse,
        metavar="|".join(choices),
        autocompletion=complete,
        help="; ".join(f"{c}: {meaning[c]}" for c in choices) + ".",
    )


def _cache_dir(value: str) -> Path:
    """`--cache-dir ''` is a mistake (an unset variable in a script), not the current folder."""
    if not value.strip():
        raise typer.BadParameter("is empty (an unset variable?); give a folder, or leave the option out")
    return Path(value)


AllRootsOption = Annotated[
    bool,
    typer.Option(
        "--all-roots",
        help="Also read the ledgers of every other cache root this user traced (each step says "
        "its root). By default only this cache's records count, plus the roots its inputs come from.",
    ),
]
CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        parser=_cache_dir,
        metavar="DIR",
        help="The datasets cache root. Default: HF_DATASETS_CACHE, else HF_HOME/datasets, "
        "else XDG_CACHE_HOME/huggingface/datasets, else ~/.cache/huggingface/datasets.",
        show_default=False,
    ),
]
FormatOption = Annotated[OutputFormat, format_option()]
JsonOption = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
QuietOption = Annotated[bool, typer.Option("-q", "--quiet", help="Same as --format quiet.")]
NoTruncateOption = Annotated[
    bool,
    typer.Option("--no-truncate", help="Show fingerprints, names and paths whole, however wide the table."),
]


def confirm(question: str) -> bool:
    """Ask a yes/no question on the terminal (default no). Ctrl-C while it waits is a
    KeyboardInterrupt, as anywhere else (exit 130): Typer would turn it into "Aborted!" and 1.
    Typer's own prompt: Typer bundles its Click, and a separate `click` may not be installed."""
    try:
        return typer.confirm(question, default=False)
    except typer.Abort as e:
        # Typer raises Abort `from None` for Ctrl-C and for end of input alike; what it caught
        # stays in __context__.
        if isinstance(e.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """`func` behind the process boundary (`report_exception`), ending with `typer.Exit`."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (Exception, KeyboardInterrupt) as e:  # what it does not handle goes on
            code = report_exception(e)
            if code is None:
                raise
            raise typer.Exit(code) from None

    return wrapper  # type: ignore[return-value]
