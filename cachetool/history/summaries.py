"""The run summaries of a compaction (`cachetool.history.compact`): one `RunSummaryRecord` per
old run, earlier summaries trimmed to the fingerprints that still have files, and the oldest
merged so the ledger stays bounded."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.compacted import RunSummaryRecord
from cachetool.history.records.runs import RunEndRecord, RunStartRecord
from cachetool.history.records.steps import StepRecord
from cachetool.history.writer import RECORD_VERSION

#: Summaries of single runs kept; older ones are merged into one (the ledger stays bounded).
MAX_SUMMARIES = 1000
#: The step types `stats` counts as steps (hits, misses); saves are counted apart.
COUNTED = ("transform", "root")


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


def written_bytes(rec: StepRecord) -> int:
    """Bytes of the files a record wrote (not those it reused)."""
    return sum(f.size or 0 for f in rec.files if f.status == "written")
