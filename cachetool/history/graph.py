"""The steps of a ledger, indexed once (`StepGraph`, `Ledger.view`): fingerprints as nodes and
recorded calls as edges, for `lineage` (a step's origin, parents, children, its files now: `Step`),
`show`, `explain` and stale entries (a step's siblings, the computation a hit reused), `stats`
and `report`.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.formatting import human_size, iso_time
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import GcRecord, RunSummaryRecord, SourceRecord
from cachetool.history.records.parts import CallSite, FunctionInfo, RandomFallback, SourceInfo
from cachetool.history.records.steps import SaveRecord, StepRecord, fn_key, moved_key, site_key
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.history.ledger import Ledger


#: A fingerprint no record explains. `cachetool run` of the pipeline would record it (a step
#: loaded from the cache is recorded too), unless no plain run makes it: one check-determinism
#: wrote under its own PYTHONHASHSEED.
NOT_RECORDED = "no recorded run made it (a run without `cachetool run`, or `cachetool check-determinism`)"


@dataclass(frozen=True)
class FileNow:
    """A file a step wrote or reused, as it is on disk now."""

    path: str
    size: int | None  # None: gone

    @property
    def exists(self) -> bool:
        return self.size is not None


@dataclass(frozen=True)
class Step:
    """One fingerprint and what made it (its latest recorded origin), or a bare fingerprint that no
    record explains (`recorded` False)."""

    fingerprint: str
    recorded: bool
    parents: tuple[str, ...] = ()
    type: str | None = None
    operation: str | None = None
    transform: str | None = None
    function: FunctionInfo | None = None
    args: tuple[tuple[str, str], ...] = ()  # (name, short repr) of the small, telling arguments
    call_site: CallSite | None = None
    runs: int = 0
    hits: int = 0
    misses: int = 0
    cache: str | None = None  # of the latest record: hit | partial | miss | none
    files: tuple[FileNow, ...] = ()
    in_memory: bool = False
    fingerprint_given: bool = False
    random_fallback: RandomFallback | None = None
    source: SourceInfo | None = None
    root: str | None = None
    foreign: bool = False  # recorded in another root than the one asked about (`root` says which)
    internal: bool = False  # a call `datasets` made itself, shown because it wrote a file
    split: str | None = None
    last_used: float | None = None
    saved_to: tuple[str, ...] = ()  # save_to_disk folders that hold this fingerprint
    deleted: str | None = None  # "deleted by gc <time>: <reason>" when gc removed its files
    where: str | None = None  # "computed on node-3, loaded on node-7" when several hosts ran it
    record: StepRecord | None = field(default=None, compare=False, repr=False)

    @property
    def function_str(self) -> str:
        """`keep @ pipeline.py:14`: the function and the line the step was called at (two calls of
        one function look different); the line it is defined at where no call site is known."""
        fn = self.function
        if not fn:
            return ""
        name = fn.qualname or "?"
        site = self.call_site
        if site is not None and site.file and site.line is not None:
            return f"{name} @ {os.path.basename(site.file)}:{site.line}"
        if fn.file:
            return f"{name} @ {os.path.basename(fn.file)}:{fn.line}"
        return name

    @property
    def args_str(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.args)

    @property
    def file_str(self) -> str:
        """`3.1 MB`, `gone`, `no file (in memory)` or `no file`."""
        if not self.recorded:
            return ""
        if not self.files:
            return "no file (in memory)" if self.in_memory else "no file"
        if self.deleted and not any(f.exists for f in self.files):
            return "deleted"
        if all(f.exists for f in self.files):
            return human_size(sum(f.size or 0 for f in self.files))
        if not any(f.exists for f in self.files):
            return "gone"
        gone = sum(not f.exists for f in self.files)
        return f"{gone} of {len(self.files)} files gone"

    def to_json(self) -> dict[str, Any]:
        out = json_fields(self, skip=("record",))
        files = [json_fields(x, "path", "size", "exists") for x in self.files]
        out |= {"args": dict(self.args), "files": files, "last_used": iso_time(self.last_used)}
        return {("used" if k == "last_used" else k): v for k, v in out.items()}


#: The fields of a `Step` that are those of the record that made it.
_AS_RECORDED = (
    *("type", "operation", "transform", "function", "call_site", "cache", "in_memory"),
    *("fingerprint_given", "random_fallback", "source", "split", "internal"),
)
#: Arguments that say nothing a reader needs in a one-line summary.
_QUIET_ARGS = frozenset({"fingerprint_name", "function", "new_fingerprint"})


def _files_now(rec: StepRecord) -> list[FileNow]:
    """The files `rec` wrote or reused, as they are on disk now."""
    files = []
    for f in rec.files:
        path = rec.located(f.path)  # the root may have been moved since
        try:
            size: int | None = os.stat(path).st_size
        except OSError:
            size = None
        files.append(FileNow(path, size))
    return files


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


class StepGraph:
    """The step records of a ledger indexed in one pass, by result fingerprint (origin, parents,
    children), by call site and function (siblings), by run: a question is a lookup, not a pass
    over every record (a long ledger has 100,000). Built once per read (`Ledger.view`); with
    `include_internal` (`lineage --internal`) the calls `datasets` makes itself are steps too.
    Steps read from another root are `foreign` in lineage, and not this root's (`own`)."""

    def __init__(self, ledger: Ledger, *, include_internal: bool = False) -> None:
        self.ledger = ledger
        self.root = os.fspath(ledger.root)
        self.include_internal = include_internal
        self.all_roots = ledger.all_roots  # records of other roots count as this root's
        self.sources: dict[str, str] = {}  # source hash -> the function's text
        self.steps: list[StepRecord] = []  # transforms and roots, oldest first
        self.by_result: dict[str, list[StepRecord]] = {}  # fp -> its records of `steps`
        self._saves: dict[str, list[StepRecord]] = {}  # fp -> the saves (and checkpoints) of it
        self._origin: dict[str, StepRecord] = {}  # fp -> its latest origin (records come oldest first)
        self._parents: dict[str, tuple[str, ...]] = {}  # fp -> parents, where hidden steps are bridged
        self._children: dict[str, list[str]] = {}
        self._removed: dict[str, GcRecord] = {}  # fp -> the latest gc record that removed its files
        self._internal: dict[str, StepRecord] = {}  # fp -> its latest internal origin, when hidden
        self._made_hidden: dict[str, list[StepRecord]] = {}  # fp -> its hidden origins with files
        self._realpaths: dict[str, str] = {}
        self._summaries: list[RunSummaryRecord] = []  # of runs a compaction folded away
        for rec in ledger.records:
            if isinstance(rec, StepRecord):
                self._add(rec)
            elif isinstance(rec, SourceRecord):
                if rec.hash is not None and rec.text is not None:
                    self.sources.setdefault(rec.hash, rec.text)
            elif isinstance(rec, GcRecord):
                for gone in rec.fingerprints:
                    self._removed[gone] = rec
            elif isinstance(rec, RunSummaryRecord):
                self._summaries.append(rec)
        self._lineages: dict[int, tuple[object, ...]] = {}  # by id of a record of `steps`
        self._upstream: dict[str, tuple[str, ...]] = {}
        #: Source files read (None: unreadable), and per record whether its function's code
        #: differs on disk now (`cachetool.history.explain.stale`).
        self.disk: dict[str, str | None] = {}
        self.on_disk: dict[int, bool] = {}
        # A file a hidden internal step wrote (`cast_column` writes through an internal `map`) is
        # still a cache entry: its step stays reachable, marked internal, with every run that wrote
        # or reused it (the latest run may well have loaded it from the cache).
        self._made_hidden = {fp: made for fp, made in self._made_hidden.items() if fp not in self._origin}
        self._origin.update((fp, made[-1]) for fp, made in self._made_hidden.items())
        self._bridge_internal()
        self._link_children()

    def _add(self, rec: StepRecord) -> None:
        """Index one step record (oldest first)."""
        fp = rec.result
        if rec.internal and not self.include_internal:
            if rec.is_origin and fp is not None:
                self._internal[fp] = rec
                if rec.files:
                    self._made_hidden.setdefault(fp, []).append(rec)
            return
        if rec.type in ("save", "checkpoint"):
            if fp is not None:
                self._saves.setdefault(fp, []).append(rec)
            return
        self.steps.append(rec)
        if fp is not None:
            self.by_result.setdefault(fp, []).append(rec)
            if rec.is_origin:
                self._origin[fp] = rec

    def _link_children(self) -> None:
        for fp in self._origin:
            for p in self.parents(fp):
                if p != fp:
                    kids = self._children.setdefault(p, [])
                    if fp not in kids:
                        kids.append(fp)

    def _bridge_internal(self) -> None:
        """A shown step whose parent was made by hidden internal steps (`cast_column` runs `cast`,
        `train_test_split` runs `select`) hangs on the nearest shown ancestor instead, so that
        every recorded file keeps its parent without `--internal`."""
        if not self._internal:
            return
        for fp, rec in self._origin.items():
            parents = tuple(self._visible_parent(p) for p in rec.parents if p != fp)
            if parents != rec.parents:
                self._parents[fp] = tuple(dict.fromkeys(parents))

    def _visible_parent(self, fp: str) -> str:
        seen: set[str] = set()
        while fp not in self._origin and fp in self._internal and fp not in seen:
            seen.add(fp)
            hidden = self._internal[fp]
            if len(hidden.parents) != 1:
                break
            fp = hidden.parents[0]
        return fp

    @functools.cached_property
    def _by_key(self) -> dict[tuple[object, ...], list[StepRecord]]:
        """The steps by call site, by function, and by function code (a step's siblings): made
        when first asked for (`lineage` never asks)."""
        out: dict[tuple[object, ...], list[StepRecord]] = {}
        for rec in self.steps:
            for key in self._keys(rec):
                if key is not None:
                    out.setdefault(key, []).append(rec)
        return out

    def _keys(self, rec: StepRecord) -> tuple[tuple[object, ...] | None, ...]:
        site, fn, moved = site_key(rec, self._realpaths), fn_key(rec), moved_key(rec)
        return (
            None if site is None else ("site", *site),
            None if fn is None else ("function", *fn),
            None if moved is None else ("moved", *moved),
        )

    # -- lookups --------------------------------------------------------------------------------
    def own(self, rec: LedgerRecord) -> bool:
        """The record was read from this root's ledger (not followed into another root)."""
        return self.all_roots or not self.ledger.is_foreign(rec)

    @property
    def fingerprints(self) -> set[str]:
        """Every fingerprint a shown record names, as a result or as a parent."""
        out = set(self._origin) | set(self.by_result) | set(self._saves)
        for fp in self._origin:
            out.update(self.parents(fp))
        return out

    @property
    def recorded(self) -> Container[str]:
        """The fingerprints a record explains (`fp in graph.recorded`)."""
        return self._origin.keys()

    def origin(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that made `fp` from its parents (None for an unrecorded fingerprint);
        with `before`, the latest of this graph's steps begun by then."""
        if before is None:
            return self._origin.get(fp)
        return self._latest(fp, lambda r: fp not in r.parents and r.time <= before)

    def parents(self, fp: str) -> tuple[str, ...]:
        """The parents of `fp`'s origin; those a hidden internal step made are bridged over."""
        found = self._parents.get(fp)
        if found is not None:
            return found
        rec = self._origin.get(fp)
        return rec.parents if rec else ()

    def children(self, fp: str) -> tuple[str, ...]:
        return tuple(self._children.get(fp, ()))

    def _latest(self, fp: str | None, keep: Callable[[StepRecord], bool]) -> StepRecord | None:
        """The latest record of result `fp` that `keep` keeps."""
        return next((r for r in reversed(self.by_result.get(str(fp), ())) if keep(r)), None)

    def computing(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that computed `fp`'s file (a miss), before `before` when given."""
        return self._latest(fp, lambda r: r.computed and (before is None or r.time < before))

    def earlier_same(self, rec: StepRecord, before: float | None = None) -> StepRecord | None:
        """The latest earlier record of this root of the same fingerprint made the same way (begun
        before `before`, when given, else before `rec`)."""
        end = rec.time if before is None else before
        return self._latest(
            rec.result,
            lambda r: r.time < end and r.run != rec.run and r.parents == rec.parents and self.own(r),
        )

    def with_summaries(self, rec: StepRecord) -> StepRecord:
        """`rec`, or an earlier record of the same fingerprint that holds argument summaries (a hit
        records none; the computation it reused does)."""
        if _has_summaries(rec):
            return rec
        return self._latest(rec.result, lambda r: _has_summaries(r) and r.parents == rec.parents) or rec

    def first_run(self, rec: StepRecord) -> bool:
        """No run of this root was recorded before `rec`'s run, and that run loaded nothing its
        own steps had not made: the cache started empty (an untraced run may have filled it)."""
        earliest, found_results = self._runs
        if rec.run in found_results:
            return False
        other = next((t for t, run in earliest if run != rec.run), None)
        return other is None or other >= rec.time

    @functools.cached_property
    def _runs(self) -> tuple[list[tuple[float, str]], set[str]]:
        """The first two runs of this root (start time, id), and the runs that loaded a result
        none of their steps had made: the cache held something."""
        first: dict[str, float] = {}
        made: dict[str, set[str]] = {}  # per run, the results its steps had made or loaded
        found: set[str] = set()
        for summary in self._summaries:  # the runs a compaction folded away were runs too
            if self.own(summary):
                first[summary.run] = min(summary.time, first.get(summary.run, summary.time))
        for rec in self.steps:
            if rec.internal or not self.own(rec):
                continue
            first[rec.run] = min(rec.time, first.get(rec.run, rec.time))
            if rec.result is not None:
                mine = made.setdefault(rec.run, set())
                if rec.cache == "hit" and rec.result not in mine:
                    found.add(rec.run)
                mine.add(rec.result)
        return sorted((t, run) for run, t in first.items())[:2], found

    def _deleted(self, fp: str) -> str | None:
        """What gc said when it removed `fp`, while the files it removed are still gone."""
        rec = self._removed.get(fp)
        if rec is None or any(os.path.lexists(rec.located(p)) for p in rec.paths):
            return None
        if rec.action == "quarantined":
            return rec.said(iso_time(rec.time) or "")
        return f"deleted by gc {iso_time(rec.time)}: {rec.reason or 'no reason recorded'}"

    def step(self, fp: str) -> Step:
        """What the records say about `fp`, with its files checked on disk now."""
        rec = self._origin.get(fp)
        recs = [*self.by_result.get(fp, ()), *self._made_hidden.get(fp, ()), *self._saves.get(fp, ())]
        last_used = max((r.time for r in recs), default=None)
        saved = (r.saved_path for r in recs if isinstance(r, SaveRecord) and r.saved_path is not None)
        if rec is None:
            return Step(fp, recorded=False, last_used=last_used, saved_to=tuple(dict.fromkeys(saved)))
        origins = [r for r in recs if r.is_origin]
        shown = [r for r in origins if self.include_internal or not r.internal]
        files = _files_now(rec)
        kept = next((r for r in reversed(shown) if r.files and r.uncached is None), None)
        if kept is not None and kept is not rec and not any(f.exists for f in files):
            files = _files_now(kept)  # the latest run wrote to a temp folder (disable_caching())
        args = [
            (name, a.repr)
            for name, a in sorted(rec.args.items())
            # An empty `fn_kwargs` says nothing; a non-empty one tells branches apart.
            if name not in _QUIET_ARGS and a.repr is not None and not (name == "fn_kwargs" and a.repr == "{}")
        ]
        hosts: dict[tuple[str | None, bool], StepRecord] = {}  # the first of each host, per outcome
        for r in shown:
            hosts.setdefault((r.host, r.computed), r)
        return Step(
            fingerprint=fp,
            recorded=True,
            parents=self.parents(fp),
            args=tuple(args),
            runs=len(origins),
            hits=sum(r.cache == "hit" for r in origins),
            misses=sum(r.computed for r in origins),
            files=tuple(files),
            root=rec.where or None,
            foreign=bool(rec.read_from and Path(rec.read_from) != Path(self.root)),
            last_used=last_used or None,
            saved_to=tuple(dict.fromkeys(saved)),
            record=rec,
            deleted=self._deleted(fp),
            where=where_sentence(hosts.values()),
            **{k: getattr(rec, k) for k in _AS_RECORDED},
        )

    # -- the graph around a fingerprint -------------------------------------------------------
    def ancestors(self, fp: str) -> list[str]:
        """`fp` and everything it descends from, sources first (each parent before its children)."""
        out: list[str] = []
        seen: set[str] = set()

        def visit(x: str, depth: int) -> None:
            if x in seen or depth > 10_000:
                return
            seen.add(x)
            for p in self.parents(x):
                visit(p, depth + 1)
            out.append(x)

        visit(fp, 0)
        return out

    def upstream(self, fp: str) -> tuple[str, ...]:
        """What `fp` was made from, nearest first, by the steps that made each (no hidden step
        bridged over; memoised: a whole root asks for every entry's)."""
        found = self._upstream.get(fp)
        if found is None:
            out: list[str] = []
            seen = {fp}
            queue = deque(self._made_from(fp))
            while queue:
                x = queue.popleft()
                if x not in seen:
                    seen.add(x)
                    out.append(x)
                    queue.extend(self._made_from(x))
            found = self._upstream[fp] = tuple(out)
        return found

    def _made_from(self, fp: str) -> tuple[str, ...]:
        rec = self._latest(fp, lambda r: fp not in r.parents)
        return rec.parents if rec is not None else ()

    def descendants(self, fp: str) -> list[tuple[int, str]]:
        """`fp` and every fingerprint derived from it, depth-first, with its depth below `fp`."""
        out: list[tuple[int, str]] = []
        seen: set[str] = set()
        stack = [(0, fp)]
        while stack:
            depth, x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            out.append((depth, x))
            for child in reversed(self.children(x)):
                stack.append((depth + 1, child))
        return out

    def forest(self, fp: str) -> list[tuple[int, str]]:
        """The whole family of `fp`: every descendant of each of its first fingerprints (those
        without a recorded parent)."""
        out: list[tuple[int, str]] = []
        seen: set[str] = set()
        for src in (x for x in self.ancestors(fp) if not self.parents(x)):
            for depth, x in self.descendants(src):
                if x not in seen:
                    seen.add(x)
                    out.append((depth, x))
        return out

    def edges(self, fps: Iterable[str]) -> list[tuple[str, str]]:
        """(parent, child) pairs among `fps`."""
        wanted = set(fps)
        return [(p, x) for x in wanted for p in self.parents(x) if p in wanted]

    def siblings(self, rec: StepRecord) -> list[StepRecord]:
        """Earlier records of the same step (call site, else function) with another fingerprint,
        one per fingerprint, most recent first; those with the same parents come first, then
        those of the same lineage (`lineage`: each split of a DatasetDict mapped at one call site
        is compared with its own earlier state). Only records of this root count: another
        cache's runs say nothing about what this one holds."""
        t = rec.time
        fp = rec.result

        def matching(key: tuple[object, ...] | None) -> list[StepRecord]:
            if key is None:
                return []
            return [
                other
                for other in self._by_key.get(key, ())
                if other is not rec
                and other.time < t
                and other.result != fp
                and other.run != rec.run
                and other.type == rec.type
                and other.output == rec.output
                and self.own(other)
            ]

        # The same call site, else the same function, else the same function (same code) from
        # another file: the script was renamed or moved.
        site, fn, moved = self._keys(rec)
        found = matching(site) or matching(fn) or matching(moved)
        found.sort(key=lambda r: r.time, reverse=True)
        parents = rec.parents
        same = [r for r in found if r.parents == parents]
        rest = [r for r in found if r.parents != parents]
        if rest:
            mine = self.lineage(rec)
            rest = [r for r in rest if self.lineage(r) == mine] + [r for r in rest if self.lineage(r) != mine]
        out: list[StepRecord] = []
        seen: set[str | None] = set()
        for other in same + rest:
            if other.result not in seen:
                seen.add(other.result)
                out.append(other)
        return out

    def lineage(self, rec: StepRecord, depth: int = 0) -> tuple[object, ...]:
        """Where `rec`'s result comes from, as steps rather than fingerprints: the step (call
        site, else function; which output of a `train_test_split`) and the lineage of each of its
        parents, down to the source (a saved split's folder, a builder's split). Two records of
        one call site with the same lineage made the same dataset, at different times."""
        found = self._lineages.get(id(rec))
        if found is not None:
            return found
        if rec.type == "root":
            src = rec.source
            if src is None:
                found = ("root", rec.result)
            else:
                found = ("root", rec.operation, src.kind, src.path, src.builder, src.config, src.split)
        else:
            site, fn, _ = self._keys(rec)
            ups = []
            for p in rec.parents:
                origin = self.origin(p, before=rec.time + 1e-6) if depth < 50 else None
                ups.append(self.lineage(origin, depth + 1) if origin is not None else ("unrecorded", p))
            found = (site or fn, rec.output, tuple(ups))
        self._lineages[id(rec)] = found
        return found


def _has_summaries(rec: StepRecord) -> bool:
    return any(a.summary is not None for a in rec.args.values())
