"""The read index: what a scan read of each Arrow file, so a repeat scan only `stat`s the files
that did not change.

`read-index.z` in the user's cache folder (`cachetool.cache.locations.derived_dir`) is a CRC and a
`marshal` of each folder's rows (relative to the root; a file's name, size, change time, inode and
`ArrowSummary` fields), zlib-compressed folder by folder, and of the fingerprints of prepared
splits and saved datasets (so a warm listing does not hash). A row is used only while the file has
the same size, ctime (which a write changes, and so does putting the mtime back after one) and
inode. A folder's rows are decompressed when the walk reaches it, never all at once (1M files: 15
MB, 110 MB decoded); an index that fails its CRC is not used. It is written whole, only when
something changed, and not where it cannot be.
"""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cachetool.cache.arrow import ArrowSummary

INDEX_NAME = "read-index.z"
#: Raised whenever the layout or `ArrowSummary`'s fields change: an index of another is not read.
_MAGIC = b"cachetool read index 10\n"
#: The fields of a `state.json` that `loaded_fingerprint` hashes with its `_fingerprint`.
_FORMAT_FIELDS = ("_format_kwargs", "_format_type", "_format_columns", "_output_all_columns")
#: No index of a real cache comes near this (100,000 files take about 1.3 MB).
MAX_INDEX_BYTES = 256 * 1024 * 1024
#: (name, size, ctime_ns, inode, summary fields) of one file.
_Row = tuple[str, int, int, int, tuple[Any, ...]]


class ReadIndex:
    """The rows of the files a scan of `root` read before, and those it reads now."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        from cachetool.cache.locations import derived_dir

        folder = derived_dir(root)
        self.enabled = enabled and folder is not None
        self.path = (folder or root) / INDEX_NAME
        #: Each folder's rows marshalled and compressed, until the walk reaches it.
        self._stored, self._fingerprints = self._load() if self.enabled else ({}, {})
        self._fingerprints_now: dict[tuple[str, str], str] = {}  # those asked now
        self._folder: str | None = None  # the folder whose rows are in `_rows`
        self._rows: dict[str, _Row] = {}
        self._new: list[_Row] = []  # its rows still true, and those read now
        self._read_now = False  # a file of it read now
        #: The rows to write, by folder (None: as the index holds them).
        self._kept: dict[str, bytes | None] = {}
        self._changed = False

    def _load(self) -> tuple[dict[str, bytes], dict[tuple[str, str], str]]:
        """Each folder's rows as stored, and the fingerprints hashed before."""
        from cachetool.cache.store import read_state
        from cachetool.safejson import BadJsonFile

        try:
            data = read_state(self.path, MAX_INDEX_BYTES)
            body = memoryview(data)[len(_MAGIC) + 4 :]
            if data[: len(_MAGIC) + 4] == _MAGIC + zlib.crc32(body).to_bytes(4, "big"):
                stored = marshal.loads(body)
                if type(stored) is tuple and len(stored) == 2:
                    return stored
        except (OSError, BadJsonFile, ValueError, EOFError, TypeError, MemoryError):
            pass  # a damaged index: every file is read again
        return {}, {}

    def _enter(self, folder: str) -> None:
        """Make `folder` the one whose rows are at hand (the walk reads a folder's files in one go)."""
        self._flush()
        self._folder, self._new, self._read_now = folder, [], False
        blob = self._stored.pop(folder, None)  # let go of once decoded
        try:
            self._rows = {row[0]: row for row in _rows_of(blob)} if blob is not None else {}
        except (zlib.error, ValueError, EOFError, TypeError, IndexError, KeyError):  # damaged: read again
            self._rows = {}

    def _flush(self) -> None:
        """Keep the rows of the folder at hand that are still true, and its new ones."""
        folder, new = self._folder, self._new
        if folder is None or not new:
            return
        if folder in self._kept:  # the folder met again: rarely
            old = self._kept[folder]
            blob = old if old is not None else self._load()[0].get(folder)
            new = [*(_rows_of(blob) if blob else ()), *new]
        elif len(new) == len(self._rows) and not self._read_now:
            self._kept[folder] = None  # unchanged: its rows as they are
            return
        self._changed = True
        self._kept[folder] = zlib.compress(marshal.dumps(new), 1)

    def get_in(self, folder: str, name: str, size: int, ctime_ns: int, inode: int) -> ArrowSummary | None:
        """The summary of the file `name` of `folder` (relative to the root, "" for the root) if
        it has the same size, ctime and inode as when it was read."""
        if folder != self._folder:
            self._enter(folder)
        row = self._rows.get(name)
        try:
            if row is None or row[1] != size or row[2] != ctime_ns or row[3] != inode:
                return None
            summary = ArrowSummary(*row[4])
        except (IndexError, TypeError):  # a damaged row: the file is read again
            return None
        self._new.append(row)
        return summary

    def put(self, folder: str, name: str, size: int, ctime_ns: int, inode: int, s: ArrowSummary) -> None:
        """Remember what was read from the file `name` of `folder` (relative to the root)."""
        if folder != self._folder:
            self._enter(folder)
        self._read_now = True
        self._new.append((name, size, ctime_ns, inode, s.fields()))

    def source_fingerprint(self, relative_data_dir: str, split: str) -> str:
        """`source_split_fingerprint` of a prepared split, hashed once and then remembered."""
        return self._remembered(
            (relative_data_dir, split), "source_split_fingerprint", relative_data_dir, split
        )

    def loaded_fingerprint(self, state: Mapping[str, Any]) -> str | None:
        """`loaded_fingerprint` of a saved dataset's `state.json`, hashed once and then remembered
        under the fields it hashes."""
        fp = state.get("_fingerprint")
        if not isinstance(fp, str):
            return None
        hashed = repr([state.get(k) for k in _FORMAT_FIELDS])
        return self._remembered((fp, hashed), "loaded_fingerprint", state)

    def _remembered(self, key: tuple[str, str], function: str, *args: Any) -> str:
        """`cachetool.fingerprint.hashing.<function>(*args)`, remembered under `key` (what it hashes):
        a scan that hashes nothing new imports no hashing."""
        fp = self._fingerprints.get(key)
        if fp is None:
            from cachetool.fingerprint import hashing

            fp = getattr(hashing, function)(*args)
            self._changed = True
        self._fingerprints_now[key] = fp
        return fp

    def save(self) -> bool:
        """Write the index if anything changed (a folder's rows, or a folder gone). Returns False
        where it cannot be written."""
        self._flush()
        self._folder = None
        if not self.enabled or not (self._changed or self._stored):
            return True
        from cachetool.cache.store import write_whole  # a repeat listing writes nothing

        try:
            stored = self._load()[0] if None in self._kept.values() else {}
            kept = {  # the rows of unchanged folders read again
                f: rows if rows is not None else stored[f]
                for f, rows in self._kept.items()
                if rows is not None or f in stored
            }
            body = marshal.dumps((kept, self._fingerprints_now))
            write_whole(self.path, _MAGIC + zlib.crc32(body).to_bytes(4, "big") + body, create_folders=True)
        except (OSError, ValueError):
            return False
        return True


def _rows_of(blob: bytes) -> list[_Row]:
    """The rows of one folder, as `_flush` keeps them."""
    return marshal.loads(zlib.decompress(blob))
