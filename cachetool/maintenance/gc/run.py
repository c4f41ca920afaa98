"""`cachetool gc` as one Python call: `gc_cache()` takes the command's keywords, validates them as
the command does, plans, asks (or takes `yes=True`) and executes. `cachetool gc` is a thin layer
over it that only renders."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.errors import CachetoolError, ExitCode
from cachetool.maintenance.gc.execute import execute
from cachetool.maintenance.gc.model import (
    DEFAULT_MIN_AGE,
    GcOptions,
    GcPlan,
    GcResult,
    named_but_kept,
)
from cachetool.maintenance.gc.plan import plan_gc, plan_temp_only

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport


class ConfirmationNeeded(CachetoolError):
    """A plan that removes something was neither confirmed nor run with `yes` (exit 2)."""

    def __init__(self, plan: GcPlan) -> None:
        super().__init__(f"refusing to remove {len(plan.items)} item(s) without confirmation: pass yes=True")
        self.plan = plan


def gc_options(
    fingerprints: Sequence[str] = (),
    *,
    temp: bool = False,
    tmp_dir: str | os.PathLike[str] | None = None,
    min_age: str | float = DEFAULT_MIN_AGE,
    all_users: bool = False,
    older_than: str | float | None = None,
    max_size: str | int | None = None,
    dataset: Sequence[str] = (),
    keep: Sequence[str] = (),
    include_sources: bool = False,
    force_root: bool = False,
    other_hosts_idle: bool = False,
    quarantine: bool = False,
) -> GcOptions:
    """`GcOptions` from `cachetool gc`'s keywords: durations as `"30d"` or seconds, sizes as
    `"50GB"` or bytes. A bad value is a `CachetoolError` quoting it (exit 2)."""
    from cachetool.cache.query import BYTE_UNITS, parse_duration, parse_quantity

    def duration(value: str | float, option: str) -> float:
        return parse_duration(value, option) if isinstance(value, str) else float(value)

    size: int | None = None
    if isinstance(max_size, str):
        size = int(parse_quantity(max_size, BYTE_UNITS, "--max-size", max_size))
    elif max_size is not None:
        size = int(max_size)
    return GcOptions(
        temp=temp,
        tmp_dir=Path(tmp_dir) if tmp_dir is not None else None,
        min_age=duration(min_age, "--min-age"),
        all_users=all_users,
        older_than=duration(older_than, "--older-than") if older_than is not None else None,
        max_size=size,
        datasets=tuple(dataset),
        fingerprints=tuple(fingerprints),
        keep=tuple(keep),
        include_sources=include_sources,
        force_root=force_root,
        other_hosts_idle=other_hosts_idle,
        quarantine=quarantine,
    )


@dataclass(frozen=True)
class GcRun:
    """What `gc_cache()` did: the plan, and the result unless it stopped before executing."""

    plan: GcPlan
    result: GcResult | None = None
    dry_run: bool = False
    declined: bool = False  # `confirm` said no: nothing removed
    #: The ledger compaction that followed the removals (a dry run: that would follow), when the
    #: ledger is past `cachetool.history.compact.AUTO_BYTES`.
    compaction: CompactionReport | None = None

    @property
    def named_but_kept(self) -> list[tuple[str, str]]:
        """(entry, reason) for each entry named in `fingerprints` that gc keeps."""
        return named_but_kept(self.plan.options.fingerprints, self.plan, self.result)

    @property
    def exit_code(self) -> ExitCode:
        """0 when the plan ran (or nothing was to do); 1 when an item failed or a named entry
        was kept (a dry run: never 1 for a kept entry, it only warns)."""
        if self.result is not None and self.result.exit_code != ExitCode.OK:
            return self.result.exit_code
        if not self.dry_run and not self.declined and self.named_but_kept:
            return ExitCode.PROBLEMS_FOUND
        return ExitCode.OK


def gc_cache(
    cache_dir: str | os.PathLike[str] | None = None,
    fingerprints: Sequence[str] = (),
    *,
    temp: bool = False,
    tmp_dir: str | os.PathLike[str] | None = None,
    min_age: str | float = DEFAULT_MIN_AGE,
    all_users: bool = False,
    older_than: str | float | None = None,
    max_size: str | int | None = None,
    dataset: Sequence[str] = (),
    keep: Sequence[str] = (),
    include_sources: bool = False,
    force_root: bool = False,
    other_hosts_idle: bool = False,
    quarantine: bool = False,
    dry_run: bool = False,
    yes: bool = False,
    confirm: Callable[[GcPlan], bool] | None = None,
) -> GcRun:
    """Reclaim disk as `cachetool gc` does, with its keywords (see `gc_options` for the values).

    Validates the options and the cache root (the default one when `cache_dir` is None), builds
    the plan (`plan_gc`) and, unless `dry_run`, executes it (`execute`). A plan that removes
    something runs only with `yes=True` or when `confirm(plan)` returns True; with neither it
    raises `ConfirmationNeeded` (exit 2). With nothing selected (no `temp`, nothing named, no
    limit) nothing is scanned and the plan's one warning says so. Stale leases are removed even
    when the plan removes nothing: they protect nothing any more. After a removal, a ledger
    larger than `cachetool.history.compact.AUTO_BYTES` is compacted (`compact_if_large`); the
    run's `compaction` says what that did (a dry run: what it would do)."""
    from cachetool.cache.dirs import existing_root, resolve_cache_root

    options = gc_options(
        fingerprints,
        temp=temp,
        tmp_dir=tmp_dir,
        min_age=min_age,
        all_users=all_users,
        older_than=older_than,
        max_size=max_size,
        dataset=dataset,
        keep=keep,
        include_sources=include_sources,
        force_root=force_root,
        other_hosts_idle=other_hosts_idle,
        quarantine=quarantine,
    )
    from cachetool.history.compact import compact_if_large

    default = resolve_cache_root(cache_dir).path.expanduser()
    if cache_dir is None and options.temp and not options.evicts and not os.path.lexists(default):
        plan = plan_temp_only(default, options)  # nothing cached yet: the temp dir may hold leftovers
    else:
        plan = plan_gc(existing_root(cache_dir), options)
    if dry_run and plan.items:
        return GcRun(plan, None, dry_run=True, compaction=compact_if_large(plan.root, dry_run=True))
    if dry_run or not options.selects:
        return GcRun(plan, None, dry_run=dry_run)
    if not plan.items:
        stale = plan.shared is not None and bool(plan.shared.stale)
        return GcRun(plan, execute(plan) if stale else GcResult(plan, ()))
    if not yes:
        if confirm is None:
            raise ConfirmationNeeded(plan)
        if not confirm(plan):
            return GcRun(plan, None, declined=True)
    result = execute(plan)
    compaction = compact_if_large(plan.root) if result.removed else None  # the ledger stays bounded
    return GcRun(plan, result, compaction=compaction)
