"""A compact index of what was read from each Arrow file, keyed by path, size, mtime and inode.

Repeat listings then only `stat` files that did not change. The index lives in
`<root>/.cachetool/read-index.sqlite.z`: an SQLite database (standard library), compressed with
zlib (file names and numbers of one cache are alike: 13 bytes per file instead of 80), with one row per file
(folder id, name, size, mtime_ns, inode, fingerprint, rows, batches, format and end-of-stream
marker, error, schema id) and one row per distinct schema (columns and the `huggingface` metadata
with the file's own fingerprint cut out, so files of one dataset share it). It is read whole into
memory with one `read()` (a FIFO or a device in its place is never opened for reading, a damaged
one is read again from the Arrow files) and written whole to a temporary file renamed over it,
so concurrent listings never see half of one and no SQLite lock is ever taken on the cache's
file system. On a read-only root it is simply not written. The JSON index of earlier versions
(`read-index.json`) is ignored and removed when the new index is written.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import zlib
from pathlib import Path

from cachetool.cache.arrow import EMPTY, IPC_FILE, NOT_ARROW, STREAM, UNREADABLE, ArrowSummary
from cachetool.cache.layout import LEDGER_DIR

INDEX_NAME = "read-index.sqlite.z"
OLD_INDEX_NAMES = ("read-index.json",)  # earlier versions wrote JSON
INDEX_VERSION = 4
#: No index of a real cache comes near these (100,000 files take about 1.3 MB, 8 MB unpacked).
MAX_INDEX_BYTES = 256 * 1024 * 1024
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024

_FORMATS = (STREAM, IPC_FILE, EMPTY, NOT_ARROW, UNREADABLE)
_FORMAT_CODE = {f: i for i, f in enumerate(_FORMATS)}
#: Stands for the file's own fingerprint inside a stored metadata text. JSON text never holds a
#: raw NUL character, so the substitution is exact both ways.
_FP_MARK = "\x00"

_SCHEMA = """
CREATE TABLE schemas(id INTEGER PRIMARY KEY, columns TEXT NOT NULL, metadata TEXT);
CREATE TABLE dirs(id INTEGER PRIMARY KEY, path TEXT NOT NULL);
CREATE TABLE files(dir INTEGER, name TEXT, size INTEGER, mtime_ns INTEGER, inode INTEGER,
                   fingerprint TEXT, rows INTEGER, batches INTEGER, state INTEGER, error TEXT,
                   schema INTEGER);
"""

#: (size, mtime_ns, inode, summary) per path relative to the root.
_Row = tuple[int, int, int, ArrowSummary]


class ReadIndex:
    """Maps a path relative to the root to (size, mtime_ns, inode, summary)."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.root = root
        self.enabled = enabled
        self.path = root / LEDGER_DIR / INDEX_NAME
        self._old: dict[str, _Row] = {}
        self._new: dict[str, _Row] = {}
        self.hits = 0
        self.misses = 0
        if enabled:
            self._load()

    def _load(self) -> None:
        from cachetool.safejson import BadJsonFile, read_regular_file

        try:
            data = read_regular_file(self.path, MAX_INDEX_BYTES)
        except (OSError, BadJsonFile):
            return
        try:
            unz = zlib.decompressobj()
            image = unz.decompress(data, MAX_UNPACKED_BYTES)
            if unz.unconsumed_tail or not unz.eof:
                return
            self._old = _decode(image)
        except (
            zlib.error,
            sqlite3.Error,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            OverflowError,
            MemoryError,
        ):
            self._old = {}  # a damaged index: every file is read again

    def get(self, rel: str, size: int, mtime_ns: int, inode: int) -> ArrowSummary | None:
        """The remembered summary if the file has the same size, mtime and inode as then."""
        row = self._old.get(rel)
        if row is not None and row[0] == size and row[1] == mtime_ns and row[2] == inode:
            self._new[rel] = row
            self.hits += 1
            return row[3]
        return None

    def knows(self, rel: str, size: int, mtime_ns: int, inode: int) -> bool:
        """Whether `get` would answer for this file (without counting it as used)."""
        row = self._old.get(rel)
        return row is not None and row[0] == size and row[1] == mtime_ns and row[2] == inode

    def put(self, rel: str, size: int, mtime_ns: int, inode: int, summary: ArrowSummary) -> None:
        self.misses += 1
        self._new[rel] = (size, mtime_ns, inode, summary)

    def save(self) -> bool:
        """Write the index if anything changed. Returns False where the root is read-only."""
        if not self.enabled or (self.misses == 0 and len(self._new) == len(self._old)):
            return True
        folder = self.path.parent
        try:
            folder.mkdir(exist_ok=True)
            data = _encode(self._new)
            fd, tmp = tempfile.mkstemp(prefix=".read-index-", dir=folder)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
            for old in OLD_INDEX_NAMES:
                try:
                    os.unlink(folder / old)
                except FileNotFoundError:
                    pass
        except (OSError, sqlite3.Error):
            return False
        return True


def _connect(image: bytes | None = None) -> sqlite3.Connection:
    """An in-memory database, empty or holding `image` (a serialized database)."""
    db = sqlite3.connect(":memory:")
    if image is not None:
        deserialize = getattr(db, "deserialize", None)
        if deserialize is not None:
            deserialize(image)
        else:  # Python 3.10: through a private temporary file
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


def _serialize(db: sqlite3.Connection) -> bytes:
    serialize = getattr(db, "serialize", None)
    if serialize is not None:
        return bytes(serialize())
    with tempfile.TemporaryDirectory(prefix="cachetool-index-") as tmp:  # Python 3.10
        path = os.path.join(tmp, "index.sqlite")
        disk = sqlite3.connect(path)
        db.backup(disk)
        disk.close()
        with open(path, "rb") as f:
            return f.read()


def _decode(data: bytes) -> dict[str, _Row]:
    """Every row of a serialized index; raises on anything that is not one of ours."""
    db = _connect(data)
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != INDEX_VERSION:
            return {}
        schemas: dict[int, tuple[tuple[tuple[str, str], ...], str | None]] = {}
        for sid, columns, meta in db.execute("SELECT id, columns, metadata FROM schemas"):
            cols = json.loads(columns)
            if not isinstance(cols, list) or not (meta is None or isinstance(meta, str)):
                raise ValueError("bad schema row")
            schemas[sid] = (tuple((str(n), str(t)) for n, t in cols), meta)
        dirs = {d: (p + "/" if p else "") for d, p in db.execute("SELECT id, path FROM dirs")}
        out: dict[str, _Row] = {}
        for d, name, size, mtime_ns, inode, fp, rows, batches, state, error, sid in db.execute(
            "SELECT dir, name, size, mtime_ns, inode, fingerprint, rows, batches, state, error, schema "
            "FROM files"
        ):
            if not (
                type(state) is int
                and 0 <= state < 2 * len(_FORMATS)
                and type(size) is int
                and type(mtime_ns) is int
                and type(inode) is int
                and (rows is None or (type(rows) is int and rows >= 0))
                and (batches is None or (type(batches) is int and batches >= 0))
                and (fp is None or type(fp) is str)
                and (error is None or type(error) is str)
            ):
                raise ValueError("bad file row")
            columns, meta = schemas[sid] if sid is not None else ((), None)
            if meta is not None and fp is not None:
                meta = meta.replace(_FP_MARK, fp)
            s = ArrowSummary(_FORMATS[state >> 1], rows, batches, columns, fp, meta, bool(state & 1), error)
            out[dirs[d] + name] = (size, mtime_ns, inode, s)
        return out
    finally:
        db.close()


def _encode(rows: dict[str, _Row]) -> bytes:
    db = _connect()
    try:
        db.executescript(_SCHEMA)
        db.execute(f"PRAGMA user_version={INDEX_VERSION}")
        schema_ids: dict[tuple[str, str | None], int] = {}
        dir_ids: dict[str, int] = {}
        files = []
        for rel, (size, mtime_ns, inode, s) in rows.items():
            if not (_encodable(rel) and _encodable(s.fingerprint) and _encodable(s.error)):
                continue  # a file name that is not UTF-8: read again next time
            folder, _, name = rel.rpartition("/")
            d = dir_ids.get(folder)
            if d is None:
                d = dir_ids[folder] = len(dir_ids)
            sid = None
            if s.columns or s.metadata_json is not None:
                meta = s.metadata_json
                if meta is not None and s.fingerprint:
                    meta = meta.replace(s.fingerprint, _FP_MARK)
                key = (json.dumps(s.columns, separators=(",", ":")), meta)
                sid = schema_ids.get(key)
                if sid is None:
                    sid = schema_ids[key] = len(schema_ids)
            state = _FORMAT_CODE[s.format] * 2 + bool(s.eos)
            files.append(
                (d, name, size, mtime_ns, inode, s.fingerprint, s.rows, s.batches, state, s.error, sid)
            )
        db.executemany(
            "INSERT INTO schemas VALUES (?, ?, ?)", [(i, c, m) for (c, m), i in schema_ids.items()]
        )
        db.executemany("INSERT INTO dirs VALUES (?, ?)", [(i, p) for p, i in dir_ids.items()])
        db.executemany("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", files)
        db.commit()
        return zlib.compress(_serialize(db), 1)
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
