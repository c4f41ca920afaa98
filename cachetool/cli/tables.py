"""How `Output.table` lays out a table: the plain lines Rich would draw (fast), or a Rich table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["plain_table_lines", "rich_table", "whole_fits"]


def plain_table_lines(
    columns: Sequence[tuple[str, str]],
    cells: Sequence[Sequence[str]],
    widths: dict[str, tuple[int, int]],
    width: int,
) -> list[str] | None:
    """The lines Rich draws for a table without box, edge or title (header first), or None
    where Rich would have to do more than pad: the table is wider than `width`, a cell holds a
    tab, or a cell with wide characters must be cut."""
    from rich.cells import cell_len

    n = len(columns)
    if any(len(row) != n for row in cells):
        return None
    col_widths: list[int] = []
    for i, (header, _) in enumerate(columns):
        w = len(header) if header.isascii() else cell_len(header)
        for row in cells:
            c = row[i]
            lc = len(c) if c.isascii() else cell_len(c)
            if lc > w:
                w = lc
        lo, hi = widths.get(header, (None, None))
        if lo is not None:
            w = max(w, lo)
        if hi is not None:
            w = min(w, hi)
        col_widths.append(max(w, 0))
    if sum(col_widths) + 2 * (n - 1) > width:
        return None
    lines: list[str] = []
    right = [justify == "right" for _, justify in columns]
    for row in [[h for h, _ in columns], *cells]:
        out: list[str] = []
        for c, w, r in zip(row, col_widths, right, strict=True):
            if "\t" in c:
                return None
            lc = len(c) if c.isascii() else cell_len(c)
            if lc > w:
                if not c.isascii() or w < 1:
                    return None
                c, lc = c[: w - 1] + "…", w
            out.append(" " * (w - lc) + c if r else c + " " * (w - lc))
        lines.append("  ".join(out))
    return lines


def rich_table(
    title: str | None,
    caption: str | None,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[str]],
    widths: dict[str, tuple[int, int]],
) -> Any:
    """A borderless Rich table; a column with `widths` is cut with an ellipsis, others fold."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=title,
        caption=caption,
        show_edge=False,
        pad_edge=False,
        box=None,
        header_style="bold",
        caption_justify="left",
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
