"""What `cachetool report` shows, as plain data (no HTML: `cachetool.report.html`): gathered from
the scan, the ledger, verify and the leftovers gc would remove."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.layout import LEFTOVER_KINDS, Kind
from cachetool.formatting import iso_time
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.history.records.steps import StepRecord


@dataclass(frozen=True)
class Tile:
    """One rectangle of the treemap: the root, a dataset folder, or an entry, with what it holds."""

    label: str
    size: int
    kind: str  # an entry's kind; "dataset" or "root" for folders
    age: float | None = None  # seconds since last use, entries only
    rows: int | None = None
    fingerprint: str | None = None
    children: tuple[Tile, ...] = ()


@dataclass(frozen=True)
class Node:
    """One recorded fingerprint of the lineage graph, with what a click shows."""

    fingerprint: str
    operation: str  # "map"
    details: Mapping[str, Any]  # the step as `cachetool lineage --json` gives it


@dataclass(frozen=True)
class SiteRun:
    """What one call site did in one run: hits, misses and the seconds the misses took."""

    site: str  # "pipeline.py:42 map"
    run_time: float  # the run's first record, seconds since the epoch
    hits: int
    misses: int
    seconds_computing: float  # what the misses took
    seconds_lost: float  # what the misses took when an earlier run had computed this call site

    @property
    def hit_rate(self) -> float:
        return self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0


@dataclass(frozen=True)
class Problem:
    """A leftover or a verify finding, one row of the report's last table."""

    source: str  # "leftover" | "verify"
    severity: str  # "error" | "warning" | "info"
    path: str
    what: str


@dataclass(frozen=True)
class ReportData:
    root: Path
    generated_at: float
    tree: Tile  # the root: its dataset folders and the entries at its top
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]  # (parent, child) fingerprints
    site_runs: tuple[SiteRun, ...]
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def size(self) -> int:
        return self.tree.size

    @property
    def dataset_count(self) -> int:
        return sum(t.kind == "dataset" for t in (self.tree, *self.tree.children))

    @property
    def entry_count(self) -> int:
        tops = self.tree.children
        return sum(len(t.children) if t.kind == "dataset" else 1 for t in tops)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": os.fsdecode(self.root),
            "generated_at": iso_time(self.generated_at),
            "datasets": self.dataset_count,
            "entries": self.entry_count,
            "size": self.size,
            "steps": len(self.nodes),
            "edges": len(self.edges),
            "call_sites": len({s.site for s in self.site_runs}),
            "problems": [json_fields(p) for p in self.problems],
        }


def build_report(
    root: str | os.PathLike[str], *, verify: bool = True, now: float | None = None
) -> ReportData:
    """Gather everything `cachetool report` draws for the cache `root`.

    `verify` runs the header checks of `cachetool verify --stale` (no deep read) to list
    findings: results of code edited since they were computed are errors too."""
    import time

    from cachetool.cache.scan import scan_cache
    from cachetool.history.ledger import Ledger
    from cachetool.history.lineage_view import load_graph
    from cachetool.maintenance.liveness import scan_in_use

    now = time.time() if now is None else now
    ledger = Ledger.load(Path(root).expanduser().resolve())
    report = scan_cache(root, usage=ledger.usage(), liveness=scan_in_use)
    warnings: list[str] = [str(w) for w in report.warnings]
    graph = load_graph(ledger, warnings=warnings)
    nodes, edges = _lineage(graph)
    site_runs = _site_runs(graph.steps)
    problems = [
        Problem("leftover", "warning", os.fsdecode(e.path), f"{e.kind_str}, {e.size_str}")
        for e in report.entries
        if e.kind in LEFTOVER_KINDS
    ]
    if verify:
        from cachetool.maintenance.verify import verify_cache

        listed = {p.path for p in problems}  # verify speaks of leftovers too: each is listed once
        for f in verify_cache(report.root, ledger=ledger, stale=True).findings:
            if os.fsdecode(f.path) not in listed:
                problems.append(Problem("verify", f.severity.value, os.fsdecode(f.path), f.problem))
    return ReportData(
        report.root,
        now,
        _tree(report, now),
        tuple(nodes),
        tuple(edges),
        tuple(site_runs),
        tuple(problems),
        tuple(warnings),
    )


def _tree(report: Any, now: float) -> Tile:
    """The root's tile: a tile per dataset folder (its entries inside), then one per entry at the
    top of the root. A root that is itself a dataset folder (a `save_to_disk` folder) is one."""
    root = os.fsdecode(report.root)
    names = {os.fsdecode(d.path): d.name for d in report.datasets}
    folders: dict[str, list[Tile]] = {folder: [] for folder in names}
    for e in report.entries:
        label = f"{e.kind.value} {e.fingerprint[:8]}" if e.fingerprint else e.path.name
        if e.split and e.kind in (Kind.SOURCE, Kind.SAVED):
            label = f"{e.split} ({label})"
        age = None if e.used is None else max(0.0, now - e.used)
        tile = Tile(label, e.size, e.kind.value, age, e.rows, e.fingerprint)
        folders.setdefault(os.fsdecode(e.dataset_dir) if e.dataset_dir else root, []).append(tile)
    tops = [
        Tile(
            names.get(folder, os.path.basename(folder)),
            sum(t.size for t in tiles),
            "dataset",
            children=tuple(tiles),
        )
        for folder, tiles in sorted(folders.items())
        if folder != root
    ]
    kind = "dataset" if root in names else "root"
    label = names.get(root, os.path.basename(root) or root)
    return Tile(label, report.size, kind, children=(*folders.get(root, ()), *tops))


def _lineage(graph: Any) -> tuple[list[Node], list[tuple[str, str]]]:
    from cachetool.history.explain.reasons import _repr

    fps = sorted(graph.fingerprints, key=lambda fp: (getattr(graph.origin(fp), "time", 0.0), fp))
    nodes = []
    for fp in fps:
        step = graph.step(fp)
        op = step.operation or step.type or "?"
        details = step.to_json()
        # every hashed argument as a short string (its repr when small, else its type)
        hashed = step.record.args if step.record is not None else {}
        details["args"] = {**{name: _repr(a) for name, a in hashed.items()}, **details["args"]}
        nodes.append(Node(fp, op, details))
    known = set(fps)
    edges = [(p, c) for p, c in graph.edges(fps) if p in known and c in known]
    return nodes, edges


def _site_runs(records: Iterable[StepRecord]) -> list[SiteRun]:
    """Per run and call site: hits, misses and the time the misses took. Time is *lost* when an
    earlier run had already computed that call site: the work was done before and done again."""
    runs: dict[str, float] = {}
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for rec in records:
        if rec.type != "transform" or rec.internal:
            continue
        cache = rec.cache
        if cache not in ("hit", "miss", "partial"):
            continue
        run = rec.run
        t = rec.time
        runs[run] = min(runs.get(run, t), t)
        cs = rec.call_site
        file = os.path.basename((cs.file if cs else None) or "?")
        name = f"{file}:{(cs.line if cs else None) or '?'} {rec.operation}"
        row = acc[(run, name)]
        if cache == "hit":
            row[0] += 1
        else:
            row[1] += 1
            row[2] += rec.duration
    out: list[SiteRun] = []
    computed: set[str] = set()  # call sites an earlier run computed
    for (run, site), (h, m, s) in sorted(acc.items(), key=lambda kv: (runs[kv[0][0]], kv[0][1])):
        out.append(SiteRun(site, runs[run], int(h), int(m), s, s if site in computed else 0.0))
        if m:
            computed.add(site)
    return out
