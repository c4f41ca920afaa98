"""What every command shares: option types, the output sink, and the error boundary.

Commands read the same way: parse options -> call the model -> map a domain error to a message ->
pure helpers (filter, sort, limit) -> one output object -> exit code.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from cachetool.cli.tables import plain_table_lines, rich_table, whole_fits
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import safe_text

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(str, Enum):
    """Every output format of every command; each command accepts human, json, quiet and its extras."""

    human = "human"
    json = "json"
    quiet = "quiet"
    dot = "dot"
    mermaid = "mermaid"
    github = "github"


#: The schema version every `--json` document carries first (key names in docs/json.md).
JSON_VERSION = 1

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


def choose_format(fmt: OutputFormat, as_json: bool = False, quiet: bool = False) -> OutputFormat:
    if as_json:
        return OutputFormat.json
    if quiet:
        return OutputFormat.quiet
    return fmt


def debug_enabled() -> bool:
    return os.environ.get("CACHETOOL_DEBUG", "") not in ("", "0", "false", "no")


F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """The process boundary: a `CachetoolError` becomes one `Error: ...` line and its exit code.

    With `CACHETOOL_DEBUG=1` the traceback is shown instead. Ctrl-C exits 130 quietly.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CachetoolError as e:
            if debug_enabled():
                raise
            error(e.message)
            raise typer.Exit(int(e.exit_code)) from None
        except KeyboardInterrupt:
            if debug_enabled():
                raise
            error("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except BrokenPipeError:
            # `cachetool ls | head`: the reader went away; nothing more to say.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(int(ExitCode.OK)) from None
        except OSError as e:
            # The last line of defence: a file system error nothing above expected (a path longer
            # than PATH_MAX, EINVAL while a folder on the way is swapped, EIO) names the file and
            # the reason in one line, never a traceback.
            if debug_enabled():
                raise
            from cachetool.cache.dirs import os_reason

            where = f"{os.fsdecode(e.filename)}: " if e.filename else ""
            error(f"{where}{os_reason(e)}")
            raise typer.Exit(int(ExitCode.USAGE)) from None

    return wrapper  # type: ignore[return-value]


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _stderr_line(label: str, style: str, message: str) -> None:
    """Lines on stderr, escaped (paths may contain markup); a message of several lines (the
    candidates of an ambiguous prefix) keeps its line breaks. On a terminal, paths in a line wider
    than the window are shortened from the middle (names whole) so the line fits."""
    from rich.text import Text

    lines = [safe_text(line) for line in message.split("\n")]
    if sys.stderr.isatty() and not debug_enabled():
        from cachetool.formatting import fit_paths

        width = stderr_console().width
        lines = [fit_paths(line, width - len(label) - 1) for line in lines]
    stderr_console().print(Text.assemble((label, style), " ", "\n".join(lines)))


def error(message: str) -> None:
    _stderr_line("Error:", "bold red", message)


def warn(message: str) -> None:
    _stderr_line("Warning:", "yellow", message)


def hint(message: str) -> None:
    _stderr_line("Hint:", "dim", message)


class Output:
    """One sink, chosen once per command: human tables, one JSON document, or ids."""

    def __init__(self, fmt: OutputFormat, width: int | None = None, no_truncate: bool = False) -> None:
        self.format = fmt
        self._width = width
        self.no_truncate = no_truncate
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=False, width=self._width)
        return self._console

    @property
    def human(self) -> bool:
        return self.format == OutputFormat.human

    def table(
        self,
        title: str | None,
        columns: Sequence[tuple[str, str]],
        rows: Iterable[Sequence[Any]],
        caption: str | None = None,
        widths: dict[str, tuple[int, int]] | None = None,
        whole: Sequence[str] = (),
    ) -> None:
        """Columns are (header, justify). Every cell is escaped: file names can contain markup.
        Cells of the `whole` columns (names, paths) are never split: other columns give way.

        A table that fits the width is written directly, as Rich lays it out (columns two spaces
        apart, each as wide as its widest cell within `widths`, an ellipsis where a cell is cut):
        Rich takes ~0.4 ms per row, 10 s for a listing of 20,000 entries. Rich draws the rest."""
        rows = [[safe_text("" if c is None else str(c)) for c in row] for row in rows]
        headers = [h for h, _ in columns]
        widths = dict(widths or {})
        for header in whole:
            i = headers.index(header)
            longest = max((len(r[i]) for r in rows), default=len(header))
            widths[header] = (max(longest, len(header)), max(longest, len(header)))
        if title is None and caption is None:
            lines = plain_table_lines(columns, rows, {} if self.no_truncate else widths, self.console.width)
            if lines is not None:
                self._write_plain_table(lines)
                return
        table = rich_table(title, caption, columns, rows, {} if self.no_truncate else widths)
        if not whole or self.no_truncate or whole_fits(headers, rows, widths, whole, self.console.width):
            self.console.print(table)
            return
        # The names do not fit beside the other columns: one block per row instead, the names on
        # their own line, the rest as `header value` pairs below, so nothing is cut or dropped.
        if title:
            self.line(title, style="bold")
        others = [i for i, h in enumerate(headers) if h not in whole]
        for row in rows:
            for h in whole:
                self.line(row[headers.index(h)])
            pairs = [f"{headers[i]} {row[i]}".strip() for i in others if row[i]]
            self.line("  " + " · ".join(pairs), style="dim")

    def _write_plain_table(self, lines: list[str]) -> None:
        console = self.console
        if console.is_terminal:
            from rich.text import Text

            console.print(Text(lines[0], style="bold"), overflow="ignore", crop=False)
            lines = lines[1:]
        write = console.file.write
        for start in range(0, len(lines), 1000):
            write("\n".join(lines[start : start + 1000]) + "\n")
        console.file.flush()

    def path(self, path: str | os.PathLike[str], room: int | None = None) -> str:
        """A path for a human line: `~` for the home folder, shortened from the middle to fit
        `room` columns (default: the terminal's width) unless --no-truncate; names stay whole."""
        from cachetool.formatting import short_path

        if self.no_truncate:
            return short_path(path, None)
        return short_path(path, self.console.width if room is None else room)

    def line(self, text: str = "", style: str | None = None, *, wrap: bool = True) -> None:
        """One line of text; wider than the terminal, it is wrapped at spaces only (paths, hashes
        and commands in backticks never split), continuation lines indented. `wrap=False` for a
        line that is a command to paste: a wrapped one would run as several commands."""
        from rich.text import Text

        from cachetool.formatting import wrap_line

        whole = self.no_truncate or not wrap
        pieces = [safe_text(text)] if whole else wrap_line(safe_text(text), self.console.width)
        for piece in pieces:
            self.console.print(Text(piece, style=style or ""), soft_wrap=True)

    def json(self, doc: dict[str, Any]) -> None:
        """One document in the envelope every command shares: `version` first, then the fields."""
        # Indented for a person at a terminal; compact (and several times faster) in a pipe.
        indent = 2 if sys.stdout.isatty() else None
        text = json.dumps(envelope(doc), indent=indent, ensure_ascii=True, default=_json_default)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def json_pieces(self, doc: Callable[[], Any], pieces: Callable[[], Iterable[str]]) -> None:
        """The same document as `json(doc())`; in a pipe (compact) written from `pieces`, the
        document's text in order, so a large listing is never held whole as objects or text."""
        if sys.stdout.isatty():
            self.json(doc())
            return
        sys.stdout.flush()
        binary = getattr(sys.stdout, "buffer", None)
        for piece in pieces():
            if binary is not None:
                binary.write(piece.encode("ascii"))
            else:
                sys.stdout.write(piece)
        if binary is not None:
            binary.write(b"\n")
            binary.flush()
        else:
            sys.stdout.write("\n")
        sys.stdout.flush()

    def ids(self, ids: Iterable[str]) -> None:
        for i in ids:
            sys.stdout.write(safe_text(i) + "\n")
        sys.stdout.flush()


def envelope(doc: dict[str, Any]) -> dict[str, Any]:
    """`{"version": 1, ...fields}`: the schema version first, whatever the model called it."""
    fields = {k: v for k, v in doc.items() if k not in ("version", "v")}
    return {"version": JSON_VERSION, **fields}


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return os.fsdecode(obj)
    if isinstance(obj, Enum):
        return obj.value
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
