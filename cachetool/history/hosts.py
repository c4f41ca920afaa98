"""A ledger written from many hosts: where a state was computed and loaded, and the computations
two runs did at the same time.

Every process appends to its own segment (host and pid in its name), so a ledger on a shared
file system merges the records of every node. Two questions only the merge can answer:

* *where*: "computed on node-3, loaded on node-7, node-9" (said only when more than one host
  appears in the records of a fingerprint);
* *waste*: two runs that computed the same fingerprint at overlapping times both paid for it;
  one result was thrown away (the last rename wins). `stats` reports each such overlap and the
  time lost: every computation but the longest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cachetool.formatting import human_duration
from cachetool.history.records.steps import StepRecord


@dataclass(frozen=True)
class Computation:
    """One run's computation of a fingerprint."""

    run: str
    host: str | None
    pid: int | None
    start: float
    duration: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ConcurrentComputation:
    """Two or more runs computing one fingerprint at overlapping times."""

    fingerprint: str
    operation: str | None
    computations: tuple[Computation, ...]

    @property
    def runs(self) -> int:
        return len({c.run for c in self.computations})

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({c.host for c in self.computations if c.host}))

    @property
    def lost_seconds(self) -> float:
        """Every computation but the longest: one of them was needed."""
        durations = [c.duration for c in self.computations]
        return sum(durations) - max(durations)

    def sentence(self) -> str:
        """ "2 runs computed 7f3a1b2c… concurrently (node-3, node-7); 11 min lost"."""
        where = f" ({', '.join(self.hosts)})" if len(self.hosts) > 1 else ""
        what = f" ({self.operation})" if self.operation and not where else ""
        return (
            f"{self.runs} runs computed {self.fingerprint[:8]}… concurrently{where}{what}; "
            f"{human_duration(self.lost_seconds)} lost"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "operation": self.operation,
            "runs": self.runs,
            "hosts": list(self.hosts),
            "lost_seconds": round(self.lost_seconds, 6),
            "computations": [c.to_json() for c in self.computations],
        }


def concurrent_computations(records: Iterable[Any]) -> tuple[ConcurrentComputation, ...]:
    """Every fingerprint that two or more runs computed at overlapping times (from `time` to
    `time + duration` of their records), most time lost first."""
    by_fp: dict[str, list[StepRecord]] = {}
    for rec in records:
        if not isinstance(rec, StepRecord) or rec.internal or not rec.computed or rec.result is None:
            continue
        if rec.type not in ("transform", "root"):
            continue
        by_fp.setdefault(rec.result, []).append(rec)
    out: list[ConcurrentComputation] = []
    for fp, recs in by_fp.items():
        if len({r.run for r in recs}) < 2:
            continue
        recs.sort(key=lambda r: r.time)
        cluster: list[StepRecord] = []
        end = float("-inf")
        for r in [*recs, None]:
            if r is not None and (not cluster or r.time < end):
                cluster.append(r)
                end = max(end, r.time + r.duration)
                continue
            if len({c.run for c in cluster}) > 1:
                out.append(_overlap(fp, cluster))
            if r is not None:
                cluster, end = [r], r.time + r.duration
    out.sort(key=lambda c: (-c.lost_seconds, c.fingerprint))
    return tuple(out)


def _overlap(fp: str, cluster: Sequence[StepRecord]) -> ConcurrentComputation:
    # One run may compute a state twice in a row (a loop): its own records are one computation each.
    comps = tuple(Computation(r.run, r.host, r.pid, r.time, r.duration) for r in cluster)
    return ConcurrentComputation(fp, cluster[0].operation, comps)


def where_sentence(records: Iterable[Any]) -> str | None:
    """ "computed on node-3, loaded on node-7" for the records of one fingerprint, when more than
    one host appears in them; None otherwise (one host says nothing a reader needs)."""
    computed: list[str] = []
    loaded: list[str] = []
    for rec in records:
        if not isinstance(rec, StepRecord) or not rec.host:
            continue
        target = computed if rec.computed else loaded if rec.cache == "hit" else None
        if target is not None and rec.host not in target:
            target.append(rec.host)
    if len(set(computed) | set(loaded)) < 2:
        return None
    parts = []
    if computed:
        parts.append(f"computed on {', '.join(computed)}")
    if loaded:
        parts.append(f"loaded on {', '.join(loaded)}")
    return ", ".join(parts)
