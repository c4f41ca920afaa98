"""The human table of `cachetool ls`: entries grouped by dataset folder (or one flat table when
sorted), their cells made column by column (lean entries' from their tuples), narrowed to the
terminal, and the totals under them. `cachetool.cli.ls` draws it only in human mode."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cli.output import Output

if TYPE_CHECKING:
    from cachetool.cache.lean import LeanEntry, Listed
    from cachetool.cache.scan import CacheReport, Entry


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
    entries: Sequence[Listed],
    grouped: bool = True,
    pinned: frozenset[str] = frozenset(),
    count: int | None = None,
    totals: dict[str, tuple[int, int]] | None = None,
) -> None:
    """Tables grouped by dataset folder (or one flat table when sorted), then the totals.
    `entries` may hold lean entries (`cachetool.cache.lean`); the report's entries then leave
    them out, and `count` (how many entries the cache holds) and `totals` (`report.totals()` of
    every entry) stand for what the report would say."""
    if count is None:
        count = len(report.entries)
    texts = _Texts(report.scanned_at)
    out.line(f"Cache: {out.path(report.root, out.width - 7)}", style="bold")
    if not entries:
        out.line("No entries." if not count else "No entries match.")
    elif grouped:
        groups: dict[str, list[Listed]] = {}
        dirs: dict[str, Path | None] = {}
        for e in entries:
            if isinstance(e, tuple):
                ds = e[3]
                name, where = (ds.name, ds.path) if ds is not None else (None, None)
            else:
                name, where = e.dataset, e.dataset_dir
            name = name or "(cache root)"
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
    for text in totals_line(report, len(entries), count, totals).splitlines():
        out.line(text)


class _Texts:
    """The texts of ages, sizes and row counts, each formatted once: they repeat (the files of
    one run share their second, a pipeline's steps their row count), in every table of a
    listing. `now` is the scan's time, which ages count from."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.ages: dict[int, str] = {}
        self.sizes: dict[int, str] = {}
        self.counts: dict[int | None, str] = {None: ""}

    def age(self, ts: float | None) -> str:
        if ts is None:
            return ""
        seconds = int(self.now - ts)
        text = self.ages.get(seconds)
        if text is None:
            from cachetool.formatting import short_age

            text = self.ages[seconds] = short_age(seconds) + " ago"
        return text

    def size(self, n: int) -> str:
        text = self.sizes.get(n)
        if text is None:
            from cachetool.formatting import human_size

            text = self.sizes[n] = human_size(n)
        return text

    def rows(self, n: int | None) -> str:
        text = self.counts.get(n)
        if text is None:
            text = self.counts[n] = f"{n:,}"
        return text

    def ages_of(self, times: list[float]) -> list[str]:
        """`age` of each of `times` (none None)."""
        from cachetool.formatting import short_age

        now = self.now
        return _each(self.ages, [int(now - ts) for ts in times], lambda s: short_age(s) + " ago")

    def sizes_of(self, sizes: list[int]) -> list[str]:
        from cachetool.formatting import human_size

        return _each(self.sizes, sizes, human_size)

    def rows_of(self, counts: list[int | None]) -> list[str]:
        return _each(self.counts, counts, lambda n: f"{n:,}")


def _each(known: dict[Any, str], keys: list[Any], make: Callable[[Any], str]) -> list[str]:
    """The text of each of `keys`, each distinct key's made once and remembered in `known`."""
    for missing in set(keys).difference(known):
        known[missing] = make(missing)
    return list(map(known.__getitem__, keys))


def _table_columns(
    entries: Sequence[Listed],
    now: float,
    no_truncate: bool,
    pinned: frozenset[str],
    texts: _Texts | None = None,
) -> dict[str, list[str]]:
    """Each column's cells, by column name, in the order of `entries`: lean entries' cells are
    made column by column from their tuples (`_lean_columns`), run by run."""
    from itertools import groupby

    if texts is None:
        texts = _Texts(now)
    columns: dict[str, list[str]] | None = None
    for lean, run in groupby(entries, _has_lean_cells):
        if lean:
            got = _lean_columns(list(run), pinned, texts)  # type: ignore[arg-type]
        else:
            got = _object_columns(run, no_truncate, pinned, texts)
        if columns is None:
            columns = got
        else:
            for name, cells in got.items():
                columns[name] += cells
    return columns if columns is not None else _object_columns([], no_truncate, pinned, texts)


def _has_lean_cells(e: Listed) -> bool:
    """A lean entry (`_lean_columns` makes its cells)."""
    return isinstance(e, tuple)


def _object_columns(
    listed: Iterable[Listed], no_truncate: bool, pinned: frozenset[str], texts: _Texts
) -> dict[str, list[str]]:
    """`_table_columns` of entries, from their `Entry`."""
    from cachetool.cache.lean import entries_of
    from cachetool.cache.query import is_pinned

    entries = entries_of(listed)
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


def _lean_columns(
    entries: Sequence[LeanEntry], pinned: frozenset[str], texts: _Texts
) -> dict[str, list[str]]:
    """`_table_columns` of lean entries that have a fingerprint, column by column from their
    tuples: each is one file, in no ledger record (no parent, no operation, used when
    modified), with no aliases; its fingerprint is its label."""
    n = len(entries)
    schemas = {id(e[13]): e[13] for e in entries}
    cols = {k: str(len(schema[0]) or "") for k, schema in schemas.items()}
    modified = texts.ages_of([e[6] for e in entries])
    return {
        "dataset": [e[3].name if e[3] is not None else "" for e in entries],
        "kind": [e[2]._value_ for e in entries],
        "fingerprint": [e[4] for e in entries],
        "pin": ["yes" if e[4] in pinned else "" for e in entries] if pinned else [""] * n,
        "files": ["1"] * n,
        "rows": texts.rows_of([e[9] for e in entries]),
        "cols": [cols[id(e[13])] for e in entries],
        "size": texts.sizes_of([e[5] for e in entries]),
        "modified": modified,
        "used": modified[:],
        "op": [""] * n,
        "parent": [""] * n,
    }


def _entry_table(
    out: Output,
    report: CacheReport,
    entries: Sequence[Listed],
    with_dataset: bool,
    pinned: frozenset[str] = frozenset(),
    texts: _Texts | None = None,
) -> None:
    """One row per entry. `op` and `parent` appear once the ledger knows any entry. On a narrow
    terminal the dataset shows without its config hash, parents by their first 8 digits, then
    `cols`, `files`, `modified`, `parent` and `op` give way, in that order, until the table fits
    (all stay in --json and `show`; --no-truncate keeps everything). A `pin` column marks pinned
    entries when there are any."""
    columns = _table_columns(entries, report.scanned_at, out.no_truncate, pinned, texts)
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
    entries: Sequence[Listed],
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
        cells = columns["fingerprint"]  # lean entries (tuples) all have a fingerprint: their label
        columns["fingerprint"] = [
            c if isinstance(e, tuple) else entry_label(e, width=width)
            for c, e in zip(cells, entries, strict=True)
        ]
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


def totals_line(
    report: CacheReport,
    shown: int,
    count: int | None = None,
    totals: dict[str, tuple[int, int]] | None = None,
) -> str:
    """The totals under a listing of `shown` entries; `count` and `totals` stand for the number
    of the report's entries and `report.totals()` when given (a lean listing's)."""
    from cachetool.formatting import human_size

    if totals is None:
        totals = report.totals()  # once: it sums every entry
    if count is None:
        count = len(report.entries)
    files = sum(n for n, _ in totals.values())
    size = sum(b for _, b in totals.values())
    parts = [f"{k} {n} file{'s' if n != 1 else ''} {human_size(b)}" for k, (n, b) in totals.items()]
    head = f"{shown} of {count} entries; cache holds {files} files, {human_size(size)}"
    return head + ("\nby kind: " + "; ".join(parts) if parts else "")
