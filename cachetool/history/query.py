"""What the ledger says of one fingerprint. Lineage (`cachetool lineage`): the graph of recorded
steps, fingerprints as nodes and recorded calls as edges, across roots (a saved folder's parent
lives in the cache root it was computed in); a fingerprint as lineage shows it (`Step`), and the
answer (`LineageView`). `cachetool show`: one entry from the disk and the ledger (`EntryReport`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cachetool.formatting import human_size, iso_time
from cachetool.history.ledger import Ledger, named_elsewhere
from cachetool.history.ledger_stats import where_sentence
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import GcRecord
from cachetool.history.records.parts import CallSite, FunctionInfo, RandomFallback, SourceInfo
from cachetool.history.records.steps import SaveRecord, StepRecord
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile, CacheReport, Entry
    from cachetool.history.explain.answer import StaleHit
    from cachetool.history.records.steps import StepStartRecord


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


class LineageGraph:
    """Every recorded fingerprint with its origin and children.

    `root` is the root the graph was asked about: steps recorded in another root are marked
    `foreign` (and keep the root they were read from)."""

    def __init__(
        self, records: Iterable[LedgerRecord], *, include_internal: bool = False, root: str | None = None
    ) -> None:
        self.root = root
        self.include_internal = include_internal
        self._origin: dict[str, StepRecord] = {}  # fp -> its latest origin (records come oldest first)
        self._by_result: dict[str, list[StepRecord]] = {}  # fp -> its shown records, saves included
        self._children: dict[str, list[str]] = {}
        self._removed: dict[str, GcRecord] = {}  # fp -> the latest gc record that removed its files
        self._internal: dict[str, StepRecord] = {}  # fp -> its latest internal origin, when hidden
        self.records: list[StepRecord] = []
        made_file: dict[str, list[StepRecord]] = {}  # fp -> its hidden internal origins with files
        for rec in records:
            if isinstance(rec, GcRecord):
                for gone in rec.fingerprints:
                    self._removed[gone] = rec
            elif isinstance(rec, StepRecord):
                if rec.internal and not include_internal:
                    if rec.is_origin and rec.result is not None:
                        self._internal[rec.result] = rec
                        if rec.files:
                            made_file.setdefault(rec.result, []).append(rec)
                    continue
                self.records.append(rec)
                if rec.result is not None:
                    self._by_result.setdefault(rec.result, []).append(rec)
                    if rec.is_origin:
                        self._origin[rec.result] = rec
        # A file a hidden internal step wrote (`cast_column` writes through an internal `map`) is
        # still a cache entry: its step stays reachable, marked internal, with every run that wrote
        # or reused it (the latest run may well have loaded it from the cache).
        for fp, made in made_file.items():
            if fp not in self._origin:
                self._origin[fp] = made[-1]
                self._by_result.setdefault(fp, []).extend(made)
        self._bridge_internal()
        self._link_children()

    def _link_children(self) -> None:
        for fp, rec in self._origin.items():
            for p in rec.parents:
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
        for fp, rec in list(self._origin.items()):
            parents = tuple(self._visible_parent(p) for p in rec.parents if p != fp)
            if parents != rec.parents:
                self._origin[fp] = replace(rec, parents=tuple(dict.fromkeys(parents)))

    def _visible_parent(self, fp: str) -> str:
        seen: set[str] = set()
        while fp not in self._origin and fp in self._internal and fp not in seen:
            seen.add(fp)
            hidden = self._internal[fp]
            if len(hidden.parents) != 1:
                break
            fp = hidden.parents[0]
        return fp

    # -- lookups --------------------------------------------------------------------------------
    @property
    def fingerprints(self) -> set[str]:
        """Every fingerprint a record names, as a result or as a parent."""
        out = set(self._origin) | set(self._by_result)
        for rec in self._origin.values():
            out.update(rec.parents)
        return out

    @property
    def recorded(self) -> Container[str]:
        """The fingerprints a record explains (`fp in graph.recorded`)."""
        return self._origin.keys()

    def origin(self, fp: str) -> StepRecord | None:
        """The latest record that made `fp` from its parents (None for an unrecorded fingerprint)."""
        return self._origin.get(fp)

    def parents(self, fp: str) -> tuple[str, ...]:
        rec = self._origin.get(fp)
        return rec.parents if rec else ()

    def children(self, fp: str) -> tuple[str, ...]:
        return tuple(self._children.get(fp, ()))

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
        recs = self._by_result.get(fp, [])
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
            foreign=bool(self.root and rec.read_from and Path(rec.read_from) != Path(self.root)),
            last_used=last_used or None,
            saved_to=tuple(dict.fromkeys(saved)),
            record=rec,
            deleted=self._deleted(fp),
            where=where_sentence(hosts.values()),
            **{k: getattr(rec, k) for k in _AS_RECORDED},
        )

    # -- queries -------------------------------------------------------------------------------
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

    def sources(self, fp: str) -> list[str]:
        """The first fingerprints of `fp`'s ancestry: those without a recorded parent."""
        return [x for x in self.ancestors(fp) if not self.parents(x)]

    def forest(self, fp: str) -> list[tuple[int, str]]:
        """The whole family of `fp`: every descendant of each of its sources."""
        out: list[tuple[int, str]] = []
        seen: set[str] = set()
        for src in self.sources(fp):
            for depth, x in self.descendants(src):
                if x not in seen:
                    seen.add(x)
                    out.append((depth, x))
        return out

    def edges(self, fps: Iterable[str]) -> list[tuple[str, str]]:
        """(parent, child) pairs among `fps`."""
        wanted = set(fps)
        return [(p, x) for x in wanted for p in self.parents(x) if p in wanted]


def load_graph(
    root: str | os.PathLike[str] | Ledger,
    *,
    include_internal: bool = False,
    warnings: list[str] | None = None,
) -> LineageGraph:
    """The lineage graph of `root` (a loaded `Ledger`, or a root to load), with the origins of
    parents recorded in other roots."""
    ledger = root if isinstance(root, Ledger) else Ledger.load(root)
    if warnings is not None:
        warnings.extend(ledger.warnings)
    return LineageGraph(ledger.records, include_internal=include_internal, root=os.fspath(ledger.root))


LineageMode = Literal["chain", "descendants", "all"]


@dataclass(frozen=True)
class LineageView:
    """The answer of one `lineage` query: steps in order (with depth for trees) and the edges."""

    fingerprint: str
    mode: LineageMode
    steps: tuple[tuple[int, Step], ...]
    edges: tuple[tuple[str, str], ...]
    entry: Entry | None  # what the disk holds for the fingerprint, if anything
    #: What reading the ledger warned of (torn records, unreadable segments).
    warnings: tuple[str, ...] = field(default=(), compare=False)
    #: The steps whose cache entry is stale, each with why in a few words
    #: (`cachetool.history.explain.stale.stale_hits`).
    stale: tuple[tuple[str, str], ...] = ()
    #: For a fingerprint no record explains: the step that began to make it in a run killed
    #: before the step ended (`cachetool.history.runs.unended_step`).
    unended: StepStartRecord | None = None
    #: When that step raised rather than was killed: the exception its record keeps.
    failed: str | None = None

    def stale_note(self, fp: str) -> str | None:
        """Why `fp`'s entry is stale, or None."""
        return dict(self.stale).get(fp)

    @property
    def recorded(self) -> bool:
        return any(s.fingerprint == self.fingerprint and s.recorded for _, s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "fingerprint", "mode", "recorded"),
            "steps": [
                {"depth": d, **s.to_json(), "stale": self.stale_note(s.fingerprint) is not None}
                for d, s in self.steps
            ],
            **json_fields(self, "edges", "entry", "unended", "failed"),
        }


def lineage(
    root: str | os.PathLike[str],
    fingerprint: str,
    *,
    descendants: bool = False,
    all: bool = False,
    internal: bool = False,
    all_roots: bool = False,
) -> LineageView:
    """Where `fingerprint` (a unique prefix, an alias, a path or a cache file's name:
    `cachetool.cache.lookup.resolve`) comes from in the cache at `root`: the chain of recorded
    steps from its source(s); with `descendants`, the tree of what was made from it; with `all`,
    every branch of its dataset. `internal` keeps the calls `datasets` makes itself;
    `all_roots` reads the ledgers of every known cache root.

    The Python side of `cachetool lineage`."""
    from cachetool.cache.scan import scan_cache

    mode: LineageMode = "all" if all else "descendants" if descendants else "chain"
    root_abs = os.path.abspath(os.path.expanduser(os.fspath(root)))
    ledger = Ledger.load(root_abs, all_roots=all_roots)
    report = scan_cache(root, usage=ledger.usage())
    with named_elsewhere(Path(root_abs), fingerprint, "lineage"):
        return lineage_view(report, fingerprint, mode=mode, include_internal=internal, ledger=ledger)


def lineage_view(
    report: CacheReport,
    prefix: str,
    *,
    mode: LineageMode = "chain",
    include_internal: bool = False,
    ledger: Ledger | None = None,
) -> LineageView:
    """`lineage` for a cache already scanned (`report`), with its ledger when already loaded."""
    from cachetool.cache.lookup import resolve

    ledger = ledger or Ledger.load(report.root)
    graph = load_graph(ledger, include_internal=include_internal)
    got = resolve(prefix, report, ledger)
    fp = got.recorded_as(graph.recorded)
    if mode == "descendants":
        items = graph.descendants(fp)
    elif mode == "all":
        items = graph.forest(fp)
    else:
        items = [(0, x) for x in graph.ancestors(fp)]
    fps = [x for _, x in items]
    unended, failed = None, None
    if fp not in graph.recorded:
        from cachetool.history.runs import failed_step, unended_step

        unended = unended_step(ledger.records, fp)
        if unended is None and (raised := failed_step(ledger.records, fp)) is not None:
            unended, failed = raised
    return LineageView(
        unended=unended,
        failed=failed,
        stale=stale_notes(report.root, ledger, fps),
        fingerprint=fp,
        mode=mode,
        steps=tuple((d, graph.step(x)) for d, x in items),
        edges=tuple(sorted(graph.edges(fps))),
        entry=got.entry,
        warnings=ledger.warnings,
    )


def stale_notes(root: str | os.PathLike[str], ledger: Ledger, fps: list[str]) -> tuple[tuple[str, str], ...]:
    """The stale entries among `fps`, each with a few words of why: in `root` and in the other
    roots the ledger read (a `save_to_disk` folder a map after `load_from_disk` wrote in)."""
    from cachetool.history.explain.stale import stale_hits

    if not any(r.may_go_stale for r in ledger.steps(include_internal=True)):
        return ()
    view = ledger.view
    roots = dict.fromkeys([os.path.abspath(os.fspath(root)), *(os.fspath(r) for r in ledger.roots)])
    found = [s for r in roots for s in stale_hits(r, view=view, only=fps)]
    return tuple((s.fingerprint, _stale_note(s)) for s in found)


def _stale_note(s: StaleHit) -> str:
    if s.written_under:  # a `cache_file_name=` file loaded whatever its fingerprint
        return f"stale: written under {s.written_under}"
    if s.inputs and not s.changes and s.derived_from is None:  # a file its generator reads
        return "stale: a file it reads changed"
    return f"stale: made from {up.fingerprint}" if (up := s.derived_from) else "stale: code changed"


#: The fingerprint written inside a file, against the entry's: the same (`matches`; a shard of a
#: `num_proc` map holds `<fp>_00000_of_00002`), another one (`differs`), or none written (`none`).
FingerprintCheck = Literal["matches", "differs", "none"]


def fingerprint_check(entry: Entry, file: CacheFile) -> FingerprintCheck:
    """Whether the fingerprint recorded inside `file` is the one its entry is named after."""
    s = file.summary
    if s is None or s.fingerprint is None:
        return "none"
    fp = entry.fingerprint
    if fp and (s.fingerprint == fp or (file.shard and s.fingerprint.startswith(fp + "_"))):
        return "matches"
    return "differs"


@dataclass(frozen=True)
class EntryReport:
    """One entry (None: a fingerprint only the ledger records, no cache file holds it), the
    records of the steps that made it (oldest first), and whether it is pinned."""

    report: CacheReport
    fingerprint: str
    entry: Entry | None
    records: tuple[StepRecord, ...]
    pinned: bool = False
    #: What could not be read (a damaged pins file: the entry is shown as not pinned).
    warnings: tuple[str, ...] = ()
    #: When no cache file holds it: the latest record of gc removing it or verify quarantining it.
    removed: GcRecord | None = None
    #: Why the entry is stale (`stale: code changed`, `stale: made from FP`, ...), as lineage says, or None.
    stale: str | None = None
    #: When no record made it: the step that began to make it in a run killed (or still running)
    #: in it (`cachetool.history.runs.unended_step`).
    unended: StepStartRecord | None = None

    @property
    def features(self) -> dict[str, Any] | None:
        """The `features` of the first file that records them."""
        e = self.entry
        if e is None:
            return None
        return next((f.summary.features for f in e.files if f.summary and f.summary.features), None)

    def to_json(self) -> dict[str, Any]:
        """The `--json` document of `show` (schema in docs/listing.md)."""
        root = os.fsdecode(self.report.root)
        records = [r.to_json() for r in self.records]
        e = self.entry
        if e is None:
            return {
                "fingerprint": self.fingerprint,
                "kind": None,
                "root": root,
                "files": [],
                "records": records,
                "removed": self.removed.to_json() if self.removed is not None else None,
                "unended": self.unended.to_json() if self.unended is not None else None,
            }
        doc = e.to_json()
        doc["root"] = root
        doc["files"] = [f.to_json() for f in e.files]
        doc["schema"] = [{"name": n, "type": t} for n, t in e.columns]
        doc["features"] = self.features
        doc["records"] = records
        doc["pinned"] = self.pinned
        doc["stale"] = self.stale
        return doc


def show_entry(
    root: str | os.PathLike[str],
    fingerprint: str,
    *,
    progress: Callable[[str | os.PathLike[str], Ledger | bool], CacheReport] | None = None,
) -> EntryReport:
    """Everything known about the entry `fingerprint` names (a unique prefix, an alias, a path,
    a cache file's name: `cachetool.cache.lookup.resolve`) in the cache at `root`: its files
    and what each holds, and the records of the steps that made it. A fingerprint only the ledger
    records gives `entry=None` with those records. `progress` scans the cache in place of
    `scan_cache` (the command shows a progress bar). The Python side of `cachetool show`."""
    from cachetool.cache.locations import enclosing_root
    from cachetool.cache.lookup import Resolved, entry_at_path, resolve
    from cachetool.cache.pins import read_pins
    from cachetool.cache.scan import scan_cache
    from cachetool.errors import CachetoolError
    from cachetool.history.records.base import order_key
    from cachetool.history.runs import unended_step

    root_path = Path(os.fspath(root)).expanduser().resolve()
    with named_elsewhere(root_path, fingerprint, "show"):
        ledger = Ledger.load(root_path, follow=False)
        report = scan_cache(root, usage=ledger.usage()) if progress is None else progress(root, ledger)
        at_path = entry_at_path(report, fingerprint)  # a leftover or a lock has no fingerprint
        got = (
            Resolved(fingerprint, at_path)
            if at_path and not at_path.fingerprint
            else resolve(fingerprint, report, ledger)
        )
    entry = got.entry
    if entry is None:
        fp = got.fingerprint
        removed = next((g for g in reversed(ledger.gc_records()) if fp in g.fingerprints), None)
        made = tuple(ledger.for_result(fp))
        unended = None if made else unended_step(ledger.records, fp)
        return EntryReport(report, fp, None, made, removed=removed, unended=unended)
    # The records of the entry's fingerprints, and of the one named when its step wrote the
    # entry's files under another name.
    fps = dict.fromkeys(fp for fp in (entry.fingerprint, *entry.aliases, got.fingerprint) if fp)
    records = sorted((r for fp in fps for r in ledger.for_result(fp)), key=order_key)
    warnings: tuple[str, ...] = ()
    try:
        pinned = entry.pinned_in(frozenset(read_pins(enclosing_root(report.root))))
    except CachetoolError as e:
        pinned, warnings = False, (e.message,)
    stale = next((note for fp, note in stale_notes(root_path, ledger, list(fps)) if fp in fps), None)
    return EntryReport(report, got.fingerprint, entry, tuple(records), pinned, warnings, stale=stale)
