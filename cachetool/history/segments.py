"""Reading segments: the typed records of one segment file, every bad line skipped with a warning.

A line that is not a record of this schema (bad JSON, more than `MAX_LINE_BYTES`, nested too
deeply, a field of the wrong type, an unknown `type`) is skipped with a warning naming the file
and line, never an exception; a torn last line (a writer killed mid-record) too. Only regular
files are read (a FIFO is not waited on, a symlink to `/dev/zero` is not read), at most
`MAX_SEGMENT_BYTES` each.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from cachetool.cache.roots import SEGMENT_SUFFIX, is_segment_name, ledger_dirs
from cachetool.cache.store import NotRegularFile, open_state
from cachetool.history.records import parse_record
from cachetool.history.records.base import BadRecord, LedgerRecord

#: A record longer than this is not one cachetool wrote (source texts stop at 20,000 characters,
#: argument summaries at 2.5 kB each): skipped with a warning.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: A segment is read up to this size; the rest is skipped with a warning (a runaway writer, or a
#: file that is not a segment).
MAX_SEGMENT_BYTES = 256 * 1024 * 1024


#: The name of a compacted segment starts with this (`cachetool.history.compact`).
COMPACTED_PREFIX = "compacted-"


def iter_segments(root: str | os.PathLike[str]) -> Iterator[Path]:
    """Segment files of `root` (own ledger and user fallback), in name order; a segment a
    compacted segment replaces is left out while it still has the size it was read at (a
    compaction that was killed before removing it)."""
    for d in ledger_dirs(root):
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(SEGMENT_SUFFIX))
        except OSError:
            continue
        replaced = replaced_segments(d, [n for n in names if n.startswith(COMPACTED_PREFIX)])
        for n in names:
            if not still_replaced(d / n, replaced):
                yield d / n


def still_replaced(path: Path, replaced: dict[str, int]) -> bool:
    """The segment at `path` is one a compacted segment replaces and still has the size it was
    read at (a compaction killed before removing it): readers skip it, the next compaction
    removes it."""
    return path.name in replaced and segment_size(path) == replaced[path.name]


def replaced_segments(folder: Path, compacted: list[str]) -> dict[str, int]:
    """{name: size} of the segments the compacted segments `compacted` of `folder` replace (each
    names them in its first record)."""
    out: dict[str, int] = {}
    for name in compacted:
        try:
            fd = open_state(folder / name)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                first = f.readline(MAX_LINE_BYTES)
        except OSError:
            continue
        finally:
            os.close(fd)
        rec = _parse_line(folder / name, 1, first.rstrip(b"\n"), [], None)
        replaces = getattr(rec, "replaces", None) if rec is not None and rec.type == "compaction" else None
        out.update((n, size) for n, size in replaces or () if is_segment_name(n))
    return out


def segment_size(path: Path) -> int | None:
    """The size of the file at `path` (not followed if a symlink); None if there is none."""
    try:
        return path.lstat().st_size
    except OSError:
        return None


def read_partly(path: Path) -> bool:
    """Readers read only part of the segment at `path`: it holds more than `MAX_SEGMENT_BYTES`."""
    return (segment_size(path) or 0) > MAX_SEGMENT_BYTES


def _read_capped(path: Path, warnings: list[str]) -> bytes | None:
    """The first MAX_SEGMENT_BYTES of a regular file; None (with a
    warning) for anything else: a FIFO is never waited on, a symlink to /dev/zero is never read."""
    try:
        fd = open_state(path)
    except NotRegularFile:
        warnings.append(f"{path}: skipped: not a regular file")
        return None
    except OSError as e:
        warnings.append(f"{path}: {e.strerror or e}")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            warnings.append(f"{path}: skipped: not a regular file")
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_SEGMENT_BYTES + 1)
    except OSError as e:
        warnings.append(f"{path}: {e.strerror or e}")
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_SEGMENT_BYTES:
        cut = data.rfind(b"\n", 0, MAX_SEGMENT_BYTES) + 1
        warnings.append(
            f"{path}: read the first {cut} bytes only (a segment holds at most {MAX_SEGMENT_BYTES})"
        )
        data = data[:cut]
    return data


def read_segment(
    path: Path, warnings: list[str] | None = None, read_from: str | None = None
) -> list[LedgerRecord]:
    """The records of one segment, typed. A last line without its newline is a record torn by a
    killed writer; it and every line that is not a valid record (bad JSON, too long, nested too
    deeply, a field of the wrong type, an unknown type) are skipped with a warning naming the line."""
    return [rec for _, rec in read_segment_from(path, warnings, read_from)[0]]


def read_segment_from(
    path: Path, warnings: list[str] | None = None, read_from: str | None = None
) -> tuple[list[tuple[int, LedgerRecord]], int, int]:
    """`read_segment` with each record's offset, the offset after the last whole line, and how
    many whole lines were skipped."""
    sink: list[str] = [] if warnings is None else warnings
    data = _read_capped(path, sink)
    if not data:
        return [], 0, 0
    whole = data.rfind(b"\n") + 1
    if data[whole:].strip():
        sink.append(
            f"{path}: skipped a torn last record ({len(data) - whole} bytes; its writer was killed mid-write)"
        )
    out = []
    skipped = len(sink)
    at = 0
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        rec = _parse_line(path, number, line, sink, read_from)
        if rec is not None:
            out.append((at, rec))
        at += len(line) + 1
    return out, whole, len(sink) - skipped


def _parse_line(
    path: Path, number: int, line: bytes, sink: list[str], read_from: str | None
) -> LedgerRecord | None:
    """One line's record, or None (with a warning unless blank)."""
    if not line.strip():
        return None
    if len(line) > MAX_LINE_BYTES:
        sink.append(f"{path}:{number}: skipped a record of {len(line)} bytes (at most {MAX_LINE_BYTES})")
        return None
    try:
        obj = json.loads(line)
    except RecursionError:
        sink.append(f"{path}:{number}: skipped a record nested too deeply")
        return None
    except ValueError:
        sink.append(f"{path}:{number}: skipped an unreadable record")
        return None
    try:
        return parse_record(obj, read_from)
    except BadRecord as e:
        sink.append(f"{path}:{number}: skipped a record: {e}")
    except RecursionError:
        sink.append(f"{path}:{number}: skipped a record nested too deeply")
    return None
