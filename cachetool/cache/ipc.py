"""The hand-written reader of Arrow IPC streams, so that a listing reads a cache without importing
pyarrow: each message's header is a small flatbuffer, checked as pyarrow's flatbuffers verifier
checks it and read as pyarrow reads it (`ipc/metadata_internal.cc`), for the column types
`datasets` writes. Anything else (dictionaries, extension types, field metadata, maps, unions, a
value pyarrow would refuse or might read differently) is declined and read by pyarrow's reader
(`cachetool.cache.arrow`), so what is accepted here reads exactly as pyarrow reads it
(tests/test_ipc_schema.py compares them; docs/performance.md).
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

EOS_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
CONTINUATION = b"\xff\xff\xff\xff"

_Table = tuple[int, tuple[int, ...]]
_Columns = tuple[tuple[str, str], ...]
#: What the headers of a well-formed stream say: rows, batches, columns, the fingerprint and text
#: of the `huggingface` metadata, whether it ends with the end-of-stream marker, and why not.
Headers = tuple[int, int, _Columns, "str | None", "str | None", bool, "str | None"]

# Little-endian reads at an offset.
_u8 = struct.Struct("<B").unpack_from
_i16 = struct.Struct("<h").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from
_i64x2 = struct.Struct("<qq").unpack_from
_SCALARS = {1: _u8, 2: _i16, 4: _i32, 8: _i64}
_VTABLES: dict[int, Any] = {}

# Message.header_type values (Arrow's Message.fbs).
_SCHEMA_MESSAGE = 1
_RECORD_BATCH_MESSAGE = 3

#: Deeper field nesting than this is left to pyarrow (its verifier stops at 128 tables deep).
MAX_NESTING = 32

# Type union members (Arrow's Schema.fbs) read here: their number, the fields of their table.
_NULL, _INT, _FLOAT, _BINARY, _UTF8, _BOOL, _DECIMAL, _DATE, _TIME, _TIMESTAMP = range(1, 11)
_LIST, _STRUCT, _FIXED_BINARY, _FIXED_LIST, _DURATION = 12, 13, 15, 16, 18
_LARGE_BINARY, _LARGE_UTF8, _LARGE_LIST = 19, 20, 21
_UNITS = ("s", "ms", "us", "ns")
#: Types whose text follows from a few scalars of their table: {kind: ((size, default) of each
#: field, {their values: the text})}; other values are declined.
_SCALAR_TYPES: dict[int, tuple[tuple[tuple[int, int], ...], dict[tuple[int, ...], str]]] = {
    _NULL: ((), {(): "null"}),
    _BINARY: ((), {(): "binary"}),
    _UTF8: ((), {(): "string"}),
    _BOOL: ((), {(): "bool"}),
    _LARGE_BINARY: ((), {(): "large_binary"}),
    _LARGE_UTF8: ((), {(): "large_string"}),
    _INT: (((4, 0), (1, 0)), {(w, s): f"{'' if s else 'u'}int{w}" for w in (8, 16, 32, 64) for s in (0, 1)}),
    _FLOAT: (((2, 0),), {(0,): "halffloat", (1,): "float", (2,): "double"}),
    _DATE: (((2, 1),), {(0,): "date32[day]", (1,): "date64[ms]"}),
    _TIME: (
        ((2, 1), (4, 32)),
        {(u, w): f"time{w}[{_UNITS[u]}]" for u, w in ((0, 32), (1, 32), (2, 64), (3, 64))},
    ),
    _DURATION: (((2, 1),), {(u,): f"duration[{unit}]" for u, unit in enumerate(_UNITS)}),
}
_LISTS = {_LIST: "list", _LARGE_LIST: "large_list", _FIXED_LIST: "fixed_size_list"}
#: Decimal bit widths read here and the largest precision pyarrow allows for each.
_DECIMALS = {128: 38, 256: 76}


class _Declined(Exception):
    """The message is not one this module reads exactly as pyarrow does."""


class _Reader:
    """Verifying reads of the flatbuffer `buf[lo:hi]` (alignment counted from `lo`, as the
    verifier counts it from the start of the message)."""

    def __init__(self, buf: Any, lo: int, hi: int) -> None:
        self.buf, self.lo, self.hi = buf, lo, hi
        self.tables = 0
        # The verifier allows 8 tables per byte; a real schema has one per 15 bytes or fewer.
        self.max_tables = (hi - lo) // 4

    def check(self, pos: int, size: int, align: int) -> None:
        if pos < self.lo or pos + size > self.hi or (pos - self.lo) % align:
            raise _Declined

    def table(self, pos: int, known: int) -> _Table:
        """(position, field offsets) of the table at `pos`, which has `known` fields; a table
        with a field this module does not know is declined."""
        buf, lo, hi = self.buf, self.lo, self.hi
        self.tables += 1
        if pos < lo or pos + 4 > hi or (pos - lo) & 3 or self.tables > self.max_tables:
            raise _Declined
        vt = pos - _i32(buf, pos)[0]
        vsize = _u16(buf, vt)[0] if lo <= vt <= hi - 4 and not (vt - lo) & 1 else 0
        if vsize < 4 or vsize & 1 or vt + vsize > hi:
            raise _Declined
        n = (vsize - 4) >> 1
        unpack = _VTABLES.get(n) or _VTABLES.setdefault(n, struct.Struct(f"<{n}H").unpack_from)
        offs = unpack(buf, vt + 4)
        if any(offs[known:]):
            raise _Declined
        return pos, offs

    def at(self, t: _Table, i: int, size: int) -> int:
        """Position of field `i` (`size` bytes, aligned to its size) of table `t`; 0 if absent."""
        pos, offs = t
        if i >= len(offs) or not offs[i]:
            return 0
        p = pos + offs[i]
        self.check(p, size, size)
        return p

    def ref(self, p: int) -> int:
        """Where the offset stored at `p` points."""
        self.check(p, 4, 4)
        o = _u32(self.buf, p)[0]
        if o == 0 or o >= 1 << 31:
            raise _Declined
        self.check(p + o, 1, 1)
        return p + o

    def vector(self, p: int, item: int) -> tuple[int, int]:
        """(first item, count) of the vector referenced at `p`."""
        v = self.ref(p)
        self.check(v, 4, 4)
        count = _u32(self.buf, v)[0]
        self.check(v + 4, item * count, 1)
        return v + 4, count

    def string(self, p: int) -> tuple[int, int]:
        """Where the bytes of the string referenced at `p` start and end."""
        start, length = self.vector(p, 1)
        self.check(start + length, 1, 1)
        if self.buf[start + length] != 0:
            raise _Declined
        return start, start + length

    def text(self, p: int) -> str:
        start, end = self.string(p)
        try:
            return bytes(self.buf[start:end]).decode("utf-8")
        except UnicodeDecodeError:
            raise _Declined from None

    def scalar(self, t: _Table, i: int, size: int, default: int) -> int:
        p = self.at(t, i, size)
        return _SCALARS[size](self.buf, p)[0] if p else default

    def tables_of(self, t: _Table, i: int, known: int) -> list[_Table]:
        """The tables of the vector of tables in field `i` of `t`; declined when absent."""
        p = self.at(t, i, 4)
        if not p:
            raise _Declined
        start, count = self.vector(p, 4)
        return [self.table(self.ref(start + 4 * k), known) for k in range(count)]

    def message(self, kind: int, known: int) -> tuple[_Table, _Table, int]:
        """(message table, header table, body length) of a V4/V5 message of type `kind` whose
        header table has `known` fields; declined for anything else."""
        # Message: version, header_type, header, bodyLength, custom_metadata (not read).
        msg = self.table(self.ref(self.lo), 5 if kind == _RECORD_BATCH_MESSAGE else 4)
        header = self.at(msg, 2, 4)
        if self.scalar(msg, 0, 2, 0) not in (3, 4) or self.scalar(msg, 1, 1, 0) != kind or not header:
            raise _Declined
        body = self.scalar(msg, 3, 8, 0)
        if body < 0:
            raise _Declined
        return msg, self.table(self.ref(header), known), body


def decode_schema(message: bytes) -> tuple[_Columns, tuple[int, ...], int] | None:
    """(columns as (name, `str(type)`), the node index of each column in a record batch, the node
    count of a batch) of the schema message `message` (the stream's first message, its 8-byte
    prefix included), exactly as pyarrow reads it; None for a message this module declines."""
    if len(message) < 8 or message[:4] != CONTINUATION or _i32(message, 4)[0] != len(message) - 8:
        return None
    try:
        r = _Reader(message, 8, len(message))
        return _shape(r, _schema(r)[0])
    except (_Declined, struct.error, RecursionError):
        return None


def _schema(r: _Reader) -> tuple[_Table, tuple[int, int] | None]:
    """The Schema table of the schema message `r` reads, and where the value of its `huggingface`
    metadata lies (None without one)."""
    _, schema, body = r.message(_SCHEMA_MESSAGE, 3)  # endianness, fields, custom_metadata
    if body or r.scalar(schema, 0, 2, 0) != 0:
        raise _Declined  # a body, or big-endian: pyarrow swaps what it reads
    span = None
    if r.at(schema, 2, 4):
        for kv in r.tables_of(schema, 2, 2):
            key_at, value_at = r.at(kv, 0, 4), r.at(kv, 1, 4)
            if not key_at or not value_at:
                raise _Declined  # pyarrow: "custom_metadata.key is null"
            k0, k1 = r.string(key_at)
            value = r.string(value_at)
            if r.buf[k0:k1] == b"huggingface":
                if span is not None:
                    raise _Declined  # the key twice: pyarrow's reader says what it makes of that
                span = value
    return schema, span


def _shape(r: _Reader, schema: _Table) -> tuple[_Columns, tuple[int, ...], int]:
    """Columns, the node index of each column and the node count of a batch of `schema`."""
    columns = []
    top = []
    count = 0
    for f in r.tables_of(schema, 1, 7):
        name, type_text, _, nodes = _field(r, f, 0)
        columns.append((name, type_text))
        top.append(count)
        count += nodes
    return tuple(columns), tuple(top), count


#: Columns of the schemas met so far, where each column's node sits among a batch's field
#: nodes, and the batch headers met in streams of that schema; keyed by the schema message's
#: bytes around the `huggingface` metadata value (which holds each file's own fingerprint) where
#: decoding never reads the value, else by the whole message: files of one dataset share them.
_Shape = tuple[_Columns, tuple[int, ...], int, "dict[bytes, tuple[int, int]]"]
_SHAPES: dict[tuple[bytes, bytes], _Shape] = {}
#: Distinct batch headers remembered per schema: batches of equal length and layout (a map's
#: 1,000-row batches of fixed-width columns, across every file of a dataset) have equal header
#: bytes, and a header's checks depend on its bytes and its schema alone.
BATCH_HEADERS_PER_SHAPE = 256
#: ... and in all (a few hundred bytes each), and how many are remembered now.
BATCH_HEADERS_IN_ALL = 20_000
_BATCH_HEADERS = [0]
#: Schema messages with `huggingface` metadata met so far, by length: (where the metadata value
#: starts and ends, where the message ends, its bytes before and after the value, its shape).
_SCHEMA_MESSAGES: dict[int, list[tuple[int, int, int, bytes, bytes, _Shape]]] = {}
#: At most 4 of one length and this many in all (each is a schema message, a few kB at most).
SCHEMA_MESSAGES_IN_ALL = 1000
_SCHEMAS_KEPT = [0]


def walk_headers(buf: Any, size: int) -> Headers | None:
    """Rows, batches, columns and metadata of a well-formed stream; None for anything else (the
    caller reads it through pyarrow then). Raises nothing on a good file."""
    if size < 16 or buf[:4] != CONTINUATION:
        return None
    try:
        schema = _read_schema(buf, size)
        if schema is None:
            return None
        pos, (columns, top_nodes, node_count, known), fingerprint, text = schema
        rows = batches = 0
        while True:
            length = _i32(buf, pos + 4)[0] if pos + 8 <= size and buf[pos : pos + 4] == CONTINUATION else -1
            if length == 0:
                break  # the end-of-stream marker
            if length < 0 or pos + 8 + length > size:
                return None
            header = bytes(buf[pos + 8 : pos + 8 + length])
            # A batch header met before (in this schema) passed every check already: only where
            # its body ends is left to check.
            hit = known.get(header)
            if hit is None:
                hit = _batch(_Reader(buf, pos + 8, pos + 8 + length), node_count, top_nodes)
                if len(known) < BATCH_HEADERS_PER_SHAPE and _BATCH_HEADERS[0] < BATCH_HEADERS_IN_ALL:
                    known[header] = hit
                    _BATCH_HEADERS[0] += 1
            pos += 8 + length + hit[1]
            if pos > size:
                return None
            rows += hit[0]
            batches += 1
            if pos == size:
                break  # no end-of-stream marker: the same answer pyarrow's reader gives below
    except Exception:  # anything unusual (_Declined, struct.error, ...): pyarrow's reader says what
        return None
    eos = buf[size - 8 : size] == EOS_MARKER
    return rows, batches, columns, fingerprint, text, eos, None if eos else no_eos(batches, rows)


def no_eos(batches: int, rows: int) -> str:
    """The problem of a stream read to its end without the end-of-stream marker."""
    return f"no end-of-stream marker after {batches} batches ({rows} rows): the writer did not finish"


def _batch(r: _Reader, node_count: int, top_nodes: tuple[int, ...]) -> tuple[int, int]:
    """(rows, body length) of the record batch message `r` reads, checked as pyarrow's reader
    checks it first: one node per array, each column as long as the batch, every buffer inside
    the body and 8-byte aligned."""
    # RecordBatch: length, nodes, buffers, compression, variadicBufferCounts.
    _, batch, body = r.message(_RECORD_BATCH_MESSAGE, 5)
    length = r.scalar(batch, 0, 8, 0)
    nodes_at = r.at(batch, 1, 4)
    if length < 0 or not nodes_at:
        raise _Declined
    n0, nn = r.vector(nodes_at, 16)
    if nn != node_count or any(_i64(r.buf, n0 + 16 * i)[0] != length for i in top_nodes):
        raise _Declined
    buffers_at = r.at(batch, 2, 4)
    if buffers_at:
        b0, nb = r.vector(buffers_at, 16)
        for i in range(nb):
            off, blen = _i64x2(r.buf, b0 + 16 * i)
            if off < 0 or blen < 0 or off + blen > body or off & 7:
                raise _Declined
    return length, body


def _read_schema(buf: Any, size: int) -> tuple[int, _Shape, str | None, str | None] | None:
    """The schema message at the start of the stream: where it ends, its shape (decoded once per
    distinct schema), and the fingerprint and text of its `huggingface` metadata."""
    length = _i32(buf, 4)[0]
    span: tuple[int, int] | None
    for seen in _SCHEMA_MESSAGES.get(length, ()):
        # The same message but for the metadata value's bytes (another fingerprint of the same
        # length): the same flatbuffer, so the same shape and the value in the same place.
        v0, v1, end, head, tail, shape = seen
        if end <= size and buf[:v0] == head and buf[v1:end] == tail:
            span = (v0, v1)
            break
    else:
        end = 8 + length
        if length <= 0 or end > size:
            return None
        r = _Reader(buf, 8, end)
        schema, span = _schema(r)
        whole = (bytes(buf[:end]), b"")
        split = whole if span is None else (bytes(buf[: span[0]]), bytes(buf[span[1] : end]))
        known = _SHAPES.get(split) or _SHAPES.get(whole)
        if known is None:
            known = (*_shape(r, schema), {})
            unread = span is not None and _value_unread(buf, end, span, known[:3])
            if len(_SHAPES) > 10_000:
                _SHAPES.clear()
                _SCHEMA_MESSAGES.clear()
                _BATCH_HEADERS[0] = _SCHEMAS_KEPT[0] = 0
            _SHAPES[split if unread else whole] = known
            if (
                unread
                and span is not None
                and _SCHEMAS_KEPT[0] < SCHEMA_MESSAGES_IN_ALL
                and len(_SCHEMA_MESSAGES.get(length, ())) < 4
            ):
                _SCHEMA_MESSAGES.setdefault(length, []).append((*span, end, *split, known))
                _SCHEMAS_KEPT[0] += 1
        shape = known
    fingerprint = text = None
    if span is not None:
        fingerprint, text = parse_hf_metadata(bytes(buf[span[0] : span[1]]))
    return end, shape, fingerprint, text


def _value_unread(buf: Any, end: int, span: tuple[int, int], shape: tuple[Any, ...]) -> bool:
    """Whether decoding the schema message `buf[:end]` never looks inside its metadata value at
    `span`: it decodes to the same shape, with the value in the same place, when the value's
    bytes are all 0x00 and when they are all 0xFF (an offset, length, type or flag read there
    would differ between the two or be out of bounds). Then any message equal to it outside the
    value decodes the same."""
    if end > 0xFFFF:
        return False  # a 16-bit field read inside the value could still point inside the message
    v0, v1 = span
    for fill in (b"\x00", b"\xff"):
        probe = bytes(buf[:v0]) + fill * (v1 - v0) + bytes(buf[v1:end])
        try:
            r = _Reader(probe, 8, end)
            schema, probe_span = _schema(r)
            if probe_span != span or _shape(r, schema) != shape:
                return False
        except (_Declined, struct.error, RecursionError):  # it reads into the value
            return False
    return True


def _field(r: _Reader, f: _Table, depth: int) -> tuple[str, str, bool, int]:
    """(name, `str(type)`, nullable, node count) of the Field table `f`; the type's text is
    pyarrow's `DataType::ToString`."""
    if depth > MAX_NESTING:
        raise _Declined
    # Field: name, nullable, type_type, type, dictionary, children, custom_metadata.
    name_at = r.at(f, 0, 4)
    if not name_at or r.at(f, 4, 4) or r.at(f, 6, 4):
        raise _Declined  # no name, a dictionary or field metadata (extension types): pyarrow's
    name = r.text(name_at)
    nullable = r.scalar(f, 1, 1, 0) != 0
    kind = r.scalar(f, 2, 1, 0)
    type_at = r.at(f, 3, 4)
    if not type_at:
        raise _Declined
    children = [_field(r, c, depth + 1) for c in r.tables_of(f, 5, 7)]
    text = _type(r, kind, r.ref(type_at), children)
    nodes = 1 + sum(c[3] for c in children)
    return name, text, nullable, nodes


def _child(c: tuple[str, str, bool, int]) -> str:
    """A child field as a nested type's text shows it (pyarrow's `Field::ToString`)."""
    return f"{c[0]}: {c[1]}" if c[2] else f"{c[0]}: {c[1]} not null"


def _type(r: _Reader, kind: int, pos: int, children: list[tuple[str, str, bool, int]]) -> str:
    """`str()` of the type `kind` whose table is at `pos`, with `children` (see `_field`): one
    branch per family of Arrow types, in one function, as a type switch reads whole."""
    if kind in _LISTS:
        if len(children) != 1:
            raise _Declined
        t = r.table(pos, 1 if kind == _FIXED_LIST else 0)
        item = f"{_LISTS[kind]}<{_child(children[0])}>"
        if kind != _FIXED_LIST:
            return item
        size = r.scalar(t, 0, 4, 0)
        if size < 0:
            raise _Declined
        return f"{item}[{size}]"
    if kind == _STRUCT:
        r.table(pos, 0)
        return "struct<" + ", ".join(_child(c) for c in children) + ">"
    if children:
        raise _Declined  # children on a type that has none: pyarrow ignores them, so do not guess
    if kind in _SCALAR_TYPES:
        fields, texts = _SCALAR_TYPES[kind]
        t = r.table(pos, len(fields))
        text = texts.get(tuple(r.scalar(t, i, size, default) for i, (size, default) in enumerate(fields)))
        if text is None:
            raise _Declined
        return text
    if kind == _TIMESTAMP:
        t = r.table(pos, 2)
        unit = r.scalar(t, 0, 2, 0)
        if not 0 <= unit <= 3:
            raise _Declined
        tz_at = r.at(t, 1, 4)
        tz = r.text(tz_at) if tz_at else ""
        return f"timestamp[{_UNITS[unit]}, tz={tz}]" if tz else f"timestamp[{_UNITS[unit]}]"
    if kind == _FIXED_BINARY:
        width = r.scalar(r.table(pos, 1), 0, 4, 0)
        if width < 0:
            raise _Declined
        return f"fixed_size_binary[{width}]"
    if kind == _DECIMAL:
        t = r.table(pos, 3)
        precision, scale, width = r.scalar(t, 0, 4, 0), r.scalar(t, 1, 4, 0), r.scalar(t, 2, 4, 128)
        most = _DECIMALS.get(width)
        if most is None or not 1 <= precision <= most or not 0 <= scale <= precision:
            raise _Declined
        return f"decimal{width}({precision}, {scale})"
    raise _Declined  # maps, unions, intervals, views, run-end encoding, unknown numbers


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
