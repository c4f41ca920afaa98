"""Finding the entry a name stands for: a path, a fingerprint or alias, or a unique prefix.

`resolve` is the one naming rule every command that takes a name follows, against a scan of the
cache and, when given, what the root's ledger records (passed in by the caller; `find_entry` is
its form for a scanned report alone).
"""

from __future__ import annotations

import os
import re
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachetool.cache.layout import Kind, parse_cache_file
from cachetool.errors import RecordedOnly

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cachetool.cache.model import CacheReport, Entry
    from cachetool.history.ledger import Ledger

#: `<fp>_00000_of_00002`: the fingerprint `datasets` gives shard 0 of a `num_proc=2` map.
_SHARD_OF = re.compile(r"^(.+)_\d{5}_of_\d{5}$")


@dataclass(frozen=True)
class Resolved:
    """What a name a user typed stands for: one fingerprint, and the cache entry that holds it
    (None when only the ledger knows it: its files were removed, or it never had any)."""

    fingerprint: str
    entry: Entry | None = None

    def recorded_as(self, recorded: Container[str]) -> str:
        """The fingerprint the ledger records the step under: after `load_from_disk` an entry's
        own fingerprint is not recorded, its alias is. The resolved one when none is."""
        if self.fingerprint in recorded or self.entry is None:
            return self.fingerprint
        e = self.entry
        return next((fp for fp in (e.fingerprint, *e.aliases) if fp and fp in recorded), self.fingerprint)


def resolve(
    name: str,
    report: CacheReport,
    ledger: Ledger | None = None,
    *,
    recorded: Iterable[str] | None = None,
) -> Resolved:
    """The one fingerprint `name` means, with one rule for every command:

    1. a path: the entry at that path (as typed, or made absolute); else a cache file's name
       (`cache-<fp>.arrow`, of one shard too) stands for `<fp>`;
    2. an exact fingerprint: an entry's fingerprint or alias, else one the ledger records (as a
       result or a parent);
    3. a prefix: the fingerprints (of entries, aliases included, and of the ledger) that start
       with `name`. An entry and its aliases are one candidate; a recorded fingerprint that is
       one of an entry's is not another, nor is a shard of a `num_proc` map's result
       (`<fp>_00000_of_00002`). One candidate resolves; several are *ambiguous*
       (`AmbiguousFingerprint`, listing them); none is `UnknownFingerprint`.

    In 2 and 3, a killed run's `tmp*` partial of a result that is there is part of that result,
    not another candidate.

    For an entry, the fingerprint returned is the one typed when it is exact, else the one that
    starts with the prefix, preferring the one the ledger records (`recorded`: fingerprints known
    without a loaded ledger) (after `load_from_disk` the recorded one is the alias). A
    fingerprint only the ledger knows resolves to the entry that holds the files its step wrote
    (`cast_column`'s result lives in a file its internal `map` named), else with `entry=None`:
    `lineage`, `explain` and `show` show its records, `pin` pins it, `gc` and `verify` say no
    cache file holds it."""
    from cachetool.errors import NoFingerprint, UnknownFingerprint

    if not name:
        raise UnknownFingerprint(name, report.root)
    known = (ledger.fingerprints() if ledger is not None else set()) | set(recorded or ())
    # 1. a path, or a cache file's name
    e = entry_at_path(report, name)
    if e is not None:
        fp = next((x for x in (e.fingerprint, *e.aliases) if x and x in known), e.fingerprint)
        if fp is None:
            raise NoFingerprint(name, report.root, e.kind.value)
        return Resolved(fp, e)
    name = cache_file_key(name)
    # 2. exact
    exact = [e for e in report.entries if name in (e.fingerprint, *e.aliases)]
    exact = [e for e in exact if not _partial_of(e, exact)] or exact
    if len(exact) == 1:
        return Resolved(name, exact[0])
    if not exact and name in known:
        return Resolved(name, _entry_of_files(report, ledger, name))
    # 3. prefix
    return _by_prefix(name, report, ledger, known, exact or report.entries)


def cache_file_key(name: str) -> str:
    """The fingerprint a cache file's name (`cache-<fp>.arrow`, of one shard too) stands for;
    any other name as it is."""
    parsed = parse_cache_file(name) if os.sep not in name else None
    return parsed[0] if parsed is not None else name


def _by_prefix(
    name: str, report: CacheReport, ledger: Ledger | None, known: set[str], entries: Iterable[Entry]
) -> Resolved:
    from cachetool.errors import AmbiguousFingerprint, UnknownFingerprint

    candidates: dict[str, Resolved] = {}
    seen: set[str] = set()
    for e in entries:
        fps = [x for x in (e.fingerprint, *e.aliases) if x]
        named = [x for x in fps if x.startswith(name)]
        if not named:
            continue
        seen.update(fps)
        fp = next((x for x in named if x in known), None) or next((x for x in fps if x in known), named[0])
        candidates[f"{e.id} ({e.kind.value}, {os.fsdecode(e.path)})"] = Resolved(fp, e)
    # A killed num_proc writer's tmp file names its shard (`<fp>_00001_of_00002`): part of <fp>.
    shards = {
        k for k, r in candidates.items() if (m := _SHARD_OF.match(r.fingerprint)) and m.group(1) in seen
    }
    candidates = {k: r for k, r in candidates.items() if k not in shards}
    entries_named = [r.entry for r in candidates.values() if r.entry is not None]
    candidates = {
        k: r for k, r in candidates.items() if r.entry is None or not _partial_of(r.entry, entries_named)
    }
    for fp in sorted(x for x in known if x.startswith(name)):
        if fp in seen:
            continue
        shard_of = _SHARD_OF.match(fp)  # a num_proc shard is part of its map's result
        if shard_of is not None and (shard_of.group(1) in seen or shard_of.group(1) in known):
            continue
        entry = _entry_of_files(report, ledger, fp)
        where = f"files of {entry.id}" if entry is not None else "no cache file"
        candidates[f"{fp} (recorded in the ledger, {where})"] = Resolved(fp, entry)
    if not candidates:
        unread = [e.path for e in report.entries if e.kind == Kind.UNREADABLE and not e.files]
        raise UnknownFingerprint(name, report.root, unread)
    # The tmp files of a killed num_proc map's shards, none finished: parts of one <fp>, which the
    # name stands for (not one shard's tmp file, a part that has no lineage of its own).
    bases = {m.group(1) if (m := _SHARD_OF.match(r.fingerprint)) else None for r in candidates.values()}
    if len(bases) == 1 and (base := bases.pop()) is not None and base.startswith(name):
        return Resolved(base, _entry_of_files(report, ledger, base))
    if len(candidates) > 1:
        raise AmbiguousFingerprint(name, sorted(candidates))
    return next(iter(candidates.values()))


def _partial_of(e: Entry, others: Iterable[Entry]) -> bool:
    """`e` is a killed run's `tmp*` partial of the result of one of `others` (two runs of one
    pipeline on one cache, one killed while the other finished): part of it, not another name."""
    return e.kind == Kind.TEMP and any(
        o.fingerprint is not None and o.fingerprint in e.aliases for o in others
    )


def entry_at_path(report: CacheReport, name: str) -> Entry | None:
    """The entry at the path `name` (as typed, or made absolute: a bare name is one in the
    working folder), if `name` is one's path."""
    absolute = os.path.abspath(name)
    for e in report.entries:
        path = os.fsdecode(e.path)
        if path in (name, absolute):
            return e
    return None


def _entry_of_files(report: CacheReport, ledger: Ledger | None, fp: str) -> Entry | None:
    """The entry holding the files a step that made `fp` wrote: `cast_column`'s result lives in
    the file its internal `map` named after another fingerprint."""
    if ledger is None:
        return None
    paths = {r.located(f.path) for r in ledger.for_result(fp, include_internal=True) for f in r.files}
    if not paths:
        return None
    return next((e for e in report.entries if any(os.fsdecode(f.path) in paths for f in e.files)), None)


def find_entry(
    report: CacheReport,
    prefix: str,
    ledger: Ledger | None = None,
    *,
    recorded: Sequence[str] | None = None,
) -> Entry:
    """The one entry `prefix` names, by the rule of `cachetool.cache.lookup.resolve` (path, exact
    fingerprint or alias, unique prefix). With a `ledger` (or the fingerprints it records,
    `recorded`), fingerprints only it knows are candidates too; one of them named is
    `RecordedOnly` here (no entry holds it, and the message says what the ledger knows). Raises
    `AmbiguousFingerprint` listing candidates."""
    at_path = entry_at_path(report, prefix)  # a leftover named by its path has no fingerprint
    if at_path is not None:
        return at_path
    got = resolve(prefix, report, ledger, recorded=recorded)
    if got.entry is None:
        raise RecordedOnly(got.fingerprint, report.root)
    return got.entry
