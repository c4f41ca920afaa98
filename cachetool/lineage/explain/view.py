"""The records of a root, indexed for comparisons: a step's siblings (earlier records of the same
call site or function with another fingerprint), the origin of a fingerprint, the computation a
cache hit reused."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cachetool.lineage.ledger import Ledger
from cachetool.lineage.records import (
    FunctionRef,
    LedgerRecord,
    RootRecord,
    SourceRecord,
    StepRecord,
    TransformRecord,
)


class LedgerView:
    """The records of a root (and of the roots its lineage reaches), indexed for comparisons."""

    def __init__(
        self,
        root: Path,
        records: Iterable[LedgerRecord],
        warnings: Sequence[str] = (),
        ledger: Ledger | None = None,
        *,
        all_roots: bool = False,
    ) -> None:
        self.root = root
        self.ledger = ledger
        self.all_roots = all_roots  # records of other roots count as this root's
        self.warnings = tuple(warnings)
        self.sources: dict[str, str] = {}
        self.steps: list[StepRecord] = []
        self.by_result: dict[str, list[StepRecord]] = {}
        for rec in records:
            if isinstance(rec, SourceRecord):
                if rec.hash is not None and rec.text is not None:
                    self.sources.setdefault(rec.hash, rec.text)
                continue
            if rec.internal or not isinstance(rec, (TransformRecord, RootRecord)):
                continue
            self.steps.append(rec)
            if rec.result is not None:
                self.by_result.setdefault(rec.result, []).append(rec)

    def own(self, rec: StepRecord) -> bool:
        """The record was read from this root's ledger (not followed into another root)."""
        return self.all_roots or rec.read_from is None or Path(rec.read_from) == self.root

    def first_run(self, rec: StepRecord) -> bool:
        """No run of this root was recorded before `rec`'s run: the cache started empty."""
        return not any(self.own(r) and r.run != rec.run and r.time < rec.time for r in self.steps)

    def origin(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that made `fp` (before `before`, when given)."""
        best = None
        for rec in self.by_result.get(fp, ()):
            if fp in rec.parents:
                continue
            if before is not None and rec.time > before:
                continue
            best = rec
        return best

    def computing(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that computed `fp`'s file (a miss), before `before` when given."""
        best = None
        for rec in self.by_result.get(fp, ()):
            if rec.computed and (before is None or rec.time < before):
                best = rec
        return best

    def siblings(self, rec: StepRecord) -> list[StepRecord]:
        """Earlier records of the same step (call site, else function) with another fingerprint,
        one per fingerprint, most recent first; those with the same parents come first. Only
        records of this root count: another cache's runs say nothing about what this one holds."""
        t = rec.time
        key_site = _site_key(rec)
        key_fn = _fn_key(rec)
        key_moved = _moved_key(rec)
        fp = rec.result
        same_site: list[StepRecord] = []
        same_fn: list[StepRecord] = []
        moved: list[StepRecord] = []
        for other in self.steps:
            if other is rec or other.time >= t or other.result == fp or other.run == rec.run:
                continue
            if other.type != rec.type or other.output != rec.output or not self.own(other):
                continue
            if key_site is not None and _site_key(other) == key_site:
                same_site.append(other)
            elif key_fn is not None and _fn_key(other) == key_fn:
                same_fn.append(other)
            elif key_moved is not None and _moved_key(other) == key_moved:
                moved.append(other)
        # The same function (same code) from another file: the script was renamed or moved.
        found = same_site or same_fn or moved
        found.sort(key=lambda r: r.time, reverse=True)
        parents = rec.parents
        out: list[StepRecord] = []
        seen: set[str | None] = set()
        for other in [r for r in found if r.parents == parents] + [r for r in found if r.parents != parents]:
            if other.result not in seen:
                seen.add(other.result)
                out.append(other)
        return out

    def earlier_same(self, rec: StepRecord) -> StepRecord | None:
        """The latest earlier record of this root of the same fingerprint made the same way."""
        best = None
        for other in self.by_result.get(str(rec.result), ()):
            if other is rec or other.time >= rec.time or other.run == rec.run or not self.own(other):
                continue
            if other.parents == rec.parents:
                best = other
        return best

    def with_summaries(self, rec: StepRecord) -> StepRecord:
        """`rec`, or an earlier record of the same fingerprint that holds argument summaries (a hit
        records none; the computation it reused does)."""
        if _has_summaries(rec):
            return rec
        for other in reversed(self.by_result.get(str(rec.result), ())):
            if _has_summaries(other) and other.parents == rec.parents:
                return other
        return rec


def load_view(root: str | os.PathLike[str] | Ledger, *, all_roots: bool = False) -> LedgerView:
    """The ledger of `root` (a loaded `Ledger`, or a root to load), indexed: its own records, plus
    the origins of inputs recorded in other roots (every known root with `all_roots`)."""
    ledger = root if isinstance(root, Ledger) else Ledger.load(root, all_roots=all_roots)
    return LedgerView(ledger.root, ledger.records, ledger.warnings, ledger, all_roots=all_roots)


def first_line(item: FunctionRef) -> int:
    return item.line if item.line is not None else 1


def _site_key(rec: StepRecord) -> tuple[Any, ...] | None:
    site = rec.call_site
    if site is None or not site.file:
        return None
    return (rec.operation, os.path.realpath(site.file), site.line)


def _fn_key(rec: StepRecord) -> tuple[Any, ...] | None:
    fn = rec.function
    if fn is None or not fn.qualname:
        return None
    return (rec.operation, fn.qualname, fn.file)


def _moved_key(rec: StepRecord) -> tuple[Any, ...] | None:
    fn = rec.function
    if fn is None or not fn.qualname or not fn.code_hash:
        return None
    return (rec.operation, fn.qualname, fn.code_hash, tuple(rec.parents))


def _has_summaries(rec: StepRecord) -> bool:
    return any(a.summary is not None for a in rec.args.values())
