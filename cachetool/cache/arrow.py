"""Cheap reads of Arrow IPC stream files: schema, metadata, row count and completeness.

Nothing here reads column data. A small file is read with one `read()`, a large one
memory-mapped, and its message headers are walked in Python (`cachetool.cache.ipc`), so
the cost grows with the number of batches, not with bytes; anything unusual is read again through
pyarrow's reader, which names the damage. Files are opened with `O_NOATIME` where the kernel
allows it, so a listing never moves a file's access time.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from cachetool.cache.ipc import CONTINUATION, EOS_MARKER, Headers, no_eos, parse_hf_metadata, walk_headers
from cachetool.cache.model import fast_init

FILE_MAGIC = b"ARROW1"

# Formats a file can be found in.
STREAM = "stream"
IPC_FILE = "ipc-file"
EMPTY = "empty"
NOT_ARROW = "not-arrow"
UNREADABLE = "unreadable"


@fast_init
@dataclass(frozen=True, slots=True)
class ArrowSummary:
    """What the headers of one Arrow file say. Raw values only. Slots: a listing holds one per
    file, 100,000 of them in a large cache."""

    format: str
    rows: int | None = None
    batches: int | None = None
    columns: tuple[tuple[str, str], ...] = ()  # (name, Arrow type)
    fingerprint: str | None = None  # the `fingerprint` in the `huggingface` schema metadata
    #: The `huggingface` metadata value with the file's own fingerprint replaced by `FP_MARK`
    #: (`metadata_template(text, fingerprint)`): files of one dataset share one such text.
    metadata_template: str | None = None
    eos: bool = False  # ends with the end-of-stream marker: the writer closed it
    error: str | None = None  # why it cannot be read to its end (truncated, garbage, ...)

    @property
    def metadata_json(self) -> str | None:
        """The whole `huggingface` metadata value, as written."""
        t = self.metadata_template
        if t is None or not self.fingerprint:
            return t
        return t.replace(FP_MARK, self.fingerprint)

    @property
    def is_indices(self) -> bool:
        """An indices mapping (filter, sort, shuffle, train_test_split): one `indices: uint64` column."""
        return self.columns == (("indices", "uint64"),)

    @property
    def complete(self) -> bool:
        return self.format == STREAM and self.eos and self.error is None

    def resumable_rows(self, folder: str | os.PathLike[str]) -> int:
        """For a `tmp*` file in `folder`: the rows of a map's partial output a traced rerun may
        reuse (complete batches of a step whose `cache-<fp>.arrow` is not there; an indices
        mapping is a filter's, sort's, ...: those do not resume); 0 otherwise."""
        fp, rows = self.fingerprint, self.rows
        if not fp or not rows or self.is_indices:
            return 0
        return 0 if os.path.exists(os.path.join(folder, f"cache-{fp}.arrow")) else rows

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

    def fields(self) -> tuple[Any, ...]:
        """The values the read index keeps of the summary, in the order of its fields."""
        return _FIELDS(self)


_FIELDS = attrgetter(*(f.name for f in dataclasses.fields(ArrowSummary)))


#: Stands for a file's own fingerprint in a metadata template. JSON text never holds a raw NUL
#: character, so the substitution is exact both ways.
FP_MARK = "\x00"
_TEMPLATES: dict[str, str] = {}


def metadata_template(text: str | None, fingerprint: str | None) -> str | None:
    """`text` with `fingerprint` replaced by `FP_MARK`, one shared string per distinct result."""
    if text is None:
        return None
    t = text.replace(fingerprint, FP_MARK) if fingerprint else text
    shared = _TEMPLATES.get(t)
    if shared is None:
        if len(_TEMPLATES) > 10_000:
            _TEMPLATES.clear()
        shared = _TEMPLATES[t] = t
    return shared


def _stream(h: Headers | None) -> ArrowSummary | None:
    if h is None:
        return None
    rows, batches, columns, fp, text, eos, error = h
    return ArrowSummary(STREAM, rows, batches, columns, fp, metadata_template(text, fp), eos, error)


_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NOATIME = getattr(os, "O_NOATIME", 0)


def open_noatime(path: str | os.PathLike[str]) -> int:
    """Open read-only without following a final symlink and, where allowed, without touching atime."""
    if _NOATIME:
        try:
            return os.open(path, _OPEN_FLAGS | _NOATIME)
        except PermissionError:
            pass  # O_NOATIME needs ownership of the file; fall back to a plain open.
    return os.open(path, _OPEN_FLAGS)


#: Files up to this size are read with one `read()`; larger ones are memory-mapped, so only the
#: pages holding message headers are touched, never column data.
READ_WHOLE_BYTES = 1 << 20

#: The largest schema message (the header holding the columns and the `huggingface` metadata)
#: that is read: `datasets` writes a few kB (a few MB for a ClassLabel of a million names). A
#: larger one is a problem of its file, reported without reading it: decoding a 300 MB header took
#: gigabytes of memory.
MAX_SCHEMA_BYTES = 64 << 20


def schema_too_large(head: bytes, size: int) -> str | None:
    """Why the stream (or IPC file) of `size` bytes starting with `head` (its first 16 bytes) is
    not read: its schema message is longer than `MAX_SCHEMA_BYTES`; None when it is not, or when
    the file is too short to hold what its first bytes announce (damage, which the readers name)."""
    skip = 8 if head[:6] == FILE_MAGIC else 0
    at = skip + (4 if head[skip : skip + 4] == CONTINUATION else 0)
    if len(head) < at + 4:
        return None
    length = int.from_bytes(head[at : at + 4], "little", signed=True)
    if length <= MAX_SCHEMA_BYTES or length > size - at - 4:
        return None
    return (
        f"schema header of {length:,} bytes, larger than the {MAX_SCHEMA_BYTES >> 20} MiB "
        "cachetool reads (datasets writes a few kB): not read"
    )


def read_summary(path: str | os.PathLike[str], size_hint: int = -1) -> ArrowSummary:
    """Read the schema and batch headers of an Arrow IPC stream file. Never raises for a bad file.
    `size_hint`: the file's size as a `stat` just said (a listing has it), which spares an
    `fstat` when one `read()` finds the file that long. A well-formed stream is walked by
    `cachetool.cache.ipc`; anything else (a cut, a dictionary batch, the IPC file format, garbage)
    is read by pyarrow's reader, which says exactly what is wrong."""
    try:
        fd = open_noatime(path)
    except PermissionError:
        return ArrowSummary(UNREADABLE, error="permission denied")
    except OSError as e:
        return ArrowSummary(UNREADABLE, error=e.strerror or str(e))
    try:
        hinted = 0 < size_hint <= READ_WHOLE_BYTES
        size = size_hint if hinted else os.fstat(fd).st_size
        if size == 0:
            return ArrowSummary(EMPTY, rows=0, batches=0, error="empty file (0 bytes)")
        if size <= READ_WHOLE_BYTES:
            try:
                # With a hint, one byte more: a file that changed since its `stat` reads longer.
                data = os.read(fd, size + hinted)
            except OSError as e:
                return ArrowSummary(UNREADABLE, error=e.strerror or str(e))
            if len(data) == size:
                fast = _stream(walk_headers(data, size))
                if fast is not None:
                    return fast
            elif hinted:
                return read_summary(path)  # not the size the listing saw: read it as it is now
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            return ArrowSummary(UNREADABLE, error=f"cannot map file: {e}")
        try:
            too_large = schema_too_large(mm[:16], size)
            if too_large is not None:
                return ArrowSummary(UNREADABLE, error=too_large)
            if size > READ_WHOLE_BYTES:
                fast = _stream(walk_headers(mm, size))
                if fast is not None:
                    return fast
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
    """What pyarrow's reader reads in the stream (or IPC file) `mm`, and the damage it names."""
    import pyarrow as pa

    head = mm[:8]
    ipc_file = head[:6] == FILE_MAGIC
    if not ipc_file and head[:4] != CONTINUATION:
        return ArrowSummary(NOT_ARROW, error=f"not an Arrow IPC stream (starts with {head[:8].hex()})")
    what = "damaged Arrow IPC file" if ipc_file else "unreadable schema"
    rows = batches = 0
    buf = pa.py_buffer(mm)
    try:
        try:
            reader = (pa.ipc.open_file if ipc_file else pa.ipc.open_stream)(pa.BufferReader(buf))
            if ipc_file:
                batches = reader.num_record_batches
                rows = sum(reader.get_batch(i).num_rows for i in range(batches))
            columns = tuple((f.name, str(f.type)) for f in reader.schema)
        except (pa.ArrowInvalid, OSError) as e:
            return ArrowSummary(NOT_ARROW, error=f"{what}: {_one_line(e)}")
        except Exception as e:  # see read_summary
            names = isinstance(e, UnicodeDecodeError) and not ipc_file
            return ArrowSummary(
                UNREADABLE, error=f"{what}: {'a column name is not UTF-8' if names else _describe(e)}"
            )
        raw = (reader.schema.metadata or {}).get(b"huggingface")
        fingerprint, text = (None, None) if raw is None else parse_hf_metadata(raw)
        eos = not ipc_file and mm[size - 8 : size] == EOS_MARKER
        error = "Arrow IPC file format, but datasets reads the stream format" if ipc_file else None
        while not ipc_file:
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
            error = no_eos(batches, rows)
        del reader
        template = metadata_template(text, fingerprint)
        return ArrowSummary(
            IPC_FILE if ipc_file else STREAM, rows, batches, columns, fingerprint, template, eos, error
        )
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
