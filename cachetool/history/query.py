"""The answer of `cachetool lineage`: the steps around one fingerprint, from the lineage graph.

`lineage(root, fingerprint)` is the chain from its source(s) to it; `descendants=True` the tree
of what was made from it; `all=True` every branch of its dataset (the forest of its sources).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from cachetool.cache.lookup import KnownFingerprints
    from cachetool.cache.model import CacheReport, Entry
    from cachetool.history.ledger import Ledger
    from cachetool.history.records import StepStartRecord
    from cachetool.history.step import Step

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
    #: (`cachetool.history.explain.stale_hits`).
    stale: tuple[tuple[str, str], ...] = ()
    #: For a fingerprint no record explains: the step that began to make it in a run killed
    #: before the step ended (`cachetool.history.runs.unended_step`).
    unended: StepStartRecord | None = None

    def stale_note(self, fp: str) -> str | None:
        """Why `fp`'s entry is stale, or None."""
        return dict(self.stale).get(fp)

    @property
    def recorded(self) -> bool:
        return any(s.fingerprint == self.fingerprint and s.recorded for _, s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "mode": self.mode,
            "recorded": self.recorded,
            "steps": [
                {"depth": d, **s.to_json(), "stale": self.stale_note(s.fingerprint) is not None}
                for d, s in self.steps
            ],
            "edges": [list(e) for e in self.edges],
            "entry": self.entry.to_json() if self.entry is not None else None,
            "unended": None if self.unended is None else self.unended.to_json(),
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
    from cachetool.cache.lookup import resolve
    from cachetool.cache.scan import scan_cache
    from cachetool.errors import UnknownFingerprint
    from cachetool.history.index import UsageIndex
    from cachetool.history.ledger import Ledger
    from cachetool.history.narrow import narrow_report
    from cachetool.history.part import IndexedFingerprints, open_index

    mode: LineageMode = "all" if all else "descendants" if descendants else "chain"
    root_abs = os.path.abspath(os.path.expanduser(os.fspath(root)))
    con = None if all_roots else open_index(root_abs)
    report = None
    if con is not None:
        # A long-lived ledger: read only the records of the fingerprint's family, and scan only
        # the folders that can hold the name's entry (the whole cache when only a scan can tell),
        # with the usage of the index just opened, not a second.
        narrowed = narrow_report(root_abs, fingerprint, con)
        found = narrowed if narrowed is not None else scan_cache(root, usage=UsageIndex(con))
        known = IndexedFingerprints(con)
        try:
            got = resolve(fingerprint, found, recorded=known)
        except UnknownFingerprint:
            # A name this root does not record (a step of a saved folder made from it) needs
            # the other roots, and the whole scan.
            got = None
        if got is not None:
            e = got.entry
            named = {
                got.fingerprint,
                *((x for x in (e.fingerprint, *e.aliases) if x) if e is not None else ()),
            }
            ledger = Ledger.load_part(root_abs, named, down=mode != "chain", index=con)
            return lineage_view(
                found,
                fingerprint,
                mode=mode,
                include_internal=internal,
                ledger=ledger,
                recorded=known,
            )
        report = found if narrowed is None else None
    ledger = Ledger.load(root_abs, all_roots=all_roots)
    report = report or scan_cache(root, usage=ledger.usage())
    return lineage_view(report, fingerprint, mode=mode, include_internal=internal, ledger=ledger)


def lineage_view(
    report: CacheReport,
    prefix: str,
    *,
    mode: LineageMode = "chain",
    include_internal: bool = False,
    all_roots: bool = False,
    ledger: Ledger | None = None,
    recorded: KnownFingerprints | None = None,
) -> LineageView:
    """`lineage` for a cache already scanned (`report`), with its ledger when already loaded
    (`recorded`: every fingerprint of the root, when `ledger` holds a part of its records)."""
    from cachetool.cache.lookup import resolve
    from cachetool.history.graph import load_graph
    from cachetool.history.ledger import Ledger

    if ledger is None:
        ledger = Ledger.load(report.root, all_roots=all_roots)
    graph = load_graph(ledger, include_internal=include_internal)
    got = resolve(prefix, report, ledger, recorded=recorded)
    fp = got.recorded_as(graph.recorded)
    if mode == "descendants":
        items = graph.descendants(fp)
    elif mode == "all":
        items = graph.forest(fp)
    else:
        items = [(0, x) for x in graph.ancestors(fp)]
    fps = [x for _, x in items]
    unended = None
    if fp not in graph.recorded:
        from cachetool.history.part import step_starts
        from cachetool.history.runs import unended_step

        unended = unended_step(step_starts(report.root, ledger.records), fp)
    return LineageView(
        unended=unended,
        stale=_stale_notes(report.root, ledger, fps),
        fingerprint=fp,
        mode=mode,
        steps=tuple((d, graph.step(x)) for d, x in items),
        edges=tuple(sorted(graph.edges(fps))),
        entry=got.entry,
        warnings=ledger.warnings,
    )


def _stale_notes(root: str | os.PathLike[str], ledger: Ledger, fps: list[str]) -> tuple[tuple[str, str], ...]:
    """The stale entries among `fps`, each with a few words of why: in `root` and in the other
    roots the ledger read (a `save_to_disk` folder a map after `load_from_disk` wrote in)."""
    from cachetool.history.explain import load_view, stale_hits

    view = load_view(ledger)
    roots = dict.fromkeys([os.path.abspath(os.fspath(root)), *(os.fspath(r) for r in ledger.roots)])
    found = [s for r in roots for s in stale_hits(r, view=view, only=fps)]
    return tuple(
        (
            s.fingerprint,
            f"stale: made from {up.fingerprint}" if (up := s.derived_from) else "stale: code changed",
        )
        for s in found
    )
