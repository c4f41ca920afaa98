"""The text of a plain `ls --json` kept for a cache in which nothing it depends on changed.

A warm listing of an unchanged cache writes the same bytes each time. `ListingText.of(root)`
lists every folder of the root with `lstat` (the walk the scan would do anyway, handed to it:
`listed`) and computes a key of everything the text depends on: each folder's path and, for
each of its entries, name, mode, size, mtime, ctime (which no one can set back: a file rewritten
with the same size and mtime still changes it), inode and owner; the root's pins; the code that
writes the text (the size and mtime of cachetool's modules, the Python version); the format of
this file. Where `ls-json.z` in the user's cache folder for this root
(`cachetool.cache.dirs.derived_dir`: a listing writes nothing into the root) holds the text
written under the same key, that is the listing.

It is written only after a listing whose every entry follows from the files and the ledger alone
(the key holds the stat of every file of the root's ledger folders): no warning, no damaged pins
file, and only entries of kinds whose text depends on nothing but the files (locks, downloads
and extracted folders do; temporary files, tf.data caches and leftovers do not), none with a
problem. Nothing is kept where the root has no read index (a cold listing pays nothing for it),
for a `--limit`, or for a terminal (which gets the indented document). The file is
zlib-compressed (about 16 bytes per file) and written whole to a temporary file renamed over it;
a damaged, foreign or unreadable one is simply not used, nor one whose text holds anything but
printable ASCII (what compact JSON text is made of). Like the read index, it lives in the user's
own folder: another user of a shared cache cannot make a listing say anything."""

from __future__ import annotations

import os
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from cachetool.cache.index import INDEX_NAME
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheReport
from cachetool.cache.walk import Candidates, Item, list_dir_split

SNAPSHOT_NAME = "ls-json.z"
_MAGIC = b"cachetool ls --json 1\n"
_MAX_BYTES = 256 * 1024 * 1024
_PIECE = 1024 * 1024
#: Up to this many files, the folders listed for the key are handed to the scan (a changed cache
#: is not listed twice); beyond, the rest are listed again by the scan rather than all held.
HOLD_FILES = 40_000
#: Up to this many bytes of text, the kept text is held while checked, then written; beyond, it
#: is decompressed twice (checked, then written) rather than held whole.
HOLD_BYTES = 32 * 1024 * 1024
_PRINTABLE = bytes(range(32, 127))
#: Kinds whose entries' text follows from their files alone (with no problem named): a lock's
#: entry is its file and the dataset folder it guards (whether the lock is held is gc's question,
#: never the listing's), a download's its files, an extracted folder's the files of its tree
#: (every folder is in the key). Temporary files, leftovers and tf.data caches are judged by
#: their age or by live processes.
STATIC_KINDS = frozenset(
    {
        Kind.SOURCE,
        Kind.DERIVED,
        Kind.INDICES,
        Kind.SHARDS,
        Kind.SAVED,
        Kind.ARROW,
        Kind.METADATA,
        Kind.OTHER,
        Kind.LOCK,
        Kind.DOWNLOAD,
        Kind.EXTRACTED,
    }
)
#: What `list_dir_split` returns for a folder.
Listed = tuple[list[Item], "str | None", Candidates]


class ListingText:
    """The folders of a root as listed for its key, the key, and the stored text if it is valid."""

    def __init__(
        self,
        root: Path,
        listed: dict[str, Listed],
        key: bytes,
        text: list[bytes] | Callable[[], Iterator[bytes]] | None,
        pins: frozenset[str] = frozenset(),
    ) -> None:
        self.root = root
        #: The pins the key holds: a listing that read others (a pin made meanwhile) is not kept.
        self.pins = pins
        #: Each folder's `list_dir_split` result by its path's text (taken by the scan).
        self.listed = listed
        self.key = key
        #: The kept text, if written under this key (`pieces`).
        self.text = text

    def pieces(self) -> Iterable[bytes]:
        """The kept text's pieces (printable ASCII), in order."""
        text = self.text
        if text is None:
            return ()
        return text if isinstance(text, list) else text()

    @classmethod
    def of(cls, root: str | os.PathLike[str]) -> ListingText | None:
        """The listing of `root` for its key; None where no text is kept for it (not a folder, no
        read index, cachetool's own folder, a ledger, an unlistable folder, damaged pins)."""
        from cachetool.cache.pins import read_pins
        from cachetool.cache.scan import _is_cachetool_state
        from cachetool.errors import CachetoolError

        path = Path(root).expanduser()
        try:
            if not path.is_dir() or path.is_symlink():
                return None
            path = path.resolve()
            if not os.path.isfile(_path(path).with_name(INDEX_NAME)) or _is_cachetool_state(path):
                return None
            ledgers = _ledger_key(path)
            if ledgers is None:
                return None
            pins = sorted(read_pins(path))
        except (OSError, CachetoolError):
            return None
        listed: dict[str, Listed] = {}
        held = 0
        import hashlib

        h = hashlib.blake2b(digest_size=32)
        for part in _code_key():
            h.update(part)
        h.update(os.fsencode("\0".join(pins)) + b"\1")
        h.update(ledgers)
        stack = [path]
        while stack:
            folder = stack.pop()
            got = list_dir_split(folder)
            items, err, candidates = got
            if err:
                return None
            text = str(folder)
            if held < HOLD_FILES:  # beyond, the scan lists the other folders itself
                listed[text] = got
                held += len(items) + len(candidates.pairs)
            nums = array("q")
            extend = nums.extend
            names = [text]
            try:
                for it in items:
                    if not it.ok:
                        return None
                    names.append(it.name)
                    extend((it.mode, it.size, it.mtime_ns, it.ctime_ns, it.ino, it.uid))
                    if it.is_dir:
                        stack.append(it.path)
                for name, st in candidates.pairs:
                    names.append(name)
                    extend((st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_uid))
            except OverflowError:  # a number beyond 64 bits: no text kept
                return None
            encoded = os.fsencode("\0".join(names))
            h.update(b"%d %d\1" % (len(names), len(encoded)) + encoded + nums.tobytes())
        key = h.digest()
        kept = _load(path, key)
        return cls(path, {} if kept is not None else listed, key, kept, frozenset(pins))

    def keep(self, pieces: Iterable[str]) -> Iterator[str]:
        """`pieces` (the listing's text, in order), stored under the key once all went through."""
        z = zlib.compressobj(1)
        chunks = [_MAGIC, self.key]
        for piece in pieces:
            chunks.append(z.compress(piece.encode("ascii")))
            yield piece
        chunks.append(z.flush())
        _store(self.root, b"".join(chunks))


def reusable(report: CacheReport, warnings: Sequence[str], pinned: frozenset[str], snap: ListingText) -> bool:
    """Whether the text of a listing follows from the files alone (see the module's docs), with
    the pins `snap`'s key holds (`pinned`: those the listing read)."""
    if report.warnings or warnings or pinned != snap.pins:
        return False
    return all(e.kind in STATIC_KINDS and not e.problems for e in report.entries)


def _ledger_key(root: Path) -> bytes | None:
    """What the ledger of `root` says, as far as a listing can tell without reading it: each
    folder that may hold its segments (the root's own; the per-user fallback where the per-user
    `ledgers` folder exists, as the scan decides), and name, mode, size, mtime, ctime and inode
    of everything in it (a tracer appending to a segment, a new run, a compaction all change
    them). None where a folder cannot be listed."""
    from cachetool.cache.roots import present_ledger_dirs

    parts = []
    for folder in present_ledger_dirs(root):
        parts.append(os.fsencode(str(folder)) + b"\1")
        try:
            with os.scandir(folder) as it:
                found = sorted((de.name, de.stat(follow_symlinks=False)) for de in it)
        except FileNotFoundError:
            parts.append(b"-\1")
            continue
        except OSError:
            return None
        for name, st in found:
            parts.append(
                os.fsencode(name)
                + b"\0%d %d %d %d %d\1" % (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            )
    return b"".join(parts)


def _code_key() -> Iterator[bytes]:
    """The format of the stored text, the Python that runs, and the size and mtime of every
    module of cachetool (those that write the text, read the ledger and the pins among them)."""
    yield _MAGIC
    yield sys.version.encode("utf-8", "surrogateescape") + b"\1"
    stack = [Path(__file__).resolve().parent.parent]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                found = sorted((de.name, de.is_dir(follow_symlinks=False), de.stat()) for de in it)
        except OSError:
            found = []
        yield os.fsencode(str(folder)) + b"\1"
        for name, is_dir, st in found:
            if is_dir and name != "__pycache__":
                stack.append(folder / name)
            elif name.endswith(".py"):
                yield f"{name}\0{st.st_size}\0{st.st_mtime_ns}\1".encode("utf-8", "surrogateescape")


def _load(root: Path, key: bytes) -> list[bytes] | Callable[[], Iterator[bytes]] | None:
    """The stored text (printable ASCII) if it was written under `key`: its pieces, or where it
    is larger than `HOLD_BYTES`, a function giving them again (all checked before the first is
    written: a damaged or foreign text is never written in part)."""
    from cachetool.cache.store import read_state
    from cachetool.safejson import BadJsonFile

    try:
        data = read_state(_path(root), _MAX_BYTES)
    except (OSError, BadJsonFile):
        return None
    head = len(_MAGIC) + len(key)
    if data[: len(_MAGIC)] != _MAGIC or data[len(_MAGIC) : head] != key:
        return None
    held: list[bytes] | None = []
    size = 0
    try:
        for piece in _pieces(data, head):
            if piece.translate(None, _PRINTABLE):  # compact JSON text is printable ASCII alone
                return None
            size += len(piece)
            if held is not None:
                held.append(piece)
                if size > HOLD_BYTES:
                    held = None  # checked through, then read again while written
    except (zlib.error, ValueError, MemoryError):
        return None
    if held is not None:
        return held
    return lambda: _pieces(data, head)


def _pieces(data: bytes, head: int) -> Iterator[bytes]:
    """The text compressed in `data` after `head`, a megabyte at a time; ValueError if it does
    not end where `data` does."""
    unz = zlib.decompressobj()
    rest: bytes | memoryview = memoryview(data)[head:]
    while rest:
        piece = unz.decompress(rest, _PIECE)
        rest = unz.unconsumed_tail
        if piece:
            yield piece
    piece = unz.flush()
    if piece:
        yield piece
    if not unz.eof or unz.unused_data:
        raise ValueError("not one whole zlib stream")


def _path(root: Path) -> Path:
    """Where the text is kept: the user's cache folder for this root (never the root itself)."""
    from cachetool.cache.dirs import derived_dir

    folder = derived_dir(root)
    if folder is None:
        raise FileNotFoundError(root)
    return folder / SNAPSHOT_NAME


def _store(root: Path, data: bytes) -> None:
    """Write the stored text (whole, through a temporary file); nothing where it cannot."""
    from cachetool.cache.store import write_whole

    try:
        write_whole(_path(root), data, create_folders=True)
    except OSError:
        pass
