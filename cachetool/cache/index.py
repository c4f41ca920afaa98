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
INDEX_VERSION = 2


class ReadIndex:
    """Maps a path relative to the root to (size, mtime_ns, summary)."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.root = root
        self.enabled = enabled
        self.path = root / LEDGER_DIR / INDEX_NAME
        self._old: dict[str, list[Any]] = {}
        self._new: dict[str, list[Any]] = {}
        self.hits = 0
        self.misses = 0
        if enabled:
            self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(doc, dict) and doc.get("version") == INDEX_VERSION:
            files = doc.get("files")
            if isinstance(files, dict):
                self._old = files

    def get(self, rel: str, size: int, mtime_ns: int) -> ArrowSummary | None:
        row = self._old.get(rel)
        if row and len(row) == 3 and row[0] == size and row[1] == mtime_ns:
            try:
                summary = ArrowSummary.from_row(row[2])
            except (TypeError, ValueError):
                return None
            self._new[rel] = row
            self.hits += 1
            return summary
        return None

    def put(self, rel: str, size: int, mtime_ns: int, summary: ArrowSummary) -> None:
        self.misses += 1
        self._new[rel] = [size, mtime_ns, summary.to_row()]

    def save(self) -> bool:
        """Write the index if anything changed. Returns False where the root is read-only."""
        if not self.enabled or (self.misses == 0 and len(self._new) == len(self._old)):
            return True
        folder = self.path.parent
        try:
            folder.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".read-index-", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps({"version": INDEX_VERSION, "files": self._new}, separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError:
            return False
        return True
