"""`list_cache()`: what `cachetool ls` shows, as data: the scan, then `--filter`, `--sort`, `--limit`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cache.model import CacheReport, Entry
from cachetool.cache.shard import Shard, parse_shard, shard_report
from cachetool.errors import CachetoolError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cachetool.cache.model import Liveness, RecordedUse


@dataclass(frozen=True)
class Listing:
    """The scan of a folder and the entries the filters kept, in the sort order, cut to the limit."""

    report: CacheReport
    entries: list[Entry]
    #: Fingerprints pinned in this root (`cachetool pin`).
    pinned: frozenset[str] = frozenset()
    #: A damaged pins file, named (the listing goes on without pins).
    warnings: tuple[str, ...] = field(default=(), compare=False)


def read_listing(
    path: str | os.PathLike[str],
    *,
    filter: Sequence[str] = (),  # the name of the `--filter` option
    sort: str | None = None,
    limit: int | None = None,
    usage: Mapping[str, RecordedUse] | None = None,
    liveness: Callable[..., Liveness] | None = None,
    progress: Callable[[int], None] | None = None,
    shard: Shard | tuple[int, int] | str | None = None,
) -> Listing:
    """List a cache root, a `save_to_disk` folder or any folder of Arrow files with what the
    caller knows of it (`usage`, `liveness`: what `scan_cache` takes): `filter` holds `--filter`
    expressions (all must match), `sort` a `--sort` expression, `limit` the most entries kept;
    bad ones raise `BadExpression` before the folder is read. `shard` (`"i/n"` or `(i, n)`) keeps
    the share of shard i of n (`cachetool.cache.shard`) in the report too. The report keeps every
    entry (of the shard) (`listing.report.entries`); `listing.entries` are the ones selected."""
    from cachetool.cache.query import apply_filters, sort_entries
    from cachetool.cache.scan import scan_cache

    check_query(filter, sort, limit)
    chosen = parse_shard(shard)
    report = shard_report(scan_cache(Path(path), usage=usage, liveness=liveness, progress=progress), chosen)
    pinned, warnings = _pinned(report.root)
    entries = sort_entries(apply_filters(report.entries, list(filter), pinned=pinned), sort)
    if limit is not None:
        entries = entries[:limit]
    return Listing(report, entries, pinned, warnings)


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
    """The pinned fingerprints of `root` (kept by the root that holds it: `enclosing_root`); a
    damaged pins file is a warning (listing goes on)."""
    from cachetool.cache.dirs import enclosing_root
    from cachetool.cache.pins import read_pins

    try:
        return frozenset(read_pins(enclosing_root(root))), ()
    except CachetoolError as e:
        return frozenset(), (e.message,)
