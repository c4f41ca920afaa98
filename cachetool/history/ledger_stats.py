"""How well the cache works, from the ledger (`cachetool stats`, as `ccache -s`): hits, misses,
time lost to recomputation, hours lost to nondeterminism and given back, work two hosts did twice,
and the counting period `zero_stats` starts. What each number counts: docs/explain.md.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.layout import LEDGER_DIR
from cachetool.cache.roots import fallback_ledger_dir
from cachetool.cache.store import read_state_json, write_whole
from cachetool.errors import CachetoolError
from cachetool.formatting import iso_time, short_duration
from cachetool.history.ledger import Ledger
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import RunEndRecord, RunSummaryRecord
from cachetool.history.records.steps import COUNTED, StepRecord, step_counts, written_bytes
from cachetool.history.runs import open_starts, run_state
from cachetool.safejson import json_fields, json_value

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport

STATS_FILE = "stats.json"

#: A call site: its key (`pipeline.py:21 map`), file, line, operation and function.
_Site = tuple[str, str | None, int | None, str | None, str | None]


@dataclass(frozen=True)
class Counts:
    """Hits, misses and what they cost, for all steps or for one group of them."""

    steps: int = 0
    runs: int = 0
    hits: int = 0
    misses: int = 0  # partial ones included
    partial: int = 0
    no_file: int = 0  # looked nothing up and wrote no cache file (failed steps apart)
    failed: int = 0  # raised: the error is in the record (Ctrl-C apart)
    interrupted: int = 0  # stopped by Ctrl-C: the run's end record names the step
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
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = round(v, 6) if isinstance(v, float) else v
            if f.name == "no_file":
                out["hit_rate"] = self.hit_rate
        return out

    @classmethod
    def of(
        cls,
        steps: list[tuple[StepRecord, bool]],
        summaries: Iterable[RunSummaryRecord] = (),
        stopped: Collection[tuple[str | None, int | None]] = (),
    ) -> Counts:
        """The counts of `steps` (each with whether it had run before: its time, when it computed
        or ran uncached, is lost), and of the summarised runs `summaries`; the steps `stopped`
        names (run, seq) were interrupted by Ctrl-C, not failed."""
        uncached = [r for r, _ in steps if r.uncached is not None]
        counts = step_counts([r for r, _ in steps])
        interrupted = sum((r.run, r.seq) in stopped for r, _ in steps)
        c = cls(
            **{**counts, "failed": counts["failed"] - interrupted},
            interrupted=interrupted,
            recompute_seconds=sum(r.duration for r, again in steps if again and (r.computed or r.uncached)),
            uncached=len(uncached),
            uncached_seconds=sum(r.duration for r in uncached),
        )
        runs = {r.run for r, _ in steps if r.run}
        for s in summaries:  # their call sites and datasets are not kept
            runs.update(s.run if s.runs == 1 else f"{s.run}#{i}" for i in range(s.runs))
            c = replace(c, **{k: getattr(c, k) + getattr(s, k) for k in counts})  # a summary holds them too
        return replace(c, runs=len(runs))


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
        return json_fields(self, skip=("counts",)) | self.counts.to_json()


@dataclass(frozen=True)
class RandomReason:
    """Why `datasets` fell back to a random fingerprint, and how often."""

    argument: str | None
    error: str
    count: int


@dataclass(frozen=True)
class Computation:
    """One run's computation of a fingerprint."""

    run: str
    host: str | None
    pid: int | None
    start: float
    duration: float


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
        """ "2 runs computed 7f3a1b2c… concurrently (node-3, node-7); 11.0 min lost" (the duration
        written as `stats` writes its totals)."""
        where = f" ({', '.join(self.hosts)})" if len(self.hosts) > 1 else ""
        what = f" ({self.operation})" if self.operation and not where else ""
        return (
            f"{self.runs} runs computed {self.fingerprint[:8]}… concurrently{where}{what}; "
            f"{short_duration(self.lost_seconds)} lost"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "fingerprint", "operation", "runs", "hosts"),
            "lost_seconds": round(self.lost_seconds, 6),
            **json_fields(self, "computations"),
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
                # One run may compute a state twice in a row (a loop): each record is one computation.
                comps = tuple(Computation(c.run, c.host, c.pid, c.time, c.duration) for c in cluster)
                out.append(ConcurrentComputation(fp, cluster[0].operation, comps))
            if r is not None:
                cluster, end = [r], r.time + r.duration
    out.sort(key=lambda c: (-c.lost_seconds, c.fingerprint))
    return tuple(out)


#: The kinds of `explain` reasons that make a recomputation the doing of nondeterminism: a part
#: that hashes differently in every process, a random fallback fingerprint, an object an earlier
#: step changes while it computes.
NONDETERMINISM = ("nondeterministic", "random", "cache-state")


def compute_time(rec: StepRecord) -> tuple[float, float | None]:
    """(wall, CPU seconds or None) a step spent computing: its recorded compute time, else (older
    records) its duration and no CPU time."""
    c = rec.compute
    return (c.wall, c.cpu) if c is not None else (rec.duration, None)


def recompute_costs(records: Iterable[LedgerRecord]) -> dict[str, float]:
    """What recomputing each fingerprint would cost, in wall seconds: the compute time its latest
    full computation recorded (a partial one's when no other), under every fingerprint the
    result is known by. A fingerprint never computed under the tracer is not in it."""
    costs: dict[str, float] = {}
    partial: dict[str, float] = {}
    for rec in records:
        if isinstance(rec, StepRecord) and rec.compute is not None and rec.computed and not rec.internal:
            for fp in rec.made:
                (costs if rec.cache == "miss" else partial)[fp] = rec.compute.wall
    return partial | costs


@dataclass(frozen=True)
class Hours:
    """Compute time of some steps: wall seconds, CPU seconds (of the steps that recorded it), and
    the rows reused (time given back by resume)."""

    steps: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    rows: int = 0

    def plus(self, wall: float, cpu: float | None = None, rows: int = 0) -> Hours:
        return Hours(self.steps + 1, self.seconds + wall, self.cpu_seconds + (cpu or 0.0), self.rows + rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "seconds": round(self.seconds, 6),
            "cpu_seconds": round(self.cpu_seconds, 6),
        }


@dataclass(frozen=True)
class Lost:
    """Hours recomputed because of nondeterminism, of one culprit (`kind`, the part's path, and
    `explain`'s sentence of the latest) or one call site (its key, operation, function, place)."""

    key: str
    hours: Hours
    kind: str | None = None
    message: str | None = None
    operation: str | None = None
    function: str | None = None
    file: str | None = None
    line: int | None = None

    def to_json(self, key: str = "key") -> dict[str, Any]:
        """`key` names the key ("culprit" for a culprit); fields that are None are left out."""
        given = {k: v for k, v in json_fields(self, skip=("key", "hours")).items() if v is not None}
        return {key: self.key, **given, **self.hours.to_json()}


@dataclass(frozen=True)
class Nondeterminism:
    """Hours recomputed because of nondeterminism: in all, per culprit, per call site."""

    total: Hours = Hours()
    culprits: tuple[Lost, ...] = ()
    call_sites: tuple[Lost, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.total.to_json(),
            "culprits": [c.to_json("culprit") for c in self.culprits],
            "call_sites": [c.to_json() for c in self.call_sites],
        }


@dataclass(frozen=True)
class GivenBack:
    """Compute time given back by resume and by re-key."""

    resume: Hours = Hours()
    rekey: Hours = Hours()

    @property
    def seconds(self) -> float:
        return self.resume.seconds + self.rekey.seconds

    def to_json(self) -> dict[str, Any]:
        r, k = self.resume, self.rekey
        return {
            "seconds": round(self.seconds, 6),
            "resume": {"steps": r.steps, "rows": r.rows, "seconds": round(r.seconds, 6)},
            "rekey": {"steps": k.steps, "seconds": round(k.seconds, 6)},
        }


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
    #: fingerprints two or more runs computed at the same time (`cachetool.history.ledger_stats`)
    concurrent: tuple[ConcurrentComputation, ...] = ()
    #: what `--compact` did (or with `--dry-run` would do) before counting
    compaction: CompactionReport | None = None
    #: hours recomputed because of nondeterminism
    nondeterminism: Nondeterminism = Nondeterminism()
    #: hours given back by resume and re-key
    given_back: GivenBack = GivenBack()
    #: steps whose run was killed in them (SIGKILL, OOM): begun, never ended, the process gone
    killed: int = 0

    @property
    def concurrent_seconds(self) -> float:
        return sum(c.lost_seconds for c in self.concurrent)

    def to_json(self) -> dict[str, Any]:
        compaction = {"compaction": json_value(self.compaction)} if self.compaction is not None else {}
        return {
            **compaction,
            "version": 1,
            "root": str(self.root),
            "period": {
                "start": iso_time(self.start),
                "end": iso_time(self.end),
                "zeroed_at": iso_time(self.zeroed_at),
            },
            **self.total.to_json(),
            "killed": self.killed,
            "saves": self.saves,
            "random_fingerprints": {
                "count": self.random_count,
                "reasons": json_value(self.random),
            },
            **json_fields(self, "call_sites", "datasets"),
            "hosts": dict(self.hosts),
            "concurrent": {
                "count": len(self.concurrent),
                "lost_seconds": round(self.concurrent_seconds, 6),
                "computations": json_value(self.concurrent),
            },
            **json_fields(self, "nondeterminism", "given_back"),
        }


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
    saved folder's name for a saved dataset; `(in memory)`, `(caching disabled)` (its files were in
    a temp folder) or `(no file)` otherwise."""
    if rec.uncached == "caching-disabled":
        return "(caching disabled)"
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
    since: float | str | None = None,
    all_: bool = False,
    now: float | None = None,
    compact: bool = False,
    dry_run: bool = False,
) -> StatsReport:
    """Count the recorded steps of `root` from the latest `zero_stats` (and not before `since`, an
    epoch time, or a period before `now` as `--since` takes it: "7d", "12h", "30m", "2w"; another
    string is a `CachetoolError`); `all_` (`--all`) ignores the zero mark. With `compact`
    (`--compact`), compact the ledger first (`cachetool.history.compact.compact_ledger`; with
    `dry_run`, only say what it would do): the report's `compaction`. Runs a compaction
    summarised count in the totals. The Python side of `cachetool stats`."""
    root_path = Path(root)
    compaction = None
    if dry_run and not compact:
        raise CachetoolError("--dry-run goes with --compact")
    end = time.time() if now is None else now
    if isinstance(since, str):
        from cachetool.cache.selection import parse_duration

        # A period longer than the clock's past (`--since 9999999999y`) means every recorded run.
        since = max(0.0, end - parse_duration(since, "--since"))
    if compact:
        from cachetool.history.compact import compact_ledger

        compaction = compact_ledger(root_path, dry_run=dry_run)
    ledger = Ledger.load(root_path, follow=False)
    zero = zeroed_at(root_path)
    start = max((t for t in (since, None if all_ else zero) if t is not None), default=None)

    def in_period(rec: LedgerRecord) -> bool:
        return (start is None or rec.time >= start) and rec.time <= end

    # Fed oldest first: records before the period still tell whether a step had run before.
    steps: list[tuple[StepRecord, bool]] = []
    saves: list[StepRecord] = []
    sites: dict[str, tuple[list[tuple[StepRecord, bool]], _Site]] = {}
    datasets: dict[str, list[tuple[StepRecord, bool]]] = {}
    seen_sites: dict[str, set[str]] = {}  # call site -> the runs that ran a step there
    seen_fps: set[str] = set()
    back = GivenBack()
    computed: dict[object, StepRecord] = {}  # fingerprint, or (call site, parents) -> its latest computation
    made: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}  # (call site, parents) -> result -> run
    recomputed: list[StepRecord] = []  # misses whose call site and input made another result before
    records = [*ledger.own_steps(), *ledger.saves_elsewhere()]
    for rec in sorted((r for r in records if r.type in (*COUNTED, "save")), key=lambda r: r.time):
        if rec.type == "save":
            saves += [rec] if in_period(rec) else []
            continue
        site = _site(rec)
        # A call site counts as run before only from an earlier run: one call makes several
        # steps there (train_test_split's two splits, a DatasetDict's splits, two maps on a line).
        again = bool(seen_sites.get(site[0], set()) - {rec.run}) or rec.result in seen_fps
        if rec.error is None:  # a step that raised made nothing a later run could have reused
            seen_sites.setdefault(site[0], set()).add(rec.run)
        before = made.setdefault((site[0], rec.parents), {})
        if (
            in_period(rec)
            and rec.computed
            and any(f != rec.result and r != rec.run for f, r in before.items())
        ):
            recomputed.append(rec)
        if rec.result is not None:
            seen_fps.add(rec.result)
            before[rec.result] = rec.run
            if rec.computed:
                computed[rec.result] = computed[(site[0], rec.parents)] = rec
        if in_period(rec):
            back = _given_back(back, rec, computed, site[0])
            steps.append((rec, again))
            sites.setdefault(site[0], ([], site))[0].append((rec, again))
            datasets.setdefault(dataset_of(rec), []).append((rec, again))
    summaries = [s for s in ledger.summaries() if in_period(s)]
    stopped = {
        (r.run, r.step)
        for r in ledger.records
        if isinstance(r, RunEndRecord) and r.exception == "KeyboardInterrupt"
    }
    total = Counts.of(steps, summaries, stopped)
    site_groups = [
        Group(
            key=k,
            counts=Counts.of(items, stopped=stopped),
            operation=s[3],
            function=s[4],
            file=s[1],
            line=s[2],
        )
        for k, (items, s) in sites.items()
    ]
    site_groups.sort(key=lambda g: (-g.counts.recompute_seconds, -g.counts.misses, g.key))
    ds_groups = sorted(
        (Group(key=k, counts=Counts.of(items, stopped=stopped)) for k, items in datasets.items()),
        key=lambda g: (-g.counts.misses, g.key),
    )
    random = Counter(
        (rf.argument, f"{rf.error_type}: {rf.error}" if rf.error_type else str(rf.error))
        for r, _ in steps
        if (rf := r.random_fallback) is not None
    )
    summarised: Counter[str] = Counter()
    for s in summaries:
        summarised[s.host or "?"] += s.steps
    hosts = Counter(r.host or "?" for r, _ in steps) + summarised
    return StatsReport(
        root=root_path,
        start=start,
        end=end,
        zeroed_at=zero,
        total=replace(total, bytes_written=total.bytes_written + sum(written_bytes(r) for r in saves)),
        saves=len(saves) + sum(s.saves for s in summaries),
        random_count=random.total(),
        random=tuple(
            RandomReason(arg, err, n) for (arg, err), n in sorted(random.items(), key=lambda kv: -kv[1])
        ),
        call_sites=tuple(site_groups),
        datasets=tuple(ds_groups),
        warnings=ledger.warnings,
        hosts=tuple(sorted(hosts.items(), key=lambda kv: (-kv[1], kv[0]))),
        concurrent=concurrent_computations(r for r, _ in steps),
        compaction=compaction,
        nondeterminism=_nondeterminism(ledger, recomputed),
        given_back=back,
        killed=sum(
            in_period(s) and run_state(s) == "killed" and not ledger.is_foreign(s)
            for s in open_starts(ledger.records)
        ),
    )


def _given_back(back: GivenBack, rec: StepRecord, computed: dict[object, StepRecord], site: str) -> GivenBack:
    """`back` with what `rec` gave back: by resume, the time its killed run spent computing the
    rows it reused (records written before that time was kept: its reused rows at the rate it
    computed the rest); by re-key (its `rekeyed` part), the compute time of the earlier result it
    names (else of the latest of its call site and input), less its own time."""
    wall = compute_time(rec)[0]
    resumed = rec.resumed
    if resumed is not None and resumed.rows:
        left = resumed.of - resumed.rows
        seconds = resumed.seconds
        if seconds is None:
            seconds = wall * resumed.rows / left if left > 0 else 0.0
        back = replace(back, resume=back.resume.plus(seconds, rows=resumed.rows))
    if rec.rekeyed is not None:
        earlier = computed.get(rec.rekeyed.source) or computed.get((site, rec.parents))
        saved = max(0.0, compute_time(earlier)[0] - rec.duration) if earlier is not None else 0.0
        back = replace(back, rekey=back.rekey.plus(saved))
    return back


def _nondeterminism(ledger: Ledger, recomputed: list[StepRecord]) -> Nondeterminism:
    """The hours of the `recomputed` steps (misses whose call site and input had an earlier result
    under another fingerprint) for a reason `explain` gives (`explain_record`) of a kind in
    `NONDETERMINISM`; a step with several culprits shares its time between them."""
    if not recomputed:
        return Nondeterminism()
    from cachetool.history.explain.explainer import explain_record

    total = Hours()
    culprits: dict[tuple[str, str], Lost] = {}
    sites: dict[str, Lost] = {}
    for rec in recomputed:
        reasons = [r for r in explain_record(ledger.view, rec).reasons if r.kind in NONDETERMINISM]
        if not reasons:
            continue
        wall, cpu = compute_time(rec)
        total = total.plus(wall, cpu)
        key, file, line, op, fn = _site(rec)
        lost = sites.get(key) or Lost(key, Hours(), operation=op, function=fn, file=file, line=line)
        sites[key] = replace(lost, hours=lost.hours.plus(wall, cpu))
        for r in reasons:
            name = r.path or r.argument or "the transform"
            lost = culprits.get((r.kind, name)) or Lost(name, Hours(), kind=r.kind)
            share = lost.hours.plus(wall / len(reasons), None if cpu is None else cpu / len(reasons))
            culprits[(r.kind, name)] = replace(lost, hours=share, message=r.text)
    order = lambda g: (-g.hours.seconds, g.key)  # noqa: E731
    return Nondeterminism(
        total, tuple(sorted(culprits.values(), key=order)), tuple(sorted(sites.values(), key=order))
    )
