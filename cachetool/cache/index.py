"""A compact index of what was read from each Arrow file, keyed by path, size, change time and
inode (a write changes the ctime, and so does putting the mtime back after one).

Repeat listings then only `stat` files that did not change. The index lives in the user's cache
folder (`cachetool.cache.dirs.derived_dir`: a listing writes nothing into the root), as
`read-index.sqlite.z`: an SQLite database (standard library), compressed with
zlib (file names and numbers of one cache are alike: about 13 bytes per file), with one row per
file (folder, name, size, ctime_ns, inode, fingerprint, rows, batches, format and end-of-stream
marker, error, schema id), the rows of one folder next to each other, one row per folder (its
path and the range of its file rows) and one row per distinct schema (columns and the
`huggingface` metadata with the file's own fingerprint cut out, so files of one dataset share
it). It is read with one `read()` (a FIFO or a device in its place is never opened for reading)
into an in-memory database, and a folder's rows are looked up when the walk reaches that folder:
a listing never holds every row as Python objects at once. A damaged index (or a damaged row) is
read again from the Arrow files. It is written whole to a temporary file renamed over it, so
concurrent listings never see half of one and no SQLite lock is ever taken on the cache's file
system. Where it cannot be written it is simply not written.
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

from cachetool.cache.arrow import EMPTY, IPC_FILE, NOT_ARROW, STREAM, UNREADABLE, ArrowSummary

INDEX_NAME = "read-index.sqlite.z"
INDEX_VERSION = 6
#: No index of a real cache comes near these (100,000 files take about 1.3 MB, 8 MB unpacked).
MAX_INDEX_BYTES = 256 * 1024 * 1024
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024

_FORMATS = (STREAM, IPC_FILE, EMPTY, NOT_ARROW, UNREADABLE)
_FORMAT_CODE = {f: i for i, f in enumerate(_FORMATS)}

_SCHEMA = """
CREATE TABLE schemas(id INTEGER PRIMARY KEY, columns TEXT NOT NULL, metadata TEXT);
CREATE TABLE dirs(id INTEGER PRIMARY KEY, path TEXT NOT NULL, first INTEGER, last INTEGER);
CREATE TABLE files(id INTEGER PRIMARY KEY, name TEXT, size INTEGER, ctime_ns INTEGER,
                   inode INTEGER, fingerprint TEXT, rows INTEGER, batches INTEGER, state INTEGER,
                   error TEXT, schema INTEGER);
"""
#: The rows of one folder (by id range) that are as this module writes them; any other row (a
#: damaged or foreign index) is left out, so its file is read again. SQLite checks it row by row.
_FOLDER_ROWS = f"""
SELECT id, name, size, ctime_ns, inode, fingerprint, rows, batches, state, error, schema
FROM files WHERE id BETWEEN ? AND ?
  AND typeof(state) = 'integer' AND state BETWEEN 0 AND {2 * len(_FORMATS) - 1}
  AND (rows IS NULL OR (typeof(rows) = 'integer' AND rows >= 0))
  AND (batches IS NULL OR (typeof(batches) = 'integer' AND batches >= 0))
  AND (fingerprint IS NULL OR typeof(fingerprint) = 'text')
  AND (error IS NULL OR typeof(error) = 'text')
  AND (schema IS NULL OR schema IN (SELECT id FROM schemas))
"""

#: (name, size, ctime_ns, inode, summary) of one file, listed under its folder.
_Row = tuple[str, int, int, int, ArrowSummary]
#: A stored file row: (id, name, size, ctime_ns, inode, fingerprint, rows, batches, state,
#: error, schema), as SQLite returns it (so of any type in a damaged index).
_Stored = tuple[Any, ...]
_Schema = tuple[tuple[tuple[str, str], ...], "str | None"]
_NO_SCHEMA: _Schema = ((), None)
_id_of = itemgetter(0)  # a stored row's id
_name_of = itemgetter(1)  # a stored row's file name


class ReadIndex:
    """Maps a path relative to the root to (size, ctime_ns, inode, summary)."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        from cachetool.cache.dirs import derived_dir

        self.root = root
        folder = derived_dir(root)
        self.enabled = enabled and folder is not None
        self.path = (folder or root) / INDEX_NAME
        self._db: sqlite3.Connection | None = None
        self._schemas: dict[int, _Schema] = {}
        self._dirs: dict[str, tuple[int, int]] = {}  # folder -> (first, last) file row id
        self.stored = 0  # file rows in the index read
        self._folder: str | None = None  # the folder whose rows are in `_rows`
        self._rows: dict[str, _Stored] = {}
        self._used: set[int] = set()  # ids of rows that still describe their file
        self._new: dict[str, list[_Row]] = {}  # files read this time, by folder
        self.hits = 0
        self.misses = 0
        if self.enabled:
            self._load()

    def _load(self) -> None:
        from cachetool.cache.store import read_state
        from cachetool.safejson import BadJsonFile

        try:
            data = read_state(self.path, MAX_INDEX_BYTES)
        except (OSError, BadJsonFile):
            return
        try:
            unz = zlib.decompressobj()
            image = unz.decompress(data, MAX_UNPACKED_BYTES)
            del data
            if unz.unconsumed_tail or not unz.eof:
                return
            self._open(image)
        except (zlib.error, sqlite3.Error, ValueError, TypeError, KeyError, OverflowError, MemoryError):
            self._close()  # a damaged index: every file is read again

    def _open(self, image: bytes) -> None:
        db = self._db = connect_image(image)
        if db.execute("PRAGMA user_version").fetchone()[0] != INDEX_VERSION:
            raise ValueError("an index of another version")
        for sid, columns, meta in db.execute("SELECT id, columns, metadata FROM schemas"):
            cols = json.loads(columns)
            if not isinstance(cols, list) or not (meta is None or isinstance(meta, str)):
                raise ValueError("bad schema row")
            self._schemas[sid] = (tuple((str(n), str(t)) for n, t in cols), meta)
        for path, first, last in db.execute("SELECT path, first, last FROM dirs"):
            if not (type(path) is str and type(first) is int and type(last) is int):
                raise ValueError("bad folder row")
            self._dirs[path] = (first, last)
        self.stored = db.execute("SELECT count(*) FROM files").fetchone()[0]

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = None
        self._schemas, self._dirs, self._rows, self._folder = {}, {}, {}, None

    def _lookup(self, folder: str, name: str) -> _Stored | None:
        """The stored row of `name` in `folder`, reading the folder's rows when the walk enters
        a new folder (the one dict lookup per file after that)."""
        if folder != self._folder:
            self._folder = folder
            self._rows = {}
            span = self._dirs.get(folder)
            if span is not None and self._db is not None:
                try:
                    rows = self._db.execute(_FOLDER_ROWS, span).fetchall()
                    self._rows = dict(zip(map(_name_of, rows), rows, strict=True))
                except sqlite3.Error:
                    self._rows = {}
        return self._rows.get(name)

    def get(self, rel: str, size: int, ctime_ns: int, inode: int) -> ArrowSummary | None:
        """The remembered summary if the file has the same size, ctime and inode as then."""
        folder, _, name = rel.rpartition("/")
        return self.get_in(folder, name, size, ctime_ns, inode)

    def get_in(self, folder: str, name: str, size: int, ctime_ns: int, inode: int) -> ArrowSummary | None:
        """`get` of the file `name` of `folder` (relative to the root, "" for the root)."""
        row = self.row_in(folder, name, size, ctime_ns, inode)
        return None if row is None else self._summary(row)

    def row_in(self, folder: str, name: str, size: int, ctime_ns: int, inode: int) -> _Stored | None:
        """The stored row behind `get_in` (a well-formed row: `_FOLDER_ROWS`), marked as still
        describing its file; `summary_of(row, self.schema(row))` is its summary."""
        row = self._rows.get(name) if folder == self._folder else self._lookup(folder, name)
        if row is None or row[2] != size or row[3] != ctime_ns or row[4] != inode:
            return None
        self.mark_used(row)
        return row

    def rows_of(self, folder: str) -> dict[str, _Stored]:
        """The stored rows of `folder`'s files by name (well-formed rows only); a row that still
        describes its file (`row_in`) is to be passed to `mark_used`."""
        if folder != self._folder:
            self._lookup(folder, "")
        return self._rows

    def mark_used(self, *rows: _Stored) -> None:
        """Note that `rows` (of `rows_of`) still describe their file: they are kept when saving."""
        self._used.update(map(_id_of, rows))
        self.hits += len(rows)

    def schema(self, row: _Stored) -> _Schema:
        """The columns and metadata template of a stored row (one tuple shared by its files)."""
        sid = row[10]
        return self._schemas[sid] if sid is not None else _NO_SCHEMA

    def folder_rows(self, folder: str) -> int:
        """How many files of `folder` (relative to the root, "" for the root) the index holds."""
        span = self._dirs.get(folder)
        return 0 if span is None else span[1] - span[0] + 1

    def _summary(self, row: _Stored) -> ArrowSummary:
        """The summary a stored row holds (`_FOLDER_ROWS` let through well-formed rows only)."""
        return summary_of(row, self.schema(row))

    def put(
        self, folder: str, name: str, size: int, ctime_ns: int, inode: int, summary: ArrowSummary
    ) -> None:
        """Remember what was read from the file `name` of `folder` (relative to the root)."""
        self.misses += 1
        rows = self._new.get(folder)
        if rows is None:
            rows = self._new[folder] = []  # the folder's text kept once, not once per file
        rows.append((name, size, ctime_ns, inode, summary))

    def save(self) -> bool:
        """Write the index if anything changed. Returns False where it cannot be written."""
        if not self.enabled or (self.misses == 0 and len(self._used) == self.stored):
            self._close()
            return True
        try:
            rows = self._kept_rows()
            for path, new in self._new.items():
                rows.setdefault(path, []).extend(new)
            self._close()
            from cachetool.cache.store import write_whole  # a repeat listing writes nothing

            write_whole(self.path, _encode(rows), create_folders=True)
        except (OSError, sqlite3.Error):
            return False
        return True

    def _kept_rows(self) -> dict[str, list[_Row]]:
        """The stored rows that still described their file in this listing, by folder."""
        out: dict[str, list[_Row]] = {}
        if self._db is None or not self._used:
            return out
        for path, span in self._dirs.items():
            for row in self._db.execute(_FOLDER_ROWS, span):
                if row[0] in self._used:
                    out.setdefault(path, []).append((row[1], row[2], row[3], row[4], self._summary(row)))
        return out


def summary_of(row: _Stored, schema: _Schema) -> ArrowSummary:
    """The summary a stored row holds, given its schema (`ReadIndex.schema`)."""
    fp, rows, batches, state, error = row[5:10]
    return stored_summary(fp, rows, batches, state, error, schema)


def stored_summary(
    fp: str | None, rows: int | None, batches: int | None, state: int, error: str | None, schema: _Schema
) -> ArrowSummary:
    """The summary of a stored row's values (usable after the index is closed)."""
    columns, meta = schema
    return ArrowSummary(_FORMATS[state >> 1], rows, batches, columns, fp, meta, bool(state & 1), error)


#: A stored row's `state` (format code * 2 + end-of-stream marker) of a stream read to its end.
STREAM_COMPLETE = _FORMAT_CODE[STREAM] * 2 + 1
#: Stored `state`s below this are of a stream or an IPC file (format codes 0 and 1).
READABLE_STATES = 4
assert {_FORMAT_CODE[STREAM], _FORMAT_CODE[IPC_FILE]} == {0, 1}


def connect_image(image: bytes | None = None) -> sqlite3.Connection:
    """An in-memory database, empty or holding `image` (a serialized database): how a database
    kept in `.cachetool/` is opened (`cachetool.cache.store`), never by its path."""
    db = sqlite3.connect(":memory:")
    if image is not None:
        deserialize = getattr(db, "deserialize", None)
        if deserialize is not None:
            deserialize(image)
        else:  # Python 3.10: through a private temporary file
            import tempfile

            db.close()
            with tempfile.TemporaryDirectory(prefix="cachetool-index-") as tmp:
                path = os.path.join(tmp, "index.sqlite")
                with open(path, "wb") as f:
                    f.write(image)
                disk = sqlite3.connect(path)
                db = sqlite3.connect(":memory:")
                disk.backup(db)
                disk.close()
    db.execute("PRAGMA trusted_schema=OFF")  # the file may come from anyone who can write the root
    return db


def image_of(db: sqlite3.Connection) -> bytes:
    """The serialized image of the database `db` (what `connect_image` opens again)."""
    serialize = getattr(db, "serialize", None)
    if serialize is not None:
        return bytes(serialize())
    import tempfile  # Python 3.10: through a private temporary file

    with tempfile.TemporaryDirectory(prefix="cachetool-index-") as tmp:
        path = os.path.join(tmp, "index.sqlite")
        disk = sqlite3.connect(path)
        db.backup(disk)
        disk.close()
        with open(path, "rb") as f:
            return f.read()


def _encode(rows: dict[str, list[_Row]]) -> bytes:
    """The compressed image of an index holding `rows` (by folder), each folder's rows next to
    each other. Rows go to SQLite one by one (no list of 100,000 tuples beside the listing),
    into a private temporary file, which is then compressed as it is read: neither the
    database nor its image is ever held whole in memory (8 MB each for 100,000 files)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cachetool-index-") as tmp:
        path = os.path.join(tmp, "index.sqlite")
        _write(sqlite3.connect(path), rows)
        z = zlib.compressobj(1)
        parts = []
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                parts.append(z.compress(chunk))
        parts.append(z.flush())
        return b"".join(parts)


def _write(db: sqlite3.Connection, rows: dict[str, list[_Row]]) -> None:
    """Fill the empty database `db` with `rows` and close it."""
    try:
        db.execute("PRAGMA journal_mode=OFF")  # a private file, thrown away if anything fails
        db.execute("PRAGMA synchronous=OFF")
        db.executescript(_SCHEMA)
        db.execute(f"PRAGMA user_version={INDEX_VERSION}")
        schema_ids: dict[tuple[str, str | None], int] = {}
        column_texts: dict[tuple[tuple[str, str], ...], str] = {}
        #: By the identity of the columns and the template (summaries share them, and every
        #: summary stays alive while this runs): no tuple of columns is hashed per file.
        by_identity: dict[tuple[int, int], int | None] = {}

        def schema_id(s: ArrowSummary) -> int | None:
            key = (id(s.columns), id(s.metadata_template))
            sid = by_identity.get(key, -1)
            if sid != -1:
                return sid
            if not s.columns and s.metadata_template is None:
                sid = None
            else:
                text = column_texts.get(s.columns)
                if text is None:
                    text = column_texts[s.columns] = json.dumps(s.columns, separators=(",", ":"))
                sid = schema_ids.setdefault((text, s.metadata_template), len(schema_ids))
            by_identity[key] = sid
            return sid

        dirs: list[tuple[int, str, int, int]] = []

        def file_rows() -> Iterator[tuple[object, ...]]:
            n = 0
            for folder, members in rows.items():
                if not _encodable(folder):
                    continue  # a name that is not UTF-8: read again next time
                first = n + 1
                for name, size, ctime_ns, inode, s in members:
                    fp, error, template = s.fingerprint, s.error, s.metadata_template
                    if not (
                        name.isascii()
                        and (fp is None or fp.isascii())
                        and error is None
                        and (template is None or template.isascii())
                    ) and not all(map(_encodable, (name, fp, error, template))):
                        continue
                    n += 1
                    state = _FORMAT_CODE[s.format] * 2 + bool(s.eos)
                    yield (n, name, size, ctime_ns, inode, fp, s.rows, s.batches, state, error, schema_id(s))
                if n >= first:
                    dirs.append((len(dirs), folder, first, n))

        db.executemany("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", file_rows())
        db.executemany("INSERT INTO dirs VALUES (?, ?, ?, ?)", dirs)
        db.executemany(
            "INSERT INTO schemas VALUES (?, ?, ?)", [(i, c, m) for (c, m), i in schema_ids.items()]
        )
        db.commit()
    finally:
        db.close()


def _encodable(text: str | None) -> bool:
    """SQLite stores UTF-8; a file name with undecodable bytes (surrogate escapes) is not."""
    if text is None or text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
