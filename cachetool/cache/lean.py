"""Entries of unchanged `cache-<fp>.arrow` files kept as plain tuples until something asks for
their `Entry`.

Most of a cache is `cache-<fp>.arrow` files, each one entry of one file. When the read index
knows such a file (same size, mtime and inode) and what it holds raises no question (a stream or
IPC file with columns, no error, the fingerprint of its name or none), its entry follows from the
file's name and `stat`, the index row and the dataset folder alone. A listing that writes
`--json` keeps those values in a `LeanEntry` and writes its text from them (`json_bodies`): no
`Path`, `ArrowSummary`, `CacheFile` or `Entry` per file. `entry_of` makes the `Entry` the walk
would have made (`derived_entry`), for anything else that needs one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring_ascii as _encode_ascii
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from cachetool.cache.entries import derived_entry
from cachetool.cache.index import READABLE_STATES, STREAM_COMPLETE, stored_summary
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, DatasetDir, Entry, json_body_writer, shared_json
from cachetool.formatting import iso_time

if TYPE_CHECKING:
    import os

#: (folder text and "/", file name, kind, dataset folder, fingerprint, size, mtime, mode, uid,
#: rows, batches, stored state, whether the file holds its fingerprint, schema): a plain tuple,
#: the cheapest object to make (positions 0-13; hot loops index it directly).
LeanEntry = tuple[
    str, str, Kind, "DatasetDir | None", str, int, float, int, int, "int | None", "int | None", int, bool, Any
]
#: What a listing holds in listing order: entries, and lean entries where no `Entry` was made.
Listed = Union[Entry, LeanEntry]  # noqa: UP007 (a runtime alias, Python 3.10 included)

_INDICES_COLUMNS = (("indices", "uint64"),)  # `ArrowSummary.is_indices`
_MODES: dict[int, int] = {}


def lean_entry(
    prefix: str,
    name: str,
    st: os.stat_result,
    fp: str,
    ds: DatasetDir | None,
    row: tuple[Any, ...],
    schema: tuple[Any, ...],
) -> LeanEntry | None:
    """The lean entry of the file `name` (`cache-<fp>.arrow`) of the folder `prefix` (its text
    and "/"), from its `stat` and its read index `row` (`ReadIndex.rows_of`); None where
    `derived_entry` would say something of its own (an error, an unreadable format, no columns,
    another fingerprint inside): those get their `Entry`."""
    state = row[8]
    if row[9] is not None or state >= READABLE_STATES:  # an error, or neither stream nor IPC file
        return None
    columns = schema[0]
    if not columns:
        return None
    held = row[5]
    if held is not None and held != fp:
        return None
    kind = Kind.INDICES if columns == _INDICES_COLUMNS else Kind.DERIVED
    mode = st.st_mode
    return (
        prefix,
        name,
        kind,
        ds,
        fp,
        st.st_size,
        st.st_mtime,
        _MODES.setdefault(mode, mode),  # one int per distinct mode, not per file
        st.st_uid,
        row[6],
        row[7],
        state,
        held is not None,
        schema,
    )


def entry_of(e: LeanEntry) -> Entry:
    """The `Entry` the walk makes of the file (`derived_entry` of its `CacheFile`)."""
    prefix, name, _, ds, fp, size, mtime, mode, uid, rows, batches, state, held, schema = e
    summary = stored_summary(fp if held else None, rows, batches, state, None, schema)
    return derived_entry(CacheFile(Path(prefix + name), size, mtime, mode, uid, summary), fp, ds)


def entries_of(listed: Iterable[Listed]) -> list[Entry]:
    """Each listed item as an `Entry`."""
    return [entry_of(e) if isinstance(e, tuple) else e for e in listed]


def path_text(e: LeanEntry) -> str:
    return e[0] + e[1]


def fingerprint_of(e: LeanEntry) -> str:
    return e[4]


class JsonTexts:
    """The JSON text of listed items (`Entry.to_json_text()` with `"pinned"` added before the
    closing brace, as `ls --json` writes them), chunk by chunk. A lean entry is written through
    the template of the first `Entry` of its shape (kind, dataset folder and schema): only its
    fingerprint, path, rows, size, time and completeness are its own. The items must stay alive
    while this is used (shapes are keyed by identity)."""

    def __init__(self, pinned: frozenset[str] | set[str], is_pinned: Callable[[Entry], bool]) -> None:
        self.pinned = pinned
        self.is_pinned = is_pinned
        self._entry_body = json_body_writer()
        #: By shape: the template's pieces, the last one ending the text unpinned and pinned.
        self._templates: dict[tuple[Any, ...], tuple[str, str, str, str, str, str, str]] = {}
        self._seconds: dict[int, str] = {}  # JSON text of the times of a second
        self._folders: dict[str, str] = {}  # JSON text of a folder's path and "/", unclosed

    def texts(self, listed: Iterable[Listed]) -> list[str]:
        out: list[str] = []
        append = out.append
        templates, pinned, seconds, folders = self._templates, self.pinned, self._seconds, self._folders
        shared, iso, stream_complete, floor = shared_json, iso_time, STREAM_COMPLETE, math.floor
        for e in listed:
            if not isinstance(e, tuple):
                body = self._entry_body(e)
                append(body + (', "pinned": true}' if self.is_pinned(e) else ', "pinned": false}'))
                continue
            key = (e[2], id(e[3]), id(e[13]))
            t = templates.get(key)
            if t is None:
                t0, t1, t2, t3, t4, t5 = entry_of(e)._json_template()
                t = templates[key] = (t0, t1, t2, t3, t4, t5 + ', "pinned": false}', t5 + ', "pinned": true}')
            # The fingerprint of a lean entry is ASCII letters and digits, its name `cache-<fp>.arrow`:
            # JSON escapes nothing in them, and the path's text is its folder's, escaped once.
            folder = folders.get(e[0])
            if folder is None:
                folder = folders[e[0]] = _encode_ascii(e[0])[:-1]
            fp = e[4]
            rows = e[9]
            mtime = e[6]
            second = floor(mtime)
            if mtime - second < 0.9999995:  # as `iso_time` shares a second's text
                mod_iso = seconds.get(second)
                if mod_iso is None:
                    mod_iso = seconds[second] = shared(iso(mtime))
            else:
                mod_iso = shared(iso(mtime))
            append(
                f'{t[0]}"{fp}"{t[1]}"{fp}"{t[2]}{folder}{e[1]}"{t[3]}'
                f'{"null" if rows is None else int.__repr__(rows)}{t[4]}{e[5]}, "modified": {mod_iso}, '
                f'"used": {mod_iso}, "complete": {"true" if e[11] == stream_complete else "false"}'
                f"{t[6] if pinned and fp in pinned else t[5]}"
            )
        return out
