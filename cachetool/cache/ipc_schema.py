"""The schema message of an Arrow IPC stream, decoded in Python for the column types `datasets`
writes (integers, floats, strings, binaries, booleans, dates, times, timestamps, durations,
decimals, lists, large lists, fixed-size lists and structs, nested), so a listing reads a cache
without importing pyarrow.

The message is a flatbuffer. It is checked as the flatbuffers verifier that pyarrow runs checks it
(every table, offset, string and vector inside the message and aligned, strings NUL-terminated,
nesting and table counts bounded) and read as pyarrow reads it (`ipc/metadata_internal.cc`).
Anything else (dictionaries, extension types or any field metadata, maps, unions, intervals,
views, message metadata, an unknown field, a value pyarrow would refuse or might read
differently) is declined: `decode_schema` returns None and the caller asks pyarrow, so what is
accepted here reads exactly as pyarrow reads it (tests/test_ipc_schema.py compares them on
every schema of the test caches and on thousands of damaged messages)."""

from __future__ import annotations

import struct

_Table = tuple[int, tuple[int, ...]]

# Little-endian reads at an offset (also used by `ipc_headers`).
_u8 = struct.Struct("<B").unpack_from
_i16 = struct.Struct("<h").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from

#: Deeper field nesting than this is left to pyarrow (its verifier stops at 128 tables deep).
MAX_NESTING = 32

# Type union members (Arrow's Schema.fbs) read here: their number, the fields of their table.
_NULL, _INT, _FLOAT, _BINARY, _UTF8, _BOOL, _DECIMAL, _DATE, _TIME, _TIMESTAMP = range(1, 11)
_LIST, _STRUCT, _FIXED_BINARY, _FIXED_LIST, _DURATION = 12, 13, 15, 16, 18
_LARGE_BINARY, _LARGE_UTF8, _LARGE_LIST = 19, 20, 21
_PLAIN = {
    _NULL: "null",
    _BINARY: "binary",
    _UTF8: "string",
    _BOOL: "bool",
    _LARGE_BINARY: "large_binary",
    _LARGE_UTF8: "large_string",
}
_INTS = {(8, 1): "int8", (16, 1): "int16", (32, 1): "int32", (64, 1): "int64"}
_INTS.update({(8, 0): "uint8", (16, 0): "uint16", (32, 0): "uint32", (64, 0): "uint64"})
_FLOATS = ("halffloat", "float", "double")
_UNITS = ("s", "ms", "us", "ns")
_LISTS = {_LIST: "list", _LARGE_LIST: "large_list", _FIXED_LIST: "fixed_size_list"}
#: Decimal bit widths read here and the largest precision pyarrow allows for each.
_DECIMALS = {128: 38, 256: 76}


class _Declined(Exception):
    """The message is not one this module reads exactly as pyarrow does."""


class _Reader:
    """Verifying reads of one flatbuffer (offsets relative to its first byte, as the verifier's)."""

    def __init__(self, fb: bytes) -> None:
        self.fb = fb
        self.n = len(fb)
        self.tables = 0
        # The verifier allows 8 tables per byte; a real schema has one per 15 bytes or fewer.
        self.max_tables = self.n // 4

    def check(self, pos: int, size: int, align: int) -> None:
        if pos < 0 or pos + size > self.n or pos % align:
            raise _Declined

    def table(self, pos: int, known: int) -> _Table:
        """(position, field offsets) of the table at `pos`, which has `known` fields; a table
        with a field this module does not know is declined."""
        self.check(pos, 4, 4)
        self.tables += 1
        if self.tables > self.max_tables:
            raise _Declined
        vt = pos - _i32(self.fb, pos)[0]
        self.check(vt, 4, 2)
        vsize = _u16(self.fb, vt)[0]
        if vsize < 4 or vsize & 1:
            raise _Declined
        self.check(vt, vsize, 1)
        offs = struct.unpack_from(f"<{(vsize - 4) >> 1}H", self.fb, vt + 4)
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
        o = _u32(self.fb, p)[0]
        if o == 0 or o >= 1 << 31:
            raise _Declined
        self.check(p + o, 1, 1)
        return p + o

    def vector(self, p: int, item: int) -> tuple[int, int]:
        """(first item, count) of the vector referenced at `p`."""
        v = self.ref(p)
        self.check(v, 4, 4)
        count = _u32(self.fb, v)[0]
        self.check(v + 4, item * count, 1)
        return v + 4, count

    def string(self, p: int) -> bytes:
        start, length = self.vector(p, 1)
        self.check(start + length, 1, 1)
        if self.fb[start + length] != 0:
            raise _Declined
        return self.fb[start : start + length]

    def text(self, p: int) -> str:
        try:
            return self.string(p).decode("utf-8")
        except UnicodeDecodeError:
            raise _Declined from None

    def scalar(self, t: _Table, i: int, size: int, default: int) -> int:
        p = self.at(t, i, size)
        if not p:
            return default
        return {1: _u8, 2: _i16, 4: _i32, 8: _i64}[size](self.fb, p)[0]

    def tables_of(self, t: _Table, i: int, known: int) -> list[_Table]:
        """The tables of the vector of tables in field `i` of `t`; declined when absent."""
        p = self.at(t, i, 4)
        if not p:
            raise _Declined
        start, count = self.vector(p, 4)
        return [self.table(self.ref(start + 4 * k), known) for k in range(count)]


def decode_schema(message: bytes) -> tuple[tuple[tuple[str, str], ...], tuple[int, ...], int] | None:
    """(columns as (name, `str(type)`), the node index of each column in a record batch, the node
    count of a batch) of the schema message `message` (the stream's first message, its 8-byte
    prefix included), exactly as pyarrow reads it; None for a message this module declines."""
    try:
        return _decode(message)
    except (_Declined, struct.error, RecursionError):
        return None


def _decode(message: bytes) -> tuple[tuple[tuple[str, str], ...], tuple[int, ...], int] | None:
    if len(message) < 8 or message[:4] != b"\xff\xff\xff\xff":
        return None
    length = _i32(message, 4)[0]
    if length <= 0 or 8 + length != len(message):
        return None
    r = _Reader(message[8:])
    msg = r.table(r.ref(0), 4)  # version, header_type, header, bodyLength (no custom_metadata)
    if r.scalar(msg, 0, 2, 0) not in (3, 4) or r.scalar(msg, 1, 1, 0) != 1 or r.scalar(msg, 3, 8, 0):
        return None  # not a V4/V5 schema message without a body
    header = r.at(msg, 2, 4)
    if not header:
        return None
    schema = r.table(r.ref(header), 3)  # endianness, fields, custom_metadata (no features)
    if r.scalar(schema, 0, 2, 0) != 0:
        return None  # big-endian: pyarrow swaps what it reads
    fields = r.tables_of(schema, 1, 7)
    if r.at(schema, 2, 4):
        for kv in r.tables_of(schema, 2, 2):
            for i in (0, 1):
                p = r.at(kv, i, 4)
                if not p:
                    return None  # pyarrow: "custom_metadata.key is null"
                r.string(p)
    columns = []
    top = []
    count = 0
    for f in fields:
        name, type_text, _, nodes = _field(r, f, 0)
        columns.append((name, type_text))
        top.append(count)
        count += nodes
    return tuple(columns), tuple(top), count


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
    """`str()` of the type `kind` whose table is at `pos`, with `children` (see `_field`). One
    branch per kind of Arrow type, in one function on purpose: a type switch reads whole, and it
    runs for every field of every distinct schema of a cold listing."""
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
    if kind in _PLAIN:
        r.table(pos, 0)
        return _PLAIN[kind]
    if kind == _INT:
        t = r.table(pos, 2)
        width, signed = r.scalar(t, 0, 4, 0), r.scalar(t, 1, 1, 0)
        text = _INTS.get((width, signed != 0))
        if text is None:
            raise _Declined
        return text
    if kind == _FLOAT:
        precision = r.scalar(r.table(pos, 1), 0, 2, 0)
        if not 0 <= precision <= 2:
            raise _Declined
        return _FLOATS[precision]
    if kind == _DATE:
        unit = r.scalar(r.table(pos, 1), 0, 2, 1)
        if unit not in (0, 1):
            raise _Declined
        return "date32[day]" if unit == 0 else "date64[ms]"
    if kind == _TIME:
        t = r.table(pos, 2)
        unit, width = r.scalar(t, 0, 2, 1), r.scalar(t, 1, 4, 32)
        if (unit, width) not in ((0, 32), (1, 32), (2, 64), (3, 64)):
            raise _Declined
        return f"time{width}[{_UNITS[unit]}]"
    if kind == _TIMESTAMP:
        t = r.table(pos, 2)
        unit = r.scalar(t, 0, 2, 0)
        if not 0 <= unit <= 3:
            raise _Declined
        tz_at = r.at(t, 1, 4)
        tz = r.text(tz_at) if tz_at else ""
        return f"timestamp[{_UNITS[unit]}, tz={tz}]" if tz else f"timestamp[{_UNITS[unit]}]"
    if kind == _DURATION:
        unit = r.scalar(r.table(pos, 1), 0, 2, 1)
        if not 0 <= unit <= 3:
            raise _Declined
        return f"duration[{_UNITS[unit]}]"
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
