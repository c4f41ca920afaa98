"""A part of a long-lived ledger, read through its index (`cachetool.history.index`): the records
that `lineage` or `explain` of one fingerprint (or of one run) reads, without the others.

`lineage` needs the records that made the fingerprint and its ancestors (with `--descendants` or
`--all`, what was made from them too). `explain` needs those of the step, of its *siblings*
(records of the same call site, function, or moved function: `step_keys`) and of their
ancestors, the records of the run, and one record (or run summary) of an earlier run (to tell a
first run). Every
part holds every gc record and the source texts its records name.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cachetool.history.follow import source_hashes
from cachetool.history.index import chunks, index_path, segments_now, storable, up_to_date
from cachetool.history.records import LedgerRecord, StepRecord
from cachetool.history.segments import read_records_at


def open_index(root: str | os.PathLike[str]) -> sqlite3.Connection | None:
    """The up-to-date index of `root`'s own ledger, when its records can be read from it alone:
    None when the root records nothing, no index can be written, or a segment holds a line that
    is not a record or ends in a torn one (reading the whole ledger names them)."""
    root_path = Path(os.path.abspath(os.fspath(root)))
    segments = segments_now(root_path)
    if not segments:
        return None
    db = index_path(root_path)
    if db is None:
        return None
    try:
        con = up_to_date(db, root_path, segments)
    except (OSError, sqlite3.Error, UnicodeEncodeError):  # a path that is not UTF-8: no index
        return None
    clean = con.execute("SELECT count(*) FROM segments WHERE bad > 0 OR done != size").fetchone()[0] == 0
    return con if clean else None


class IndexedFingerprints:
    """Every fingerprint a step record of the root names, as a result or as a parent (internal
    ones too), asked of the index one at a time or by prefix
    (`cachetool.cache.lookup.KnownFingerprints`)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con

    def __contains__(self, fp: object, /) -> bool:
        if not isinstance(fp, str) or not storable(fp):
            return False
        return self._con.execute("SELECT 1 FROM known WHERE fp = ?", (fp,)).fetchone() is not None

    def starting_with(self, prefix: str) -> list[str]:
        if not storable(prefix):
            return []
        q = "SELECT fp FROM known WHERE fp >= ? AND fp < ? ORDER BY fp"
        return [r[0] for r in self._con.execute(q, (prefix, prefix + chr(0x10FFFF)))]


def segment_paths(con: sqlite3.Connection) -> list[Path]:
    """The segments the index was built from, in name order."""
    return [Path(r[0]) for r in con.execute("SELECT path FROM segments ORDER BY path")]


def closure(con: sqlite3.Connection, fps: set[str], *, up: bool = True, down: bool = False) -> set[str]:
    """`fps` with every fingerprint their records reach: parents (`up`) and children (`down`),
    transitively, through every step record (internal ones too)."""
    seen = set(fps)
    frontier = set(fps)
    while frontier:
        found: set[str] = set()
        for chunk, marks in chunks(sorted(frontier)):
            if up:
                q = f"SELECT par.parent FROM rec JOIN par ON par.id = rec.id WHERE rec.result IN ({marks})"
                found.update(r[0] for r in con.execute(q, chunk))
            if down:
                q = f"SELECT rec.result FROM par JOIN rec ON rec.id = par.id WHERE par.parent IN ({marks})"
                found.update(r[0] for r in con.execute(q, chunk) if r[0] is not None)
        frontier = found - seen
        seen |= frontier
    return seen


def _spans_of_results(con: sqlite3.Connection, fps: Iterable[str]) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for chunk, marks in chunks(sorted(fps)):
        q = f"SELECT path, offset, length FROM rec WHERE type NOT IN ('source', 'gc') AND result IN ({marks})"
        out += con.execute(q, chunk).fetchall()
    return out


def records_of_results(con: sqlite3.Connection, root: Path, fps: Iterable[str]) -> list[LedgerRecord]:
    """The records of `root`'s own ledger whose result is one of `fps` (every type but sources
    and gc records, internal ones too), alone."""
    spans: dict[str, set[tuple[int, int]]] = {}
    for path, offset, length in _spans_of_results(con, fps):
        spans.setdefault(path, set()).add((offset, length))
    return _read(root, spans)


def step_starts(root: str | os.PathLike[str], records: Iterable[LedgerRecord]) -> Iterable[LedgerRecord]:
    """Every `step-start` record of `root`'s own ledger (one per step that began to compute),
    read through its index; `records` (every record of the root) when it has none."""
    con = open_index(root)
    if con is None:
        return records
    spans: dict[str, set[tuple[int, int]]] = {}
    for path, offset, length in con.execute("SELECT path, offset, length FROM rec WHERE type = 'step-start'"):
        spans.setdefault(path, set()).add((offset, length))
    return _read(Path(os.path.abspath(os.fspath(root))), spans)


def records_of(
    con: sqlite3.Connection, root: Path, fps: set[str], more: Iterable[tuple[str, int, int]] = ()
) -> list[LedgerRecord]:
    """The records of `root`'s own ledger that made `fps` (every type, internal ones too), those
    at `more` (path, offset, length), every gc record, and the source texts they name."""
    spans: dict[str, set[tuple[int, int]]] = {}

    def add(rows: Iterable[tuple[str, int, int]]) -> None:
        for path, offset, length in rows:
            spans.setdefault(path, set()).add((offset, length))

    add(_spans_of_results(con, fps))
    add(con.execute("SELECT path, offset, length FROM rec WHERE type = 'gc'"))
    add(more)
    out = _read(root, spans)
    hashes = sorted({h for r in out if isinstance(r, StepRecord) for h in source_hashes(r)})
    spans = {}
    for chunk, marks in chunks(hashes):
        add(
            con.execute(
                f"SELECT path, offset, length FROM rec WHERE +type = 'source' AND result IN ({marks})", chunk
            )
        )
    return out + _read(root, spans)


#: `+type`: not through the index on `type` (most records are steps; the other terms select).
_STEPS = "+type IN ('transform', 'root') AND internal = 0"


def latest_run(con: sqlite3.Connection) -> str | None:
    """The run of the latest step record, or of a later start of a run that never ended (killed
    before its first step, in `load_dataset`'s own build) (`explain --last`)."""
    unended = (
        "type = 'run-start' AND NOT EXISTS (SELECT 1 FROM rec e WHERE e.run = rec.run AND e.type = 'run-end')"
    )
    row = con.execute(
        f"SELECT run FROM rec WHERE run != '' AND ({_STEPS} OR {unended}) "
        "ORDER BY time DESC, run DESC LIMIT 1"
    ).fetchone()
    return None if row is None else str(row[0])


def explain_records(
    con: sqlite3.Connection,
    root: Path,
    *,
    fps: set[str] | None = None,
    run: str | None = None,
    history: int = 0,
) -> list[LedgerRecord]:
    """The records `explain` of the steps that made `fps` (or of every step of `run`) reads: the
    records of those fingerprints and of the siblings it compares them with (the latest
    `1 + history` of each: `LedgerView.siblings`), with all their ancestors; every record of the
    run; for each run concerned, the earliest step of another run (was it the first run?)."""
    more: list[tuple[str, int, int]] = []
    cols = "result, type, output, run, time, skey, fkey, mkey, parents"
    if run is not None:
        more += con.execute("SELECT path, offset, length FROM rec WHERE run = ?", (run,)).fetchall()
        q = "SELECT result FROM rec WHERE run = ? AND result IS NOT NULL AND type NOT IN ('source', 'gc')"
        wanted = {r[0] for r in con.execute(q, (run,))}
        targets = con.execute(f"SELECT {cols} FROM rec WHERE {_STEPS} AND run = ?", (run,)).fetchall()
    else:
        wanted = set(fps or ())
        targets = []
        for chunk, marks in chunks(sorted(wanted)):
            targets += con.execute(
                f"SELECT {cols} FROM rec WHERE {_STEPS} AND result IN ({marks})", chunk
            ).fetchall()
    for target in targets:
        wanted.update(_siblings(con, target, 1 + history))
    for other in {t[3] for t in targets}:
        q = f"SELECT path, offset, length FROM rec WHERE {_STEPS} AND run != ? ORDER BY time LIMIT 1"
        more += con.execute(q, (other,)).fetchall()
        # a run a compaction summarised was a run too
        q = "SELECT path, offset, length FROM rec WHERE type = 'run-summary' AND run != ? ORDER BY time"
        more += con.execute(f"{q} LIMIT 1", (other,)).fetchall()
    return records_of(con, root, closure(con, wanted, up=True), more)


#: How many more siblings with other parents `explain` reads than it compares with: enough for
#: the splits of a DatasetDict mapped at one call site.
_OTHER_LINEAGES = 8


def _siblings(con: sqlite3.Connection, target: tuple[Any, ...], n: int) -> list[str]:
    """The results of the latest `n` siblings of a step (the rule of `LedgerView.siblings`).
    Among siblings with other parents the view prefers those of the same lineage (each split of
    a DatasetDict its own), which only the records tell: the latest `n + _OTHER_LINEAGES` of
    them are read."""
    result, type_, output, run, time, *keys, parents = target
    found: list[tuple[Any, ...]] = []
    for column, key in zip(("skey", "fkey", "mkey"), keys, strict=True):
        if key is None:
            continue
        q = (
            f"SELECT result, time, parents FROM rec WHERE {_STEPS} AND {column} = ? AND +type = ? "
            "AND output IS ? AND run != ? AND time < ? AND result IS NOT ? ORDER BY id"
        )
        found = con.execute(q, (key, type_, output, run, time, result)).fetchall()
        if found:
            break
    found.sort(key=lambda r: r[1], reverse=True)
    same = list(dict.fromkeys(r[0] for r in found if r[2] == parents))[:n]
    other = [x for x in dict.fromkeys(r[0] for r in found if r[2] != parents) if x not in same]
    out = same + (other[: n + _OTHER_LINEAGES] if len(same) < n else [])
    return [x for x in out if x is not None]


def _read(root: Path, spans: dict[str, set[tuple[int, int]]]) -> list[LedgerRecord]:
    out: list[LedgerRecord] = []
    for path, at in spans.items():
        out += read_records_at(Path(path), sorted(at), os.fspath(root))
    return out
