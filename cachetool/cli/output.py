"""The output sink every command writes through (human lines and tables, one JSON document, or
ids), the `Error:`/`Warning:`/`Hint:` lines on stderr, and the process boundary (`report_exception`).

Rich is imported only where it draws something (a terminal, a table plain lines cannot show, a
tab); elsewhere the sink writes the very bytes Rich would, at the width Rich would choose.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, TextIO

from cachetool.errors import CacheNotFound, CachetoolError, ExitCode
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


def debug_enabled() -> bool:
    return os.environ.get("CACHETOOL_DEBUG", "") not in ("", "0", "false", "no")


def report_exception(
    e: BaseException, command: str | None = None, words: Sequence[str] | None = None
) -> int | None:
    """The process boundary of `command` (`words`: as typed, without `--cache-dir`; see
    `hint_root_elsewhere`): a `CachetoolError` becomes one `Error: ...` line on
    stderr and the exit code to end with is returned; None lets the exception go on
    (`CACHETOOL_DEBUG=1`, or one not handled here). Ctrl-C exits 130; a reader that went away
    (`cachetool ls | head`) ends it with 0; an unexpected file system error (ENAMETOOLONG,
    EINVAL, EIO) names the file and why."""
    if isinstance(e, BrokenPipeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    if not isinstance(e, CachetoolError | KeyboardInterrupt | OSError) or debug_enabled():
        return None
    if isinstance(e, CachetoolError):
        error(e.message)
        if isinstance(e, CacheNotFound) and e.default:
            hint_root_elsewhere(e.root, *(words or [command or "ls"]))
        return int(e.exit_code)
    if isinstance(e, KeyboardInterrupt):
        error("interrupted")
        return int(ExitCode.INTERRUPTED)
    from cachetool.cache.locations import os_reason

    where = f"{os.fsdecode(e.filename)}: " if e.filename else ""
    error(f"{where}{os_reason(e)}")
    return int(ExitCode.USAGE)


def plain_width(stream: TextIO) -> int | None:
    """The width of lines written to `stream` as they are, where Rich would neither style nor crop
    them (not a terminal by `TTY_COMPATIBLE`, `FORCE_COLOR`, then `isatty()`): `COLUMNS`, else the
    first terminal's of stdin, stdout, stderr, else 80. None where Rich must write."""
    compatible, force = os.environ.get("TTY_COMPATIBLE", ""), os.environ.get("FORCE_COLOR")
    try:
        terminal = stream.isatty()
    except ValueError:  # closed
        terminal = False
    if compatible in ("0", "1"):
        terminal = compatible == "1"
    elif force is not None:
        terminal = force != ""
    if terminal or sys.platform == "win32":
        return None
    columns = os.environ.get("COLUMNS")
    if columns is not None:
        return int(columns) if columns.isascii() and columns.isdigit() else None
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns or 80
        except (AttributeError, ValueError, OSError):
            continue
    return 80


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _stderr_line(label: str, style: str, message: str, fit: bool = True) -> None:
    """Lines on stderr, escaped, line breaks kept. On a terminal, paths in a line wider than the
    window are shortened from the middle (names whole), unless not `fit`; never wrapped."""
    lines = [safe_text(line) for line in message.split("\n")]
    text = "\n".join(lines)
    if "\t" not in text and not sys.stderr.isatty() and plain_width(sys.stderr) is not None:
        sys.stdout.flush()  # what came before on stdout stays before, as Rich flushes each line
        sys.stderr.write(f"{label} {text}\n")
        sys.stderr.flush()
        return
    from rich.text import Text

    if fit and sys.stderr.isatty() and not debug_enabled():
        from cachetool.formatting import fit_paths

        width = stderr_console().width
        lines = [fit_paths(line, width - len(label) - 1) for line in lines]
    stderr_console().print(Text.assemble((label, style), " ", "\n".join(lines)))


def error(message: str) -> None:
    _stderr_line("Error:", "bold red", message)


def warn(*messages: str) -> None:
    for message in messages:
        _stderr_line("Warning:", "yellow", message)


def hint(*messages: str) -> None:
    """Hints on stderr; one that holds a command (in backticks) is printed whole, its paths not
    shortened, so the command pastes as printed."""
    for message in messages:
        _stderr_line("Hint:", "dim", message, fit="`" not in message)


#: The commands that only read the cache: a hint may give one again on another root as typed.
_READERS = frozenset({"ls", "show", "lineage", "explain", "stats"})


def hint_root_elsewhere(root: str | os.PathLike[str], *words: str) -> None:
    """Nothing is cached in the default root `root`: name the root the last traced run recorded
    steps in (a pipeline with `cache_dir=`), with the command the user typed (`words`, its name
    first) run on it; `ls` for a command that changes things (`gc -y` is not for a root one has
    not looked at)."""
    from cachetool.cache.roots import latest_root_elsewhere
    from cachetool.hints import shell_command

    other = latest_root_elsewhere(root)
    if other is not None:
        shown = shell_command(
            *(words if words[:1] and words[0] in _READERS else ["ls"]), "--cache-dir", other
        )
        hint(f"the last traced run recorded steps in {other}: `{shown}`")


class Output:
    """One sink, chosen once per command: human tables, one JSON document, or ids."""

    def __init__(self, fmt: OutputFormat, width: int | None = None, no_truncate: bool = False) -> None:
        self.format = fmt
        self._width = width
        self.no_truncate = no_truncate
        self._console: Console | None = None

    @functools.cached_property
    def _plain_width(self) -> int | None:
        return None if self._console is not None else plain_width(sys.stdout)

    @property
    def plain(self) -> bool:
        """Whether lines go to stdout as they are: Rich would neither style nor crop them."""
        return self._plain_width is not None

    @property
    def width(self) -> int:
        """The width of a line: the console's (`COLUMNS`, the terminal's, else 80)."""
        width = self._width if self._width is not None else self._plain_width
        return width if width is not None else self.console.width

    @property
    def room(self) -> int:
        """The width a table may take: the line's, or any with --no-truncate (nothing is cut)."""
        return sys.maxsize if self.no_truncate else self.width

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
        rows: Iterable[Sequence[Any]] = (),
        widths: dict[str, tuple[int, int]] | None = None,
        whole: Sequence[str] = (),
        cells: Sequence[Sequence[Any]] | None = None,
    ) -> None:
        """Columns are (header, justify); the cells come as `rows`, or column by column as
        `cells` (a long listing builds them so); every cell is escaped. Cells of the `whole`
        columns (names, paths) are never split: other columns give way. A table that fits is
        written directly, as Rich lays it out (Rich takes ~0.4 ms per row); Rich draws the rest."""
        if cells is None:
            cells = list(zip(*rows, strict=True)) or [() for _ in columns]
        cols = [_safe_column(col) for col in cells]
        headers = [h for h, _ in columns]
        widths = dict(widths or {})
        for header in whole:
            col = cols[headers.index(header)]
            longest = max([len(header), *map(len, col)])
            widths[header] = (longest, longest)
        if title is None or self.plain:
            lines = plain_column_lines(columns, cols, {} if self.no_truncate else widths, self.room)
            if lines is not None and title is not None:
                lines = _titled(title, lines)
            if lines is not None:
                self._write_plain_table(lines)
                return
        table_rows = list(zip(*cols, strict=True))
        table = rich_table(title, columns, table_rows, {} if self.no_truncate else widths)
        if not whole or self.no_truncate or whole_fits(headers, table_rows, widths, whole, self.width):
            room = max(self.width, self.console.measure(table).maximum) if self.no_truncate else None
            self.console.print(table, width=room)
            return
        # The names do not fit beside the other columns: one block per row instead, the names on
        # their own line, the rest as `header value` pairs below, so nothing is cut or dropped.
        if title:
            self.line(title, style="bold")
        others = [i for i, h in enumerate(headers) if h not in whole]
        for row in table_rows:
            for h in whole:
                self.line(row[headers.index(h)])
            pairs = [f"{headers[i]} {row[i]}".strip() for i in others if row[i]]
            self.line("  " + " · ".join(pairs), style="dim")

    def _write_plain_table(self, lines: list[str]) -> None:
        if not self.plain and self.console.is_terminal:
            from rich.text import Text

            self.console.print(Text(lines[0], style="bold"), overflow="ignore", crop=False)
            lines = lines[1:]
        file = sys.stdout if self.plain else self.console.file
        for start in range(0, len(lines), 1000):
            file.write("\n".join(lines[start : start + 1000]) + "\n")
        file.flush()

    def path(self, path: str | os.PathLike[str], room: int | None = None) -> str:
        """A path for a human line: `~` for home, shortened from the middle to fit `room` columns
        (default: the width) unless --no-truncate; names stay whole."""
        from cachetool.formatting import short_path

        if self.no_truncate:
            return short_path(path, None)
        return short_path(path, self.width if room is None else room)

    def line(self, text: str = "", style: str | None = None, *, wrap: bool = True) -> None:
        """One line of text, wrapped at spaces only (continuation lines indented) when wider than
        the terminal; `wrap=False` for a command to paste."""
        from cachetool.formatting import wrap_line

        whole = self.no_truncate or not wrap
        pieces = [safe_text(text)] if whole else wrap_line(safe_text(text), self.width)
        if self.plain and not any("\t" in piece for piece in pieces):  # Rich expands tabs
            sys.stdout.write("".join(piece + "\n" for piece in pieces))
            sys.stdout.flush()
            return
        from rich.text import Text

        for piece in pieces:
            self.console.print(Text(piece, style=style or ""), soft_wrap=True)

    def json(self, doc: dict[str, Any]) -> None:
        """One document in the envelope every command shares: `version` first, then the fields."""
        # Indented for a person at a terminal; compact (and several times faster) in a pipe.
        from cachetool.safejson import json_value  # paths, enums and typed values

        indent = 2 if sys.stdout.isatty() else None
        text = json.dumps(envelope(doc), indent=indent, ensure_ascii=True, default=json_value)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def json_pieces(self, pieces: Callable[[], Iterable[str]]) -> None:
        """The document whose compact text `pieces()` gives in order: in a pipe written as it
        comes, so a large listing is never held whole as objects or text; indented at a terminal."""
        if sys.stdout.isatty():
            self.json(json.loads("".join(pieces())))
            return
        for piece in pieces():
            sys.stdout.write(piece)
        sys.stdout.write("\n")
        sys.stdout.flush()

    def emit(self, doc: Callable[[], dict[str, Any]], ids: Iterable[str]) -> bool:
        """What every command writes for `--json` (the document `doc()`) and for `-q` (`ids`, one
        a line); False for the other formats, which the command draws itself."""
        if self.format == OutputFormat.json:
            self.json(doc())
        elif self.format == OutputFormat.quiet:
            self.ids(ids)
        else:
            return False
        return True

    def ids(self, ids: Iterable[str]) -> None:
        for i in ids:
            sys.stdout.write(safe_text(i) + "\n")
        sys.stdout.flush()


def _titled(title: str, lines: list[str]) -> list[str] | None:
    """A plain table's lines under its title centred as Rich draws it, or None where Rich would
    do more (a title wider than the table, markup or emoji codes)."""
    width = len(lines[0])
    text = title.rstrip()
    if not (lines[0].isascii() and text.isascii() and text.isprintable()) or len(text) > width:
        return None
    if "[" in text or ":" in text:
        return None
    left = (width - len(text)) // 2
    return [" " * left + text + " " * (width - left - len(text)), *lines]


def _safe_column(col: Sequence[Any]) -> Sequence[str]:
    """A column's cells as text safe for a terminal (None is empty); a column of plain strings
    with nothing to escape is taken as it is."""
    with contextlib.suppress(TypeError):  # not all text
        if "".join(col).isprintable():
            return col
    return [safe_text("" if c is None else str(c)) for c in col]


def envelope(doc: dict[str, Any]) -> dict[str, Any]:
    """`{"version": 1, ...fields}`: the schema version first, whatever the model called it."""
    fields = {k: v for k, v in doc.items() if k not in ("version", "v")}
    return {"version": JSON_VERSION, **fields}


def plain_column_lines(
    columns: Sequence[tuple[str, str]],
    col_cells: Sequence[Sequence[str]],
    widths: dict[str, tuple[int, int]],
    width: int,
) -> list[str] | None:
    """The lines Rich draws for a table without box, edge or title (header first) of cells given
    column by column, or None where Rich would have to do more than pad: the table is wider than
    `width`, a cell holds a tab, or a cell with wide characters must be cut.

    A column of ASCII text (the usual case) is measured with `len` and padded by one format string
    per line, so a listing of 100,000 rows costs little more than its text."""
    n = len(columns)
    col_widths: list[int] = []
    pieces: list[str] = []  # the format of a line, column by column
    padded_only: list[bool] = []  # an ASCII column no cell of which is cut: its format pads it
    for (header, justify), col in zip(columns, col_cells, strict=True):
        everything = header + "".join(col)
        if "\t" in everything:
            return None
        ascii_only = _narrow(everything)
        if ascii_only:
            longest = w = max(len(header), max(map(len, col), default=0))
        else:
            from rich.cells import cell_len

            longest = w = max(cell_len(header), max(map(cell_len, col), default=0))
        lo, hi = widths.get(header, (None, None))
        if lo is not None:
            w = max(w, lo)
        if hi is not None:
            w = min(w, hi)
        col_widths.append(max(w, 0))
        padded_only.append(ascii_only and longest <= w)
        pieces.append(f"{{:{'>' if justify == 'right' else '<'}{max(w, 0)}}}" if ascii_only else "{}")
    if sum(col_widths) + 2 * (n - 1) > width:
        return None
    header_cells: list[str] = []
    fitted: list[Sequence[str]] = []
    for (header, justify), col, w, as_is in zip(columns, col_cells, col_widths, padded_only, strict=True):
        if as_is:  # what `_fit_cells` would give
            header_cells.append(header)
            fitted.append(col)
            continue
        fitted_col = _fit_cells([header, *col], w, justify == "right")
        if fitted_col is None:
            return None
        header_cells.append(fitted_col[0])
        fitted.append(fitted_col[1:])
    line = "  ".join(pieces).format
    return [line(*header_cells), *(line(*row) for row in zip(*fitted, strict=True))]


def _narrow(text: str) -> bool:
    """Every character one cell wide as Rich measures it, so `len` is the width: ASCII, and the
    ellipsis of a cut name or an abbreviated hash (measuring the rest needs Rich's tables)."""
    return text.isascii() or text.replace("…", "").isascii()


def _fit_cells(col: list[str], w: int, right: bool) -> list[str] | None:
    """A column's cells (header first) cut to `w` cells with an ellipsis where longer; a column
    that is not ASCII is also padded here (its format pads nothing), None where a cell with wide
    characters would have to be cut."""
    if _narrow("".join(col)):
        if max(map(len, col)) <= w:
            return col
        if w < 1 or not all(c.isascii() for c in col if len(c) > w):
            return None
        return [c if len(c) <= w else c[: w - 1] + "…" for c in col]
    from rich.cells import cell_len

    out: list[str] = []
    for c in col:
        lc = len(c) if c.isascii() else cell_len(c)
        if lc > w:
            if not c.isascii() or w < 1:
                return None
            c, lc = c[: w - 1] + "…", w
        out.append(" " * (w - lc) + c if right else c + " " * (w - lc))
    return out


def rich_table(
    title: str | None,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[str]],
    widths: dict[str, tuple[int, int]],
) -> Any:
    """A borderless Rich table; a column with `widths` is cut with an ellipsis, others fold."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=title,
        show_edge=False,
        pad_edge=False,
        box=None,
        header_style="bold",
    )
    for header, justify in columns:
        fixed = header in widths
        lo, hi = widths.get(header, (None, None))
        table.add_column(
            header,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=justify == "right" or fixed,
            overflow="ellipsis" if fixed else "fold",
            min_width=lo,
            max_width=hi,
        )
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    return table


def whole_fits(
    headers: list[str],
    rows: Sequence[Sequence[str]],
    widths: dict[str, tuple[int, int]],
    whole: Sequence[str],
    width: int,
) -> bool:
    """Whether the `whole` columns fit `width` beside the others (each of those at most 12 wide)."""
    others = [i for i, h in enumerate(headers) if h not in whole]
    need = sum(widths[h][0] for h in whole) + 2 * (len(headers) - 1)
    need += sum(min(12, max([len(headers[i]), *(len(r[i]) for r in rows)])) for i in others)
    return need <= width
