"""Cheap reads of Arrow IPC stream files: schema, metadata, row count and completeness.

Nothing here reads column data. The file is memory-mapped and its messages are walked batch by
batch; pyarrow slices the map without copying, so the cost grows with the number of batches, not
with bytes. Files are opened with `O_NOATIME` where the kernel allows it, so a listing never moves
a file's access time.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass
from typing import Any

EOS_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
CONTINUATION = b"\xff\xff\xff\xff"
FILE_MAGIC = b"ARROW1"

# Formats a file can be found in.
STREAM = "stream"
IPC_FILE = "ipc-file"
EMPTY = "empty"
NOT_ARROW = "not-arrow"
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class ArrowSummary:
    """What the headers of one Arrow file say. Raw values only."""

    format: str
    rows: int | None = None
    batches: int | None = None
    columns: tuple[tuple[str, str], ...] = ()  # (name, Arrow type)
    fingerprint: str | None = None  # the `fingerprint` in the `huggingface` schema metadata
    metadata_json: str | None = None  # the whole `huggingface` metadata value, as written
    eos: bool = False  # ends with the end-of-stream marker: the writer closed it
    error: str | None = None  # why it cannot be read to its end (truncated, garbage, ...)

    @property
    def is_indices(self) -> bool:
        """An indices mapping (filter, sort, shuffle, train_test_split): one `indices: uint64` column."""
        return self.columns == (("indices", "uint64"),)

    @property
    def complete(self) -> bool:
        return self.format == STREAM and self.eos and self.error is None

    @property
    def features(self) -> dict[str, Any] | None:
        """`info.features` from the `huggingface` metadata (the `datasets` feature types)."""
        if not self.metadata_json:
            return None
        try:
            features = (json.loads(self.metadata_json).get("info") or {}).get("features")
        except (ValueError, AttributeError, RecursionError):
            return None
        return features if isinstance(features, dict) else None

    def to_row(self) -> list[Any]:
        """A compact, JSON-able form for the read index."""
        return [
            self.format,
            self.rows,
            self.batches,
            [list(c) for c in self.columns],
            self.fingerprint,
            self.metadata_json,
            self.eos,
            self.error,
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> ArrowSummary:
        fmt, rows, batches, columns, fp, meta, eos, error = row
        return cls(
            fmt, rows, batches, tuple((str(n), str(t)) for n, t in columns), fp, meta, bool(eos), error
        )


def open_noatime(path: str | os.PathLike[str]) -> int:
    """Open read-only without following a final symlink and, where allowed, without touching atime."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    noatime = getattr(os, "O_NOATIME", 0)
    if noatime:
        try:
            return os.open(path, flags | noatime)
        except PermissionError:
            pass  # O_NOATIME needs ownership of the file; fall back to a plain open.
    return os.open(path, flags)


def _parse_metadata(schema: Any) -> tuple[str | None, str | None]:
    meta = schema.metadata or {}
    raw = meta.get(b"huggingface")
    if raw is None:
        return None, None
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None, None
    fp = doc.get("fingerprint") if isinstance(doc, dict) else None
    return (fp if isinstance(fp, str) else None), text


def read_summary(path: str | os.PathLike[str]) -> ArrowSummary:
    """Read the schema and batch headers of an Arrow IPC stream file. Never raises for a bad file."""
    try:
        fd = open_noatime(path)
    except PermissionError:
        return ArrowSummary(UNREADABLE, error="permission denied")
    except OSError as e:
        return ArrowSummary(UNREADABLE, error=e.strerror or str(e))
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return ArrowSummary(EMPTY, rows=0, batches=0, error="empty file (0 bytes)")
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            return ArrowSummary(UNREADABLE, error=f"cannot map file: {e}")
        try:
            return _walk(mm, size)
        except Exception as e:  # any damage pyarrow trips over is a finding, not a crash
            # pyarrow raises more than ArrowInvalid on damaged headers: ArrowNotImplementedError
            # ("Integers with more than 64 bits"), ArrowKeyError (a dictionary id), a
            # UnicodeDecodeError for a column name that is not UTF-8, ...
            return ArrowSummary(UNREADABLE, error=f"damaged Arrow file: {_describe(e)}")
        finally:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a pyarrow view outlived the walk; GC closes it
                pass
    finally:
        os.close(fd)


def _walk(mm: mmap.mmap, size: int) -> ArrowSummary:
    import pyarrow as pa

    head = mm[:8]
    if head[:6] == FILE_MAGIC:
        return _ipc_file(mm)
    if head[:4] != CONTINUATION:
        return ArrowSummary(NOT_ARROW, error=f"not an Arrow IPC stream (starts with {head[:8].hex()})")
    eos = size >= 8 and mm[size - 8 : size] == EOS_MARKER
    buf = pa.py_buffer(mm)
    try:
        try:
            reader = pa.ipc.open_stream(pa.BufferReader(buf))
        except (pa.ArrowInvalid, OSError) as e:
            return ArrowSummary(NOT_ARROW, error=f"unreadable schema: {_one_line(e)}")
        except Exception as e:  # see read_summary
            return ArrowSummary(UNREADABLE, error=f"unreadable schema: {_describe(e)}")
        schema = reader.schema
        try:
            columns = tuple((f.name, str(f.type)) for f in schema)
        except UnicodeDecodeError:
            return ArrowSummary(UNREADABLE, error="unreadable schema: a column name is not UTF-8")
        fingerprint, features = _parse_metadata(schema)
        rows = batches = 0
        error = None
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError) as e:
                error = f"truncated after {batches} batches ({rows} rows): {_one_line(e)}"
                break
            except Exception as e:  # see read_summary
                error = f"damaged after {batches} batches ({rows} rows): {_describe(e)}"
                break
            rows += batch.num_rows
            batches += 1
            del batch
        if error is None and not eos:
            error = (
                f"no end-of-stream marker after {batches} batches ({rows} rows): the writer did not finish"
            )
        del reader
        return ArrowSummary(STREAM, rows, batches, columns, fingerprint, features, eos, error)
    finally:
        del buf


def _ipc_file(mm: mmap.mmap) -> ArrowSummary:
    import pyarrow as pa

    buf = pa.py_buffer(mm)
    try:
        try:
            reader = pa.ipc.open_file(pa.BufferReader(buf))
            schema = reader.schema
            rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
            fp, features = _parse_metadata(schema)
            columns = tuple((f.name, str(f.type)) for f in schema)
            n = reader.num_record_batches
            del reader
            return ArrowSummary(
                IPC_FILE,
                rows,
                n,
                columns,
                fp,
                features,
                False,
                "Arrow IPC file format, but datasets reads the stream format",
            )
        except (pa.ArrowInvalid, OSError) as e:
            return ArrowSummary(NOT_ARROW, error=f"damaged Arrow IPC file: {_one_line(e)}")
        except Exception as e:  # see read_summary
            return ArrowSummary(UNREADABLE, error=f"damaged Arrow IPC file: {_describe(e)}")
    finally:
        del buf


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _describe(e: BaseException) -> str:
    """The exception's class and message on one line ("ArrowNotImplementedError: Integers ...")."""
    if isinstance(e, UnicodeDecodeError):
        return "a name or metadata string is not UTF-8"
    text = _one_line(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
