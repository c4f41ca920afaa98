"""The records of a root, indexed for comparisons: a step's siblings (earlier records of the same
call site or function with another fingerprint), the origin of a fingerprint, the computation a
cache hit reused."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

from cachetool.history.ledger import Ledger
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import RunSummaryRecord, SourceRecord
from cachetool.history.records.steps import (
    RootRecord,
    StepRecord,
    TransformRecord,
    fn_key,
    moved_key,
    site_key,
)


class LedgerView:
    """The records of a root (and of the roots its lineage reaches), indexed for comparisons."""

    def __init__(self, ledger: Ledger, *, all_roots: bool = False) -> None:
        self._root = os.fspath(ledger.root)  # compared as a string: `read_from` is normalized
        self.ledger = ledger
        self.all_roots = all_roots  # records of other roots count as this root's
        self.sources: dict[str, str] = {}
        self.steps: list[StepRecord] = []
        self.by_result: dict[str, list[StepRecord]] = {}
        # Siblings by key, and the first record of each run: a question is a lookup, not a pass
        # over every record (a long ledger has 100,000 of them).
        self._realpaths: dict[str, str] = {}
        self._by_key: dict[tuple[object, ...], list[StepRecord]] = {}
        first: dict[str, float] = {}
        made: dict[str, set[str]] = {}  # per run, the results its steps had made or loaded
        #: Runs that loaded a result none of their steps had made: the cache held something.
        self._found_results: set[str] = set()
        for rec in ledger.records:
            if isinstance(rec, SourceRecord):
                if rec.hash is not None and rec.text is not None:
                    self.sources.setdefault(rec.hash, rec.text)
                continue
            step = isinstance(rec, (TransformRecord, RootRecord)) and not rec.internal
            # The runs a compaction folded away were runs too.
            if (step or isinstance(rec, RunSummaryRecord)) and self.own(rec):
                first[rec.run] = min(rec.time, first.get(rec.run, rec.time))
            if not isinstance(rec, (TransformRecord, RootRecord)) or rec.internal:
                continue
            self.steps.append(rec)
            if rec.result is not None:
                self.by_result.setdefault(rec.result, []).append(rec)
                mine = made.setdefault(rec.run, set())
                if rec.cache == "hit" and rec.result not in mine and self.own(rec):
                    self._found_results.add(rec.run)
                mine.add(rec.result)
            for key in self._keys(rec):
                if key is not None:
                    self._by_key.setdefault(key, []).append(rec)
        self._earliest = sorted((t, run) for run, t in first.items())[:2]
        self._lineages: dict[int, tuple[object, ...]] = {}  # by id of a record of `steps`
        self._ancestors: dict[str, tuple[str, ...]] = {}
        #: Source files read (None: unreadable), and per record whether its function's code
        #: differs on disk now (`cachetool.history.explain.stale`).
        self.disk: dict[str, str | None] = {}
        self.on_disk: dict[int, bool] = {}

    def _keys(self, rec: StepRecord) -> tuple[tuple[object, ...] | None, ...]:
        site, fn, moved = site_key(rec, self._realpaths), fn_key(rec), moved_key(rec)
        return (
            None if site is None else ("site", *site),
            None if fn is None else ("function", *fn),
            None if moved is None else ("moved", *moved),
        )

    def own(self, rec: LedgerRecord) -> bool:
        """The record was read from this root's ledger (not followed into another root)."""
        return self.all_roots or rec.read_from is None or rec.read_from == self._root

    def first_run(self, rec: StepRecord) -> bool:
        """No run of this root was recorded before `rec`'s run, and that run loaded nothing its
        own steps had not made: the cache started empty (an untraced run may have filled it)."""
        if rec.run in self._found_results:
            return False
        other = next((t for t, run in self._earliest if run != rec.run), None)
        return other is None or other >= rec.time

    def _latest(self, fp: str | None, keep: Callable[[StepRecord], bool]) -> StepRecord | None:
        """The latest record of result `fp` that `keep` keeps."""
        return next((r for r in reversed(self.by_result.get(str(fp), ())) if keep(r)), None)

    def origin(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that made `fp` (before `before`, when given)."""
        return self._latest(fp, lambda r: fp not in r.parents and (before is None or r.time <= before))

    def parents(self, fp: str) -> tuple[str, ...]:
        rec = self.origin(fp)
        return rec.parents if rec is not None else ()

    def ancestors(self, fp: str) -> tuple[str, ...]:
        """The recorded ancestors of `fp`, nearest first (memoised: a whole root asks for every
        entry's)."""
        found = self._ancestors.get(fp)
        if found is None:
            out: list[str] = []
            seen = {fp}
            queue = deque(self.parents(fp))
            while queue:
                x = queue.popleft()
                if x not in seen:
                    seen.add(x)
                    out.append(x)
                    queue.extend(self.parents(x))
            found = self._ancestors[fp] = tuple(out)
        return found

    def computing(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that computed `fp`'s file (a miss), before `before` when given."""
        return self._latest(fp, lambda r: r.computed and (before is None or r.time < before))

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


def load_view(root: str | os.PathLike[str] | Ledger, *, all_roots: bool = False) -> LedgerView:
    """The ledger of `root` (a loaded `Ledger`, or a root to load), indexed: its own records, plus
    the origins of inputs recorded in other roots (every known root with `all_roots`)."""
    ledger = root if isinstance(root, Ledger) else Ledger.load(root, all_roots=all_roots)
    return LedgerView(ledger, all_roots=all_roots)


def _has_summaries(rec: StepRecord) -> bool:
    return any(a.summary is not None for a in rec.args.values())
