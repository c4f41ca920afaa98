"""A small index of what was read from each Arrow file, keyed by path, size and mtime.

Repeat listings then only `stat` files whose size and mtime did not change. The index lives in
`<root>/.cachetool/read-index.json`; on a read-only root it is simply not written.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cachetool.cache.arrow import ArrowSummary
from cachetool.cache.layout import LEDGER_DIR

INDEX_NAME = "read-index.json"
INDEX_VERSION = 3


class ReadIndex:
    """Maps a path relative to the root to (size, mtime_ns, summary)."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.root = root
        self.enabled = enabled
        self.path = root / LEDGER_DIR / INDEX_NAME
        self._old: dict[str, list[Any]] = {}
        self._new: dict[str, list[Any]] = {}
        # The `huggingface` metadata repeats across files of a dataset: stored once, referenced by
        # number, so the index stays small and loads fast.
        self._old_meta: list[str] = []
        self._meta: list[str] = []
        self._meta_ids: dict[str, int] = {}
        self.hits = 0
        self.misses = 0
        if enabled:
            self._load()

    def _load(self) -> None:
        from cachetool.safejson import read_json_file

        try:
            doc = read_json_file(self.path)
        except (OSError, ValueError):
            return
        if isinstance(doc, dict) and doc.get("version") == INDEX_VERSION:
            files = doc.get("files")
            meta = doc.get("meta")
            if isinstance(files, dict) and isinstance(meta, list):
                self._old = files
                self._old_meta = meta

    def get(self, rel: str, size: int, mtime_ns: int) -> ArrowSummary | None:
        row = self._old.get(rel)
        if row and len(row) == 3 and row[0] == size and row[1] == mtime_ns:
            try:
                stored = list(row[2])
                ref = stored[5]
                stored[5] = self._old_meta[ref] if isinstance(ref, int) else None
                summary = ArrowSummary.from_row(stored)
                if not (
                    all(v is None or _is_count(v) for v in (summary.rows, summary.batches))
                    and isinstance(summary.format, str)
                    and all(v is None or isinstance(v, str) for v in (summary.fingerprint, summary.error))
                    and (summary.metadata_json is None or isinstance(summary.metadata_json, str))
                ):
                    return None  # a damaged index: read the file again
            except (TypeError, ValueError, IndexError, AttributeError):
                return None
            self._remember(rel, size, mtime_ns, summary)
            self.hits += 1
            return summary
        return None

    def put(self, rel: str, size: int, mtime_ns: int, summary: ArrowSummary) -> None:
        self.misses += 1
        self._remember(rel, size, mtime_ns, summary)

    def _remember(self, rel: str, size: int, mtime_ns: int, summary: ArrowSummary) -> None:
        row = summary.to_row()
        meta = row[5]
        if meta is not None:
            ref = self._meta_ids.get(meta)
            if ref is None:
                ref = self._meta_ids[meta] = len(self._meta)
                self._meta.append(meta)
            row[5] = ref
        self._new[rel] = [size, mtime_ns, row]

    def save(self) -> bool:
        """Write the index if anything changed. Returns False where the root is read-only."""
        if not self.enabled or (self.misses == 0 and len(self._new) == len(self._old)):
            return True
        folder = self.path.parent
        try:
            folder.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".read-index-", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                doc = {"version": INDEX_VERSION, "meta": self._meta, "files": self._new}
                f.write(json.dumps(doc, separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError:
            return False
        return True


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0
