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
import struct
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


@dataclass(frozen=True, slots=True)
class ArrowSummary:
    """What the headers of one Arrow file say. Raw values only. Slots: a listing holds one per
    file, 100,000 of them in a large cache."""

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

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Explicit, so a summary read in another process pickles on Python 3.10 too (frozen
        # dataclasses with slots learned to pickle in 3.11).
        return ArrowSummary, (
            self.format,
            self.rows,
            self.batches,
            self.columns,
            self.fingerprint,
            self.metadata_json,
            self.eos,
            self.error,
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
    raw = (schema.metadata or {}).get(b"huggingface")
    return (None, None) if raw is None else _parse_hf_metadata(raw)


#: Files up to this size are read with one `read()`; larger ones are memory-mapped, so only the
#: pages holding message headers are touched, never column data.
READ_WHOLE_BYTES = 1 << 20


def read_summary(path: str | os.PathLike[str]) -> ArrowSummary:
    """Read the schema and batch headers of an Arrow IPC stream file. Never raises for a bad file.

    A well-formed stream is walked message by message in Python (the header of each message is
    a small flatbuffer: its type, the batch's row count and its body length); the schema is
    decoded by pyarrow once per distinct shape. Anything unusual (a cut, a dictionary batch,
    the IPC file format, garbage) is read again through pyarrow, whose reader says exactly what
    is wrong."""
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
        if size <= READ_WHOLE_BYTES:
            try:
                data = os.read(fd, size)
            except OSError as e:
                return ArrowSummary(UNREADABLE, error=e.strerror or str(e))
            if len(data) == size:
                fast = _walk_headers(data, size)
                if fast is not None:
                    return fast
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            return ArrowSummary(UNREADABLE, error=f"cannot map file: {e}")
        try:
            if size > READ_WHOLE_BYTES:
                fast = _walk_headers(mm, size)
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


_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_i64 = struct.Struct("<q").unpack_from
_i64x2 = struct.Struct("<qq").unpack_from

# Message.header_type values (Arrow's Message.fbs).
_SCHEMA_MESSAGE = 1
_RECORD_BATCH_MESSAGE = 3

#: Columns of the schemas met so far and where each column's node sits among a batch's field
#: nodes, keyed by the schema message's bytes around the `huggingface` metadata value (which
#: holds each file's own fingerprint): files of one dataset share them and pyarrow decodes each
#: shape once.
_Shape = tuple[tuple[tuple[str, str], ...], tuple[int, ...], int]
_SHAPES: dict[tuple[bytes, bytes], _Shape] = {}


_VTABLES: dict[int, Any] = {}


def _table(buf: Any, pos: int, lo: int, hi: int) -> tuple[int, tuple[int, ...]]:
    """(position, field offsets) of the flatbuffer table at `pos`, inside `buf[lo:hi]`."""
    if not lo <= pos <= hi - 4:
        raise ValueError("table outside the message")
    vt = pos - _i32(buf, pos)[0]
    if not lo <= vt <= hi - 4:
        raise ValueError("vtable outside the message")
    vsize = _u16(buf, vt)[0]
    if vsize < 4 or vt + vsize > hi:
        raise ValueError("vtable outside the message")
    n = (vsize - 4) >> 1
    unpack = _VTABLES.get(n)
    if unpack is None:
        unpack = _VTABLES[n] = struct.Struct(f"<{n}H").unpack_from
    return pos, unpack(buf, vt + 4)


def _at(t: tuple[int, tuple[int, ...]], i: int, n: int, hi: int) -> int:
    """Position of the `n` bytes of field `i` of table `t`; 0 when the field is absent."""
    pos, offs = t
    if i >= len(offs) or not offs[i]:
        return 0
    p = pos + offs[i]
    if p + n > hi:
        raise ValueError("field outside the message")
    return p


def _ref(buf: Any, p: int, hi: int) -> int:
    """Where the offset stored at `p` points (a table, vector or string)."""
    q = p + _i32(buf, p)[0]
    if not p < q <= hi - 4:
        raise ValueError("reference outside the message")
    return q


def _vector(buf: Any, p: int, item: int, hi: int) -> tuple[int, int]:
    """(first item position, length) of the vector referenced at `p`."""
    v = _ref(buf, p, hi)
    n = _i32(buf, v)[0]
    if n < 0 or v + 4 + n * item > hi:
        raise ValueError("vector outside the message")
    return v + 4, n


def _message(buf: Any, pos: int, size: int) -> tuple[int, tuple[int, tuple[int, ...]], int, int, int] | None:
    """The message at `pos`: (header type, header table, body length, next position, end of
    its flatbuffer), or None for the end-of-stream marker. ValueError for anything not well
    formed."""
    if pos + 8 > size or buf[pos : pos + 4] != CONTINUATION:
        raise ValueError("no message here")
    length = _i32(buf, pos + 4)[0]
    if length == 0:
        return None
    lo = pos + 8
    hi = lo + length
    if length < 0 or hi > size:
        raise ValueError("message past the end")
    msg = _table(buf, _ref(buf, lo, hi), lo, hi)
    version_at = _at(msg, 0, 2, hi)
    if not version_at or _u16(buf, version_at)[0] not in (3, 4):  # MetadataVersion V4, V5
        raise ValueError("a metadata version pyarrow may not read")
    kind_at = _at(msg, 1, 1, hi)
    kind = _u8(buf, kind_at)[0] if kind_at else 0
    header_at = _at(msg, 2, 4, hi)
    if not header_at:
        raise ValueError("message without header")
    header = _table(buf, _ref(buf, header_at, hi), lo, hi)
    body_at = _at(msg, 3, 8, hi)
    body = _i64(buf, body_at)[0] if body_at else 0
    end = hi + body
    if body < 0 or end > size:
        raise ValueError("body past the end")
    return kind, header, body, end, hi


def _walk_headers(buf: Any, size: int) -> ArrowSummary | None:
    """Rows, batches, columns and metadata of a well-formed stream; None for anything else (the
    caller reads it through pyarrow then). Raises nothing on a good file."""
    if size < 16 or buf[:4] != CONTINUATION:
        return None
    try:
        first = _message(buf, 0, size)
        if first is None:
            return None
        kind, schema, body, pos, hi = first
        if kind != _SCHEMA_MESSAGE or body != 0:
            return None
        meta_span = None
        meta_at = _at(schema, 2, 4, hi)
        if meta_at:
            start, n = _vector(buf, meta_at, 4, hi)
            for i in range(n):
                kv = _table(buf, _ref(buf, start + 4 * i, hi), 8, hi)
                key_at, value_at = _at(kv, 0, 4, hi), _at(kv, 1, 4, hi)
                if not key_at:
                    return None
                k0, kn = _vector(buf, key_at, 1, hi)
                if buf[k0 : k0 + kn] == b"huggingface":
                    if meta_span is not None or not value_at:
                        return None  # twice, or without a value: let pyarrow say what it makes of it
                    v0, vn = _vector(buf, value_at, 1, hi)
                    meta_span = (v0, v0 + vn)
        key = (
            (bytes(buf[:pos]), b"")
            if meta_span is None
            else (bytes(buf[: meta_span[0]]), bytes(buf[meta_span[1] : pos]))
        )
        shape = _SHAPES.get(key)
        if shape is None:
            shape = _decode_shape(buf, pos)
            if shape is None:
                return None
            if len(_SHAPES) > 10_000:
                _SHAPES.clear()
            _SHAPES[key] = shape
        columns, top_nodes, node_count = shape
        fingerprint = text = None
        if meta_span is not None:
            fingerprint, text = _parse_hf_metadata(bytes(buf[meta_span[0] : meta_span[1]]))
        rows = batches = 0
        while True:
            msg = _message(buf, pos, size)
            if msg is None:
                break
            kind, batch, body, end, hi = msg
            if kind != _RECORD_BATCH_MESSAGE:
                return None  # dictionary batches and the like: pyarrow's reader handles them
            length_at = _at(batch, 0, 8, hi)
            length = _i64(buf, length_at)[0] if length_at else 0
            nodes_at = _at(batch, 1, 4, hi)
            if length < 0 or not nodes_at:
                return None
            # What pyarrow's reader checks first: one node per array, each column as long as
            # the batch, every buffer inside the body and 8-byte aligned.
            n0, nn = _vector(buf, nodes_at, 16, hi)
            if nn != node_count or any(_i64(buf, n0 + 16 * i)[0] != length for i in top_nodes):
                return None
            buffers_at = _at(batch, 2, 4, hi)
            if buffers_at:
                b0, nb = _vector(buf, buffers_at, 16, hi)
                for i in range(nb):
                    off, blen = _i64x2(buf, b0 + 16 * i)
                    if off < 0 or blen < 0 or off + blen > body or off & 7:
                        return None
            rows += length
            batches += 1
            pos = end
            if pos == size:
                break  # no end-of-stream marker: the same answer pyarrow's reader gives below
    except Exception:  # anything unusual (struct.error, ValueError, ...): pyarrow's reader says what
        return None
    eos = buf[size - 8 : size] == EOS_MARKER
    error = None
    if not eos:
        error = f"no end-of-stream marker after {batches} batches ({rows} rows): the writer did not finish"
    return ArrowSummary(STREAM, rows, batches, columns, fingerprint, text, eos, error)


def _decode_shape(buf: Any, schema_end: int) -> _Shape | None:
    """Columns, the node index of each column and the node count of a batch, for the schema
    message `buf[:schema_end]`; None where pyarrow refuses it."""
    import pyarrow as pa

    try:
        schema = pa.ipc.read_schema(pa.py_buffer(bytes(buf[:schema_end])))
        top: list[int] = []
        count = 0
        for f in schema:
            top.append(count)
            count += _node_count(f.type)
    except Exception:  # pyarrow refuses it (ArrowException, UnicodeDecodeError, ...): its reader says why
        return None
    return tuple((f.name, str(f.type)) for f in schema), tuple(top), count


def _node_count(t: Any) -> int:
    """Field nodes an array of type `t` takes in a record batch (itself and its children)."""
    return 1 + sum(_node_count(t.field(i).type) for i in range(t.num_fields))


def _parse_hf_metadata(raw: bytes) -> tuple[str | None, str | None]:
    """(fingerprint, text) of a `huggingface` metadata value; (None, None) if it is not JSON."""
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None, None
    fp = doc.get("fingerprint") if isinstance(doc, dict) else None
    return (fp if isinstance(fp, str) else None), text


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
