"""`list_cache()`: what `cachetool ls` shows, as data: the scan, then `--filter`, `--sort`, `--limit`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.model import CacheReport, Entry
from cachetool.errors import CachetoolError

if TYPE_CHECKING:
    from cachetool.cache.lean import LeanEntry, Listed
    from cachetool.history.ledger import Ledger


@dataclass(frozen=True)
class Listing:
    """The scan of a folder and the entries the filters kept, in the sort order, cut to the limit."""

    report: CacheReport
    entries: list[Entry]
    #: Fingerprints pinned in this root (`cachetool pin`).
    pinned: frozenset[str] = frozenset()
    #: A damaged pins file, named (the listing goes on without pins).
    warnings: tuple[str, ...] = field(default=(), compare=False)


def list_cache(
    path: str | os.PathLike[str],
    *,
    filter: Sequence[str] = (),  # the name of the `--filter` option
    sort: str | None = None,
    limit: int | None = None,
    ledger: bool | Ledger = True,
    progress: Callable[[int], None] | None = None,
) -> Listing:
    """List a cache root, a `save_to_disk` folder or any folder of Arrow files, as `cachetool ls`
    does: `filter` holds `--filter` expressions (all must match: `["size>100MB", "used>30d"]`),
    `sort` a `--sort` expression (`"size:desc"`), `limit` the most entries kept.

    Bad expressions raise `BadExpression` before the folder is read. The report keeps every entry
    (`listing.report.entries`); `listing.entries` are the ones selected."""
    from cachetool.cache.query import apply_filters, sort_entries
    from cachetool.cache.scan import scan_cache

    check_query(filter, sort, limit)
    report = scan_cache(Path(path), ledger=ledger, progress=progress)
    pinned, warnings = _pinned(report.root)
    entries = sort_entries(apply_filters(report.entries, list(filter), pinned=pinned), sort)
    if limit is not None:
        entries = entries[:limit]
    return Listing(report, entries, pinned, warnings)


@dataclass(frozen=True)
class LeanListing:
    """`list_cache(path, limit=limit)` for writing JSON: `listed` holds the entries kept (in
    listing order, cut to the limit), unchanged `cache-<fp>.arrow` files among them as lean
    entries (`cachetool.cache.lean`). The report's `entries` leave the lean ones out: `totals`
    counts them all, and `listing()` is the `Listing` with every `Entry` made."""

    report: CacheReport
    everything: list[Listed]
    listed: list[Listed]
    pinned: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def totals(self) -> dict[str, tuple[int, int]]:
        """`CacheReport.totals()` of the whole listing."""
        totals = self.report.totals()
        if len(self.everything) == len(self.report.entries):
            return totals
        from itertools import compress, repeat
        from operator import is_, itemgetter

        lean: list[LeanEntry] = list(filter(tuple.__instancecheck__, self.everything))  # type: ignore[arg-type]
        kinds = list(map(itemgetter(2), lean))
        sizes = list(map(itemgetter(5), lean))
        out = {k: [n, b] for k, (n, b) in totals.items()}
        for kind in set(kinds):
            row = out.setdefault(kind._value_, [0, 0])
            mask = list(map(is_, kinds, repeat(kind)))
            row[0] += sum(mask)
            row[1] += sum(compress(sizes, mask))
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    def listing(self) -> Listing:
        from dataclasses import replace

        from cachetool.cache.lean import entries_of

        report = replace(self.report, entries=tuple(entries_of(self.everything)))
        return Listing(report, entries_of(self.listed), self.pinned, self.warnings)


def list_cache_lean(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    ledger: bool | Ledger = True,
    progress: Callable[[int], None] | None = None,
    prelisted: dict[str, Any] | None = None,
) -> LeanListing:
    """`list_cache(path, limit=limit)` as a `LeanListing` (no `--filter`, no `--sort`); `prelisted`
    holds folders already listed (`snapshot.ListingText.listed`)."""
    from cachetool.cache.scan import scan_cache_lean

    check_query((), None, limit)
    report, everything = scan_cache_lean(Path(path), ledger=ledger, progress=progress, prelisted=prelisted)
    pinned, warnings = _pinned(report.root)
    listed = everything if limit is None else everything[:limit]
    return LeanListing(report, everything, listed, pinned, warnings)


def check_query(filter: Sequence[str], sort: str | None, limit: int | None) -> None:
    """Raise `BadExpression` for a bad `--filter` or `--sort` expression, before any scan."""
    if filter or sort is not None:  # a plain listing does without importing the query rules
        from cachetool.cache.query import compile_filter, sort_entries

        for expr in filter:
            compile_filter(expr)
        sort_entries([], sort)
    if limit is not None and limit < 0:
        raise CachetoolError(f"--limit must be 0 or more, not {limit}")


def _pinned(root: Path) -> tuple[frozenset[str], tuple[str, ...]]:
    """The pinned fingerprints of `root`; a damaged pins file is a warning (listing goes on)."""
    from cachetool.cache.pins import read_pins

    try:
        return frozenset(read_pins(root)), ()
    except CachetoolError as e:
        return frozenset(), (e.message,)
