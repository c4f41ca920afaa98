"""How well the cache works, from the ledger: hits, misses, time lost to recomputation (`ccache -s`).

Counts come from the recorded steps (transform calls and source datasets; internal calls that
`datasets` makes itself are left out): a *hit* reused every output file, a *miss* computed at
least one (a `num_proc` step that reused some shards is a partial miss). Steps that write no
file (in-memory datasets, `select` with a list, `remove_columns`) are counted as steps, not as
hits or misses. *Recompute time* is the recorded duration of misses of steps that had run
before (same call site, or the same fingerprint): the time a better-kept cache would have
saved; first runs are not lost time.

`zero_stats(root)` starts a new counting period, as `ccache -z` does, without deleting a record:
it writes the time into `<root>/.cachetool/stats.json`, and later reports count from there.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetool.errors import CachetoolError
from cachetool.lineage.ledger import LEDGER_DIR, Record, fallback_ledger_dir, read_ledger

__all__ = ["Counts", "Group", "RandomReason", "StatsReport", "ledger_stats", "zero_stats", "zeroed_at"]

STATS_FILE = "stats.json"
_COUNTED = ("transform", "root")


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

    def to_json(self) -> dict[str, Any]:
        return {
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
        }


class _Acc:
    """A mutable tally, frozen into `Counts` at the end."""

    def __init__(self) -> None:
        self.steps = self.hits = self.misses = self.partial = self.no_file = self.bytes = 0
        self.miss_s = self.recompute_s = 0.0
        self.runs: set[str] = set()

    def add(self, rec: Mapping[str, Any], recomputed: bool) -> None:
        self.steps += 1
        run = rec.get("run")
        if isinstance(run, str):
            self.runs.add(run)
        cache = rec.get("cache")
        duration = rec.get("duration")
        seconds = float(duration) if isinstance(duration, (int, float)) else 0.0
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
        self.bytes += written_bytes(rec)

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
        )


def written_bytes(rec: Mapping[str, Any]) -> int:
    """Bytes of the files a record wrote (not those it reused)."""
    total = 0
    for f in rec.get("files") or ():
        if isinstance(f, Mapping) and f.get("status") == "written" and isinstance(f.get("size"), int):
            total += f["size"]
    return total


def _time(rec: Mapping[str, Any]) -> float:
    t = rec.get("time")
    return float(t) if isinstance(t, (int, float)) else 0.0


def _site(rec: Mapping[str, Any]) -> tuple[str, str | None, int | None, str | None, str | None]:
    site = rec.get("call_site") if isinstance(rec.get("call_site"), Mapping) else {}
    fn = rec.get("function") if isinstance(rec.get("function"), Mapping) else {}
    file = site.get("file") if isinstance(site, Mapping) else None
    line = site.get("line") if isinstance(site, Mapping) else None
    op = rec.get("operation")
    qualname = fn.get("qualname") if isinstance(fn, Mapping) else None
    where = f"{os.path.basename(str(file))}:{line}" if file else "?"
    return f"{where} {op}", str(file) if file else None, line if isinstance(line, int) else None, op, qualname


def dataset_of(rec: Mapping[str, Any]) -> str:
    """`csv/default-c955f4a6b949b4ae` for a step whose files live in that builder folder; the
    saved folder's name for a saved dataset; `(in memory)` or `(no file)` otherwise."""
    src = rec.get("source") if isinstance(rec.get("source"), Mapping) else None
    files = [f for f in rec.get("files") or () if isinstance(f, Mapping) and isinstance(f.get("path"), str)]
    root = rec.get("root") or rec.get("_root")
    if files and isinstance(root, str):
        rel = os.path.relpath(os.path.dirname(files[0]["path"]), root)
        parts = [] if rel == "." else rel.split(os.sep)
        if parts and parts[0] != "..":
            return "/".join(parts[:2])
        return f"saved:{os.path.basename(root.rstrip(os.sep))}"
    if isinstance(src, Mapping) and src.get("kind") == "builder":
        rel = str(src.get("relative_data_dir") or src.get("builder") or "?")
        return "/".join(rel.split("/")[:2])
    if rec.get("in_memory"):
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
            doc = json.loads(path.read_text(encoding="utf-8"))
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
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{STATS_FILE}.{os.getpid()}.tmp")
            tmp.write_text(doc, encoding="utf-8")
            os.replace(tmp, path)
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
    everything: bool = False,
    now: float | None = None,
    records: Iterable[Record] | None = None,
) -> StatsReport:
    """Count the recorded steps of `root` from the latest `zero_stats` (and not before `since`, an
    epoch time); `everything` ignores the zero mark. The Python side of `cachetool stats`."""
    root_path = Path(root)
    end = time.time() if now is None else now
    warnings: tuple[str, ...] = ()
    if records is None:
        got = read_ledger(root_path, include_internal=False)
        records, warnings = got.records, got.warnings
    zero = zeroed_at(root_path)
    starts = [t for t in (since, None if everything else zero) if t is not None]
    start = max(starts) if starts else None
    all_steps = sorted(
        (r for r in records if r.get("type") in (*_COUNTED, "save") and not r.get("internal")), key=_time
    )
    total = _Acc()
    sites: dict[str, tuple[_Acc, tuple[str, str | None, int | None, str | None, str | None]]] = {}
    datasets: dict[str, _Acc] = {}
    seen_sites: set[str] = set()
    seen_fps: set[str] = set()
    saves = 0
    random: dict[tuple[str | None, str], int] = {}
    random_count = 0
    for rec in all_steps:
        site = _site(rec)
        fp = rec.get("result")
        recomputed = site[0] in seen_sites or (isinstance(fp, str) and fp in seen_fps)
        if rec.get("type") != "save":
            seen_sites.add(site[0])
            if isinstance(fp, str):
                seen_fps.add(fp)
        t = _time(rec)
        if (start is not None and t < start) or t > end:
            continue
        if rec.get("type") == "save":
            saves += 1
            total.bytes += written_bytes(rec)
            continue
        total.add(rec, recomputed)
        acc = sites.get(site[0])
        if acc is None:
            acc = sites[site[0]] = (_Acc(), site)
        acc[0].add(rec, recomputed)
        datasets.setdefault(dataset_of(rec), _Acc()).add(rec, recomputed)
        rf = rec.get("random_fallback")
        if isinstance(rf, Mapping):
            random_count += 1
            err = (
                f"{rf.get('error_type')}: {rf.get('error')}" if rf.get("error_type") else str(rf.get("error"))
            )
            key = (rf.get("argument"), err)
            random[key] = random.get(key, 0) + 1
    site_groups = [
        Group(key=k, counts=a.counts(), operation=s[3], function=s[4], file=s[1], line=s[2])
        for k, (a, s) in sites.items()
    ]
    site_groups.sort(key=lambda g: (-g.counts.recompute_seconds, -g.counts.misses, g.key))
    ds_groups = [Group(key=k, counts=a.counts()) for k, a in datasets.items()]
    ds_groups.sort(key=lambda g: (-g.counts.misses, g.key))
    return StatsReport(
        root=root_path,
        start=start,
        end=end,
        zeroed_at=zero,
        total=total.counts(),
        saves=saves,
        random_count=random_count,
        random=tuple(
            RandomReason(arg, err, n) for (arg, err), n in sorted(random.items(), key=lambda kv: -kv[1])
        ),
        call_sites=tuple(site_groups),
        datasets=tuple(ds_groups),
        warnings=tuple(warnings),
    )
