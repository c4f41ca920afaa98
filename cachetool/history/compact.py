"""Compacting a long-lived ledger: old runs summarised, the records still needed kept whole.

Every traced process appends its own segment, so a cache used for months holds thousands of
segments and hundreds of thousands of records (about 1.2 kB each). `compact_ledger(root)`
replaces the segments of finished old runs with one *compacted segment* (`compacted-<time>-<pid>
.jsonl`, JSON Lines like any segment) that holds:

* a `CompactionRecord` first, naming the segments (and their sizes) it replaces;
* one `RunSummaryRecord` per old run: start and end, host, script, step counts, bytes written,
  the fingerprints whose origin it recorded (computed, loaded, neither) and when it last used each
  one; summaries of earlier compactions are carried over;
* the gc records a command still reads (the latest removal of each fingerprint the kept records
  name, and of data from each folder that still exists); the others are folded into one count in
  the `CompactionRecord` (`gc_folded`: removals, bytes, first and last time), so a cache cleaned
  every day keeps a ledger of bounded size;
* whole, the records still needed: for every fingerprint that still has files in the cache (an
  entry's fingerprint or alias, or a recorded file that exists), and every fingerprint a kept run
  names as a parent, its latest origin record, then the same for its parents up to the source:
  `lineage`, `show` and `explain` of what the cache holds keep their parent links; and the
  source texts those records name.

The newest `keep_runs` segments of each ledger folder (a segment holds one process's runs) stay
whole, and so does every segment whose writer may still be running: a segment is compacted only
when compaction can lock it exclusively (a writer holds a shared lock on its open segment, so a
writer in another PID namespace is seen whatever the pid in its name) and its writer, on this
host, is gone, or, written on another host, it recorded its end more than an hour ago. A segment
with lines this cachetool cannot read (a newer record type, a torn last line) stays whole too,
with a warning: nothing is dropped unread. A compacted segment is never written larger than
readers read of one segment (`MAX_SEGMENT_BYTES`): past it, the records kept whole (written after
the gc history) would be lost to lineage; the ledger is then left as it is, with a warning.

What the ledger's usage needs of a summarised run (last use, hits, misses, random fingerprints:
`cachetool.history.ledger.Usage`) is in its summary, so `ls`, `gc` and `verify` see the same
usage. `explain` compares a step only with the runs kept whole; `stats` counts summarised runs in
its totals, not by call site or dataset.

Safety: a ledger folder that is a symlink, or whose real path leaves the root (the user's state
folder for the fallback ledger), is left alone; a compacted segment names only plain segment
files of its own folder, and removals go through the folder's descriptor. One compaction at a
time per ledger folder (a lock file in it); the compacted segment is
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
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.roots import SEGMENT_SUFFIX, is_segment_name, ledger_dirs, segment_name, user_state_dir
from cachetool.errors import CachetoolError
from cachetool.history import segments as segment_files
from cachetool.history.records.compacted import CompactionRecord
from cachetool.history.segments import (
    COMPACTED_PREFIX,
    replaced_segments,
    segment_size,
)
from cachetool.history.writer import ENCODER, RECORD_VERSION
from cachetool.processes import alive

if TYPE_CHECKING:  # the passes read records: loaded only when a compaction runs
    from cachetool.history.compact_passes import Segment


def _max_replaced() -> int:
    """Half the descriptors this process may open (each lock is one): 512 under the common soft
    limit of 1,024, so a ledger of a thousand runs compacts at once where the limit is higher."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 512
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(16, min(soft // 2, 65536))


#: Segments one compaction locks and replaces at most (each lock is an open descriptor); the
#: rest wait for the next compaction.
MAX_REPLACED = _max_replaced()
LOCK_NAME = ".compact.lock"
_TMP_PREFIX = ".compact-"
#: Test hook: a compaction whose environment names one of its kill points ("written": the
#: compacted segment written under its temporary name; "renamed": renamed into place, the
#: replaced segments not yet removed) SIGKILLs itself there (the kill tests use it).
KILL_AT_ENV = "CACHETOOL_TEST_KILL_AT"


@contextlib.contextmanager
def folder_fd(folder: Path) -> Iterator[int]:
    """A descriptor of `folder` itself (never a symlink's target): removals go through it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(dfd: int, names: list[str]) -> Iterator[set[str]]:
    """The names of `names` whose segment this process locked exclusively, held until the block
    ends (each an open descriptor: callers pass at most `MAX_REPLACED`). A writer holds a shared
    lock on its open segment (`cachetool.history.writer.SegmentWriter`): a segment it is writing
    is not among them, whatever the pid in its name says. Where locks are not supported (some
    NFS), the pid rule alone decides."""
    fds: list[int] = []
    got: set[str] = set()
    try:
        for name in names:
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


def unlink_replaced(dfd: int, name: str, size: int) -> None:
    """Remove the replaced segment `name` of the folder open as `dfd`, if it is a regular file
    with the name of a segment that still has the size it was read at."""
    if not is_segment_name(name):
        return
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            os.unlink(name, dir_fd=dfd)


def kill_point(point: str) -> None:
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def write_compacted(folder: Path, data: bytes, now: float) -> Path:
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    final = folder / f"{COMPACTED_PREFIX}{stamp}-{os.getpid()}{SEGMENT_SUFFIX}"
    tmp = folder / f"{_TMP_PREFIX}{os.getpid()}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    kill_point("written")
    os.replace(tmp, final)
    sync_dir(folder)
    return final


def remove_leftovers(folder: Path, dfd: int) -> None:
    """What a killed compaction left: its temporary file, and segments it replaced."""
    names = os.listdir(dfd)
    for name in names:
        if name.startswith(_TMP_PREFIX) and name.endswith(".tmp"):
            pid = name[len(_TMP_PREFIX) : -len(".tmp")]
            if pid.isdigit() and not alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
    compacted = [n for n in names if n.startswith(COMPACTED_PREFIX) and n.endswith(SEGMENT_SUFFIX)]
    for name, size in replaced_segments(folder, compacted).items():
        unlink_replaced(dfd, name, size)


def sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: Segments kept whole per ledger folder (the newest ones, one per traced process: `cachetool
#: run` traces one run each): `explain` compares a step with these.
KEEP_RUNS = 50
#: Past this many bytes of segments that compaction would fold (older than the newest
#: `KEEP_RUNS` of their folder), a traced run that ends and a `gc` run compact the ledger by
#: themselves: reading the whole ledger (`lineage`, `explain`, `ls`) stays about a second.
AUTO_BYTES = 16 * 1024 * 1024
#: A segment written on another host is compacted only this long after it recorded its end.
OTHER_HOST_GRACE = 3600.0


@dataclass(frozen=True)
class CompactionReport:
    """What `compact_ledger` did (or, with `dry_run`, would do) to the ledger of `root`."""

    root: Path
    dry_run: bool
    segments: int = 0  # segments replaced
    runs: int = 0  # runs summarised
    kept: int = 0  # records of those segments kept whole
    summarised: int = 0  # records of those segments folded into summaries
    gc_folded: int = 0  # gc records folded into a count (earlier compactions' included)
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
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "root": os.fspath(self.root), "left": list(self.left), "warnings": list(self.warnings)}

    def plus(self, other: CompactionReport) -> CompactionReport:
        """This report with what `other` (of another ledger folder of the same root) did."""
        return replace(
            self,
            segments=self.segments + other.segments,
            runs=self.runs + other.runs,
            kept=self.kept + other.kept,
            summarised=self.summarised + other.summarised,
            gc_folded=self.gc_folded + other.gc_folded,
            bytes_after=self.bytes_after - other.bytes_before + other.bytes_after,
            left=self.left + other.left,
            recent=self.recent + other.recent,
            warnings=self.warnings + other.warnings,
        )


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
    timeout: float = 60,
) -> CompactionReport:
    """Compact the ledger of `root` (see the module docstring): in each ledger folder, the
    segments of finished runs older than its newest `keep_runs` segments (a segment holds one
    traced process's runs) become one compacted segment. With `dry_run`, nothing is
    written or removed; the report says what would be. Raises `CachetoolError` when another
    compaction of this ledger holds its lock for more than `timeout` seconds."""
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
            with FileLock(os.fspath(folder / LOCK_NAME), timeout=timeout):
                got = _compact_folder(root_path, folder, keep_runs, dry_run, now)
        except Timeout:
            raise CachetoolError(f"{folder}: another compaction of this ledger is running") from None
        except OSError as e:
            raise CachetoolError(f"{folder}: cannot compact the ledger: {e.strerror or e}") from None
        total = total.plus(got)
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


def foldable_bytes(root: str | os.PathLike[str], keep_runs: int = KEEP_RUNS) -> int:
    """Bytes of the segments compaction could fold: in each ledger folder, those not yet compacted
    and older (by mtime) than its newest `keep_runs`. Only `stat`s: cheap enough for every run."""
    total = 0
    for folder in ledger_dirs(root):
        with contextlib.suppress(OSError), os.scandir(folder) as it:
            raw = [
                de.stat()
                for de in it
                if de.name.endswith(SEGMENT_SUFFIX) and not de.name.startswith(COMPACTED_PREFIX)
            ]
            raw.sort(key=lambda st: st.st_mtime)
            total += sum(st.st_size for st in raw[: max(0, len(raw) - keep_runs)])
    return total


def compact_if_large(
    root: str | os.PathLike[str], *, dry_run: bool = False, wait: bool = True
) -> CompactionReport | None:
    """`compact_ledger(root, dry_run=dry_run)` when more than `AUTO_BYTES` could be folded (what a
    traced run does as it ends and `gc` after a removal); None, doing nothing, otherwise or when
    another compaction holds the ledger (waited for a minute with `wait`, not at all without)."""
    if foldable_bytes(root) <= AUTO_BYTES:
        return None
    try:
        return compact_ledger(root, dry_run=dry_run, timeout=60 if wait else 0)
    except CachetoolError:
        return None


def _compact_folder(root: Path, folder: Path, keep_runs: int, dry_run: bool, now: float) -> CompactionReport:
    with folder_fd(folder) as dfd:
        if not dry_run:
            remove_leftovers(folder, dfd)
        from cachetool.history.compact_passes import first_pass

        segments = first_pass(folder)
        warnings = tuple(f"{folder / s.name}: left whole: {s.unread}" for s in segments if s.unread)
        raw = sorted((s for s in segments if not s.compacted), key=lambda s: (s.last, s.name))
        recent = raw[max(0, len(raw) - keep_runs) :] if keep_runs > 0 else []
        old = raw[: len(raw) - len(recent)]
        finished = [s.name for s in old if not s.unread and _finished(s, folder, now)]
        if len(finished) > MAX_REPLACED:
            more = len(finished) - MAX_REPLACED
            warnings += (f"{folder}: {more} more old segment(s) wait for the next compaction",)
        with locked(dfd, finished[:MAX_REPLACED]) as mine:
            done = [s for s in old if s.name in mine]
            left = tuple(s.name for s in old if s.name not in mine)
            compacted = [s for s in segments if s.compacted and not s.unread]
            empty = CompactionReport(root, dry_run, left=left, recent=len(recent), warnings=warnings)
            if not done and len(compacted) < 2:
                return empty
            replaced = done + compacted
            data, report = _compacted(root, folder, segments, replaced, now)
            if len(data) > segment_files.MAX_SEGMENT_BYTES:
                # Readers read that much of a segment: the records kept whole, written after the
                # gc history, would be lost to lineage (and gc would no longer protect a pin's
                # ancestors). The segments stay as they are, each read whole.
                return replace(
                    empty,
                    warnings=(
                        *warnings,
                        f"{folder}: left as it is: the compacted segment would hold {len(data)} bytes, "
                        f"more than readers read of one segment ({segment_files.MAX_SEGMENT_BYTES})",
                    ),
                )
            if any(segment_size(folder / s.name) != s.size for s in replaced):
                # A writer appended meanwhile: what was read no longer stands for the segment.
                return replace(
                    empty, warnings=(*warnings, f"{folder}: the ledger changed while read: try again")
                )
            report = replace(report, dry_run=dry_run, left=left, recent=len(recent), warnings=warnings)
            if dry_run:
                return report
            write_compacted(folder, data, now)
            kill_point("renamed")
            for s in replaced:
                unlink_replaced(dfd, s.name, s.size)
            sync_dir(folder)
            return report


def _compacted(
    root: Path, folder: Path, segments: list[Segment], replaced: list[Segment], now: float
) -> tuple[bytes, CompactionReport]:
    """The bytes of the compacted segment that replaces `replaced`, and what it holds."""
    names = {s.name for s in replaced}
    from cachetool.history.compact_passes import living_fingerprints, needed, second_pass

    living = living_fingerprints(root, replaced)
    wanted = set(living)
    for seg in segments:
        if seg.name not in names:
            wanted |= seg.inputs  # a run kept whole: the origins of its inputs stay
    keep, hashes, named = needed(replaced, wanted)
    lines, kept, runs, summarised, folded = second_pass(root, folder, replaced, keep, hashes, living, named)
    header = CompactionRecord(
        v=RECORD_VERSION,
        type=CompactionRecord.TYPE,
        time=now,
        host=socket.gethostname(),
        pid=os.getpid(),
        internal=True,
        root=os.fspath(root),
        replaces=tuple((s.name, s.size) for s in replaced),
        extra={"gc_folded": list(folded)} if folded[0] else {},
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
        gc_folded=folded[0],
        bytes_before=sum(s.size for s in replaced),
        bytes_after=len(data),
    )
    return data, report


#: `<host>-<pid>-<UTC start>.jsonl`, as `cachetool.cache.roots.segment_name` names a segment.
_SEGMENT_NAME = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)-\d{8}T\d{6}\.\d{6}Z\.jsonl$")


def _finished(seg: Segment, folder: Path, now: float) -> bool:
    """Its writer will append no more: on this host, its process is gone; on another host, it
    recorded its end more than `OTHER_HOST_GRACE` ago (a segment of another name: it was last
    written that long ago)."""
    m = _SEGMENT_NAME.match(seg.name)
    if m is not None and m["host"] == _safe_host(socket.gethostname()):
        return not alive(int(m["pid"]))
    if seg.ended and now - seg.last > OTHER_HOST_GRACE:
        return True
    try:
        return m is None and now - (folder / seg.name).stat().st_mtime > OTHER_HOST_GRACE
    except OSError:
        return False


def _safe_host(host: str) -> str:
    """The host as a segment's name spells it."""
    return segment_name(host, 0, 0.0).rsplit("-", 2)[0]
