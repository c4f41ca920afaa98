"""Planning eviction (`--older-than`, `--max-size`, `--dataset`, named entries): whole units only.

A unit is every shard of a fingerprint together, a saved DatasetDict folder as one, or the
source splits of a builder folder together with its `dataset_info.json` (which goes first, so
`datasets` prepares the folder again instead of trusting one with holes). Pinned entries and
their recorded ancestors, `--keep` and its ancestors, and (without `--include-sources`) sources
and saved datasets are protected; so is anything a refusal keeps (in use, too young, not yours).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cache import layout
from cachetool.cache.layout import DATA_KINDS, Kind
from cachetool.formatting import compact_age, compact_duration, human_size
from cachetool.maintenance.gc.plan import GcItem, KeptBecause, Refusal, Target
from cachetool.maintenance.gc.rules import KEPT_BECAUSE, Planner

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile
    from cachetool.cache.scan import Entry
    from cachetool.history.ledger import Ledger

#: Kinds kept unless `--include-sources`: what cannot be computed again from the cache alone.
SOURCE_LIKE = frozenset({Kind.SOURCE, Kind.SAVED, Kind.ARROW})
#: Kinds an entry named on the command line may be evicted as.
EVICTABLE = frozenset({Kind.DERIVED, Kind.INDICES, Kind.SHARDS}) | SOURCE_LIKE


@dataclass
class _Unit:
    key: Path
    kind: Kind
    members: list[Entry]
    targets: tuple[Target, ...]
    size: int
    files: int
    used: float | None
    newest: float | None
    label: str | None

    @property
    def fingerprints(self) -> set[str]:
        return {fp for e in self.members for fp in (e.fingerprint, *e.aliases) if fp}

    @property
    def primary(self) -> Entry:
        return self.members[0]


@dataclass(frozen=True)
class _Protected:
    """Why a unit must stay: counted as `because`, shown in the skips as `why`."""

    because: KeptBecause
    why: Refusal


class EvictionPlanner(Planner):
    """The eviction steps of a plan."""

    def resolve_protections(self) -> None:
        """Pins, `--keep` and their recorded ancestors (the one naming rule for `--keep`:
        ambiguous is an error; a name nothing matches is only warned about)."""
        from cachetool.cache.lookup import resolve
        from cachetool.errors import UnknownFingerprint

        parents = self.parents
        recorded = [*parents, *(x for v in parents.values() for x in v)]
        self.keep_fps: set[str] = set()
        for p in self.o.keep:
            try:
                got = resolve(p, self.report, recorded=recorded)
            except UnknownFingerprint:
                self.warnings.append(f"--keep {p}: no entry or recorded fingerprint matches")
                continue
            e = got.entry
            self.keep_fps |= {
                got.fingerprint,
                *((fp for fp in (e.fingerprint, *e.aliases) if fp) if e else ()),
            }
        self.pin_ancestors = ancestors(sorted(self.pins), parents)
        self.keep_ancestors = ancestors(sorted(self.keep_fps), parents)
        self._units: list[_Unit] = []

    def units(self) -> list[_Unit]:
        entries = self.report.entries
        meta_by_dir = {d.path: d.meta_files for d in self.report.datasets}
        out: list[_Unit] = []
        for key in sorted({e.unit or e.path for e in entries if e.kind == Kind.SAVED}):
            if key == self.root:
                continue  # a saved folder given as the root: never remove the root
            members = [e for e in entries if e.path == key or key in e.path.parents]
            members.sort(key=lambda e: (e.kind != Kind.SAVED, os.fsdecode(e.path)))
            metas = [f for d, fs in meta_by_dir.items() if d == key or key in d.parents for f in fs]
            out.append(
                _unit(key, Kind.SAVED, members, [f for e in members for f in e.files] + metas, folder=True)
            )
        by_source_dir: dict[Path, list[Entry]] = {}
        for e in entries:
            if e.kind == Kind.SOURCE and e.dataset_dir is not None:
                by_source_dir.setdefault(e.dataset_dir, []).append(e)
        for d, members in sorted(by_source_dir.items()):
            # dataset_info.json goes first: without it datasets prepares again rather than
            # trusting a folder whose splits are half gone.
            metas = sorted(meta_by_dir.get(d, ()), key=lambda f: f.name != layout.DATASET_INFO)
            out.append(_unit(d, Kind.SOURCE, members, [*metas, *(f for e in members for f in e.files)]))
        for e in entries:
            if e.kind in (Kind.DERIVED, Kind.INDICES, Kind.SHARDS, Kind.ARROW):
                out.append(_unit(e.path, e.kind, [e], list(e.files)))
        return out

    def protection(self, u: _Unit) -> _Protected | None:
        """Why a unit must stay, or None."""
        fps = u.fingerprints
        if fps & self.pins:
            return _Protected(KeptBecause.PINNED, Refusal("pinned", "pinned (cachetool unpin to release)"))
        hit = next((fp for fp in sorted(fps) if fp in self.pin_ancestors), None)
        if hit:
            why = Refusal("pinned", f"ancestor of pinned {self.pin_ancestors[hit]}")
            return _Protected(KeptBecause.PINNED_ANCESTOR, why)
        if fps & self.keep_fps:
            return _Protected(KeptBecause.KEEP, Refusal("keep", "kept by --keep"))
        hit = next((fp for fp in sorted(fps) if fp in self.keep_ancestors), None)
        if hit:
            return _Protected(
                KeptBecause.KEEP, Refusal("keep", f"ancestor of --keep {self.keep_ancestors[hit]}")
            )
        if u.kind in SOURCE_LIKE and not self.o.include_sources:
            why = Refusal("source", "source split or saved dataset (pass --include-sources)")
            return _Protected(KeptBecause.SOURCES, why)
        pids: set[int] = set()
        for e in u.members:
            pids |= self.file_pids(e.files)
        if u.kind == Kind.SAVED:
            pids |= self.in_use.pids_under(u.key)
        uids = [f.uid for e in u.members for f in e.files]
        refused = self.refusal(uids, u.newest, pids)
        return None if refused is None else _Protected(KEPT_BECAUSE[refused.code], refused)

    def evictions(self, explicit: list[Entry] | None) -> dict[Path, KeptBecause]:
        """Plan evictions; returns, per unit key, why a unit that stays stays (for the sentence).
        `explicit`: the evictable entries named on the command line, None when none were named
        (an empty list when every name was refused: then nothing is in scope)."""
        o = self.o
        units = self._units = self.units()
        explicit_keys = {_unit_key_of(e) for e in explicit or ()}
        scoped = self.scoped(units, explicit_keys if explicit is not None else None)
        scoped_keys = {u.key for u in scoped}
        protected = {u.key: self.protection(u) for u in scoped}
        why_kept: dict[Path, KeptBecause] = {
            u.key: KeptBecause.OUTSIDE for u in units if u.key not in scoped_keys
        }
        selected: list[_Unit] = []
        if o.older_than is not None:
            for u in scoped:
                if u.used is not None and self.now - u.used > o.older_than:
                    selected.append(u)
                else:
                    why_kept[u.key] = KeptBecause.RECENT
        elif o.max_size is None:
            selected = list(scoped)
        chosen: list[_Unit] = []
        for u in selected:
            p = protected[u.key]
            if p is None:
                chosen.append(u)
            else:
                why_kept[u.key] = p.because
                self.protected_skip(u, p.why, explicit_keys)
        by_size: set[Path] = set()
        if o.max_size is not None:
            selected_keys = {u.key for u in selected}
            rest = [u for u in scoped if u.key not in selected_keys]
            by_size = self.fit_under(o.max_size, rest, chosen, protected, why_kept, explicit_keys)
        for u in _outermost(chosen):
            self.add(self._evict_item(u, by_size=u.key in by_size))
        return why_kept

    def scoped(self, units: list[_Unit], explicit_keys: set[Path] | None) -> list[_Unit]:
        """The units named on the command line (all without names), of `--dataset` if given."""
        scoped = units if explicit_keys is None else [u for u in units if u.key in explicit_keys]
        if self.o.datasets:
            from cachetool.cache.query import compile_filter

            tests = [compile_filter(f"dataset={name}") for name in self.o.datasets]
            scoped = [u for u in scoped if any(t(e, self.now) for e in u.members for t in tests)]
        return scoped

    def fit_under(
        self,
        max_size: int,
        rest: list[_Unit],
        chosen: list[_Unit],
        protected: Mapping[Path, _Protected | None],
        why_kept: dict[Path, KeptBecause],
        explicit_keys: set[Path],
    ) -> set[Path]:
        """Choose least recently used units of `rest` (adding them to `chosen`) until the cache
        fits under `max_size`; returns the keys chosen for size."""
        leftover_bytes = sum(i.size for i in self.items if i.scope == "root")
        current = self.report.size - leftover_bytes - sum(u.size for u in _outermost(chosen))
        by_size: set[Path] = set()
        rest = sorted(
            rest, key=lambda u: (u.used if u.used is not None else 0.0, -u.size, os.fsdecode(u.key))
        )
        for u in rest:
            if current <= max_size:
                why_kept.setdefault(u.key, KeptBecause.FITS)
                continue
            p = protected[u.key]
            if p is not None:
                why_kept[u.key] = p.because
                self.protected_skip(u, p.why, explicit_keys)
                continue
            if any(c.kind == Kind.SAVED and c.key in u.key.parents for c in chosen):
                continue
            # A saved folder holds entries chosen before it (a map's cache file written into
            # it): their bytes are in its size already.
            current += sum(c.size for c in chosen if u.kind == Kind.SAVED and u.key in c.key.parents)
            chosen.append(u)
            by_size.add(u.key)
            current -= u.size
            why_kept.pop(u.key, None)
        if current > max_size:
            self.warnings.append(
                f"the cache stays above {human_size(max_size)} ({human_size(current)}): the rest is protected"
            )
        return by_size

    def protected_skip(self, u: _Unit, why: Refusal, explicit_keys: set[Path]) -> None:
        # Sources and saved datasets stay by default; listing each of them would bury the skips
        # that matter (pinned, in use, too young) unless the user named them.
        if u.kind in SOURCE_LIKE and not self.o.include_sources and u.key not in explicit_keys:
            return
        self.skip(u.primary, why, path=u.key, size=u.size)

    def _evict_item(self, u: _Unit, by_size: bool = False) -> GcItem:
        o = self.o
        ago = f" (last used {compact_age(self.now - u.used)} ago)" if u.used is not None else ""
        if by_size and o.max_size is not None:
            reason = f"least recently used{ago}, cache over {human_size(o.max_size)}"
        elif o.older_than is not None:
            reason = f"not used in {compact_duration(o.older_than)}{ago}"
        elif o.fingerprints:
            reason = "named on the command line"
        else:
            reason = f"in --dataset {', '.join(o.datasets)}"
        e = u.primary
        fp = e.fingerprint if u.kind != Kind.SOURCE or len(u.members) == 1 else None
        aliases = tuple(sorted(u.fingerprints - {fp} if fp else u.fingerprints))
        # A builder folder goes under its builder lock, as `datasets` prepares it: a pipeline that
        # finds the folder incomplete (dataset_info.json goes first) and prepares it again would
        # otherwise `rmtree` it while gc removes the same files (FileNotFoundError in the pipeline).
        lock = u.key.with_name(layout.builder_lock_name(u.key.name)) if u.kind == Kind.SOURCE else None
        return GcItem(
            u.key if u.kind in (Kind.SAVED, Kind.SOURCE) else e.path,
            u.kind,
            u.size,
            u.files,
            reason,
            u.targets,
            action="evict",
            fingerprint=fp,
            aliases=aliases,
            dataset=u.label,
            used=u.used,
            lock=lock,
        )

    def kept(
        self, why_kept: Mapping[Path, KeptBecause], evicting: bool, named: bool = False
    ) -> tuple[int, int, dict[KeptBecause, int]]:
        """How many data entries (and bytes) survive the plan, counted by why (`named`: the run
        removes only the entries named on the command line)."""
        removed = {t.path for i in self.items for t in i.targets}
        counts: dict[KeptBecause, int] = {}
        n = size = 0
        reason_of_entry: dict[Path, KeptBecause] = {}
        for u in self._units if evicting else []:
            for e in u.members:
                reason_of_entry.setdefault(e.path, why_kept.get(u.key, KeptBecause.NOT_SELECTED))
        for e in self.report.entries:
            if e.kind not in DATA_KINDS:
                continue
            if (
                e.path in removed
                or any(p in removed for p in e.path.parents)
                or any(f.path in removed for f in e.files)
            ):
                continue
            n += 1
            size += e.size
            if evicting:
                reason = reason_of_entry.get(e.path, KeptBecause.NOT_EVICTABLE)
            else:
                reason = KeptBecause.OUTSIDE if named else KeptBecause.UNTOUCHED
            counts[reason] = counts.get(reason, 0) + 1
        return n, size, counts


def _unit(key: Path, kind: Kind, members: list[Entry], files: list[CacheFile], folder: bool = False) -> _Unit:
    """A unit of `members` removing `files` (as one folder, or file by file)."""
    size = sum(f.size for f in files)
    newest = max((f.mtime for f in files), default=None)
    used = max((u for e in members if (u := e.used) is not None), default=None)
    targets = (
        (Target(key, True, size, newest),)
        if folder
        else tuple(Target(f.path, False, f.size, f.mtime) for f in files)
    )
    return _Unit(key, kind, members, targets, size, len(files), used, newest, members[0].dataset)


def _unit_key_of(e: Entry) -> Path:
    if e.kind == Kind.SAVED:
        return e.unit or e.path
    if e.kind == Kind.SOURCE and e.dataset_dir is not None:
        return e.dataset_dir
    return e.path


def _outermost(units: Sequence[_Unit]) -> list[_Unit]:
    """Drop units inside a chosen saved folder: removing the folder removes them."""
    folders = [u.key for u in units if u.kind == Kind.SAVED]
    return [u for u in units if not any(f in u.key.parents for f in folders)]


def recorded_parents(root: str | os.PathLike[str] | Ledger) -> dict[str, frozenset[str]]:
    """Every parent the ledger of `root` records for each fingerprint, across all runs.

    All records count, internal ones too (a `set_format` inside `load_from_disk` links two
    fingerprints of one state): for protection, a superset of the true ancestry is the safe side."""
    from cachetool.history.ledger import Ledger

    ledger = root if isinstance(root, Ledger) else Ledger.load(root, follow=False)
    parents: dict[str, set[str]] = {}
    for rec in ledger.own_steps(include_internal=True):
        if rec.result is None:
            continue
        got = parents.setdefault(rec.result, set())
        got.update(p for p in rec.parents if p != rec.result)
    return {k: frozenset(v) for k, v in parents.items()}


def ancestors(fingerprints: Iterable[str], parents: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Every recorded ancestor of `fingerprints` -> the first of `fingerprints` it was reached from.

    The fingerprints themselves are not included (unless one is an ancestor of another)."""
    out: dict[str, str] = {}
    queue: deque[tuple[str, str]] = deque((fp, fp) for fp in fingerprints)
    seen: set[str] = set()
    while queue:
        fp, origin = queue.popleft()
        if fp in seen:
            continue
        seen.add(fp)
        for p in parents.get(fp, ()):
            if p not in out:
                out[p] = origin
            queue.append((p, origin))
    return out
