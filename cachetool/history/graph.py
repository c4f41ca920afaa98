"""The lineage graph: fingerprints as nodes, recorded transform calls as edges.

Built from ledger records (`cachetool.history.ledger`) of one or more roots; lineage crosses roots
(a saved folder's `load_from_disk` record names the fingerprint in `state.json`, whose own record
lives in the cache root it was computed in). Queries: the chain from the source(s) to a
fingerprint, the tree of its descendants, and the whole forest of a dataset.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Container, Iterable
from pathlib import Path

from cachetool.history.hosts import where_sentence
from cachetool.history.ledger import Ledger
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import GcRecord
from cachetool.history.records.steps import SaveRecord, StepRecord
from cachetool.history.step import FileNow, Step

#: Arguments that say nothing a reader needs in a one-line summary.
_QUIET_ARGS = frozenset({"fingerprint_name", "function", "new_fingerprint"})


def _count_run(st: list[float], rec: StepRecord) -> None:
    """One more run of a fingerprint's origin in its stats: ``[runs, hits, misses, last_used]``."""
    st[0] += 1
    st[1] += rec.cache == "hit"
    st[2] += rec.computed


class LineageGraph:
    """Every recorded fingerprint with its origin and children.

    `root` is the root the graph was asked about: steps recorded in another root are marked
    `foreign` (and keep the root they were read from)."""

    def __init__(
        self, records: Iterable[LedgerRecord], *, include_internal: bool = False, root: str | None = None
    ) -> None:
        self.root = root
        self._origin: dict[str, StepRecord] = {}
        self._stats: dict[str, list[float]] = {}  # fp -> [runs, hits, misses, last_used]
        self._children: dict[str, list[str]] = {}
        self._saved: dict[str, list[str]] = {}
        self._removed: dict[str, GcRecord] = {}  # fp -> the latest gc record that removed its files
        self._internal: dict[str, StepRecord] = {}  # fp -> its latest internal origin, when hidden
        self._hosts: dict[str, list[StepRecord]] = {}  # fp -> its origins from hosts not seen before
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
                else:
                    self._add_step(rec)
        self._adopt_internal_files(made_file)
        self._bridge_internal()
        self._link_children()

    def _add_step(self, rec: StepRecord) -> None:
        """Count a shown step (records come oldest first: the latest origin of a fingerprint wins)."""
        self.records.append(rec)
        fp = rec.result
        if fp is None:
            return
        st = self._stats.setdefault(fp, [0, 0, 0, 0.0])
        st[3] = max(st[3], rec.time)
        if isinstance(rec, SaveRecord):
            path = rec.saved_path
            if path is not None and path not in self._saved.setdefault(fp, []):
                self._saved[fp].append(path)
            return
        if not rec.is_origin:
            return  # says nothing about where fp comes from
        _count_run(st, rec)
        self._origin[fp] = rec
        seen = self._hosts.setdefault(fp, [])
        if not any(r.host == rec.host and r.computed == rec.computed for r in seen):
            seen.append(rec)

    def _adopt_internal_files(self, made_file: dict[str, list[StepRecord]]) -> None:
        """A file a hidden internal step wrote (`cast_column` writes through an internal `map`) is
        still a cache entry: its step stays reachable, marked internal, with every run that wrote
        or reused it (the latest run may well have loaded it from the cache)."""
        for fp, made in made_file.items():
            if fp in self._origin:
                continue
            self._origin[fp] = made[-1]
            st = self._stats.setdefault(fp, [0, 0, 0, 0.0])
            for rec in made:
                _count_run(st, rec)
                st[3] = max(st[3], rec.time)

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
                self._origin[fp] = dataclasses.replace(rec, parents=tuple(dict.fromkeys(parents)))

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
        out = set(self._origin) | set(self._stats)
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
        from cachetool.history.gclog import describe, paths_gone

        rec = self._removed.get(fp)
        return describe(rec) if rec is not None and paths_gone(rec) else None

    def step(self, fp: str) -> Step:
        """What the records say about `fp`, with its files checked on disk now."""
        rec = self._origin.get(fp)
        st = self._stats.get(fp)
        if rec is None:
            return Step(
                fp, recorded=False, last_used=st[3] if st else None, saved_to=tuple(self._saved.get(fp, ()))
            )
        files = []
        for f in rec.files:
            path = rec.located(f.path)  # the root may have been moved since
            try:
                size: int | None = os.stat(path).st_size
            except OSError:
                size = None
            files.append(FileNow(path, size))
        args = [
            (name, a.repr)
            for name, a in sorted(rec.args.items())
            # An empty `fn_kwargs` says nothing; a non-empty one tells branches apart.
            if name not in _QUIET_ARGS and a.repr is not None and not (name == "fn_kwargs" and a.repr == "{}")
        ]
        stats = st or [0, 0, 0, 0.0]
        root = rec.where or None
        return Step(
            fingerprint=fp,
            recorded=True,
            parents=self.parents(fp),
            type=rec.type,
            operation=rec.operation,
            transform=rec.transform,
            function=rec.function,
            args=tuple(args),
            call_site=rec.call_site,
            runs=int(stats[0]),
            hits=int(stats[1]),
            misses=int(stats[2]),
            cache=rec.cache,
            files=tuple(files),
            in_memory=rec.in_memory,
            fingerprint_given=rec.fingerprint_given,
            random_fallback=rec.random_fallback,
            source=rec.source,
            root=root,
            foreign=bool(self.root and rec.read_from and Path(rec.read_from) != Path(self.root)),
            split=rec.split,
            internal=rec.internal,
            last_used=stats[3] or None,
            saved_to=tuple(self._saved.get(fp, ())),
            record=rec,
            deleted=self._deleted(fp),
            where=where_sentence(self._hosts.get(fp, ())),
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
    all_roots: bool = False,
) -> LineageGraph:
    """The lineage graph of `root` (a loaded `Ledger`, or a root to load), with the origins of
    parents recorded in other roots; every known root with `all_roots`."""
    ledger = root if isinstance(root, Ledger) else Ledger.load(root, all_roots=all_roots)
    if warnings is not None:
        warnings.extend(ledger.warnings)
    return LineageGraph(ledger.records, include_internal=include_internal, root=os.fspath(ledger.root))
