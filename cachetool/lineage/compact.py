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
import os
import re
import socket
import time
from collections.abc import Iterable
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
    RunStartRecord,
    RunSummaryRecord,
    SourceRecord,
    StepRecord,
)
from cachetool.lineage.roots import SEGMENT_SUFFIX, ledger_dirs, segment_name
from cachetool.lineage.segments import COMPACTED_PREFIX, read_segment_from, replaced_segments
from cachetool.lineage.writer import ENCODER, RECORD_VERSION

#: Runs kept whole (the newest ones): `explain` compares a step with these.
KEEP_RUNS = 50
#: Summaries of single runs kept; older ones are merged into one (the ledger stays bounded).
MAX_SUMMARIES = 1000
#: Past this many bytes of segments a `gc` run compacts the ledger by itself.
AUTO_BYTES = 64 * 1024 * 1024
#: A segment written on another host is compacted only this long after it recorded its end.
OTHER_HOST_GRACE = 3600.0
_LOCK = ".compact.lock"
_TMP_PREFIX = ".compact-"


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
    left: tuple[str, ...] = field(default=())  # old segments whose writer may still be running
    warnings: tuple[str, ...] = ()

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
    total = CompactionReport(root_path, dry_run, bytes_before=before, bytes_after=before)
    for folder in ledger_dirs(root_path):
        if not folder.is_dir():
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
            warnings=total.warnings + got.warnings,
        )
    return total


def compact_if_large(root: str | os.PathLike[str]) -> CompactionReport | None:
    """`compact_ledger(root)` when its segments hold more than `AUTO_BYTES` (what `gc` does after
    a removal); None, doing nothing, otherwise or when another compaction holds the ledger."""
    if ledger_bytes(root) <= AUTO_BYTES:
        return None
    try:
        return compact_ledger(root)
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
    with_files: set[str] = field(default_factory=set)  # results a recorded file of which exists
    sources: dict[str, int] = field(default_factory=dict)  # source hash -> offset of its text


def _compact_folder(root: Path, folder: Path, keep_runs: int, dry_run: bool, now: float) -> CompactionReport:
    if not dry_run:
        _remove_leftovers(folder)
    segments = _first_pass(folder)
    raw = sorted((s for s in segments if not s.compacted), key=lambda s: (s.last, s.name))
    recent = raw[len(raw) - keep_runs :] if keep_runs > 0 else []
    old = raw[: len(raw) - len(recent)]
    done = [s for s in old if _finished(s, folder, now)]
    finished = {s.name for s in done}
    left = tuple(s.name for s in old if s.name not in finished)
    compacted = [s for s in segments if s.compacted]
    if not done and len(compacted) < 2:
        return CompactionReport(root, dry_run, left=left)
    replaced = done + compacted
    names = {s.name for s in replaced}
    living = _living(root, replaced)
    wanted = set(living)
    for seg in segments:
        if seg.name not in names:
            wanted |= seg.inputs  # a run kept whole: the origins of its inputs stay
    keep, hashes = _needed(replaced, wanted)
    lines, kept, summaries, summarised = _second_pass(root, folder, replaced, keep, hashes, living)
    if any(_size(folder / s.name) != s.size for s in replaced):
        # A writer appended meanwhile: what was read no longer stands for the segment.
        return CompactionReport(root, dry_run, left=left, warnings=("the ledger changed while read",))
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
        dry_run,
        segments=len(replaced),
        runs=summaries,
        kept=kept,
        summarised=summarised,
        bytes_before=sum(s.size for s in replaced),
        bytes_after=len(data),
        left=left,
    )
    if dry_run:
        return report
    _write_compacted(folder, data, now)
    for s in replaced:
        path = folder / s.name
        with contextlib.suppress(OSError):
            if path.stat().st_size == s.size:
                os.unlink(path)
    _sync_dir(folder)
    return report


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _first_pass(folder: Path) -> list[_Segment]:
    """Each segment readers see (replaced ones left out), read once, one at a time."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(SEGMENT_SUFFIX))
    replaced = replaced_segments(folder, [n for n in names if n.startswith(COMPACTED_PREFIX)])
    out = []
    exists: dict[str, bool] = {}
    for name in names:
        size = _size(folder / name)
        if size is None or replaced.get(name) == size:
            continue
        seg = _Segment(name, size, name.startswith(COMPACTED_PREFIX))
        records, _, _ = read_segment_from(folder / name, 0)
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
                earlier.append(_only(rec, living))
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
        fresh += _summaries(rest, living)
    order = lambda r: (r.time, r.run, r.seq)  # noqa: E731
    out: list[LedgerRecord] = [*_bounded([*earlier, *fresh])]
    out += sorted(gcs, key=order) + sorted(kept, key=order) + sorted(texts, key=order)
    return [ENCODER.encode(r.to_json()) for r in out], len(kept), len(fresh), summarised


def _summaries(records: Iterable[LedgerRecord], living: set[str]) -> list[RunSummaryRecord]:
    """One summary per run of `records` (the records not kept whole), with the usage of the
    fingerprints in `living` (those that still have files)."""
    from cachetool.lineage.stats import written_bytes

    runs: dict[str, list[LedgerRecord]] = {}
    for r in records:
        if isinstance(r, (StepRecord, RunStartRecord, RunEndRecord)):
            runs.setdefault(r.run, []).append(r)
    out = []
    for run, recs in runs.items():
        steps = [r for r in recs if isinstance(r, StepRecord) and not r.internal]
        counted = [r for r in steps if r.type in ("transform", "root")]
        misses = [r for r in counted if r.computed]
        fps: dict[str, list[float]] = {}
        other = 0
        for r in steps:  # the rule of `Ledger.usage`
            for fp in (r.result, *r.parents) if r.result is not None else r.parents:
                if fp in living:
                    row = fps.setdefault(fp, [0.0, 0, 0, 0, 0])
                    row[0] = max(row[0], r.end)
            if r.is_origin and r.result is not None:
                got = fps.get(r.result) if r.result in living else None
                if got is None:
                    other += 1
                    continue
                got[1] += 1
                got[2] += r.cache == "hit"
                got[3] += r.computed
                got[4] = max(got[4], r.random_fallback is not None)
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
                steps=len(counted),
                hits=sum(r.cache == "hit" for r in counted),
                misses=len(misses),
                partial=sum(r.cache == "partial" for r in counted),
                no_file=sum(r.cache not in ("hit", "miss", "partial") for r in counted),
                saves=sum(r.type == "save" for r in steps),
                miss_seconds=sum(r.duration for r in misses),
                bytes_written=sum(written_bytes(r) for r in steps if r.type in ("transform", "root", "save")),
                other=other,
                fps={fp: (v[0], int(v[1]), int(v[2]), int(v[3]), int(v[4])) for fp, v in fps.items()},
            )
        )
    return out


def _only(rec: RunSummaryRecord, living: set[str]) -> RunSummaryRecord:
    """An earlier summary with the fingerprints that no longer have files left out."""
    gone = [fp for fp in rec.fps if fp not in living]
    if not gone:
        return rec
    fps = {fp: v for fp, v in rec.fps.items() if fp in living}
    return replace(rec, fps=fps, other=rec.other + sum(rec.fps[fp][1] for fp in gone))


def _bounded(summaries: list[RunSummaryRecord]) -> list[RunSummaryRecord]:
    """The newest `MAX_SUMMARIES` summaries, oldest first, after one that merges the older ones."""
    summaries.sort(key=lambda r: (r.time, r.run))
    if len(summaries) <= MAX_SUMMARIES:
        return summaries
    old, new = (
        summaries[: len(summaries) - MAX_SUMMARIES + 1],
        summaries[len(summaries) - MAX_SUMMARIES + 1 :],
    )
    fps: dict[str, list[float]] = {}
    for r in old:
        for fp, (when, records, hits, misses, random) in r.fps.items():
            row = fps.setdefault(fp, [0.0, 0, 0, 0, 0])
            row[0] = max(row[0], when)
            row[1] += records
            row[2] += hits
            row[3] += misses
            row[4] = max(row[4], random)
    first = old[0]
    merged = replace(
        first,
        run=f"{len(old)} runs",
        duration=max(r.end for r in old) - first.time,
        argv=(),
        miss_seconds=sum(r.miss_seconds for r in old),
        fps={fp: (v[0], int(v[1]), int(v[2]), int(v[3]), int(v[4])) for fp, v in fps.items()},
        **{k: sum(getattr(r, k) for r in old) for k in RunSummaryRecord._COUNTS},
    )
    return [merged, *new]


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
    os.replace(tmp, final)
    _sync_dir(folder)
    return final


def _remove_leftovers(folder: Path) -> None:
    """What a killed compaction left: its temporary file, and segments it replaced."""
    for name in os.listdir(folder):
        if name.startswith(_TMP_PREFIX) and name.endswith(".tmp"):
            pid = name[len(_TMP_PREFIX) : -len(".tmp")]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(folder / name)
    names = [n for n in os.listdir(folder) if n.endswith(SEGMENT_SUFFIX)]
    for name, size in replaced_segments(folder, [n for n in names if n.startswith(COMPACTED_PREFIX)]).items():
        path = folder / name
        with contextlib.suppress(OSError):
            if path.stat().st_size == size:
                os.unlink(path)


def _sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
