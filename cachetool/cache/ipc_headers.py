"""The message headers of an Arrow IPC stream, walked in Python: each message's header is a
small flatbuffer (its type, a batch's row count and its body length), so a well-formed stream's
rows, batches, columns and `huggingface` metadata are read without pyarrow, which decodes each
distinct schema once. Anything unusual is left to pyarrow's reader (`cachetool.cache.arrow`)."""

from __future__ import annotations

import json
import re
import struct
from typing import Any, NamedTuple

from cachetool.cache.ipc_schema import _i32, _i64, _u8, _u16, decode_schema

EOS_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
CONTINUATION = b"\xff\xff\xff\xff"


class Headers(NamedTuple):
    """What the headers of a well-formed stream say (the fields of a stream's `ArrowSummary`)."""

    rows: int
    batches: int
    columns: tuple[tuple[str, str], ...]
    fingerprint: str | None
    metadata_json: str | None
    eos: bool
    error: str | None


_i64x2 = struct.Struct("<qq").unpack_from

# Message.header_type values (Arrow's Message.fbs).
_SCHEMA_MESSAGE = 1
_RECORD_BATCH_MESSAGE = 3

#: Columns of the schemas met so far, where each column's node sits among a batch's field
#: nodes, and the batch headers met in streams of that schema; keyed by the schema message's
#: bytes around the `huggingface` metadata value (which holds each file's own fingerprint):
#: files of one dataset share them and pyarrow decodes each shape once.
_Shape = tuple[tuple[tuple[str, str], ...], tuple[int, ...], int, "dict[bytes, tuple[int, int]]"]
#: Distinct batch headers remembered per schema: batches of equal length and layout (a map's
#: 1,000-row batches of fixed-width columns, across every file of a dataset) have equal header
#: bytes, and a header's checks depend on its bytes and its schema alone.
BATCH_HEADERS_PER_SHAPE = 256
#: ... and in all (a few hundred bytes each), and how many are remembered now.
BATCH_HEADERS_IN_ALL = 20_000
_BATCH_HEADERS = [0]
_SHAPES: dict[tuple[bytes, bytes], _Shape] = {}
#: Schema messages with `huggingface` metadata met so far, by length: (where the metadata value
#: starts and ends, where the message ends, its bytes before and after the value, its shape).
_SCHEMA_MESSAGES: dict[int, list[tuple[int, int, int, bytes, bytes, _Shape]]] = {}
#: At most 4 of one length and this many in all (each is a schema message, a few kB at most).
SCHEMA_MESSAGES_IN_ALL = 1000
_SCHEMAS_KEPT = [0]


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


def _hf_metadata_span(buf: Any, schema: tuple[int, tuple[int, ...]], hi: int) -> tuple[int, int] | None:
    """Where the value of the schema's `huggingface` metadata key lies: None without one,
    (-1, -1) when the key is there twice or without a value (pyarrow's reader says what it
    makes of that)."""
    span = None
    meta_at = _at(schema, 2, 4, hi)
    if not meta_at:
        return None
    start, n = _vector(buf, meta_at, 4, hi)
    for i in range(n):
        kv = _table(buf, _ref(buf, start + 4 * i, hi), 8, hi)
        key_at, value_at = _at(kv, 0, 4, hi), _at(kv, 1, 4, hi)
        if not key_at:
            return (-1, -1)
        k0, kn = _vector(buf, key_at, 1, hi)
        if buf[k0 : k0 + kn] == b"huggingface":
            if span is not None or not value_at:
                return (-1, -1)
            v0, vn = _vector(buf, value_at, 1, hi)
            span = (v0, v0 + vn)
    return span


def walk_headers(buf: Any, size: int) -> Headers | None:
    """Rows, batches, columns and metadata of a well-formed stream; None for anything else (the
    caller reads it through pyarrow then). Raises nothing on a good file.

    The batches are walked inline on purpose: this runs once per file of a cold listing, and the
    loop checks what pyarrow's reader checks first without a call per batch."""
    if size < 16 or buf[:4] != CONTINUATION:
        return None
    try:
        schema = _read_schema(buf, size)
        if schema is None:
            return None
        pos, (columns, top_nodes, node_count, known), fingerprint, text = schema
        rows = batches = 0
        while True:
            # A batch header met before (in this schema) passed every check below already:
            # only where its body ends is left to check.
            length = _i32(buf, pos + 4)[0] if pos + 8 <= size and buf[pos : pos + 4] == CONTINUATION else -1
            if length == 0:
                break  # the end-of-stream marker
            if length > 0:
                hit = known.get(bytes(buf[pos + 8 : pos + 8 + length]))
                if hit is not None and pos + 8 + length + hit[1] <= size:
                    rows += hit[0]
                    batches += 1
                    pos += 8 + length + hit[1]
                    if pos == size:
                        break
                    continue
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
            if len(known) < BATCH_HEADERS_PER_SHAPE and _BATCH_HEADERS[0] < BATCH_HEADERS_IN_ALL:
                known[bytes(buf[pos + 8 : hi])] = (length, body)
                _BATCH_HEADERS[0] += 1
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
    return Headers(rows, batches, columns, fingerprint, text, eos, error)


def _read_schema(buf: Any, size: int) -> tuple[int, _Shape, str | None, str | None] | None:
    """The schema message at the start of the stream: where it ends, the shape of its columns
    (decoded once per distinct schema), and the fingerprint and text of its `huggingface`
    metadata; None when the stream does not start with a schema this module reads."""
    length = _i32(buf, 4)[0]
    meta_span: tuple[int, int] | None
    for seen in _SCHEMA_MESSAGES.get(length, ()):
        # The same message but for the metadata value's bytes (another fingerprint of the same
        # length): the same flatbuffer, so the same shape and the value in the same place.
        v0, v1, pos, head, tail, shape = seen
        if pos <= size and buf[:v0] == head and buf[v1:pos] == tail:
            meta_span = (v0, v1)
            break
    else:
        first = _message(buf, 0, size)
        if first is None:
            return None
        kind, schema, body, pos, hi = first
        if kind != _SCHEMA_MESSAGE or body != 0:
            return None
        meta_span = _hf_metadata_span(buf, schema, hi)
        if meta_span == (-1, -1):
            return None
        key = (
            (bytes(buf[:pos]), b"")
            if meta_span is None
            else (bytes(buf[: meta_span[0]]), bytes(buf[meta_span[1] : pos]))
        )
        known = _SHAPES.get(key)
        if known is None:
            known = _decode_shape(buf, pos)
            if known is None:
                return None
            if len(_SHAPES) > 10_000:
                _SHAPES.clear()
                _SCHEMA_MESSAGES.clear()
                _BATCH_HEADERS[0] = _SCHEMAS_KEPT[0] = 0
            _SHAPES[key] = known
        shape = known
        if (
            meta_span is not None
            and _SCHEMAS_KEPT[0] < SCHEMA_MESSAGES_IN_ALL
            and len(_SCHEMA_MESSAGES.get(length, ())) < 4
            and _value_unread(buf, pos, meta_span)
        ):
            _SCHEMA_MESSAGES.setdefault(length, []).append((*meta_span, pos, *key, shape))
            _SCHEMAS_KEPT[0] += 1
    fingerprint = text = None
    if meta_span is not None:
        fingerprint, text = parse_hf_metadata(bytes(buf[meta_span[0] : meta_span[1]]))
    return pos, shape, fingerprint, text


def _value_unread(buf: Any, end: int, span: tuple[int, int]) -> bool:
    """Whether the schema message `buf[:end]` reads as the same message, with its metadata value
    at `span`, when the value's bytes are all 0xFF: then reading it never looked inside the
    value (any offset, length or type read there would have been out of bounds), and any message
    equal to it outside the value reads the same."""
    if end > 0xFFFF:
        return False  # a 16-bit field read inside the value could still point inside the message
    v0, v1 = span
    probe = bytes(buf[:v0]) + b"\xff" * (v1 - v0) + bytes(buf[v1:end])
    try:
        msg = _message(probe, 0, end)
        return (
            msg is not None
            and (msg[0], msg[2], msg[3]) == (_SCHEMA_MESSAGE, 0, end)
            and _hf_metadata_span(probe, msg[1], msg[4]) == span
        )
    except Exception:  # it reads into the value: never taken as a pattern
        return False


def _decode_shape(buf: Any, schema_end: int) -> _Shape | None:
    """Columns, the node index of each column and the node count of a batch, for the schema
    message `buf[:schema_end]`; None where pyarrow refuses it. Decoded in Python where
    `ipc_schema` reads the message exactly as pyarrow does (the types `datasets` writes), so a
    listing of an ordinary cache never imports pyarrow; by pyarrow otherwise."""
    decoded = decode_schema(bytes(buf[:schema_end]))
    if decoded is not None:
        return (*decoded, {})
    return _pyarrow_shape(buf, schema_end)


def _pyarrow_shape(buf: Any, schema_end: int) -> _Shape | None:
    """`_decode_shape` by pyarrow."""
    import pyarrow as pa

    try:
        schema = pa.ipc.read_schema(pa.py_buffer(bytes(buf[:schema_end])))
        top: list[int] = []
        count = 0
        for f in schema:
            top.append(count)
            count += _node_count(f.type)
        columns = tuple((f.name, str(f.type)) for f in schema)
    except Exception:  # pyarrow refuses it (ArrowException, UnicodeDecodeError, ...): its reader says why
        return None
    return columns, tuple(top), count, {}


def _node_count(t: Any) -> int:
    """Field nodes an array of type `t` takes in a record batch (itself and its children)."""
    return 1 + sum(_node_count(t.field(i).type) for i in range(t.num_fields))


#: `huggingface` metadata values read so far, as the bytes before and after the fingerprint:
#: the value of every file of a dataset is the same JSON text but for its fingerprint, and a
#: value of one of these forms is read without parsing it again (most recent first).
_HF_FORMS: list[tuple[bytes, bytes]] = []
HF_FORMS_KEPT = 16
#: ... each at most this long.
HF_FORM_BYTES = 1 << 20
#: Fingerprints a form stands for: no character JSON escapes or ends a string with.
_PLAIN_FINGERPRINT = re.compile(rb"[0-9A-Za-z_.-]+")
#: Two fingerprints, of different lengths and letters no JSON token outside a string holds.
_PROBES = (b"QqQ", b"ZzZzZ")


def parse_hf_metadata(raw: bytes) -> tuple[str | None, str | None]:
    """(fingerprint, text) of a `huggingface` metadata value; (None, None) if it is not JSON."""
    forms = _HF_FORMS
    for i, (head, tail) in enumerate(forms):
        end = len(raw) - len(tail)
        if end > len(head) and raw.startswith(head) and raw.endswith(tail):
            fp = raw[len(head) : end]
            if fp.isalnum() or _PLAIN_FINGERPRINT.fullmatch(fp):  # isalnum: ASCII letters, digits
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    break
                if i:
                    forms.insert(0, forms.pop(i))
                return fp.decode("ascii"), text
    parsed = _parse_hf_json(raw)
    if parsed[0] and len(raw) <= HF_FORM_BYTES:
        _learn_form(raw, parsed[0].encode("utf-8"))
    return parsed


def _parse_hf_json(raw: bytes) -> tuple[str | None, str | None]:
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None, None
    fp = doc.get("fingerprint") if isinstance(doc, dict) else None
    return (fp if isinstance(fp, str) else None), text


def _learn_form(raw: bytes, fp: bytes) -> None:
    """Remember `raw` as a form when its fingerprint `fp` occurs in it once, and the text with any
    plain fingerprint in that place is JSON whose fingerprint is that one: the place is then the
    whole content of the `fingerprint` string (two probes of other lengths and letters, which
    would be invalid JSON anywhere but inside a string and not after a backslash, say so), and
    any other plain fingerprint there parses to the same document with that fingerprint."""
    if not _PLAIN_FINGERPRINT.fullmatch(fp) or raw.count(fp) != 1:
        return
    at = raw.index(fp)
    head, tail = raw[:at], raw[at + len(fp) :]
    for probe in _PROBES:
        if _parse_hf_json(head + probe + tail)[0] != probe.decode("ascii"):
            return
    _HF_FORMS.insert(0, (head, tail))
    del _HF_FORMS[HF_FORMS_KEPT:]
