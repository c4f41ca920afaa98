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
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring_ascii as _encode_ascii
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from cachetool.cache.entries import derived_entry
from cachetool.cache.index import READABLE_STATES, STREAM_COMPLETE, stored_summary
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, DatasetDir, Entry
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
_UNSEEN: Any = object()


def keep_lean(
    prefix: str,
    pairs: Iterable[tuple[str, os.stat_result]],
    rows: Mapping[str, tuple[Any, ...]],
    schema: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    ds: DatasetDir | None,
    lean: list[LeanEntry],
    used: list[tuple[Any, ...]],
) -> list[tuple[str, os.stat_result]]:
    """Append to `lean` the lean entries of the `cache-<fp>.arrow` files `pairs` (name and
    `stat`, in name order) of the folder `prefix` (its text and "/"), and to `used` the read
    index `rows` (`ReadIndex.rows_of`) that still describe their file; returns the other pairs.

    A file is kept lean when its fingerprint is ASCII letters and digits (64 at most, as
    `layout.parse_cache_file` reads it: no shard part), its row has its size, mtime and inode,
    and `derived_entry` would say nothing of its own: no error, a stream or IPC file with
    columns, and the fingerprint of its name or none inside.

    One loop on purpose: it runs once per cache file of a warm listing (most of a cache), with
    the checks inline and the list methods bound once."""
    rest: list[tuple[str, os.stat_result]] = []
    shapes: dict[Any, tuple[Any, Kind] | None] = {}  # by schema id: the schema and kind, or None
    modes = _MODES
    lean_append, used_append, rest_append = lean.append, used.append, rest.append
    for pair in pairs:
        name, st = pair
        fp = name[6:-6]
        row = rows.get(name)
        if (
            row is None
            or row[2] != st.st_size
            or row[3] != st.st_ctime_ns
            or row[4] != st.st_ino
            or row[9] is not None  # an error
            or row[8] >= READABLE_STATES  # neither stream nor IPC file
            or not (fp.isalnum() and fp.isascii() and len(fp) <= 64)
        ):
            rest_append(pair)
            continue
        held = row[5]
        if held is not None and held != fp:
            rest_append(pair)
            continue
        sid = row[10]
        shape = shapes.get(sid, _UNSEEN)
        if shape is _UNSEEN:
            schema_of = schema(row)
            columns = schema_of[0]
            kind = Kind.INDICES if columns == _INDICES_COLUMNS else Kind.DERIVED
            shape = shapes[sid] = (schema_of, kind) if columns else None
        if shape is None:  # no columns
            rest_append(pair)
            continue
        mode = st.st_mode
        used_append(row)
        lean_append(
            (
                prefix,
                name,
                shape[1],
                ds,
                fp,
                st.st_size,
                st.st_mtime,
                modes.setdefault(mode, mode),  # one int per distinct mode, not per file
                st.st_uid,
                row[6],
                row[7],
                row[8],
                held is not None,
                shape[0],
            )
        )
    return rest


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
    the template of the first `Entry` of its shape (kind, dataset folder, schema and folder): only its
    fingerprint, path, rows, size, time and completeness are its own. The items must stay alive
    while this is used (shapes are keyed by identity)."""

    def __init__(self, pinned: frozenset[str] | set[str], is_pinned: Callable[[Entry], bool]) -> None:
        self.pinned = pinned
        self.is_pinned = is_pinned
        # The JSON writers load with the first JSON text: a human listing never needs them.
        from cachetool.cache import entry_json

        self._entry_body = entry_json.json_body_writer()
        self._shared = entry_json.shared_json
        self._json_template = entry_json.json_template
        #: By shape and folder: the template's pieces (`_template`).
        self._templates: dict[tuple[Any, ...], tuple[str, ...]] = {}
        #: By second: the text between the size and the completeness (the times of that second).
        self._seconds: dict[int, str] = {}
        self._folders: dict[str, str] = {}  # JSON text of a folder's path and "/", unclosed

    def texts(self, listed: Iterable[Listed]) -> list[str]:
        out: list[str] = []
        append = out.append
        templates, pinned, seconds = self._templates, self.pinned, self._seconds
        shared, iso, stream_complete, floor = self._shared, iso_time, STREAM_COMPLETE, math.floor
        for e in listed:
            if not isinstance(e, tuple):
                body = self._entry_body(e)
                append(body + (', "pinned": true}' if self.is_pinned(e) else ', "pinned": false}'))
                continue
            key = (e[2], id(e[3]), id(e[13]), e[0])
            t = templates.get(key)
            if t is None:
                t = templates[key] = self._template(e)
            # The fingerprint of a lean entry is ASCII letters and digits, its name `cache-<fp>.arrow`:
            # JSON escapes nothing in them, and the path's text is its folder's, escaped once.
            fp = e[4]
            rows = e[9]
            mtime = e[6]
            second = floor(mtime)
            if mtime - second < 0.9999995:  # as `iso_time` shares a second's text
                times = seconds.get(second)
                if times is None:
                    mod_iso = shared(iso(mtime))
                    times = seconds[second] = f', "modified": {mod_iso}, "used": {mod_iso}, "complete": '
            else:
                mod_iso = shared(iso(mtime))
                times = f', "modified": {mod_iso}, "used": {mod_iso}, "complete": '
            append(
                f'{t[0]}"{fp}"{t[1]}"{fp}"{t[2]}{e[1]}"{t[3]}'
                f"{'null' if rows is None else int.__repr__(rows)}{t[4]}{e[5]}{times}"
                f"{t[5 + (e[11] == stream_complete) * 2 + (fp in pinned)]}"
            )
        return out

    def _template(self, e: LeanEntry) -> tuple[str, ...]:
        """The pieces of the text of the lean entries of `e`'s shape and folder: before the id,
        before the fingerprint, before the file name (the folder's text included), before the
        rows, before the size, and the four ends after `"complete": ` (incomplete, incomplete
        and pinned, complete, complete and pinned)."""
        t0, t1, t2, t3, t4, t5 = self._json_template(entry_of(e))
        folder = self._folders.get(e[0])
        if folder is None:
            folder = self._folders[e[0]] = _encode_ascii(e[0])[:-1]
        both = ("false", "true")
        ends = [f'{complete}{t5}, "pinned": {pinned}}}' for complete in both for pinned in both]
        return (t0, t1, t2 + folder, t3, t4, *ends)
