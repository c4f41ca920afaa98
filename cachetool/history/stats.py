"""How well the cache works, from the ledger: hits, misses, time lost to recomputation (`ccache -s`).

Counts come from the recorded steps (transform calls and source datasets; internal calls that
`datasets` makes itself are left out): a *hit* reused every output file, a *miss* computed at
least one (a `num_proc` step that reused some shards is a partial miss). Steps that write no
file (in-memory datasets, `select` with a list, `remove_columns`) are counted as steps, not as
hits or misses. *Recompute time* is the recorded duration of misses of steps that had run
before (same call site in an earlier run, or the same fingerprint): the time a better-kept
cache would have saved; first runs are not lost time. Steps that ran without a persistent cache (a map of an
in-memory dataset, `keep_in_memory=True`, `disable_caching()`, `load_from_cache_file=False`) run
again every time: they are counted apart, and from their second run on their time is lost too.

`zero_stats(root)` starts a new counting period, as `ccache -z` does, without deleting a record:
it writes the time into `<root>/.cachetool/stats.json`, and later reports count from there.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.roots import LEDGER_DIR, fallback_ledger_dir
from cachetool.cache.store import read_state_json, write_whole
from cachetool.errors import CachetoolError
from cachetool.history.hosts import ConcurrentComputation, concurrent_computations
from cachetool.history.ledger import Ledger
from cachetool.history.records.compacted import RunSummaryRecord
from cachetool.history.records.steps import COUNTED, StepRecord, written_bytes

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport

STATS_FILE = "stats.json"

#: A call site: its key (`pipeline.py:21 map`), file, line, operation and function.
_Site = tuple[str, str | None, int | None, str | None, str | None]


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


class _Acc:
    """A mutable tally, frozen into `Counts` at the end."""

    def __init__(self) -> None:
        self.steps = self.hits = self.misses = self.partial = self.no_file = self.bytes = 0
        self.miss_s = self.recompute_s = self.uncached_s = 0.0
        self.uncached = 0
        self.runs: set[str] = set()

    def add(self, rec: StepRecord, recomputed: bool) -> None:
        self.steps += 1
        if rec.run:
            self.runs.add(rec.run)
        cache = rec.cache
        seconds = rec.duration
        if cache == "hit":
            self.hits += 1
        elif cache in ("miss", "partial"):
            self.misses += 1
            self.partial += cache == "partial"
            self.miss_s += seconds
            if recomputed:
                self.recompute_s += seconds
        else:
            self.no_file += 1
        if rec.uncached is not None:
            self.uncached += 1
            self.uncached_s += seconds
            if recomputed and cache not in ("miss", "partial"):  # misses are counted above
                self.recompute_s += seconds
        self.bytes += written_bytes(rec)

    def add_summary(self, rec: RunSummaryRecord) -> None:
        """A summarised run's counts (its call sites and datasets are not kept)."""
        self.steps += rec.steps
        self.runs.update(rec.run if rec.runs == 1 else f"{rec.run}#{i}" for i in range(rec.runs))
        self.hits += rec.hits
        self.misses += rec.misses
        self.partial += rec.partial
        self.no_file += rec.no_file
        self.miss_s += rec.miss_seconds
        self.bytes += rec.bytes_written

    def counts(self) -> Counts:
        return Counts(
            steps=self.steps,
            hits=self.hits,
            misses=self.misses,
            partial=self.partial,
            no_file=self.no_file,
            runs=len(self.runs),
            miss_seconds=self.miss_s,
            recompute_seconds=self.recompute_s,
            bytes_written=self.bytes,
            uncached=self.uncached,
            uncached_seconds=self.uncached_s,
        )


def _site(rec: StepRecord) -> _Site:
    site = rec.call_site
    file = site.file if site else None
    line = site.line if site else None
    op = rec.operation
    qualname = rec.function.qualname if rec.function else None
    where = f"{os.path.basename(file)}:{line}" if file else "?"
    return f"{where} {op}", file, line, op, qualname


def dataset_of(rec: StepRecord) -> str:
    """`csv/default-c955f4a6b949b4ae` for a step whose files live in that builder folder; the
    saved folder's name for a saved dataset; `(in memory)` or `(no file)` otherwise."""
    src = rec.source
    root = rec.where
    if rec.files and root:
        rel = os.path.relpath(os.path.dirname(rec.files[0].path), root)
        parts = [] if rel == "." else rel.split(os.sep)
        if parts and parts[0] != "..":
            return "/".join(parts[:2])
        return f"saved:{os.path.basename(root.rstrip(os.sep))}"
    if src is not None and src.kind == "builder":
        rel = str(src.relative_data_dir or src.builder or "?")
        return "/".join(rel.split("/")[:2])
    if rec.in_memory:
        return "(in memory)"
    return "(no file)"


# ------------------------------------------------------------------------------------------
# The counting period
# ------------------------------------------------------------------------------------------


def _stats_files(root: Path) -> list[Path]:
    return [root / LEDGER_DIR / STATS_FILE, fallback_ledger_dir(root) / STATS_FILE]


def zeroed_at(root: str | os.PathLike[str]) -> float | None:
    """When `zero_stats` last started a counting period for `root` (None: never)."""
    best: float | None = None
    for path in _stats_files(Path(root)):
        try:
            doc = read_state_json(path)
        except (OSError, ValueError):
            continue
        t = doc.get("zeroed_at") if isinstance(doc, dict) else None
        if isinstance(t, (int, float)) and (best is None or t > best):
            best = float(t)
    return best


def zero_stats(root: str | os.PathLike[str], now: float | None = None) -> float:
    """Start a new counting period for `root` now; no record is deleted. Returns the time."""
    t = time.time() if now is None else now
    doc = json.dumps({"v": 1, "zeroed_at": t}) + "\n"
    errors = []
    for path in _stats_files(Path(root)):
        try:
            write_whole(path, doc.encode(), mode=0o644, create_folders=True)
            return t
        except OSError as e:
            errors.append(f"{path}: {e.strerror or e}")
    raise CachetoolError(f"cannot zero the statistics: {'; '.join(errors)}")


# ------------------------------------------------------------------------------------------
# Counting
# ------------------------------------------------------------------------------------------


def ledger_stats(
    root: str | os.PathLike[str],
    *,
    since: float | None = None,
    all_: bool = False,
    now: float | None = None,
    records: Iterable[StepRecord] | None = None,
    ledger: Ledger | None = None,
    compact: bool = False,
    dry_run: bool = False,
) -> StatsReport:
    """Count the recorded steps of `root` from the latest `zero_stats` (and not before `since`, an
    epoch time); `all_` (`--all`) ignores the zero mark. With `compact` (`--compact`), compact
    the ledger first (`cachetool.history.compact.compact_ledger`; with `dry_run`, only say what
    it would do): the report's `compaction`. Runs a compaction summarised count in the totals.
    The Python side of `cachetool stats`."""
    root_path = Path(root)
    compaction = None
    if dry_run and not compact:
        raise CachetoolError("--dry-run goes with --compact")
    if compact:
        from cachetool.history.compact import compact_ledger

        compaction = compact_ledger(root_path, dry_run=dry_run)
    end = time.time() if now is None else now
    warnings: tuple[str, ...] = ()
    if records is None:
        if ledger is None:
            ledger = Ledger.load(root_path, follow=False)
        records, warnings = [*ledger.own_steps(), *ledger.saves_elsewhere()], ledger.warnings
    zero = zeroed_at(root_path)
    starts = [t for t in (since, None if all_ else zero) if t is not None]
    start = max(starts) if starts else None
    tally = _Tally(start, end)
    for rec in sorted(
        (r for r in records if r.type in (*COUNTED, "save") and not r.internal), key=lambda r: r.time
    ):
        tally.add(rec)
    for summary in ledger.summaries() if ledger is not None else ():
        tally.add_summary(summary)
    report = tally.report(root_path, zero, tuple(warnings))
    return report if compaction is None else replace(report, compaction=compaction)


class _Tally:
    """The counts of one period, fed the records oldest first (earlier records, outside the
    period, still tell whether a step had run before)."""

    def __init__(self, start: float | None, end: float) -> None:
        self.start, self.end = start, end
        self.total = _Acc()
        self.sites: dict[str, tuple[_Acc, _Site]] = {}
        self.datasets: dict[str, _Acc] = {}
        self.seen_sites: dict[str, set[str]] = {}  # call site -> the runs that ran a step there
        self.seen_fps: set[str] = set()
        self.saves = 0
        self.random: dict[tuple[str | None, str], int] = {}
        self.random_count = 0
        self.counted: list[StepRecord] = []
        self.summarised_steps: Counter[str] = Counter()

    def add(self, rec: StepRecord) -> None:
        site = _site(rec)
        fp = rec.result
        # A call site counts as run before only from an earlier run: one call makes several
        # steps there (train_test_split's two splits, a DatasetDict's splits, two maps on a line).
        site_runs = self.seen_sites.get(site[0], set())
        recomputed = bool(site_runs - {rec.run}) or (fp is not None and fp in self.seen_fps)
        if rec.type != "save":
            self.seen_sites.setdefault(site[0], set()).add(rec.run)
            if fp is not None:
                self.seen_fps.add(fp)
        if (self.start is not None and rec.time < self.start) or rec.time > self.end:
            return
        if rec.type == "save":
            self.saves += 1
            self.total.bytes += written_bytes(rec)
            return
        self.total.add(rec, recomputed)
        self.counted.append(rec)
        acc = self.sites.get(site[0])
        if acc is None:
            acc = self.sites[site[0]] = (_Acc(), site)
        acc[0].add(rec, recomputed)
        self.datasets.setdefault(dataset_of(rec), _Acc()).add(rec, recomputed)
        rf = rec.random_fallback
        if rf is not None:
            self.random_count += 1
            err = f"{rf.error_type}: {rf.error}" if rf.error_type else str(rf.error)
            key = (rf.argument, err)
            self.random[key] = self.random.get(key, 0) + 1

    def add_summary(self, rec: RunSummaryRecord) -> None:
        """A run a compaction summarised, counted in the totals when it started in the period."""
        if (self.start is not None and rec.time < self.start) or rec.time > self.end:
            return
        self.total.add_summary(rec)
        self.saves += rec.saves
        self.summarised_steps[rec.host or "?"] += rec.steps

    def report(self, root: Path, zero: float | None, warnings: tuple[str, ...]) -> StatsReport:
        site_groups = [
            Group(key=k, counts=a.counts(), operation=s[3], function=s[4], file=s[1], line=s[2])
            for k, (a, s) in self.sites.items()
        ]
        site_groups.sort(key=lambda g: (-g.counts.recompute_seconds, -g.counts.misses, g.key))
        ds_groups = [Group(key=k, counts=a.counts()) for k, a in self.datasets.items()]
        ds_groups.sort(key=lambda g: (-g.counts.misses, g.key))
        hosts = Counter(r.host or "?" for r in self.counted) + self.summarised_steps
        return StatsReport(
            root=root,
            start=self.start,
            end=self.end,
            zeroed_at=zero,
            total=self.total.counts(),
            saves=self.saves,
            random_count=self.random_count,
            random=tuple(
                RandomReason(arg, err, n)
                for (arg, err), n in sorted(self.random.items(), key=lambda kv: -kv[1])
            ),
            call_sites=tuple(site_groups),
            datasets=tuple(ds_groups),
            warnings=warnings,
            hosts=tuple(sorted(hosts.items(), key=lambda kv: (-kv[1], kv[0]))),
            concurrent=concurrent_computations(self.counted),
        )
