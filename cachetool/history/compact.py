"""Compacting a long-lived ledger: the segments of finished old runs become one compacted
segment of run summaries and the records still needed, kept whole (docs/ledger.md
and docs/explain.md, "A long-lived ledger").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import resource
import signal
import socket
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from cachetool.cache.roots import SEGMENT_SUFFIX, is_segment_name, ledger_dirs, segment_name, user_state_dir
from cachetool.errors import CachetoolError
from cachetool.history import writer
from cachetool.history.records.base import LedgerRecord, order_key
from cachetool.history.records.other import (
    COMPACTED_PREFIX,
    CompactionRecord,
    FpSums,
    GcRecord,
    RunEndRecord,
    RunStartRecord,
    RunSummaryRecord,
    SourceRecord,
    add_sums,
    step_sums,
)
from cachetool.history.records.steps import COUNTED, StepRecord, source_hashes, step_counts, written_bytes
from cachetool.history.writer import ENCODER, KEEP_RUNS, RECORD_VERSION, utf8
from cachetool.processes import alive

_SOFT_LIMIT = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
#: Segments one compaction locks and replaces at most (each lock is an open descriptor): half
#: the descriptors this process may open (512 under the common soft limit of 1,024); the rest
#: wait for the next compaction.
MAX_REPLACED = 65536 if _SOFT_LIMIT == resource.RLIM_INFINITY else max(16, min(_SOFT_LIMIT // 2, 65536))
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


def sync_dir(dfd: int) -> None:
    with contextlib.suppress(OSError):
        os.fsync(dfd)


def kill_point(point: str) -> None:
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def write_compacted(folder: Path, dfd: int, data: bytes, now: float) -> Path:
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
    sync_dir(dfd)
    return final


def remove_leftovers(folder: Path, dfd: int) -> None:
    """What a killed compaction left: its temporary file, and segments it replaced."""
    from cachetool.history.ledger import replaced_segments

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

    def plus(self, other: CompactionReport) -> CompactionReport:
        """This report with what `other` (of another ledger folder of the same root) did."""
        added = ("segments", "runs", "kept", "summarised", "gc_folded", "left", "recent", "warnings")
        return replace(
            self,
            bytes_after=self.bytes_after - other.bytes_before + other.bytes_after,
            **{k: getattr(self, k) + getattr(other, k) for k in added},
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
            lock = FileLock(os.fspath(folder / LOCK_NAME), timeout=timeout)
            with contextlib.nullcontext() if dry_run else lock:  # a dry run writes not even the lock
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


def compact_if_large(
    root: str | os.PathLike[str], *, dry_run: bool = False, wait: bool = True
) -> CompactionReport | None:
    """`compact_ledger(root, dry_run=dry_run)` when more than `AUTO_BYTES` could be folded (what a
    traced run does as it ends and `gc` after a removal); None, doing nothing, otherwise or when
    another compaction holds the ledger (waited for a minute with `wait`, not at all without)."""
    if writer.foldable_bytes(root) <= writer.AUTO_BYTES:
        return None
    try:
        return compact_ledger(root, dry_run=dry_run, timeout=60 if wait else 0)
    except CachetoolError:
        return None


def _compact_folder(root: Path, folder: Path, keep_runs: int, dry_run: bool, now: float) -> CompactionReport:
    from cachetool.history import ledger  # the reader, loaded only when a compaction runs (not by gc)

    with folder_fd(folder) as dfd:
        if not dry_run:
            remove_leftovers(folder, dfd)
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
            data, report = _compacted(empty, folder, segments, replaced, now)
            if len(data) > ledger.MAX_SEGMENT_BYTES:
                # Readers read that much of a segment: the records kept whole, written after the
                # gc history, would be lost to lineage (and gc would no longer protect a pin's
                # ancestors). The segments stay as they are, each read whole.
                return replace(
                    empty,
                    warnings=(
                        *warnings,
                        f"{folder}: left as it is: the compacted segment would hold {len(data)} bytes, "
                        f"more than readers read of one segment ({ledger.MAX_SEGMENT_BYTES})",
                    ),
                )
            if any(ledger.segment_size(folder / s.name) != s.size for s in replaced):
                # A writer appended meanwhile: what was read no longer stands for the segment.
                return replace(
                    empty, warnings=(*warnings, f"{folder}: the ledger changed while read: try again")
                )
            if dry_run:
                return report
            write_compacted(folder, dfd, data, now)
            kill_point("renamed")
            for s in replaced:
                unlink_replaced(dfd, s.name, s.size)
            sync_dir(dfd)
            return report


def _compacted(
    empty: CompactionReport, folder: Path, segments: list[Segment], replaced: list[Segment], now: float
) -> tuple[bytes, CompactionReport]:
    """The bytes of the compacted segment that replaces `replaced`, and the report `empty` with
    what it holds."""
    root = empty.root
    names = {s.name for s in replaced}
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
    data = utf8(text)
    report = replace(
        empty,
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
    m = _SEGMENT_NAME.match(seg.name)  # this host, as a segment's name spells it:
    if m is not None and m["host"] == segment_name(socket.gethostname(), 0, 0.0).rsplit("-", 2)[0]:
        return not alive(int(m["pid"]))
    if seg.ended and now - seg.last > OTHER_HOST_GRACE:
        return True
    try:
        return m is None and now - (folder / seg.name).stat().st_mtime > OTHER_HOST_GRACE
    except OSError:
        return False


#: A step record that says where its result comes from, as the first pass keeps it (not the
#: record itself: memory stays small however long the ledger): its order, where it is, its parents
#: and the source texts it names.
_Origin = tuple[tuple[float, str, int], str, int, tuple[str, ...], tuple[str, ...]]


@dataclass
class Segment:
    """What the first pass learns of one segment, reading it once."""

    name: str
    size: int
    compacted: bool
    last: float = 0.0
    ended: bool = False
    #: the latest, by result and internal
    origins: dict[tuple[str, bool], _Origin] = field(default_factory=dict)
    inputs: set[str] = field(default_factory=set)  # parents and no-op results its steps name
    unread: str = ""  # why its lines cannot all be carried over (then it stays whole)
    with_files: set[str] = field(default_factory=set)  # results a recorded file of which exists
    sources: dict[str, int] = field(default_factory=dict)  # source hash -> offset of its text


def first_pass(folder: Path) -> list[Segment]:
    """Each segment readers see (replaced ones left out), read once, one at a time."""
    from cachetool.history.ledger import read_segment_from, segments_in

    out = []
    exists: dict[str, bool] = {}
    for path in segments_in(folder):
        name = path.name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        size = st.st_size
        seg = Segment(name, size, name.startswith(COMPACTED_PREFIX))
        records, whole, skipped = read_segment_from(folder / name)
        if skipped:
            seg.unread = f"{skipped} line(s) this cachetool cannot read (`cachetool stats` names them)"
        elif min(whole, size) < size:
            seg.unread = "its last line is torn (its writer was killed mid-write) or past the size read"
        for offset, rec in records:
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
            origin = (order_key(rec), name, offset, rec.parents, tuple(source_hashes(rec)))
            was = seg.origins.get((rec.result, rec.internal))
            if was is None or origin[0] >= was[0]:
                seg.origins[(rec.result, rec.internal)] = origin
            for f in rec.files:
                if f.path not in exists:  # where it is now: the root may have been moved
                    exists[f.path] = os.path.lexists(rec.located(f.path))
                if exists[f.path]:
                    seg.with_files.add(rec.result)
        out.append(seg)
    return out


def needed(
    replaced: list[Segment], wanted: set[str]
) -> tuple[set[tuple[str, int]], dict[str, tuple[str, int]], set[str]]:
    """Where the step records to keep whole are (segment, offset): the latest origin (and latest
    internal one) of every fingerprint in `wanted`, and of their parents, up to the source; where
    the source texts they name are; and every fingerprint those records name."""
    latest: dict[tuple[str, bool], _Origin] = {}
    for seg in replaced:
        for key, o in seg.origins.items():
            was = latest.get(key)
            if was is None or o[0] >= was[0]:
                latest[key] = o
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
                hashes.update(got[4])
                todo.extend(got[3])
    sources: dict[str, tuple[str, int]] = {}
    for seg in replaced:
        for h, offset in seg.sources.items():
            if h in hashes:
                sources.setdefault(h, (seg.name, offset))
    return keep, sources, seen


def living_fingerprints(root: Path, replaced: list[Segment]) -> set[str]:
    """Fingerprints that still have files: of the cache's entries (and aliases), and those a
    recorded file of which exists."""
    from cachetool.cache.scan import scan_cache

    out: set[str] = set()
    with contextlib.suppress(CachetoolError):
        report = scan_cache(root)
        out = {fp for e in report.entries for fp in (e.fingerprint, *e.aliases) if fp}
    for seg in replaced:
        out |= seg.with_files
    return out


#: What gc removed, as a compaction counts the records it folds: removals, bytes, first and last time.
GcFolded = tuple[int, int, float, float]
#: gc's kinds for data files: `verify` asks whether gc removed data from a folder (`_removed_folders`).
_DATA_KINDS = frozenset({"source", "derived", "shards", "arrow"})


def _gc_kept(gcs: list[GcRecord], named: set[str]) -> tuple[list[GcRecord], list[GcRecord]]:
    """The gc records a reader still needs, and the others: the latest removal of each
    fingerprint the kept records name (`lineage` shows it deleted, `explain` says when, and
    `verify` does not call its recorded files missing), and the latest removal of data from each
    folder that still exists (`verify` knows gc emptied it). Everything else gc removed is history
    no command reads: it is folded into one count, so gc records no longer grow the ledger."""
    latest: dict[object, GcRecord] = {}
    for g in sorted(gcs, key=order_key):
        for fp in g.fingerprints:
            if fp in named:
                latest[fp] = g
        if g.kind in _DATA_KINDS and g.path and os.path.isdir(g.located(os.path.dirname(g.path))):
            latest[("folder", os.path.dirname(g.path))] = g
    kept = list({id(g): g for g in latest.values()}.values())
    ids = {id(g) for g in kept}
    return kept, [g for g in gcs if id(g) not in ids]


def _fold(counts: list[GcFolded]) -> GcFolded:
    """Counts of folded gc records as one."""
    counts = [c for c in counts if c[0]]
    if not counts:
        return (0, 0, 0.0, 0.0)
    return (
        sum(c[0] for c in counts),
        sum(c[1] for c in counts),
        min(c[2] for c in counts),
        max(c[3] for c in counts),
    )


def second_pass(
    root: Path,
    folder: Path,
    replaced: list[Segment],
    keep: set[tuple[str, int]],
    sources: dict[str, tuple[str, int]],
    living: set[str],
    named: set[str],
) -> tuple[list[str], int, int, int, GcFolded]:
    """The lines of the compacted segment after its header (summaries, gc records, the records
    kept whole, their source texts), reading the replaced segments again one at a time; with how
    many records were kept, runs summarised and records summarised, and the gc removals folded
    into a count (with those earlier compactions folded)."""
    from cachetool.history.ledger import read_segment_from

    chosen = set(sources.values())
    earlier: list[RunSummaryRecord] = []
    fresh: list[RunSummaryRecord] = []
    gcs: list[GcRecord] = []
    before: list[GcFolded] = []
    kept: list[LedgerRecord] = []
    texts: list[LedgerRecord] = []
    summarised = 0
    for seg in replaced:
        records, _, _ = read_segment_from(folder / seg.name)
        rest: list[LedgerRecord] = []
        for offset, rec in records:
            if offset >= seg.size:
                break
            if isinstance(rec, RunSummaryRecord):
                earlier.append(trimmed(rec, living))
            elif isinstance(rec, CompactionRecord):
                before.append(gc_folded(rec))
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
    gc_whole, gc_folded_now = _gc_kept(gcs, named | living)
    out: list[LedgerRecord] = [*bounded([*earlier, *fresh])]
    out += sorted(gc_whole, key=order_key) + sorted(kept, key=order_key) + sorted(texts, key=order_key)
    lines = [ENCODER.encode(r.to_json()) for r in out]
    folded = _fold([*before, *((1, g.size, g.time, g.time) for g in gc_folded_now)])
    return lines, len(kept), len(fresh), summarised, folded


def gc_folded(rec: CompactionRecord) -> GcFolded:
    """The gc removals a compaction record counts as folded (`gc_folded`: [removals, bytes,
    first time, last time]); zeros when it counts none or the value is not that."""
    raw = rec.extra.get("gc_folded")
    if (
        isinstance(raw, list)
        and len(raw) == 4
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in raw)
    ):
        return (int(raw[0]), int(raw[1]), float(raw[2]), float(raw[3]))
    return (0, 0, 0.0, 0.0)


#: Summaries of single runs kept; older ones are merged into one (the ledger stays bounded).
MAX_SUMMARIES = 1000


def summaries(records: Iterable[LedgerRecord], living: set[str]) -> list[RunSummaryRecord]:
    """One summary per run of `records` (the records not kept whole), with the usage of the
    fingerprints in `living` (those that still have files)."""
    runs: dict[str, list[LedgerRecord]] = {}
    for r in records:
        if isinstance(r, (StepRecord, RunStartRecord, RunEndRecord)):
            runs.setdefault(r.run, []).append(r)
    out = []
    for run, recs in runs.items():
        steps = [r for r in recs if isinstance(r, StepRecord) and not r.internal]
        saves = [r for r in steps if r.type == "save"]
        counts = step_counts([r for r in steps if r.type in COUNTED])
        counts["bytes_written"] += sum(map(written_bytes, saves))
        fps: dict[str, FpSums] = {}
        for r in steps:  # the rule of `Ledger.usage`, for the fingerprints that have files
            for fp, sums in step_sums(r):
                if fp in living:
                    fps[fp] = add_sums(fps.get(fp), sums)
        start = next((r for r in recs if isinstance(r, RunStartRecord)), None)
        first = min(recs, key=lambda r: r.time)
        out.append(
            RunSummaryRecord(
                v=RECORD_VERSION,
                type=RunSummaryRecord.TYPE,
                run=run,
                time=first.time,
                duration=max(r.end for r in recs) - first.time,
                host=first.host,
                pid=first.pid,
                versions=first.versions,
                internal=True,
                root=first.root,
                argv=start.argv if start is not None else (),
                **counts,
                saves=len(saves),
                other=sum(r.is_origin and r.result not in living for r in steps),
                fps=fps,
            )
        )
    return out


def trimmed(rec: RunSummaryRecord, living: set[str]) -> RunSummaryRecord:
    """An earlier summary with the fingerprints that no longer have files left out."""
    gone = [fp for fp in rec.fps if fp not in living]
    if not gone:
        return rec
    fps = {fp: v for fp, v in rec.fps.items() if fp in living}
    return replace(rec, fps=fps, other=rec.other + sum(rec.fps[fp][1] for fp in gone))


def bounded(summaries: list[RunSummaryRecord]) -> list[RunSummaryRecord]:
    """The newest `MAX_SUMMARIES` summaries, oldest first, after one that merges the older ones."""
    summaries.sort(key=lambda r: (r.time, r.run))
    if len(summaries) <= MAX_SUMMARIES:
        return summaries
    old, new = (
        summaries[: len(summaries) - MAX_SUMMARIES + 1],
        summaries[len(summaries) - MAX_SUMMARIES + 1 :],
    )
    fps: dict[str, FpSums] = {}
    for r in old:
        for fp, sums in r.fps.items():
            fps[fp] = add_sums(fps.get(fp), sums)
    first = old[0]
    merged = replace(
        first,
        run=f"{len(old)} runs",
        duration=max(r.end for r in old) - first.time,
        argv=(),
        miss_seconds=sum(r.miss_seconds for r in old),
        fps=fps,
        **{k: sum(getattr(r, k) for r in old) for k in RunSummaryRecord._COUNTS},
    )
    return [merged, *new]
