"""The human table of `cachetool ls`: entries grouped by dataset folder (or one flat table when
sorted), their cells made column by column, narrowed to the terminal, and the totals under
them. `cachetool.cli.ls` draws it only in human mode."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cli.output import Output

if TYPE_CHECKING:
    from cachetool.cache.model import CacheReport, Entry


def _short(path: Path, root: Path) -> str:
    try:
        return os.fsdecode(path.relative_to(root))
    except ValueError:
        return os.fsdecode(path)


_CONFIG_HASH = re.compile(r"-[0-9a-f]{16}$")
_LONG_HEX = re.compile(r"[0-9a-f]{12,}")


def entry_label(e: Entry, whole: bool = False, width: int = 16) -> str:
    """The fingerprint, else the file or folder name (full paths are in --json and `show`).
    A name longer than `width` shows each hash by its first 8 digits (as git abbreviates), or
    else as `…`, then loses its head; a hash is never shown cut anywhere else."""
    if e.fingerprint:
        return e.fingerprint
    name = os.fsdecode(e.path.name) + ("/" if e.path.is_dir() and not e.path.is_symlink() else "")
    if len(name) <= width or whole:
        return name
    short = _LONG_HEX.sub(lambda m: m.group(0)[:8] + "…", name)
    if len(short) <= width:
        return short
    short = _LONG_HEX.sub("…", name)
    return short if len(short) <= width else "…" + short[1 - width :]


def render_human(
    out: Output,
    report: CacheReport,
    entries: Sequence[Entry],
    grouped: bool = True,
    pinned: frozenset[str] = frozenset(),
) -> None:
    """Tables grouped by dataset folder (or one flat table when sorted), then the totals."""
    count = len(report.entries)
    texts = _Texts(report.scanned_at)
    out.line(f"Cache: {out.path(report.root, out.width - 7)}", style="bold")
    if not entries:
        out.line("No entries." if not count else "No entries match.")
    elif grouped:
        groups: dict[str, list[Entry]] = {}
        dirs: dict[str, Path | None] = {}
        for e in entries:
            name, where = e.dataset or "(cache root)", e.dataset_dir
            members = groups.get(name)
            if members is None:
                members = groups[name] = []
                dirs[name] = where  # the first member's folder
            members.append(e)
        for name, members in groups.items():
            where = dirs[name]
            out.line()
            out.line(name, style="bold cyan")
            if where is not None and _short(where, report.root) not in (name, "."):
                out.line(f"  {out.path(_short(where, report.root), out.width - 2)}", style="dim")
            _entry_table(out, report, members, with_dataset=False, pinned=pinned, texts=texts)
    else:
        _entry_table(out, report, entries, with_dataset=True, pinned=pinned, texts=texts)
    out.line()
    for text in totals_line(report, len(entries)).splitlines():
        out.line(text)


class _Texts:
    """The texts of ages, sizes and row counts, each formatted once: they repeat (the files of one
    run share their second, a pipeline's steps their row count). Ages count from `now`."""

    def __init__(self, now: float) -> None:
        from cachetool.formatting import human_size, short_age

        ago = functools.cache(lambda seconds: short_age(seconds) + " ago")
        self.age: Callable[[float | None], str] = lambda ts: "" if ts is None else ago(int(now - ts))
        self.size: Callable[[int], str] = functools.cache(human_size)
        self.rows: Callable[[int | None], str] = functools.cache(lambda n: "" if n is None else f"{n:,}")


def _table_columns(entries: Sequence[Entry], pinned: frozenset[str], texts: _Texts) -> dict[str, list[str]]:
    """Each column's cells, by column name, in the order of `entries`."""
    from cachetool.cache.query import is_pinned

    age = texts.age
    used: list[str] = []
    modified: list[str] = []
    for e in entries:
        mtime = e.modified
        modified.append(age(mtime))
        used.append(age(mtime if e.last_used is None else e.used))
    return {
        "dataset": [e.dataset or "" for e in entries],
        "kind": [e.kind_str for e in entries],
        "fingerprint": [entry_label(e, whole=True) for e in entries],
        "pin": ["yes" if is_pinned(e, pinned) else "" for e in entries] if pinned else [""] * len(entries),
        "files": [str(len(e.files)) for e in entries],
        "rows": [texts.rows(e.rows) for e in entries],
        "cols": [str(len(e.columns) or "") for e in entries],
        "size": [texts.size(e.size) for e in entries],
        "modified": modified,
        "used": used,
        "op": [e.operation or "" for e in entries],
        "parent": [e.parent or "" for e in entries],
    }


def _entry_table(
    out: Output,
    report: CacheReport,
    entries: Sequence[Entry],
    with_dataset: bool,
    pinned: frozenset[str] = frozenset(),
    texts: _Texts | None = None,
) -> None:
    """One row per entry. `op` and `parent` appear once the ledger knows any entry. On a narrow
    terminal the dataset shows without its config hash, parents by their first 8 digits, then
    `cols`, `files`, `modified`, `parent` and `op` give way, in that order, until the table fits
    (all stay in --json and `show`; --no-truncate keeps everything). A `pin` column marks pinned
    entries when there are any."""
    columns = _table_columns(entries, pinned, texts or _Texts(report.scanned_at))
    recorded = any(columns["parent"]) or any(columns["op"])
    names = ["kind", "fingerprint", "files", "rows", "cols", "size", "modified", "used"]
    if any(columns["pin"]):
        names.insert(2, "pin")
    if with_dataset:
        names.insert(0, "dataset")
    if recorded:
        names += ["op", "parent"]
    # A fingerprint is never cut (`new_fingerprint=` may be any string): its column is as wide as
    # the longest.
    longest_fp = max([16, *map(len, columns["fingerprint"])])
    widths = {"kind": (10, 18), "fingerprint": (16, longest_fp), "op": (2, 12)}

    if not out.no_truncate:
        _fit_columns(names, columns, widths, out.width, entries)
    justify = {
        n: ("right" if n in ("files", "rows", "cols", "size", "modified", "used") else "left") for n in names
    }
    out.column_table([(n, justify[n]) for n in names], [columns[n] for n in names], widths=widths)


def _fit_columns(
    names: list[str],
    columns: dict[str, list[str]],
    widths: dict[str, tuple[int, int]],
    room: int,
    entries: Sequence[Entry],
) -> None:
    """Narrow the table to `room` columns: shorten the names of entries without a fingerprint
    (locks, folders; `entry_label`), datasets and parents in `columns`, then drop columns from
    `names` in the order `_entry_table` documents."""

    def natural(n: str) -> int:
        """The width the table gives column `n`: its longest cell, within the column's bounds."""
        longest = max(len(n), *map(len, columns[n])) if columns[n] else len(n)
        if n not in widths:
            return longest
        low, high = widths[n]
        return max(low, min(longest, high))

    natural_width = {n: natural(n) for n in names}  # once: a listing may hold 100k entries

    def width_of(cols: list[str]) -> int:
        return sum(natural_width[n] for n in cols) + 2 * (len(cols) - 1)

    if width_of(names) > room:  # names get the room the other columns leave, at least 16
        width = max(16, room - width_of(names) + natural_width["fingerprint"])
        columns["fingerprint"] = [entry_label(e, width=width) for e in entries]
        natural_width["fingerprint"] = natural("fingerprint")
    steps: list[tuple[str, Callable[[str], str]]] = [
        ("dataset", lambda cell: _CONFIG_HASH.sub("", cell)),
        ("parent", lambda cell: cell[:8]),
    ]
    for column, shorten in steps:
        if column in names and width_of(names) > room:
            columns[column] = [shorten(cell) for cell in columns[column]]
            natural_width[column] = natural(column)
    for column in ("cols", "files", "modified", "parent", "op"):
        if width_of(names) <= room:
            break
        if column in names:
            names.remove(column)


def totals_line(report: CacheReport, shown: int) -> str:
    """The totals under a listing of `shown` entries."""
    from cachetool.formatting import human_size

    totals = report.totals()  # once: it sums every entry
    count = len(report.entries)
    files = sum(n for n, _ in totals.values())
    size = sum(b for _, b in totals.values())
    parts = [f"{k} {n} file{'s' if n != 1 else ''} {human_size(b)}" for k, (n, b) in totals.items()]
    head = f"{shown} of {count} entries; cache holds {files} files, {human_size(size)}"
    return head + ("\nby kind: " + "; ".join(parts) if parts else "")
