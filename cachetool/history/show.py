"""The answer of `cachetool show`: everything known about one cache entry, from the disk and the
ledger, as typed values (the command renders them)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile, CacheReport, Entry
    from cachetool.history.ledger import Ledger
    from cachetool.history.records.other import GcRecord
    from cachetool.history.records.steps import StepRecord, StepStartRecord

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
    #: Why the entry is stale (`stale: code changed`, `stale: made from FP`), as lineage says, or None.
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
    from cachetool.cache.dirs import enclosing_root
    from cachetool.cache.lookup import Resolved, entry_at_path, resolve
    from cachetool.cache.pins import read_pins
    from cachetool.cache.scan import scan_cache
    from cachetool.errors import CachetoolError
    from cachetool.history.ledger import Ledger, named_elsewhere
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
    from cachetool.history.query import stale_notes

    stale = next((note for fp, note in stale_notes(root_path, ledger, list(fps)) if fp in fps), None)
    return EntryReport(report, got.fingerprint, entry, tuple(records), pinned, warnings, stale=stale)
