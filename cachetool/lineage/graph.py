"""The lineage graph: fingerprints as nodes, recorded transform calls as edges.

Built from ledger records (`cachetool.lineage.ledger`) of one or more roots; lineage crosses roots
(a saved folder's `load_from_disk` record names the fingerprint in `state.json`, whose own record
lives in the cache root it was computed in). Queries: the chain from the source(s) to a
fingerprint, the tree of its descendants, and the whole forest of a dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetool.formatting import human_size, iso_time
from cachetool.lineage.ledger import Record, known_roots, read_records

#: Arguments that say nothing a reader needs in a one-line summary.
_QUIET_ARGS = frozenset({"fingerprint_name", "function", "fn_kwargs", "new_fingerprint"})


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
    function: Mapping[str, Any] | None = None
    args: tuple[tuple[str, str], ...] = ()  # (name, short repr) of the small, telling arguments
    call_site: Mapping[str, Any] | None = None
    hits: int = 0
    misses: int = 0
    runs: int = 0
    cache: str | None = None  # of the latest record: hit | partial | miss | none
    files: tuple[FileNow, ...] = ()
    in_memory: bool = False
    fingerprint_given: bool = False
    random_fallback: Mapping[str, Any] | None = None
    source: Mapping[str, Any] | None = None
    root: str | None = None
    split: str | None = None
    last_used: float | None = None
    saved_to: tuple[str, ...] = ()  # save_to_disk folders that hold this fingerprint
    deleted: str | None = None  # "deleted by gc <time>: <reason>" when gc removed its files
    record: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def wrote_files(self) -> bool:
        return bool(self.files)

    @property
    def function_str(self) -> str:
        fn = self.function
        if not fn:
            return ""
        name = str(fn.get("qualname") or "?")
        file = fn.get("file")
        if file:
            return f"{name} @ {os.path.basename(str(file))}:{fn.get('line')}"
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
        return {
            "fingerprint": self.fingerprint,
            "recorded": self.recorded,
            "parents": list(self.parents),
            "type": self.type,
            "operation": self.operation,
            "transform": self.transform,
            "function": dict(self.function) if self.function else None,
            "args": dict(self.args),
            "call_site": dict(self.call_site) if self.call_site else None,
            "runs": self.runs,
            "hits": self.hits,
            "misses": self.misses,
            "cache": self.cache,
            "files": [{"path": f.path, "size": f.size, "exists": f.exists} for f in self.files],
            "in_memory": self.in_memory,
            "fingerprint_given": self.fingerprint_given,
            "random_fallback": dict(self.random_fallback) if self.random_fallback else None,
            "source": dict(self.source) if self.source else None,
            "root": self.root,
            "split": self.split,
            "used": iso_time(self.last_used),
            "saved_to": list(self.saved_to),
            "deleted": self.deleted,
        }


class LineageGraph:
    """Every recorded fingerprint with its origin and children."""

    def __init__(self, records: Iterable[Record], *, include_internal: bool = False) -> None:
        self._origin: dict[str, Record] = {}
        self._stats: dict[str, list[float]] = {}  # fp -> [runs, hits, misses, last_used]
        self._children: dict[str, list[str]] = {}
        self._saved: dict[str, list[str]] = {}
        self._removed: dict[str, Record] = {}  # fp -> the latest gc record that removed its files
        self.records: list[Record] = []
        for rec in records:
            if rec.get("internal") and not include_internal:
                continue
            if rec.get("type") == "gc":
                for gone in (rec.get("fingerprint"), *(rec.get("aliases") or ())):
                    if isinstance(gone, str):
                        self._removed[gone] = rec
                continue
            self.records.append(rec)
            fp = rec.get("result")
            if not isinstance(fp, str):
                continue
            parents = [p for p in rec.get("parents") or () if isinstance(p, str)]
            t = rec.get("time")
            when = float(t) if isinstance(t, (int, float)) else 0.0
            st = self._stats.setdefault(fp, [0, 0, 0, 0.0])
            st[3] = max(st[3], when)
            if rec.get("type") == "save":
                path = (rec.get("source") or {}).get("path")
                if isinstance(path, str) and path not in self._saved.setdefault(fp, []):
                    self._saved[fp].append(path)
                continue
            if rec.get("type") == "checkpoint" or fp in parents:
                continue  # says nothing about where fp comes from
            st[0] += 1
            st[1] += rec.get("cache") == "hit"
            st[2] += rec.get("cache") in ("miss", "partial")
            self._origin[fp] = rec  # records come oldest first: the latest origin wins
        for fp, rec in self._origin.items():
            for p in rec.get("parents") or ():
                if isinstance(p, str) and p != fp:
                    kids = self._children.setdefault(p, [])
                    if fp not in kids:
                        kids.append(fp)

    # -- lookups --------------------------------------------------------------------------------
    @property
    def fingerprints(self) -> set[str]:
        """Every fingerprint a record names, as a result or as a parent."""
        out = set(self._origin) | set(self._stats)
        for rec in self._origin.values():
            out.update(p for p in rec.get("parents") or () if isinstance(p, str))
        return out

    def is_recorded(self, fp: str) -> bool:
        return fp in self._origin

    def origin(self, fp: str) -> Record | None:
        """The latest record that made `fp` from its parents (None for an unrecorded fingerprint)."""
        return self._origin.get(fp)

    def parents(self, fp: str) -> tuple[str, ...]:
        rec = self._origin.get(fp)
        return tuple(p for p in (rec.get("parents") or ()) if isinstance(p, str)) if rec else ()

    def children(self, fp: str) -> tuple[str, ...]:
        return tuple(self._children.get(fp, ()))

    def _deleted(self, fp: str) -> str | None:
        """What gc said when it removed `fp`, while the files it removed are still gone."""
        from cachetool.lineage.gclog import describe, paths_gone

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
        for f in rec.get("files") or ():
            if isinstance(f, Mapping) and isinstance(f.get("path"), str):
                try:
                    size: int | None = os.stat(f["path"]).st_size
                except OSError:
                    size = None
                files.append(FileNow(f["path"], size))
        args = []
        for name, a in sorted((rec.get("args") or {}).items()):
            if name in _QUIET_ARGS or not isinstance(a, Mapping) or a.get("repr") is None:
                continue
            args.append((str(name), str(a["repr"])))
        stats = st or [0, 0, 0, 0.0]
        return Step(
            fingerprint=fp,
            recorded=True,
            parents=self.parents(fp),
            type=rec.get("type"),
            operation=rec.get("operation"),
            transform=rec.get("transform"),
            function=rec.get("function") if isinstance(rec.get("function"), Mapping) else None,
            args=tuple(args),
            call_site=rec.get("call_site") if isinstance(rec.get("call_site"), Mapping) else None,
            runs=int(stats[0]),
            hits=int(stats[1]),
            misses=int(stats[2]),
            cache=rec.get("cache"),
            files=tuple(files),
            in_memory=bool(rec.get("in_memory")),
            fingerprint_given=bool(rec.get("fingerprint_given")),
            random_fallback=rec.get("random_fallback") or None,
            source=rec.get("source") if isinstance(rec.get("source"), Mapping) else None,
            root=rec.get("root") or rec.get("_root"),
            split=rec.get("split"),
            last_used=stats[3] or None,
            saved_to=tuple(self._saved.get(fp, ())),
            record=rec,
            deleted=self._deleted(fp),
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

    def chain(self, fp: str) -> list[Step]:
        """The steps from the source(s) to `fp`; an unrecorded ancestor ends its branch."""
        return [self.step(x) for x in self.ancestors(fp)]

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

    def matching(self, prefix: str) -> list[str]:
        """Recorded fingerprints that start with `prefix` (exact match alone if there is one)."""
        fps = self.fingerprints
        if prefix in fps:
            return [prefix]
        return sorted(x for x in fps if x.startswith(prefix))


def lineage_roots(root: str | os.PathLike[str]) -> list[Path]:
    """The roots whose ledgers a lineage query reads: `root` first, then every known root that
    still exists (a parent may live in another root)."""
    first = Path(os.path.abspath(os.fspath(root)))
    out = [first]
    for r in known_roots():
        p = Path(r)
        if p != first and p.is_dir():
            out.append(p)
    return out


def load_graph(
    root: str | os.PathLike[str], *, include_internal: bool = False, warnings: list[str] | None = None
) -> LineageGraph:
    """The lineage graph of `root` and of every root it may lead to."""
    records = read_records(
        lineage_roots(root),
        include_internal=include_internal,
        warn=warnings.append if warnings is not None else None,
    )
    return LineageGraph(records, include_internal=include_internal)
