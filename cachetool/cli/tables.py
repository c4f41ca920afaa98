"""How `Output.table` lays out a table: the plain lines Rich would draw (fast), or a Rich table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["plain_column_lines", "rich_table", "whole_fits"]


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
