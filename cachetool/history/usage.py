"""What a ledger says about each fingerprint: its latest use, its recorded origin, and how often
a step made it from the cache or computed it (`Usage`), from step records and the summaries of
runs a compaction folded away (`usage_of`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cachetool.history.records.compacted import RunSummaryRecord
from cachetool.history.records.steps import StepRecord


@dataclass(frozen=True)
class Usage:
    """What the ledger says about one fingerprint: its latest use and its recorded origin."""

    last_used: float
    parent: str | None
    operation: str | None
    parents: tuple[str, ...] = ()
    records: int = 0
    hits: int = 0
    misses: int = 0
    random_fallback: bool = False
    #: The fingerprint the step that made it gave its result, where that differs (the file of a
    #: `cast_column` is named after the `map` it runs): the entry's alias.
    made_as: str | None = None


def usage_of(steps: Iterable[StepRecord], summaries: Iterable[RunSummaryRecord] = ()) -> dict[str, Usage]:
    last: dict[str, float] = {}
    origin: dict[str, StepRecord] = {}
    counts: dict[str, list[int]] = {}  # fp -> [records, hits, misses, random]
    for summary in summaries:  # runs a compaction folded away: their uses and origin counts
        for kept, (when, records, hits, misses, random) in summary.fps.items():
            last[kept] = max(last.get(kept, 0.0), when)
            c = counts.setdefault(kept, [0, 0, 0, 0])
            c[0] += records
            c[1] += hits
            c[2] += misses
            c[3] |= random
    for rec in steps:  # oldest first: the latest origin wins
        for fp in rec.used:  # using a dataset as a parent is a use of it too
            last[fp] = max(last.get(fp, 0.0), rec.end)
        # A save or a no-op map says nothing about where the fingerprint comes from.
        if rec.is_origin:
            hit, miss, random = rec.origin_counts
            for made in rec.made:
                origin[made] = rec
                c = counts.setdefault(made, [0, 0, 0, 0])
                c[0] += 1
                c[1] += hit
                c[2] += miss
                c[3] |= random
    out: dict[str, Usage] = {}
    for fp, when in last.items():
        o = origin.get(fp)
        c = counts.get(fp, [0, 0, 0, 0])
        out[fp] = Usage(
            last_used=when,
            parent=o.parents[0] if o and o.parents else None,
            operation=o.operation if o else None,
            parents=o.parents if o else (),
            records=c[0],
            hits=c[1],
            misses=c[2],
            random_fallback=bool(c[3]),
            made_as=o.result if o is not None and o.result != fp else None,
        )
    return out
