"""Writing the ledger: one segment per process and root, one `os.write` per record (the format:
`cachetool.history.ledger`); a root that cannot be written falls back to the per-user ledger
folder; at most `MAX_OPEN_SEGMENTS` open at once. `GcLog`: gc's records, after the files are gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cachetool.cache.roots import (
    SEGMENT_SUFFIX,
    fallback_ledger_dir,
    ledger_dir,
    ledger_dirs,
    register_root,
    segment_name,
)
from cachetool.history.records.other import COMPACTED_PREFIX, GcRecord

#: The record format this cachetool writes. Readers accept any version >= 1.
RECORD_VERSION = 1
#: Segments a process holds open at once (one descriptor each): the roots it wrote to last.
MAX_OPEN_SEGMENTS = 32

Record = dict[str, Any]
_UNSET: Any = object()
# One encoder for every record: compact, UTF-8, anything odd (a Path) as its str().
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str, check_circular=False)
#: A lone surrogate: an undecodable byte of a path, as `os.fsdecode` gives it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> bytes:
    """JSON text `ENCODER` made, as the UTF-8 every reader takes: a lone surrogate (a path's byte
    that is not UTF-8) is written as its JSON escape, which reads back as the same str."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


WarnFn = Callable[[str], None]


def _stderr_warning(message: str) -> None:
    sys.stderr.write(f"cachetool: warning: {message}\n")
    sys.stderr.flush()


class SegmentWriter:
    """Appends records to one segment file. One `os.write` of the whole line per record on an
    `O_APPEND` descriptor: the record reaches the kernel whole or (killed mid-write, or the disk
    full) as a torn line that readers skip. A record after a torn line starts on a fresh line, so
    the torn one never swallows it: the writer remembers a write it could not finish, and a
    segment opened again whose last byte is not a newline ends with one.

    Nothing is buffered in Python, so a crash loses at most the record being written. A shared
    `flock` on the segment is held while it is open: the sign for compaction that it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._torn = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self.open()

    def open(self) -> None:
        """Open the segment (again, after `close`) for appending. Creates no folder: raises
        OSError when its folder is gone (the program deleted the root)."""
        if self._fd is not None:
            return
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o644)
        # Held while the segment is open: compaction, which must lock a segment exclusively to
        # replace it, leaves it alone whatever the pid in its name says (another PID namespace, a
        # cloned host). Where locks are not supported (some NFS), compaction falls back to the
        # pid in the name.
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        with contextlib.suppress(OSError):
            size = os.fstat(fd).st_size
            self._torn = self._torn or (size > 0 and os.pread(fd, 1, size - 1) != b"\n")
        self._fd = fd

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def append(self, record: Mapping[str, Any]) -> None:
        self.append_line(ENCODER.encode(record))

    def append_line(self, line: str) -> None:
        """Append one record already encoded as JSON (without its newline)."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        data = utf8(line + "\n")
        if self._torn:
            data = b"\n" + data
        view = memoryview(data)
        try:
            # A short write (signal, full disk) is finished by the next `write`; one that fails
            # after part of the line went out leaves a torn line, ended before the next record.
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
                self._torn = bool(view)
        except OSError:
            self._torn = self._torn or len(view) < len(data)
            raise

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class LedgerWriter:
    """The writing side of every ledger a process touches: one segment per root, opened lazily,
    at most `MAX_OPEN_SEGMENTS` open at once.

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
        self._open_roots: OrderedDict[str, None] = OrderedDict()  # least recently written first
        self._lock = threading.Lock()

    @property
    def run_id(self) -> str:
        return self.name[: -len(SEGMENT_SUFFIX)]

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
            self._opened(root)
            register_root(root, kind)
        return writer

    def _opened(self, root: str) -> None:
        """`root`'s segment is open and written to now: close the one written to longest ago
        when more than `MAX_OPEN_SEGMENTS` are open."""
        self._open_roots[root] = None
        self._open_roots.move_to_end(root)
        if len(self._open_roots) > MAX_OPEN_SEGMENTS:
            oldest, _ = self._open_roots.popitem(last=False)
            seg = self._segments.get(oldest)
            if seg is not None:
                seg.close()

    def append(self, root: str, record: Mapping[str, Any], kind: str = "cache") -> None:
        self.append_line(root, ENCODER.encode(record), kind)

    def append_line(self, root: str, line: str, kind: str = "cache") -> None:
        with self._lock:  # a segment is never closed for room while another thread writes it
            seg = self._segments.get(root, _UNSET)
            if seg is _UNSET:
                seg = self._open(root, kind)
            elif seg is not None and not seg.is_open:
                try:
                    seg.open()
                except OSError:
                    return  # the root is gone (the program deleted it): nothing to record it in
                self._opened(root)
            elif seg is not None:
                self._open_roots.move_to_end(root)
            if seg is not None:
                seg.append_line(line)

    def close(self) -> None:
        for seg in self._segments.values():
            if seg is not None:
                seg.close()
        self._segments.clear()
        self._open_roots.clear()


def _write_root_note(folder: Path, root: str) -> None:
    note = folder / "ROOT"
    if not note.exists():
        with contextlib.suppress(OSError):
            note.write_text(os.path.abspath(root) + "\n", encoding="utf-8")


class GcLog:
    """Appends gc records for one run to the ledger of one root (opened lazily, closed on exit)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self._writer = LedgerWriter()
        self._seq = 0

    def removed(
        self,
        *,
        kind: str,
        paths: Sequence[str | os.PathLike[str]],
        size: int,
        files: int,
        reason: str,
        fingerprint: str | None = None,
        aliases: Sequence[str] = (),
        dataset: str | None = None,
        when: float,
        action: str = "removed",
        moved_to: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        """Record one removal (`action` "quarantined": a move to `moved_to`). Never raises: losing
        a log line must not fail a deletion that happened."""
        from cachetool import __version__

        self._seq += 1
        w = self._writer
        record = GcRecord(
            v=RECORD_VERSION,
            type="gc",
            seq=self._seq,
            run=w.run_id,
            time=when,
            host=w.host,
            pid=w.pid,
            versions={"python": platform.python_version(), "cachetool": __version__},
            root=self.root,
            action=action,
            fingerprint=fingerprint,
            aliases=tuple(aliases),
            kind=kind,
            path=os.fsdecode(paths[0]) if paths else None,
            paths=tuple(os.fsdecode(p) for p in paths),
            size=int(size),
            files=int(files),
            reason=reason,
            dataset=dataset,
            moved_to=tuple(os.fsdecode(p) for p in moved_to),
        )
        try:
            w.append(self.root, record.to_json())
        except Exception:  # a full disk or a vanished root: the removal stands either way
            return

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> GcLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Segments kept whole per ledger folder (the newest ones, one per traced process: `cachetool
#: run` traces one run each): `explain` compares a step with these.
KEEP_RUNS = 50
#: Past this many bytes of segments that compaction would fold (older than the newest
#: `KEEP_RUNS` of their folder), a traced run that ends and a `gc` run compact the ledger by
#: themselves: reading the whole ledger (`lineage`, `explain`, `ls`) stays about a second.
AUTO_BYTES = 16 * 1024 * 1024


def foldable_bytes(root: str | os.PathLike[str], keep_runs: int = KEEP_RUNS) -> int:
    """Bytes of the segments compaction could fold: in each ledger folder, those not yet compacted
    and older (by mtime) than its newest `keep_runs`. Only `stat`s: cheap enough for every run."""
    total = 0
    for folder in ledger_dirs(root):
        with contextlib.suppress(OSError), os.scandir(folder) as it:
            found = [
                de
                for de in it
                if de.name.endswith(SEGMENT_SUFFIX) and not de.name.startswith(COMPACTED_PREFIX)
            ]
            if len(found) <= keep_runs:  # nothing to fold: no `stat` (a traced run asks as it ends)
                continue
            raw = sorted((de.stat() for de in found), key=lambda st: st.st_mtime)
            total += sum(st.st_size for st in raw[: max(0, len(raw) - keep_runs)])
    return total
