"""`cachetool gc` as a plan: decide what goes (pure data), show it, then execute it item by item.

Two kinds of work, both planned the same way: **leftovers** (`--temp`, `leftovers`) — what killed
processes leave behind, each proven dead — and **eviction** (`--older-than`, `--max-size`,
`--dataset`, fingerprints; `eviction`) of whole entries. `planner.plan_gc()` decides from a scan,
a liveness snapshot and a few lock probes; `execute.execute()` trusts none of it and checks each
item again right before removing it through folder descriptors (`rules` holds the checks both
ask). Processes on other machines of a shared file system are invisible to the liveness check;
there, leases and `--min-age` are the guards. `gc_cache()` is the whole command in one call.

Part of `maintenance`: may import `trace`, `history`, `cache`, `fingerprint` and the base modules.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.errors import CachetoolError, ExitCode
from cachetool.maintenance.gc.options import GcOptions, option_keyword

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport
    from cachetool.maintenance.gc.plan import GcPlan, GcResult


class ConfirmationNeeded(CachetoolError):
    """A plan that removes something was neither confirmed nor run with `yes` (exit 2)."""

    def __init__(self, plan: GcPlan) -> None:
        super().__init__(f"refusing to remove {len(plan.items)} item(s) without confirmation: pass yes=True")
        self.plan = plan


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
        names = self.plan.options.fingerprints

        def named(fp: str | None, aliases: tuple[str, ...], path: Path) -> bool:
            ids = [x for x in (fp, *aliases) if x]
            return any(os.fsdecode(path) == n or any(i.startswith(n) for i in ids) for n in names)

        kept = [(s.id, s.reason) for s in self.plan.skipped if named(s.fingerprint, s.aliases, s.path)]
        outcomes = (*self.result.skipped, *self.result.failed) if self.result is not None else ()
        kept += [
            (o.item.id, o.reason or o.status)
            for o in outcomes
            if named(o.item.fingerprint, o.item.aliases, o.item.path)
        ]
        return kept

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
    dry_run: bool = False,
    yes: bool = False,
    confirm: Callable[[GcPlan], bool] | None = None,
    **options: Any,
) -> GcRun:
    """Reclaim disk as `cachetool gc` does, with its keywords (the fields of `GcOptions`).

    Validates the options and the cache root (the default one when `cache_dir` is None), builds
    the plan (`plan_gc`) and, unless `dry_run`, executes it (`execute`). A plan that removes
    something runs only with `yes=True` or when `confirm(plan)` returns True; with neither it
    raises `ConfirmationNeeded` (exit 2). With nothing selected (no `temp`, nothing named, no
    limit) nothing is scanned and the plan's one warning says so. Stale leases are removed even
    when the plan removes nothing: they protect nothing any more. After a removal, a ledger
    larger than `cachetool.history.compact.AUTO_BYTES` is compacted (`compact_if_large`); the
    run's `compaction` says what that did (a dry run: what it would do)."""
    from cachetool.cache.dirs import existing_root, resolve_cache_root
    from cachetool.maintenance.gc.execute import execute
    from cachetool.maintenance.gc.plan import GcResult
    from cachetool.maintenance.gc.planner import plan_gc, plan_temp_only

    o = GcOptions.of(fingerprints=fingerprints, **options)
    default = resolve_cache_root(cache_dir).path.expanduser()
    if cache_dir is None and o.temp and not o.evicts and not os.path.lexists(default):
        plan = plan_temp_only(default, o)  # nothing cached yet: the temp dir may hold leftovers
    else:
        plan = plan_gc(existing_root(cache_dir), o)
    if dry_run and plan.items:
        from cachetool.history.compact import compact_if_large

        return GcRun(plan, None, dry_run=True, compaction=compact_if_large(plan.root, dry_run=True))
    if dry_run or not o.selects:
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
    if not result.removed:
        return GcRun(plan, result)
    from cachetool.history.compact import compact_if_large

    return GcRun(plan, result, compaction=compact_if_large(plan.root))  # the ledger stays bounded


def _keyword_signature() -> inspect.Signature:
    """`gc_cache`'s signature with every option keyword, as `GcOptions` declares them."""
    sig = inspect.signature(gc_cache)
    head, tail = list(sig.parameters.values())[:2], list(sig.parameters.values())[2:-1]
    keywords = [
        inspect.Parameter(
            option_keyword(f),
            inspect.Parameter.KEYWORD_ONLY,
            default=f.default,
            annotation=f"str | {f.type}" if f.metadata["parse"] else f.type,
        )
        for f in fields(GcOptions)
        if f.name != "fingerprints"
    ]
    return sig.replace(parameters=[*head, *keywords, *tail])


gc_cache.__signature__ = _keyword_signature()  # type: ignore[attr-defined]
