"""TensorFlow `tf.data.Dataset.cache(prefix)` file caches, read without importing TensorFlow: which
files make one cache, its state (docs/hosts.md: complete, being written, abandoned by a killed
writer, incomplete), and its index (a LevelDB-style table of `BundleHeaderProto` and
`BundleEntryProto` records, decoded from the protobuf wire format), as `cache_dataset_ops.cc` and
`tensor_bundle` write them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

#: `<prefix>.index` of a finished cache (or of a flushed shard, `<prefix>_<n>.index`).
INDEX_RE = re.compile(r"^(?P<prefix>.+)\.index$")
DATA_RE = re.compile(r"^(?P<prefix>.+)\.data-(?P<shard>\d{5})-of-(?P<count>\d{5})$")
LOCK_RE = re.compile(r"^(?P<prefix>.+)_(?P<shard>\d+)\.lockfile$")
TEMPSTATE_RE = re.compile(r"^(?P<prefix>.+)_(?P<shard>\d+)\.(?:index|data-\d{5}-of-\d{5})\.tempstate\d+$")
WRITER_SHARD_RE = re.compile(r"^(?P<prefix>.+)_(?P<shard>\d+)$")

_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48
#: An index larger than this is not read (a real one holds ~40 bytes per tensor).
MAX_INDEX_BYTES = 512 * 1024 * 1024

TfState = Literal["complete", "being-written", "abandoned", "incomplete"]


class TfIndexError(ValueError):
    """The index file is not a tensor bundle index this module can read."""


@dataclass(frozen=True)
class TfIndex:
    num_shards: int
    entries: int
    #: per data shard, the end of its last tensor (the size the data file must have at least)
    shard_ends: tuple[int, ...]


@dataclass(frozen=True)
class TfCache:
    """One `tf.data` file cache: every file that shares its prefix, and what state it is in."""

    path: str  # the folder and the prefix given to `Dataset.cache()`
    state: TfState
    files: tuple[str, ...]  # basenames
    writer_pids: tuple[int, ...] = ()  # live processes holding its files (being-written)
    problems: tuple[str, ...] = field(default=())


# --- the index -------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise TfIndexError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> dict[int, int | None]:
    """Protobuf wire format: field number → its last value (varints and fixed-width numbers as
    ints, a length-delimited field as None: never a number this module reads)."""
    out: dict[int, int | None] = {}
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out[number], pos = _varint(buf, pos, end)
            continue
        if wire not in (1, 2, 5):
            raise TfIndexError(f"unknown wire type {wire}")
        n, pos = _varint(buf, pos, end) if wire == 2 else ({1: 8, 5: 4}[wire], pos)
        if pos + n > end:
            raise TfIndexError("truncated field" if wire == 2 else f"truncated fixed{8 * n}")
        out[number] = None if wire == 2 else int.from_bytes(buf[pos : pos + n], "little")
        pos += n
    return out


def _int(fields: dict[int, int | None], number: int) -> int:
    v = fields.get(number, 0)
    if v is None:
        raise TfIndexError(f"field {number} is not a number")
    return v


def _block(data: bytes, offset: int, size: int) -> Iterable[tuple[bytes, bytes]]:
    """The key/value entries of one table block (keys are prefix-compressed)."""
    if offset < 0 or size < 4 or offset + size + 5 > len(data):
        raise TfIndexError("a block points past the end of the file")
    if data[offset + size] != 0:
        raise TfIndexError(f"compressed block (type {data[offset + size]}) is not supported")
    block = data[offset : offset + size]
    restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise TfIndexError("bad restart array")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos, end)
        non_shared, pos = _varint(block, pos, end)
        value_len, pos = _varint(block, pos, end)
        if shared > len(key) or pos + non_shared + value_len > end:
            raise TfIndexError("bad block entry")
        key = key[:shared] + block[pos : pos + non_shared]
        pos += non_shared
        yield key, block[pos : pos + value_len]
        pos += value_len


def parse_index(data: bytes) -> TfIndex:
    """Decode a tensor bundle index; raises `TfIndexError` when it is not one."""
    if len(data) < _FOOTER:
        raise TfIndexError(f"{len(data)} bytes: shorter than a table footer")
    footer = data[-_FOOTER:]
    if int.from_bytes(footer[-8:], "little") != _MAGIC:
        raise TfIndexError("no table magic number at the end")
    _, pos = _varint(footer, 0, 40)  # metaindex offset
    _, pos = _varint(footer, pos, 40)  # metaindex size
    index_offset, pos = _varint(footer, pos, 40)
    index_size, _ = _varint(footer, pos, 40)
    num_shards: int | None = None
    ends: dict[int, int] = {}
    entries = 0
    for _, handle in _block(data, index_offset, index_size):
        offset, p = _varint(handle, 0, len(handle))
        size, _ = _varint(handle, p, len(handle))
        for key, value in _block(data, offset, size):
            fields = _fields(value)
            if key == b"":
                num_shards = _int(fields, 1)
                continue
            entries += 1
            shard, start, length = _int(fields, 3), _int(fields, 4), _int(fields, 5)
            ends[shard] = max(ends.get(shard, 0), start + length)
    if num_shards is None:
        raise TfIndexError("no bundle header entry")
    if num_shards < 1 or num_shards > 100_000 or any(s >= num_shards for s in ends):
        raise TfIndexError(f"bad shard count {num_shards}")
    return TfIndex(num_shards, entries, tuple(ends.get(s, 0) for s in range(num_shards)))


def read_index(path: str) -> TfIndex:
    """Read and decode an index file (regular files only, size-capped; never follows a symlink)."""
    from cachetool.cache.arrow import open_noatime
    from cachetool.safejson import BadJsonFile, read_opened

    try:
        return parse_index(read_opened(lambda: open_noatime(path), MAX_INDEX_BYTES))
    except BadJsonFile as e:
        raise TfIndexError(str(e)) from None


# --- grouping files into caches ----------------------------------------------------------------


def tf_leftover_name(name: str) -> bool:
    """A writer's lockfile or temp state: what a killed writer leaves and gc may remove."""
    return bool(LOCK_RE.match(name) or TEMPSTATE_RE.match(name))


def is_tf_cache_file(name: str) -> bool:
    return _owner(name) is not None


def _owner(name: str) -> str | None:
    """The cache prefix a file belongs to (the writer's `<prefix>_<n>` files name `<prefix>`)."""
    for rx in (LOCK_RE, TEMPSTATE_RE):
        m = rx.match(name)
        if m:
            return m.group("prefix")
    for rx in (INDEX_RE, DATA_RE):
        m = rx.match(name)
        if m:
            prefix = m.group("prefix")
            w = WRITER_SHARD_RE.match(prefix)
            return w.group("prefix") if w else prefix
    return None


def find_tf_caches(
    folder: str,
    names: Iterable[str],
    *,
    sizes: Callable[[str], int] | None = None,
    holders: Callable[[str], tuple[int, ...]] | None = None,
) -> list[TfCache]:
    """Group the `tf.data` cache files among `names` (basenames in `folder`) by prefix.

    `holders(name)` returns the live processes that hold a file open or mapped (default: none
    known); a cache with a lockfile is `being-written` while any of its files is held, else
    `abandoned`. A finished cache (index and every data shard it names, sizes as the index says)
    is `complete`; anything else is `incomplete`, with its problems."""
    size_of = sizes or (lambda n: os.lstat(os.path.join(folder, n)).st_size)
    groups: dict[str, list[str]] = {}
    for name in names:
        owner = _owner(name)
        if owner is not None:
            groups.setdefault(owner, []).append(name)
    out = []
    for prefix, files in sorted(groups.items()):
        files.sort()
        if all(INDEX_RE.match(n) for n in files):
            continue  # a lone `x.index` with no data files and no writer state is not a tf.data cache
        locks = [n for n in files if LOCK_RE.match(n)]
        # Liveness matters only where a writer left its lockfile (it costs a pass over /proc).
        pids = sorted({pid for n in files for pid in (holders(n) if holders and locks else ())})
        created = _created_at(os.path.join(folder, locks[0])) if locks else None
        state: TfState
        problems: tuple[str, ...] = ()
        if locks and not pids and created is None:
            # TensorFlow writes `Created at: <epoch>` into every lockfile: without it, the file is
            # somebody else's, and nothing here is called abandoned (gc removes only abandoned).
            state, problems = "incomplete", (f"{locks[0]} does not hold TensorFlow's `Created at:` line",)
        elif locks:
            state = "being-written" if pids else "abandoned"
        else:
            problems = tuple(check_complete(folder, prefix, files, size_of))
            state = "incomplete" if problems else "complete"
        out.append(TfCache(os.path.join(folder, prefix), state, tuple(files), tuple(pids), problems))
    return out


def check_complete(folder: str, prefix: str, files: list[str], size_of: Callable[[str], int]) -> list[str]:
    """What keeps a finished cache from loading: a missing or unreadable index, a data shard the
    index names that is missing or shorter than the tensors it must hold."""
    index = f"{prefix}.index"
    if index not in files:
        return [f"{index} is missing"]
    try:
        idx = read_index(os.path.join(folder, index))
    except (OSError, TfIndexError) as e:
        return [f"{index}: {e.strerror if isinstance(e, OSError) else e}"]
    problems = []
    for shard, end in enumerate(idx.shard_ends):
        data = f"{prefix}.data-{shard:05d}-of-{idx.num_shards:05d}"
        if data not in files:
            problems.append(f"{data} is missing (the index names {idx.num_shards} data shard(s))")
            continue
        size = size_of(data)
        if size < end:
            problems.append(f"{data} is {size} bytes; the index places tensors up to byte {end}")
    return problems


def _created_at(path: str) -> float | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        text = os.read(fd, 200).decode("ascii", "replace")
    finally:
        os.close(fd)
    m = re.match(r"Created at: (\d+)", text)
    return float(m.group(1)) if m else None
