"""The two passes of a ledger compaction (`cachetool.history.compact`): the first reads each
segment once and keeps what it learns small (`Segment`); the second reads the replaced segments
again and writes the lines of the compacted segment (summaries, gc records, the records kept
whole and their source texts)."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cachetool.cache.roots import SEGMENT_SUFFIX
from cachetool.errors import CachetoolError
from cachetool.history.follow import source_hashes
from cachetool.history.records import (
    GcRecord,
    LedgerRecord,
    RunEndRecord,
    RunSummaryRecord,
    SourceRecord,
    StepRecord,
)
from cachetool.history.segments import COMPACTED_PREFIX, read_segment_from, replaced_segments, still_replaced
from cachetool.history.summaries import bounded, summaries, trimmed
from cachetool.history.writer import ENCODER

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
                if f.path not in exists:  # where it is now: the root may have been moved
                    exists[f.path] = os.path.lexists(rec.located(f.path))
                if exists[f.path]:
                    seg.with_files.add(rec.result)
        out.append(seg)
    return out


def needed(
    replaced: list[Segment], wanted: set[str]
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


def living_fingerprints(root: Path, replaced: list[Segment]) -> set[str]:
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


def second_pass(
    root: Path,
    folder: Path,
    replaced: list[Segment],
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
