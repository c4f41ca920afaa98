"""What `cachetool stats` reports, as raw values: `Counts` (hits, misses and what they cost, for
all steps or one group), `Group` (one call site or dataset), `RandomReason` and the whole
`StatsReport`; `to_json` is the `--json` form of each. `cachetool.history.stats` counts them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.history.hosts import ConcurrentComputation

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport

__all__ = ["Counts", "Group", "RandomReason", "StatsReport"]


@dataclass(frozen=True)
class Counts:
    """Hits, misses and what they cost, for all steps or for one group of them."""

    steps: int = 0
    hits: int = 0
    misses: int = 0  # partial ones included
    partial: int = 0
    no_file: int = 0
    runs: int = 0
    miss_seconds: float = 0.0
    recompute_seconds: float = 0.0
    bytes_written: int = 0
    #: Steps that ran without a persistent cache (in memory, keep_in_memory=True,
    #: disable_caching(), load_from_cache_file=False) and their time; from their second run on
    #: that time is in `recompute_seconds`, the time lost.
    uncached: int = 0
    uncached_seconds: float = 0.0

    @property
    def hit_rate(self) -> float | None:
        """hits / (hits + misses), or None when nothing was looked up in the cache."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else None

    @property
    def hit_rate_str(self) -> str:
        rate = self.hit_rate
        return "-" if rate is None else f"{rate * 100:.1f} %"

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "runs": self.runs,
            "hits": self.hits,
            "misses": self.misses,
            "partial": self.partial,
            "no_file": self.no_file,
            "hit_rate": self.hit_rate,
            "miss_seconds": round(self.miss_seconds, 6),
            "recompute_seconds": round(self.recompute_seconds, 6),
            "bytes_written": self.bytes_written,
            "uncached": self.uncached,
            "uncached_seconds": round(self.uncached_seconds, 6),
        }


@dataclass(frozen=True)
class Group:
    """The counts of one call site (`file:line` and operation) or one dataset."""

    key: str
    counts: Counts
    operation: str | None = None
    function: str | None = None
    file: str | None = None
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "operation": self.operation,
            "function": self.function,
            "file": self.file,
            "line": self.line,
            **self.counts.to_json(),
        }


@dataclass(frozen=True)
class RandomReason:
    """Why `datasets` fell back to a random fingerprint, and how often."""

    argument: str | None
    error: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"argument": self.argument, "error": self.error, "count": self.count}


@dataclass(frozen=True)
class StatsReport:
    """Everything `cachetool stats` prints, as raw values."""

    root: Path
    start: float | None  # the period counted starts here (None: from the first record)
    end: float
    zeroed_at: float | None
    total: Counts
    saves: int
    random_count: int
    random: tuple[RandomReason, ...]
    call_sites: tuple[Group, ...]
    datasets: tuple[Group, ...]
    warnings: tuple[str, ...] = field(default=(), compare=False)
    #: steps per host (the ledger of a shared cache merges every node's segments)
    hosts: tuple[tuple[str, int], ...] = ()
    #: fingerprints two or more runs computed at the same time (`cachetool.history.hosts`)
    concurrent: tuple[ConcurrentComputation, ...] = ()
    #: what `--compact` did (or with `--dry-run` would do) before counting
    compaction: CompactionReport | None = None

    @property
    def concurrent_seconds(self) -> float:
        return sum(c.lost_seconds for c in self.concurrent)

    def to_json(self) -> dict[str, Any]:
        compaction = {"compaction": self.compaction.to_json()} if self.compaction is not None else {}
        return {
            **compaction,
            "version": 1,
            "root": str(self.root),
            "period": {"start": self.start, "end": self.end, "zeroed_at": self.zeroed_at},
            **self.total.to_json(),
            "saves": self.saves,
            "random_fingerprints": {
                "count": self.random_count,
                "reasons": [r.to_json() for r in self.random],
            },
            "call_sites": [g.to_json() for g in self.call_sites],
            "datasets": [g.to_json() for g in self.datasets],
            "hosts": dict(self.hosts),
            "concurrent": {
                "count": len(self.concurrent),
                "lost_seconds": round(self.concurrent_seconds, 6),
                "computations": [c.to_json() for c in self.concurrent],
            },
        }
