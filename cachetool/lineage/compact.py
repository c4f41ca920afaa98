"""Compacting a long-lived ledger: old runs summarised, the records still needed kept whole.

Every traced process appends its own segment, so a cache used for months holds thousands of
segments and hundreds of thousands of records (about 1.2 kB each). `compact_ledger(root)`
replaces the segments of finished old runs with one *compacted segment* (`compacted-<time>-<pid>
.jsonl`, JSON Lines like any segment) that holds:

* a `CompactionRecord` first, naming the segments (and their sizes) it replaces;
* one `RunSummaryRecord` per old run: start and end, host, script, step counts, bytes written,
  the fingerprints whose origin it recorded (computed, loaded, neither) and when it last used each
  one; summaries of earlier compactions are carried over;
* every gc record;
* whole, the records still needed: for every fingerprint that still has files in the cache (an
  entry's fingerprint or alias, or a recorded file that exists), and every fingerprint a kept run
  names as a parent, its latest origin record, then the same for its parents up to the source:
  `lineage`, `show` and `explain` of what the cache holds keep their parent links; and the
  source texts those records name.

The newest `keep_runs` runs stay whole in their segments, and so does every run whose writer may
still be running: a segment is compacted only when its writer, on this host, is gone, or, written
on another host, it recorded its end more than an hour ago.

What the ledger's usage needs of a summarised run (last use, hits, misses, random fingerprints:
`cachetool.lineage.ledger.Usage`) is in its summary, so `ls`, `gc` and `verify` see the same
usage. `explain` compares a step only with the runs kept whole; `stats` counts summarised runs in
its totals, not by call site or dataset.

Safety: one compaction at a time per ledger folder (a lock file in it); the compacted segment is
written under a temporary name, synced, then renamed into place, and only then are the replaced
segments removed. Readers skip a replaced segment while it still has the size it was read at, so
a compaction killed at any point loses nothing and counts nothing twice: before the rename the
old segments are the ledger, after it the compacted one is; the next compaction removes what a
killed one left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import signal
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cachetool.errors import CachetoolError
from cachetool.lineage.ledger import source_hashes
from cachetool.lineage.records import (
    CompactionRecord,
    GcRecord,
    LedgerRecord,
    RunEndRecord,
    RunSummaryRecord,
    SourceRecord,
    StepRecord,
)
from cachetool.lineage.roots import SEGMENT_SUFFIX, ledger_dirs, segment_name, user_state_dir
from cachetool.lineage.segments import (
    COMPACTED_PREFIX,
    is_segment_name,
    read_segment_from,
    replaced_segments,
    segment_size,
    still_replaced,
)
from cachetool.lineage.summaries import bounded, summaries, trimmed
from cachetool.lineage.writer import ENCODER, RECORD_VERSION

#: Runs kept whole (the newest ones): `explain` compares a step with these.
KEEP_RUNS = 50
#: Past this many bytes of segments a `gc` run compacts the ledger by itself.
AUTO_BYTES = 64 * 1024 * 1024
#: A segment written on another host is compacted only this long after it recorded its end.
OTHER_HOST_GRACE = 3600.0
#: Segments one compaction locks and replaces at most (each lock is an open descriptor); the
#: rest wait for the next compaction.
MAX_REPLACED = 512
_LOCK = ".compact.lock"
_TMP_PREFIX = ".compact-"
#: Test hook: a compaction whose environment names one of its kill points ("written": the
#: compacted segment written under its temporary name; "renamed": renamed into place, the
#: replaced segments not yet removed) SIGKILLs itself there (the kill tests use it).
KILL_AT_ENV = "CACHETOOL_TEST_KILL_AT"


@dataclass(frozen=True)
class CompactionReport:
    """What `compact_ledger` did (or, with `dry_run`, would do) to the ledger of `root`."""

    root: Path
    dry_run: bool
    segments: int = 0  # segments replaced
    runs: int = 0  # runs summarised
    kept: int = 0  # records of those segments kept whole
    summarised: int = 0  # records of those segments folded into summaries
    bytes_before: int = 0  # every segment of the ledger
    bytes_after: int = 0
    left: tuple[str, ...] = field(default=())  # old segments left whole (see `warnings`)
    recent: int = 0  # segments kept whole as the newest `keep_runs` of their folder
    keep_runs: int = KEEP_RUNS
    warnings: tuple[str, ...] = ()

    @property
    def why_nothing(self) -> str:
        """Why nothing was compacted, in a few words ("" when something was)."""
        if self.segments:
            return ""
        why = []
        if self.recent:
            why.append(f"{self.recent} segment(s), all among the newest {self.keep_runs} kept whole")
        if self.left:
            why.append(f"{len(self.left)} older one(s) left whole")
        return "; ".join(why) or "no segment"

    def to_json(self) -> dict[str, Any]:
        return {
            "root": os.fspath(self.root),
            "dry_run": self.dry_run,
            "segments": self.segments,
            "runs": self.runs,
            "kept": self.kept,
            "summarised": self.summarised,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "left": list(self.left),
            "recent": self.recent,
            "keep_runs": self.keep_runs,
            "warnings": list(self.warnings),
        }


def ledger_bytes(root: str | os.PathLike[str]) -> int:
    """Bytes of every segment of `root`'s ledger (replaced ones a killed compaction left included)."""
    total = 0
    for folder in ledger_dirs(root):
        with contextlib.suppress(OSError), os.scandir(folder) as it:
            total += sum(de.stat().st_size for de in it if de.name.endswith(SEGMENT_SUFFIX))
    return total


def compact_ledger(
    root: str | os.PathLike[str],
    *,
    keep_runs: int = KEEP_RUNS,
    dry_run: bool = False,
    now: float | None = None,
) -> CompactionReport:
    """Compact the ledger of `root` (see the module docstring): the segments of finished runs
    older than the newest `keep_runs` become one compacted segment. With `dry_run`, nothing is
    written or removed; the report says what would be. Raises `CachetoolError` when another
    compaction of this ledger holds its lock for more than a minute."""
    from filelock import FileLock, Timeout

    root_path = Path(os.path.abspath(os.fspath(root)))
    before = ledger_bytes(root_path)
    now = time.time() if now is None else now
    total = CompactionReport(root_path, dry_run, bytes_before=before, bytes_after=before, keep_runs=keep_runs)
    for folder, within in zip(ledger_dirs(root_path), (root_path, user_state_dir()), strict=True):
        if not os.path.lexists(folder):
            continue
        why = _not_own(folder, within)
        if why is not None:
            total = replace(total, warnings=(*total.warnings, f"{folder}: left alone: {why}"))
            continue
        try:
            with FileLock(os.fspath(folder / _LOCK), timeout=60):
                got = _compact_folder(root_path, folder, keep_runs, dry_run, now)
        except Timeout:
            raise CachetoolError(f"{folder}: another compaction of this ledger is running") from None
        except OSError as e:
            raise CachetoolError(f"{folder}: cannot compact the ledger: {e.strerror or e}") from None
        total = CompactionReport(
            root_path,
            dry_run,
            segments=total.segments + got.segments,
            runs=total.runs + got.runs,
            kept=total.kept + got.kept,
            summarised=total.summarised + got.summarised,
            bytes_before=before,
            bytes_after=total.bytes_after - got.bytes_before + got.bytes_after,
            left=total.left + got.left,
            recent=total.recent + got.recent,
            keep_runs=keep_runs,
            warnings=total.warnings + got.warnings,
        )
    return total


def _not_own(folder: Path, within: Path) -> str | None:
    """Why compaction must not touch `folder` (a symlink, or not inside `within`: the root for
    its own ledger, the user's state folder for the fallback), or None."""
    if folder.is_symlink():
        return "a symlink (compaction never follows one out of the root)"
    if not folder.is_dir():
        return "not a folder"
    real, base = os.path.realpath(folder), os.path.realpath(within)
    if os.path.commonpath([real, base]) != base:
        return f"its real path {real} is outside {base}"
    return None


def compact_if_large(root: str | os.PathLike[str], *, dry_run: bool = False) -> CompactionReport | None:
    """`compact_ledger(root, dry_run=dry_run)` when its segments hold more than `AUTO_BYTES` (what
    `gc` does after a removal); None, doing nothing, otherwise or when another compaction holds
    the ledger."""
    if ledger_bytes(root) <= AUTO_BYTES:
        return None
    try:
        return compact_ledger(root, dry_run=dry_run)
    except CachetoolError:
        return None


#: A step record that says where its result comes from, as the first pass keeps it (not the
#: record itself: memory stays small however long the ledger): its order, where it is, its parents,
#: whether it is internal and the source texts it names.
_Origin = tuple[tuple[float, str, int], str, int, tuple[str, ...], bool, tuple[str, ...]]


@dataclass
class _Segment:
    """What the first pass learns of one segment, reading it once."""

    name: str
    size: int
    compacted: bool
    last: float = 0.0
    ended: bool = False
    origins: dict[str, list[_Origin]] = field(default_factory=dict)
    inputs: set[str] = field(default_factory=set)  # parents and no-op results its steps name
    unread: str = ""  # why its lines cannot all be carried over (then it stays whole)
    with_files: set[str] = field(default_factory=set)  # results a recorded file of which exists
    sources: dict[str, int] = field(default_factory=dict)  # source hash -> offset of its text


def _compact_folder(root: Path, folder: Path, keep_runs: int, dry_run: bool, now: float) -> CompactionReport:
    with _folder_fd(folder) as dfd:
        if not dry_run:
            _remove_leftovers(folder, dfd)
        segments = _first_pass(folder)
        warnings = tuple(f"{folder / s.name}: left whole: {s.unread}" for s in segments if s.unread)
        raw = sorted((s for s in segments if not s.compacted), key=lambda s: (s.last, s.name))
        recent = raw[len(raw) - keep_runs :] if keep_runs > 0 else []
        old = raw[: len(raw) - len(recent)]
        with _locked(dfd, [s.name for s in old if not s.unread and _finished(s, folder, now)]) as mine:
            done = [s for s in old if s.name in mine]
            left = tuple(s.name for s in old if s.name not in mine)
            compacted = [s for s in segments if s.compacted and not s.unread]
            empty = CompactionReport(root, dry_run, left=left, recent=len(recent), warnings=warnings)
            if not done and len(compacted) < 2:
                return empty
            replaced = done + compacted
            data, report = _compacted(root, folder, segments, replaced, now)
            if any(segment_size(folder / s.name) != s.size for s in replaced):
                # A writer appended meanwhile: what was read no longer stands for the segment.
                return replace(
                    empty, warnings=(*warnings, f"{folder}: the ledger changed while read: try again")
                )
            report = replace(report, dry_run=dry_run, left=left, recent=len(recent), warnings=warnings)
            if dry_run:
                return report
            _write_compacted(folder, data, now)
            _kill_point("renamed")
            for s in replaced:
                _unlink_replaced(dfd, s.name, s.size)
            _sync_dir(folder)
            return report


def _compacted(
    root: Path, folder: Path, segments: list[_Segment], replaced: list[_Segment], now: float
) -> tuple[bytes, CompactionReport]:
    """The bytes of the compacted segment that replaces `replaced`, and what it holds."""
    names = {s.name for s in replaced}
    living = _living(root, replaced)
    wanted = set(living)
    for seg in segments:
        if seg.name not in names:
            wanted |= seg.inputs  # a run kept whole: the origins of its inputs stay
    keep, hashes = _needed(replaced, wanted)
    lines, kept, runs, summarised = _second_pass(root, folder, replaced, keep, hashes, living)
    header = CompactionRecord(
        v=RECORD_VERSION,
        type=CompactionRecord.TYPE,
        time=now,
        host=socket.gethostname(),
        pid=os.getpid(),
        internal=True,
        root=os.fspath(root),
        replaces=tuple((s.name, s.size) for s in replaced),
    )
    text = "\n".join([ENCODER.encode(header.to_json()), *lines]) + "\n"
    data = text.encode("utf-8", "surrogateescape")
    report = CompactionReport(
        root,
        False,
        segments=len(replaced),
        runs=runs,
        kept=kept,
        summarised=summarised,
        bytes_before=sum(s.size for s in replaced),
        bytes_after=len(data),
    )
    return data, report


@contextlib.contextmanager
def _folder_fd(folder: Path) -> Iterator[int]:
    """A descriptor of `folder` itself (never a symlink's target): removals go through it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(dfd: int, names: list[str]) -> Iterator[set[str]]:
    """The names of `names` (at most `MAX_REPLACED`) whose segment this process locked
    exclusively, held until the block ends. A writer holds a shared lock on its open segment
    (`cachetool.lineage.writer.SegmentWriter`): a segment it is writing is not among them,
    whatever the pid in its name says. Where locks are not supported (some NFS), the pid rule
    alone decides."""
    fds: list[int] = []
    got: set[str] = set()
    try:
        for name in names[:MAX_REPLACED]:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                continue
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue  # its writer holds it
            got.add(name)
        yield got
    finally:
        for fd in fds:
            os.close(fd)


def _unlink_replaced(dfd: int, name: str, size: int) -> None:
    """Remove the replaced segment `name` of the folder open as `dfd`, if it is a regular file
    with the name of a segment that still has the size it was read at."""
    if not is_segment_name(name):
        return
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            os.unlink(name, dir_fd=dfd)


def _kill_point(point: str) -> None:
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _first_pass(folder: Path) -> list[_Segment]:
    """Each segment readers see (replaced ones left out), read once, one at a time."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(SEGMENT_SUFFIX))
    replaced = replaced_segments(folder, [n for n in names if n.startswith(COMPACTED_PREFIX)])
    out = []
    exists: dict[str, bool] = {}
    for name in names:
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or still_replaced(folder / name, replaced):
            continue
        size = st.st_size
        seg = _Segment(name, size, name.startswith(COMPACTED_PREFIX))
        records, whole, skipped = read_segment_from(folder / name, 0)
        if skipped:
            seg.unread = f"{skipped} line(s) this cachetool cannot read (`cachetool stats` names them)"
        elif min(whole, size) < size:
            seg.unread = "its last line is torn (its writer was killed mid-write) or past the size read"
        for offset, _length, rec in records:
            if offset >= size:
                break
            seg.last = max(seg.last, rec.end)
            seg.ended |= isinstance(rec, RunEndRecord)
            if isinstance(rec, SourceRecord) and rec.hash:
                seg.sources.setdefault(rec.hash, offset)
            if not isinstance(rec, StepRecord):
                continue
            seg.inputs.update(rec.parents)
            if rec.result is None:
                continue
            if not rec.is_origin:
                seg.inputs.add(rec.result)
                continue
            origin = (
                (rec.time, rec.run, rec.seq),
                name,
                offset,
                rec.parents,
                rec.internal,
                tuple(source_hashes(rec)),
            )
            seg.origins.setdefault(rec.result, []).append(origin)
            for f in rec.files:
                if f.path not in exists:
                    exists[f.path] = os.path.lexists(f.path)
                if exists[f.path]:
                    seg.with_files.add(rec.result)
        out.append(seg)
    return out


#: `<host>-<pid>-<UTC start>.jsonl`, as `cachetool.lineage.roots.segment_name` names a segment.
_SEGMENT_NAME = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)-\d{8}T\d{6}\.\d{6}Z\.jsonl$")


def _finished(seg: _Segment, folder: Path, now: float) -> bool:
    """Its writer will append no more: on this host, its process is gone; on another host, it
    recorded its end more than `OTHER_HOST_GRACE` ago (a segment of another name: it was last
    written that long ago)."""
    m = _SEGMENT_NAME.match(seg.name)
    if m is not None and m["host"] == _safe_host(socket.gethostname()):
        return not _alive(int(m["pid"]))
    if seg.ended and now - seg.last > OTHER_HOST_GRACE:
        return True
    try:
        return m is None and now - (folder / seg.name).stat().st_mtime > OTHER_HOST_GRACE
    except OSError:
        return False


def _safe_host(host: str) -> str:
    """The host as a segment's name spells it."""
    return segment_name(host, 0, 0.0).rsplit("-", 2)[0]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's: alive
    return True


def _needed(
    replaced: list[_Segment], wanted: set[str]
) -> tuple[set[tuple[str, int]], dict[str, tuple[str, int]]]:
    """Where the step records to keep whole are (segment, offset): the latest origin (and latest
    internal one) of every fingerprint in `wanted`, and of their parents, up to the source; and
    where the source texts they name are."""
    latest: dict[tuple[str, bool], _Origin] = {}
    for seg in replaced:
        for fp, origins in seg.origins.items():
            for o in origins:
                was = latest.get((fp, o[4]))
                if was is None or o[0] >= was[0]:
                    latest[(fp, o[4])] = o
    keep: set[tuple[str, int]] = set()
    hashes: set[str] = set()
    seen: set[str] = set()
    todo = list(wanted)
    while todo:
        fp = todo.pop()
        if fp in seen:
            continue
        seen.add(fp)
        for internal in (False, True):
            got = latest.get((fp, internal))
            if got is not None:
                keep.add((got[1], got[2]))
                hashes.update(got[5])
                todo.extend(got[3])
    sources: dict[str, tuple[str, int]] = {}
    for seg in replaced:
        for h, offset in seg.sources.items():
            if h in hashes:
                sources.setdefault(h, (seg.name, offset))
    return keep, sources


def _living(root: Path, replaced: list[_Segment]) -> set[str]:
    """Fingerprints that still have files: of the cache's entries (and aliases), and those a
    recorded file of which exists."""
    from cachetool.cache.scan import scan_cache

    out: set[str] = set()
    with contextlib.suppress(CachetoolError):
        report = scan_cache(root, ledger=False)
        out = {fp for e in report.entries for fp in (e.fingerprint, *e.aliases) if fp}
    for seg in replaced:
        out |= seg.with_files
    return out


def _second_pass(
    root: Path,
    folder: Path,
    replaced: list[_Segment],
    keep: set[tuple[str, int]],
    sources: dict[str, tuple[str, int]],
    living: set[str],
) -> tuple[list[str], int, int, int]:
    """The lines of the compacted segment after its header (summaries, gc records, the records
    kept whole, their source texts), reading the replaced segments again one at a time; with how
    many records were kept, runs summarised and records summarised."""
    chosen = set(sources.values())
    earlier: list[RunSummaryRecord] = []
    fresh: list[RunSummaryRecord] = []
    gcs: list[LedgerRecord] = []
    kept: list[LedgerRecord] = []
    texts: list[LedgerRecord] = []
    summarised = 0
    for seg in replaced:
        records, _, _ = read_segment_from(folder / seg.name, 0)
        rest: list[LedgerRecord] = []
        for offset, _length, rec in records:
            if offset >= seg.size:
                break
            if isinstance(rec, RunSummaryRecord):
                earlier.append(trimmed(rec, living))
            elif isinstance(rec, GcRecord):
                gcs.append(rec)
            elif isinstance(rec, SourceRecord):
                if (seg.name, offset) in chosen:
                    texts.append(rec)
            elif (seg.name, offset) in keep:
                kept.append(rec)
            else:
                summarised += isinstance(rec, StepRecord)
                rest.append(rec)
        fresh += summaries(rest, living)
    order = lambda r: (r.time, r.run, r.seq)  # noqa: E731
    out: list[LedgerRecord] = [*bounded([*earlier, *fresh])]
    out += sorted(gcs, key=order) + sorted(kept, key=order) + sorted(texts, key=order)
    return [ENCODER.encode(r.to_json()) for r in out], len(kept), len(fresh), summarised


def _write_compacted(folder: Path, data: bytes, now: float) -> Path:
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    final = folder / f"{COMPACTED_PREFIX}{stamp}-{os.getpid()}{SEGMENT_SUFFIX}"
    tmp = folder / f"{_TMP_PREFIX}{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    _kill_point("written")
    os.replace(tmp, final)
    _sync_dir(folder)
    return final


def _remove_leftovers(folder: Path, dfd: int) -> None:
    """What a killed compaction left: its temporary file, and segments it replaced."""
    names = os.listdir(dfd)
    for name in names:
        if name.startswith(_TMP_PREFIX) and name.endswith(".tmp"):
            pid = name[len(_TMP_PREFIX) : -len(".tmp")]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
    compacted = [n for n in names if n.startswith(COMPACTED_PREFIX) and n.endswith(SEGMENT_SUFFIX)]
    for name, size in replaced_segments(folder, compacted).items():
        _unlink_replaced(dfd, name, size)


def _sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
