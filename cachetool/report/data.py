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
    """One rectangle of the treemap: the root, a dataset folder, or an entry."""

    id: str
    parent: str  # "" for the root
    label: str
    size: int
    kind: str  # an entry's kind; "dataset" or "root" for folders
    age: float | None  # seconds since last use, entries only
    rows: int | None = None
    fingerprint: str | None = None


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
    tiles: tuple[Tile, ...]
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]  # (parent, child) fingerprints
    site_runs: tuple[SiteRun, ...]
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def size(self) -> int:
        return sum(t.size for t in self.tiles if t.parent == "")

    @property
    def dataset_count(self) -> int:
        return sum(t.kind == "dataset" for t in self.tiles)

    @property
    def entry_count(self) -> int:
        return sum(t.kind not in ("dataset", "root") for t in self.tiles)

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
    from cachetool.history.query import load_graph
    from cachetool.maintenance.liveness import scan_in_use

    now = time.time() if now is None else now
    ledger = Ledger.load(Path(root).expanduser().resolve())
    report = scan_cache(root, usage=ledger.usage(), liveness=scan_in_use)
    warnings: list[str] = [str(w) for w in report.warnings]
    tiles = _tiles(report, now)
    graph = load_graph(ledger, warnings=warnings)
    nodes, edges = _lineage(graph)
    site_runs = _site_runs(graph.records)
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
        tuple(tiles),
        tuple(nodes),
        tuple(edges),
        tuple(site_runs),
        tuple(problems),
        tuple(warnings),
    )


def _tiles(report: Any, now: float) -> list[Tile]:
    root_id = os.fsdecode(report.root)
    names = {os.fsdecode(d.path): d.name for d in report.datasets}
    # a root that is itself a dataset folder (a `save_to_disk` folder) is counted and named as one
    kind = "dataset" if root_id in names else "root"
    tiles = [
        Tile(root_id, "", names.get(root_id, os.path.basename(root_id) or root_id), report.size, kind, None)
    ]
    folders: dict[str, list[Any]] = defaultdict(list)
    for e in report.entries:
        folder = os.fsdecode(e.dataset_dir) if e.dataset_dir else root_id
        folders[folder].append(e)
    for d in report.datasets:
        folders.setdefault(os.fsdecode(d.path), [])
    for folder, entries in sorted(folders.items()):
        parent = root_id
        if folder != root_id:
            parent = folder
            size = sum(e.size for e in entries)
            tiles.append(
                Tile(folder, root_id, names.get(folder, os.path.basename(folder)), size, "dataset", None)
            )
        for e in entries:
            used = e.used
            label = f"{e.kind.value} {e.fingerprint[:8]}" if e.fingerprint else e.path.name
            if e.split and e.kind in (Kind.SOURCE, Kind.SAVED):
                label = f"{e.split} ({label})"
            tiles.append(
                Tile(
                    f"{folder}\x00{os.fsdecode(e.path)}",
                    parent,
                    label,
                    e.size,
                    e.kind.value,
                    None if used is None else max(0.0, now - used),
                    e.rows,
                    e.fingerprint,
                )
            )
    return tiles


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
