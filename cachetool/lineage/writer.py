"""Writing the ledger: one segment per process and root, appended one record per `write()`.

Each process appends to its own segment, `<host>-<pid>-<start time>.jsonl`, opened with
`O_APPEND`, one `write()` per record: no lock on the hot path, safe on NFS, and merging ledgers
across machines is copying files. A root that cannot be written falls back to the per-user
ledger folder (said once on stderr).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cachetool.lineage.roots import (
    SEGMENT_SUFFIX,
    fallback_ledger_dir,
    ledger_dir,
    register_root,
    segment_name,
)

#: The record format this cachetool writes. Readers accept any version >= 1.
RECORD_VERSION = 1

Record = dict[str, Any]
_UNSET: Any = object()
# One encoder for every record: compact, UTF-8, anything odd (a Path) as its str().
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str, check_circular=False)
WarnFn = Callable[[str], None]


def _stderr_warning(message: str) -> None:
    sys.stderr.write(f"cachetool: warning: {message}\n")
    sys.stderr.flush()


class SegmentWriter:
    """Appends records to one segment file. One `os.write` per record on an `O_APPEND` descriptor:
    the record reaches the kernel whole or (killed mid-write) as a torn last line that readers skip.

    Nothing is buffered in Python, so a crash loses at most the record being written. A shared
    `flock` on the segment is held until `close`: the sign for compaction that it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        # Held while the segment is open (the whole run): compaction, which must lock a segment
        # exclusively to replace it, leaves it alone whatever the pid in its name says (another
        # PID namespace, a cloned host). Where locks are not supported (some NFS), compaction
        # falls back to the pid in the name.
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)

    def append(self, record: Mapping[str, Any]) -> None:
        self.append_line(ENCODER.encode(record))

    def append_line(self, line: str) -> None:
        """Append one record already encoded as JSON (without its newline)."""
        view = memoryview((line + "\n").encode("utf-8", "surrogateescape"))
        # A short write (signal, full disk) would leave half a line; finishing it keeps the segment
        # readable, and a kill in between is exactly the torn tail readers expect.
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


class LedgerWriter:
    """The writing side of every ledger a process touches: one segment per root, opened lazily.

    A root that cannot be written falls back to `fallback_ledger_dir(root)`, said once per root on
    stderr. Every root written to is added to the per-user registry of known roots."""

    def __init__(
        self,
        *,
        host: str | None = None,
        pid: int | None = None,
        start: float | None = None,
        warn: WarnFn | None = None,
    ) -> None:
        self.host = host or socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self.start = start if start is not None else time.time()
        self.name = segment_name(self.host, self.pid, self.start)
        self._warn = warn or _stderr_warning
        self._segments: dict[str, SegmentWriter | None] = {}
        self._lock = threading.Lock()

    @property
    def run_id(self) -> str:
        return self.name[: -len(SEGMENT_SUFFIX)]

    def segment_for(self, root: str, kind: str = "cache") -> SegmentWriter | None:
        """The open segment of `root`, creating it (or its fallback) the first time."""
        seg = self._segments.get(root, _UNSET)
        if seg is not _UNSET:
            return seg
        with self._lock:  # two threads writing to a new root at once open one segment
            if root in self._segments:
                return self._segments[root]
            return self._open(root, kind)

    def _open(self, root: str, kind: str) -> SegmentWriter | None:
        writer: SegmentWriter | None = None
        try:
            writer = SegmentWriter(ledger_dir(root) / self.name)
        except OSError as e:
            fallback = fallback_ledger_dir(root)
            try:
                writer = SegmentWriter(fallback / self.name)
                _write_root_note(fallback, root)
                self._warn(
                    f"cannot write the ledger of {root} ({e.strerror or e}); "
                    f"recording its lineage in {fallback} instead"
                )
            except OSError as e2:
                self._warn(f"cannot record lineage for {root}: {e2.strerror or e2}")
        self._segments[root] = writer
        if writer is not None:
            register_root(root, kind)
        return writer

    def append(self, root: str, record: Mapping[str, Any], kind: str = "cache") -> None:
        seg = self.segment_for(root, kind)
        if seg is not None:
            seg.append(record)

    def append_line(self, root: str, line: str, kind: str = "cache") -> None:
        seg = self.segment_for(root, kind)
        if seg is not None:
            seg.append_line(line)

    def close(self) -> None:
        for seg in self._segments.values():
            if seg is not None:
                seg.close()
        self._segments.clear()


def _write_root_note(folder: Path, root: str) -> None:
    note = folder / "ROOT"
    if not note.exists():
        with contextlib.suppress(OSError):
            note.write_text(os.path.abspath(root) + "\n", encoding="utf-8")
