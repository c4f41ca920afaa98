"""`cachetool ls|verify|gc s3://...`: what a remote holds (one listing, no object read), whether a
reader would use it (shallow: sizes and two range reads per file; `--deep`: every byte against its
xxh3), and removing what nobody wrote to for a while.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cachetool.errors import ExitCode
from cachetool.remote.client import Remote, RemoteError, RemoteRefused, open_remote, short_error
from cachetool.remote.transfer import RECORD_NAME, read_record
from cachetool.safejson import json_fields

#: The first range read of a file: enough for the schema message `datasets` writes (a few kB).
HEAD_BYTES = 64 << 10
_THREADS = 64


@dataclass(frozen=True)
class RemoteEntry:
    """One fingerprint on the remote: its files (the record left out), their bytes, the latest
    write (seconds since the epoch), and whether its record is there (else: an upload killed
    before its record, which no reader uses)."""

    fingerprint: str
    files: tuple[tuple[str, int], ...]  # (name, size)
    modified: float
    record: bool

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)

    def to_json(self) -> dict[str, Any]:
        from cachetool.formatting import iso_time

        files = {"files": len(self.files), "size": self.size, "modified": iso_time(self.modified)}
        return {"fingerprint": self.fingerprint, **files, "record": self.record}


def list_remote(url: str | None = None, *, key: str | None = None) -> list[RemoteEntry]:
    """Every fingerprint on the remote `url` (else `CACHETOOL_REMOTE`), by fingerprint."""
    return _entries(open_remote(url, key))


def _entries(remote: Remote) -> list[RemoteEntry]:
    """The results of the remote: saved datasets pushed under its prefix (a folder holding
    `saved.json`) are not results, and no command on results touches them."""
    from cachetool.remote.saved import SAVED_RECORD

    found: dict[str, dict[str, Any]] = {}
    saved = set()
    for obj in remote.list():
        fp, _, name = str(obj["path"]).partition("/")
        if name == SAVED_RECORD:
            saved.add(fp)
        if not name or "/" in name:
            continue  # not something cachetool writes
        e = found.setdefault(fp, {"files": [], "modified": 0.0, "record": False})
        e["modified"] = max(e["modified"], obj["last_modified"].timestamp())
        if name == RECORD_NAME:
            e["record"] = True
        else:
            e["files"].append((name, int(obj["size"])))
    return [
        RemoteEntry(fp, tuple(sorted(e["files"])), e["modified"], e["record"])
        for fp, e in sorted(found.items())
        if fp not in saved
    ]


def remotes_below(url: str | None = None) -> list[str]:
    """The remotes under `url` (else `CACHETOOL_REMOTE`) that hold a record (`<sub>/<fp>/record.json`):
    what a user listing `url` and finding no result there may have meant."""
    remote = open_remote(url, None)
    subs = set()
    for obj in remote.list():
        *sub, _fp, name = str(obj["path"]).split("/")
        if sub and name == RECORD_NAME:
            subs.add("/".join(sub))
    return [f"{remote.url}/{sub}" for sub in sorted(subs)]


@dataclass(frozen=True)
class RemoteFinding:
    """One problem of a result on the remote: `error` (a reader refuses it) or `warning`."""

    fingerprint: str
    severity: str
    problem: str
    file: str | None = None

    def __str__(self) -> str:
        where = f"{self.fingerprint}/{self.file}" if self.file else self.fingerprint
        return f"{where}: {self.problem}"

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "fingerprint", "file", "severity", "problem")


@dataclass(frozen=True)
class RemoteVerifyReport:
    """What `verify_remote` checked: results, files, bytes read, and the findings."""

    url: str
    deep: bool
    results: int
    files: int
    bytes_read: int
    findings: tuple[RemoteFinding, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> ExitCode:
        bad = any(f.severity == "error" for f in self.findings)
        return ExitCode.PROBLEMS_FOUND if bad else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.url, **json_fields(self, "deep", "results", "files", "bytes_read", "findings")}


def verify_remote(
    url: str | None = None,
    *,
    fingerprints: Iterable[str] = (),
    deep: bool = False,
    key: str | None = None,
) -> RemoteVerifyReport:
    """Check what the remote `url` (else `CACHETOOL_REMOTE`) holds as a reader would (only the
    results `fingerprints` names, when given): see the module's docstring."""
    remote = open_remote(url, key)
    entries = _entries(remote)
    wanted = set(fingerprints)
    if wanted:
        missing = sorted(wanted - {e.fingerprint for e in entries})
        if missing:
            raise RemoteError(f"{missing[0]} is not on the remote {remote.url}")
        entries = [e for e in entries if e.fingerprint in wanted]
    # Each result's record and the start of its files are read at once (`_Heads`), and many
    # results at a time: against a remote tens of milliseconds away, requests in flight are
    # what the speed is made of.
    with ThreadPoolExecutor(_THREADS) as pool, ThreadPoolExecutor(_THREADS) as io:
        heads = None if deep else _Heads(remote, io)
        done = list(pool.map(lambda e: _verify_one(remote, e, deep, heads), entries))
    findings = tuple(f for found, _, _ in done for f in found)
    files = sum(n for _, n, _ in done)
    read = sum(b for _, _, b in done)
    return RemoteVerifyReport(remote.url, deep, len(entries), files, read, findings)


class _Heads:
    """The first range read of each file of a result (`HEAD_BYTES`, a small file whole), started
    in the pool `io` while the result's record is read; a file the record does not name is read
    for nothing, which only a result with a warning costs."""

    def __init__(self, remote: Remote, io: ThreadPoolExecutor) -> None:
        self.remote, self.io = remote, io

    def start(self, e: RemoteEntry) -> dict[str, Future[bytes]]:
        return {
            name: self.io.submit(self.remote.get_range, f"{e.fingerprint}/{name}", 0, min(size, HEAD_BYTES))
            for name, size in e.files
            if size >= 16
        }


def _verify_one(
    remote: Remote, e: RemoteEntry, deep: bool, heads: _Heads | None = None
) -> tuple[list[RemoteFinding], int, int]:
    """(findings, files checked, bytes read) of one result."""
    fp = e.fingerprint
    if not e.record:
        why = "files without a record (an upload stopped before its end): no reader uses them"
        return [RemoteFinding(fp, "warning", why)], 0, 0
    started = heads.start(e) if heads is not None else {}
    try:
        return _check_result(remote, e, deep, started)
    finally:
        for future in started.values():
            future.cancel()


def _check_result(
    remote: Remote, e: RemoteEntry, deep: bool, started: dict[str, Future[bytes]]
) -> tuple[list[RemoteFinding], int, int]:
    fp = e.fingerprint
    data = remote.get(f"{fp}/{RECORD_NAME}") or b""
    try:
        record = read_record(data, fp, remote.key)
    except RemoteRefused as err:
        return [RemoteFinding(fp, "error", err.message)], 0, len(data)
    found: list[RemoteFinding] = []
    sizes = dict(e.files)
    read = len(data)
    for f in record.files:
        size = sizes.get(f.name)
        if size is None:
            found.append(RemoteFinding(fp, "error", "missing, though the record names it", f.name))
            continue
        if size != f.size:
            found.append(RemoteFinding(fp, "error", f"{size} bytes, the record says {f.size}", f.name))
            continue
        key = f"{fp}/{f.name}"
        if deep:
            from cachetool.remote.transfer import object_digest

            got = object_digest(remote, key)
            read += got[0]
            if got != (f.size, f.xxh3):
                found.append(RemoteFinding(fp, "error", "its xxh3 is not the one its record names", f.name))
                continue
        problem, n = _shallow(remote, key, size, started.get(f.name))
        read += n
        if problem is not None:
            found.append(RemoteFinding(fp, "error", problem, f.name))
    for name in sorted(set(sizes) - {f.name for f in record.files}):
        found.append(RemoteFinding(fp, "warning", "not named by the record: no reader uses it", name))
    return found, len(record.files), read


def _shallow(
    remote: Remote, key: str, size: int, started: Future[bytes] | None = None
) -> tuple[str | None, int]:
    """(what is wrong with the Arrow stream `key` of `size` bytes, or None; bytes read): its
    schema message at the start, its end-of-stream marker at the end (`started`: the first read,
    under way)."""
    from cachetool.cache.arrow import MAX_SCHEMA_BYTES
    from cachetool.cache.ipc import CONTINUATION, EOS_MARKER, decode_schema

    if size < 16:
        return f"{size} bytes: too short for an Arrow stream", 0
    # A small file whole: one read.
    head = started.result() if started is not None else remote.get_range(key, 0, min(size, HEAD_BYTES))
    read = len(head)
    if head[:4] != CONTINUATION:
        return "not an Arrow IPC stream", read
    length = int.from_bytes(head[4:8], "little", signed=True)
    if length <= 0 or length > MAX_SCHEMA_BYTES or 8 + length > size:
        return "its schema message is damaged", read
    if 8 + length > len(head):
        head += remote.get_range(key, len(head), 8 + length)
        read = len(head)
    message = head[: 8 + length]
    if decode_schema(message) is None and not _pyarrow_reads_schema(message):
        return "its schema message does not read", read
    if len(head) == size:
        tail = head[size - 8 :]
    else:
        tail = remote.get_range(key, size - 8, size)
        read += len(tail)
    if tail != EOS_MARKER:
        return "no end-of-stream marker: the writer did not finish", read
    return None, read


def _pyarrow_reads_schema(message: bytes) -> bool:
    """pyarrow reads the schema message (one cachetool's header reader declines)."""
    import pyarrow as pa

    try:
        pa.ipc.read_schema(pa.py_buffer(message))
    except Exception:
        return False
    return True


@dataclass(frozen=True)
class RemoteGcPlan:
    """What `gc s3://... --older-than D --max-size S` would remove, oldest written first: each
    result (all of its objects) nobody wrote to for `older_than` seconds, then more until what
    stays is under `max_size` bytes. A result without a record (an upload that may still be
    running) only once nothing of it was written for `min_age` seconds. `size`: the bytes of
    every result before."""

    url: str
    older_than: float | None
    items: tuple[RemoteEntry, ...]
    max_size: int | None = None
    min_age: float = 3600.0
    size: int = 0

    @property
    def expected_freed(self) -> int:
        return sum(e.size for e in self.items)

    @property
    def size_after(self) -> int:
        """The bytes the remote holds once the plan ran."""
        return self.size - self.expected_freed

    def to_json(self) -> dict[str, Any]:
        names = ("older_than", "max_size", "min_age", "items", "expected_freed", "size", "size_after")
        return {"remote": self.url, **json_fields(self, *names)}


@dataclass(frozen=True)
class RemoteGcResult:
    """What `execute_remote_gc` removed, the bytes freed, and what it kept (with why)."""

    removed: tuple[str, ...]
    freed: int
    kept: tuple[tuple[str, str], ...] = ()


def plan_remote_gc(
    url: str | None = None,
    *,
    older_than: float | None = None,
    max_size: int | None = None,
    min_age: float = 3600.0,
    now: float | None = None,
) -> RemoteGcPlan:
    """The plan of removing from the remote `url` (else `CACHETOOL_REMOTE`) what nobody wrote to
    for `older_than` seconds, then the oldest written results until the rest is under `max_size`
    bytes (an object store records no reads: "least recently used" is "least recently written").
    Files without a record first, and only once older than `min_age`: an upload writes its record
    last, so a result being pushed is one of those, and is younger. Nothing is removed here."""
    import time

    if older_than is None and max_size is None:
        raise RemoteError("gc of a remote needs --older-than or --max-size (e.g. --older-than 30d)")
    remote = open_remote(url)
    now = time.time() if now is None else now
    entries = _entries(remote)
    size = sum(e.size for e in entries)
    # Oldest first; files without a record (a killed upload, once old enough) before any result.
    candidates = sorted(
        (e for e in entries if e.record or now - e.modified > min_age),
        key=lambda e: (e.record, e.modified, e.fingerprint),
    )
    chosen = [e for e in candidates if older_than is not None and now - e.modified > older_than]
    if max_size is not None:
        left, taken = size - sum(e.size for e in chosen), {e.fingerprint for e in chosen}
        for e in candidates:
            if left <= max_size:
                break
            if e.fingerprint not in taken:
                chosen.append(e)
                left -= e.size
    return RemoteGcPlan(remote.url, older_than, tuple(chosen), max_size, min_age, size)


def execute_remote_gc(plan: RemoteGcPlan) -> RemoteGcResult:
    """Remove each result of `plan`, its record first (from then on no reader uses it), then its
    files. Right before, its objects are listed again: one written since the plan (a push that
    came back, the record of an upload) keeps the result."""
    import obstore

    remote = open_remote(plan.url)
    removed, kept, freed = [], [], 0
    for e in plan.items:
        objects = list(remote.list(e.fingerprint))  # a path prefix: `fp/...` only
        if any(o["last_modified"].timestamp() > e.modified for o in objects):
            kept.append((e.fingerprint, "written to since the plan was made"))
            continue
        paths = sorted((str(o["path"]) for o in objects), key=lambda p: not p.endswith("/" + RECORD_NAME))
        try:
            for path in paths:
                obstore.delete(remote.store, path)
        except Exception as err:
            kept.append((e.fingerprint, f"removal failed: {short_error(err)}"))
            continue
        removed.append(e.fingerprint)
        freed += sum(int(o["size"]) for o in objects if not str(o["path"]).endswith("/" + RECORD_NAME))
    return RemoteGcResult(tuple(removed), freed, tuple(kept))
