"""The ledger index of a root: what each fingerprint's records add up to, kept up to date
incrementally, so that a listing does not read every record of a long-lived ledger.

`ledger-index.sqlite` in the user's cache folder for the root (`cachetool.cache.dirs.derived_dir`:
reading the ledger writes nothing into the root) holds one row per fingerprint (the `Usage` of
`cachetool.history.ledger`: last use, latest recorded origin, hits, misses) and one row per
segment: how far it was read. Segments are append-only, so bringing the index up to date reads
only what was appended since (whole lines: a record still being written is read next time). A
segment that shrank, was replaced or was removed makes the index rebuild from every segment.
Updates happen under a file lock, so concurrent commands never fold the same records twice; a
command that finds the index up to date takes no lock and writes nothing.

The index holds one row per fingerprint, not per record: it stays bounded by the number of
fingerprints however many runs the ledger records. When no index can be written anywhere, the
usage is computed from the records as before.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetool.history.records import RunSummaryRecord, SourceRecord, StepRecord
from cachetool.history.segments import iter_segments, read_segment_from
from cachetool.history.usage import Usage

INDEX_FILE = "ledger-index.sqlite"
#: Bumped when what a row means changes: an index of another version is rebuilt.
_VERSION = 6
_CHUNK = 500  # values per `IN (...)` query

_TABLES = ("segments", "usage", "rec", "par", "known")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS segments (
    path TEXT PRIMARY KEY, ino INTEGER, size INTEGER, mtime_ns INTEGER, done INTEGER, bad INTEGER
);
CREATE TABLE IF NOT EXISTS rec (
    id INTEGER PRIMARY KEY, path TEXT, offset INTEGER, length INTEGER, type TEXT, result TEXT,
    run TEXT, time REAL, internal INTEGER, skey TEXT, fkey TEXT, mkey TEXT, output TEXT, parents TEXT
);
CREATE INDEX IF NOT EXISTS rec_run ON rec(run);
CREATE INDEX IF NOT EXISTS rec_skey ON rec(skey);
CREATE INDEX IF NOT EXISTS rec_fkey ON rec(fkey);
CREATE INDEX IF NOT EXISTS rec_mkey ON rec(mkey);
CREATE INDEX IF NOT EXISTS rec_result ON rec(result);
CREATE INDEX IF NOT EXISTS rec_type ON rec(type);
CREATE INDEX IF NOT EXISTS rec_time ON rec(time);
CREATE TABLE IF NOT EXISTS par (id INTEGER, parent TEXT);
CREATE INDEX IF NOT EXISTS par_id ON par(id);
CREATE INDEX IF NOT EXISTS par_parent ON par(parent);
CREATE TABLE IF NOT EXISTS known (fp TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS usage (
    fp TEXT PRIMARY KEY, last REAL, o_time REAL, o_run TEXT, o_seq INTEGER, operation TEXT,
    parents TEXT, records INTEGER, hits INTEGER, misses INTEGER, random INTEGER, result TEXT
);
"""

#: A segment as it is on disk now: path, inode, size, mtime.
_Seg = tuple[str, int, int, int]


@dataclass
class _Sum:
    """What the records of one fingerprint add up to (a row of `usage`)."""

    last: float = 0.0
    o_key: tuple[float, str, int] | None = None  # the order of its latest origin record
    operation: str | None = None
    parents: tuple[str, ...] = ()
    records: int = 0
    hits: int = 0
    misses: int = 0
    random: bool = False
    result: str | None = None  # the origin's result, where it differs from the row's fingerprint

    def merge(self, other: _Sum) -> None:
        self.last = max(self.last, other.last)
        if other.o_key is not None and (self.o_key is None or other.o_key >= self.o_key):
            self.o_key, self.operation, self.parents = other.o_key, other.operation, other.parents
            self.result = other.result
        self.records += other.records
        self.hits += other.hits
        self.misses += other.misses
        self.random |= other.random

    def usage(self) -> Usage:
        return Usage(
            last_used=self.last,
            parent=self.parents[0] if self.parents else None,
            operation=self.operation,
            parents=self.parents,
            records=self.records,
            hits=self.hits,
            misses=self.misses,
            random_fallback=self.random,
            made_as=self.result,
        )

    def row(self, fp: str) -> tuple[object, ...]:
        o = self.o_key
        parents = json.dumps(list(self.parents)) if o is not None else None
        return (
            fp,
            self.last,
            *(o or (None, None, None)),
            self.operation,
            parents,
            self.records,
            self.hits,
            self.misses,
            int(self.random),
            self.result,
        )

    @classmethod
    def of_row(cls, row: tuple[Any, ...]) -> _Sum:
        _, last, o_time, o_run, o_seq, operation, parents, records, hits, misses, random, result = row
        return cls(
            last=float(last),
            o_key=(float(o_time), str(o_run), int(o_seq)) if o_time is not None else None,
            operation=operation,
            parents=tuple(json.loads(parents)) if parents is not None else (),
            records=int(records),
            hits=int(hits),
            misses=int(misses),
            random=bool(random),
            result=result,
        )


def fold(sums: dict[str, _Sum], rec: StepRecord) -> None:
    """Add one record of the root's own ledger to the sums (the rule of `Ledger.usage`: the latest
    origin names the parent; using a fingerprint as a parent is a use of it too)."""
    if rec.internal:
        return
    for fp in rec.used:
        s = sums.setdefault(fp, _Sum())
        s.last = max(s.last, rec.end)
    if rec.is_origin:
        hit, miss, random = rec.origin_counts
        for made in rec.made:
            sums[made].merge(
                _Sum(
                    last=rec.end,
                    o_key=(rec.time, rec.run, rec.seq),
                    operation=rec.operation,
                    parents=rec.parents,
                    records=1,
                    hits=hit,
                    misses=miss,
                    random=bool(random),
                    result=rec.result if made != rec.result else None,
                )
            )


def fold_summary(sums: dict[str, _Sum], rec: RunSummaryRecord) -> None:
    """Add the summary of a run a compaction folded away (the rule of `Ledger.usage`)."""
    for fp, (when, records, hits, misses, random) in rec.fps.items():
        s = sums.setdefault(fp, _Sum())
        s.merge(_Sum(last=when, records=records, hits=hits, misses=misses, random=bool(random)))


class UsageIndex(Mapping[str, Usage]):
    """`{fingerprint: Usage}` read from the index one fingerprint at a time."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con

    def __getitem__(self, fp: str) -> Usage:
        row = self._con.execute("SELECT * FROM usage WHERE fp = ?", (fp,)).fetchone()
        if row is None:
            raise KeyError(fp)
        return _Sum.of_row(row).usage()

    def __contains__(self, fp: object) -> bool:
        return self._con.execute("SELECT 1 FROM usage WHERE fp = ?", (fp,)).fetchone() is not None

    def subset(self, fps: Iterable[str]) -> dict[str, Usage]:
        """`{fp: Usage}` of those of `fps` the ledger knows: a few queries for a whole listing
        instead of one per entry."""
        wanted = list(dict.fromkeys(fp for fp in fps if storable(fp)))  # others: unknown
        out: dict[str, Usage] = {}
        for chunk, marks in chunks(wanted):
            for row in self._con.execute(f"SELECT * FROM usage WHERE fp IN ({marks})", chunk):
                out[row[0]] = _Sum.of_row(row).usage()
        return out

    def __iter__(self) -> Iterator[str]:
        return iter([r[0] for r in self._con.execute("SELECT fp FROM usage")])

    def __len__(self) -> int:
        return int(self._con.execute("SELECT count(*) FROM usage").fetchone()[0])


def storable(text: str) -> bool:
    """Whether SQLite can take `text` (UTF-8): a name the shell passed as bytes that are not
    UTF-8 (`'f0\\udce9'`) cannot, and no record holds it."""
    return text.isascii() or not any("\ud800" <= c <= "\udfff" for c in text)


def chunks(items: list[str]) -> Iterator[tuple[list[str], str]]:
    """`items` in pieces of `_CHUNK`, each with its `?,?,...` for an `IN (...)` query."""
    for i in range(0, len(items), _CHUNK):
        chunk = items[i : i + _CHUNK]
        yield chunk, ",".join("?" * len(chunk))


def index_path(root: Path) -> Path | None:
    """Where the ledger index of `root` is kept (None: nowhere, the root cannot be stat'ed)."""
    from cachetool.cache.dirs import derived_dir

    folder = derived_dir(root)
    return None if folder is None else folder / INDEX_FILE


def segments_now(root: Path) -> list[_Seg]:
    out = []
    for path in iter_segments(root):
        text = os.fspath(path)
        try:
            st = os.stat(text)
        except OSError:
            continue
        out.append((text, st.st_ino, st.st_size, st.st_mtime_ns))
    return out


def _plan(con: sqlite3.Connection, segments: list[_Seg]) -> tuple[bool, list[tuple[_Seg, int]]]:
    """Whether the index must be rebuilt, and the segments to read with the offset to read from."""
    if con.execute("PRAGMA user_version").fetchone()[0] != _VERSION:
        return True, [(s, 0) for s in segments]
    known = {r[0]: r[1:] for r in con.execute("SELECT path, ino, size, mtime_ns, done FROM segments")}
    todo = []
    for seg in segments:
        path, ino, size, mtime = seg
        was = known.pop(path, None)
        if was is None:
            todo.append((seg, 0))
        elif was[0] != ino or size < was[3]:
            return True, [(s, 0) for s in segments]  # replaced or shrunk: the sums no longer hold
        elif (was[1], was[2]) != (size, mtime):
            todo.append((seg, int(was[3])))
    if known:  # a segment was removed: its records are in the sums
        return True, [(s, 0) for s in segments]
    return False, todo


#: An index larger than this is not read (and is rebuilt): 400,000 records take about 150 MB.
MAX_INDEX_BYTES = 1 << 30


def up_to_date(db: Path, root: Path, segments: list[_Seg]) -> sqlite3.Connection:
    """The index `db` brought up to date with `segments`, as an in-memory database.

    SQLite never opens `db` by its path (it would follow a symlink planted there, and make a
    `-journal` beside it by name): the file is read whole through `cachetool.cache.store`
    (never followed, regular files only, capped), opened in memory, and when it changed,
    written back whole under its lock, so a reader sees the old index or the new one."""
    from cachetool.cache.store import lock_state, write_whole

    con = _load(db)
    rebuild, todo = _plan(con, segments)
    if not rebuild and not todo:
        return con
    with lock_state(db.with_name(db.name + ".lock"), timeout=60):
        con.close()
        con = _load(db)  # another command may have brought it up to date meanwhile
        rebuild, todo = _plan(con, segments)
        if not rebuild and not todo:
            return con
        if rebuild:
            for table in _TABLES:
                con.execute(f"DROP TABLE IF EXISTS {table}")
            con.executescript(_SCHEMA)
        _fold_segments(con, root, todo)
        con.execute(f"PRAGMA user_version = {_VERSION}")
        con.commit()
        if rebuild and _mostly_free(con):
            con.execute("VACUUM")  # a compacted ledger's index shrinks with it
        from cachetool.cache.store import image_of

        write_whole(db, image_of(con), mode=0o644)
    return con


def _load(db: Path) -> sqlite3.Connection:
    """The index kept at `db` in memory, or an empty one when there is none or it is not an
    SQLite database of ours (rebuilt then)."""
    from cachetool.cache.store import connect_image, read_state
    from cachetool.safejson import BadJsonFile

    try:
        image: bytes | None = read_state(db, MAX_INDEX_BYTES)
    except (OSError, BadJsonFile):
        image = None
    try:
        con = connect_image(image or None)
        con.executescript(_SCHEMA)
        con.execute("SELECT path, ino, size, mtime_ns, done, bad FROM segments LIMIT 1").fetchall()
        return con
    except sqlite3.Error:
        con = connect_image()
        con.executescript(_SCHEMA)
        return con


def _mostly_free(con: sqlite3.Connection) -> bool:
    free = int(con.execute("PRAGMA freelist_count").fetchone()[0])
    return free * 2 > int(con.execute("PRAGMA page_count").fetchone()[0])


def site_key(rec: StepRecord, realpaths: dict[str, str] | None = None) -> tuple[object, ...] | None:
    """The same call site: operation, file and line."""
    site = rec.call_site
    if site is None or not site.file:
        return None
    real = realpaths.get(site.file) if realpaths is not None else None
    if real is None:
        real = os.path.realpath(site.file)
        if realpaths is not None:
            realpaths[site.file] = real
    return (rec.operation, real, site.line)


def fn_key(rec: StepRecord) -> tuple[object, ...] | None:
    """The same function: operation, qualified name and file."""
    fn = rec.function
    if fn is None or not fn.qualname:
        return None
    return (rec.operation, fn.qualname, fn.file)


def moved_key(rec: StepRecord) -> tuple[object, ...] | None:
    """The same function moved to another file: operation, name, code and inputs."""
    fn = rec.function
    if fn is None or not fn.qualname or not fn.code_hash:
        return None
    return (rec.operation, fn.qualname, fn.code_hash, tuple(rec.parents))


def step_keys(rec: StepRecord, realpaths: dict[str, str] | None = None) -> tuple[str | None, ...]:
    """The three keys of `rec` as the index stores them."""
    keys = (site_key(rec, realpaths), fn_key(rec), moved_key(rec))
    return tuple(None if k is None else json.dumps(k) for k in keys)


def _fold_segments(con: sqlite3.Connection, root: Path, todo: list[tuple[_Seg, int]]) -> None:
    """Read each segment from its offset; add its records to the sums, the record locations and
    the parents."""
    sums: dict[str, _Sum] = {}
    done: list[tuple[object, ...]] = []
    recs: list[tuple[object, ...]] = []
    pars: list[tuple[int, str]] = []
    known: set[str] = set()
    next_id = int(con.execute("SELECT coalesce(max(id), 0) FROM rec").fetchone()[0]) + 1
    label = os.fspath(root)
    realpaths: dict[str, str] = {}
    for (path, ino, size, mtime), start in todo:
        records, end, bad = read_segment_from(Path(path), start, label)
        for offset, length, rec in records:
            key = rec.hash if isinstance(rec, SourceRecord) else getattr(rec, "result", None)
            keys: tuple[str | None, ...] = (None, None, None, None, None)
            if isinstance(rec, StepRecord):
                keys = (*step_keys(rec, realpaths), rec.output, json.dumps(list(rec.parents)))
            recs.append(
                (next_id, path, offset, length, rec.type, key, rec.run, rec.time, rec.internal, *keys)
            )
            if isinstance(rec, StepRecord):
                fold(sums, rec)
                pars += [(next_id, p) for p in rec.parents]
                known.update(rec.parents)
                if rec.result is not None:
                    known.add(rec.result)
            elif isinstance(rec, RunSummaryRecord):
                fold_summary(sums, rec)
            next_id += 1
        was_bad = con.execute("SELECT bad FROM segments WHERE path = ?", (path,)).fetchone()
        done.append((path, ino, size, mtime, end, bad + (was_bad[0] if was_bad else 0)))
    _merge(con, sums)
    con.executemany("INSERT INTO rec VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", recs)
    con.executemany("INSERT INTO par VALUES (?, ?)", pars)
    con.executemany("INSERT OR IGNORE INTO known VALUES (?)", [(fp,) for fp in known])
    con.executemany("INSERT OR REPLACE INTO segments VALUES (?, ?, ?, ?, ?, ?)", done)


def _merge(con: sqlite3.Connection, sums: dict[str, _Sum]) -> None:
    for chunk, marks in chunks(list(sums)):
        for row in con.execute(f"SELECT * FROM usage WHERE fp IN ({marks})", chunk):
            old = _Sum.of_row(row)
            old.merge(sums[row[0]])
            sums[row[0]] = old
    con.executemany(
        "INSERT OR REPLACE INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [s.row(fp) for fp, s in sums.items()],
    )
