"""What the ledger says of one fingerprint: its lineage (`cachetool lineage`: the chain of
recorded steps from its sources, across roots, as `LineageView`) and its entry
(`cachetool show`: one entry from the disk and the ledger, as `EntryReport`). Both read the
ledger's steps indexed once (`cachetool.history.graph.StepGraph`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cachetool.history.graph import Step, StepGraph
from cachetool.history.ledger import Ledger, named_elsewhere
from cachetool.history.records.other import GcRecord
from cachetool.history.records.steps import StepRecord
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile, CacheReport, Entry
    from cachetool.history.explain.answer import StaleHit
    from cachetool.history.records.steps import StepStartRecord


def load_graph(
    root: str | os.PathLike[str] | Ledger,
    *,
    include_internal: bool = False,
    warnings: list[str] | None = None,
) -> StepGraph:
    """The steps of `root` (a loaded `Ledger`, or a root to load) as a graph, with the origins of
    parents recorded in other roots; `include_internal` keeps the calls `datasets` makes itself."""
    ledger = root if isinstance(root, Ledger) else Ledger.load(root)
    if warnings is not None:
        warnings.extend(ledger.warnings)
    return StepGraph(ledger, include_internal=True) if include_internal else ledger.view


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
