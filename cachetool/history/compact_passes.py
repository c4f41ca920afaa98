"""The two passes of a ledger compaction (`cachetool.history.compact`): the first reads each
segment once and keeps what it learns small (`Segment`); the second reads the replaced segments
again and writes the lines of the compacted segment (summaries, gc records, the records kept
whole and their source texts), with one `RunSummaryRecord` per old run, earlier summaries trimmed
to the fingerprints that still have files, and the oldest merged so the ledger stays bounded."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from cachetool.cache.roots import SEGMENT_SUFFIX
from cachetool.errors import CachetoolError
from cachetool.history.ledger import source_hashes
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.compacted import CompactionRecord, RunSummaryRecord
from cachetool.history.records.other import GcRecord, SourceRecord
from cachetool.history.records.runs import RunEndRecord, RunStartRecord
from cachetool.history.records.steps import COUNTED, StepRecord, written_bytes
from cachetool.history.segments import COMPACTED_PREFIX, read_segment_from, replaced_segments, still_replaced
from cachetool.history.writer import ENCODER, RECORD_VERSION

#: A step record that says where its result comes from, as the first pass keeps it (not the
#: record itself: memory stays small however long the ledger): its order, where it is, its parents,
#: whether it is internal and the source texts it names.
_Origin = tuple[tuple[float, str, int], str, int, tuple[str, ...], bool, tuple[str, ...]]


@dataclass
class Segment:
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


def first_pass(folder: Path) -> list[Segment]:
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


def _gc_kept(gcs: list[GcRecord], named: set[str]) -> tuple[list[GcRecord], GcFolded]:
    """The gc records a reader still needs, and the count of the others: the latest removal of
    each fingerprint the kept records name (`lineage` shows it deleted, `explain` says when, and
    `verify` does not call its recorded files missing), and the latest removal of data from each
    folder that still exists (`verify` knows gc emptied it). Everything else gc removed is history
    no command reads: it is folded into one count, so gc records no longer grow the ledger."""
    latest: dict[object, GcRecord] = {}
    for g in sorted(gcs, key=lambda r: (r.time, r.run, r.seq)):
        for fp in g.fingerprints:
            if fp in named:
                latest[fp] = g
        if g.kind in _DATA_KINDS and g.path and os.path.isdir(g.located(os.path.dirname(g.path))):
            latest[("folder", os.path.dirname(g.path))] = g
    kept = list({id(g): g for g in latest.values()}.values())
    ids = {id(g) for g in kept}
    folded = [g for g in gcs if id(g) not in ids]
    if not folded:
        return kept, (0, 0, 0.0, 0.0)
    times = [g.time for g in folded]
    return kept, (len(folded), sum(g.size for g in folded), min(times), max(times))


def folded_sum(a: GcFolded, b: GcFolded) -> GcFolded:
    """Two counts of folded gc records as one."""
    if not a[0] or not b[0]:
        return a if a[0] else b
    return (a[0] + b[0], a[1] + b[1], min(a[2], b[2]), max(a[3], b[3]))


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
    chosen = set(sources.values())
    earlier: list[RunSummaryRecord] = []
    fresh: list[RunSummaryRecord] = []
    gcs: list[GcRecord] = []
    before: GcFolded = (0, 0, 0.0, 0.0)
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
                before = folded_sum(before, gc_folded(rec))
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
    gc_whole, folded = _gc_kept(gcs, named | living)
    out: list[LedgerRecord] = [*bounded([*earlier, *fresh])]
    out += sorted(gc_whole, key=order) + sorted(kept, key=order) + sorted(texts, key=order)
    lines = [ENCODER.encode(r.to_json()) for r in out]
    return lines, len(kept), len(fresh), summarised, folded_sum(before, folded)


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
        counted = [r for r in steps if r.type in COUNTED]
        misses = [r for r in counted if r.computed]
        fps: dict[str, list[float]] = {}
        other = 0
        for r in steps:  # the rule of `Ledger.usage`
            for fp in r.used:
                if fp in living:
                    row = fps.setdefault(fp, [0.0, 0, 0, 0, 0])
                    row[0] = max(row[0], r.end)
            if r.is_origin and r.result is not None:
                got = fps.get(r.result) if r.result in living else None
                if got is None:
                    other += 1
                    continue
                hit, miss, random = r.origin_counts
                got[1] += 1
                got[2] += hit
                got[3] += miss
                got[4] = max(got[4], random)
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
                bytes_written=sum(written_bytes(r) for r in steps if r.type in (*COUNTED, "save")),
                other=other,
                fps={fp: (v[0], int(v[1]), int(v[2]), int(v[3]), int(v[4])) for fp, v in fps.items()},
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
