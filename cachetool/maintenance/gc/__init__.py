"""`cachetool gc` as a plan: `GcOptions` declares every option once (the command's options,
`gc_cache()`'s keywords, the docs); `plan` decides what goes (leftovers of killed processes, each
proven dead, and evictions of whole entries), `execute` checks each item again and removes it
through folder descriptors (`plan.Rules` holds the checks both ask).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.errors import CachetoolError, ExitCode, option
from cachetool.maintenance import keyword_signature, option_keyword, options_of
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport
    from cachetool.maintenance.gc.plan import GcItem, GcPlan, GcResult, Skip


#: What `--max-size` evicts first (`--policy`): the least recently used, or the least recompute
#: seconds per GB.
POLICIES = ("lru", "cost")
#: Default `--min-age`: younger leftovers may belong to a writer this host cannot see.
DEFAULT_MIN_AGE = 3600.0


@dataclass(frozen=True)
class GcOptions:
    """Every choice of a gc run, declared once: `cachetool gc`'s options and `gc_cache()`'s
    keywords are made from these fields. Durations are seconds (or `"30d"`), sizes bytes (or
    `"50GB"`); an invalid value raises `CachetoolError` (exit 2) here, for the command as for Python."""

    temp: bool = option(
        False,
        "Remove leftovers of killed processes: `tmp*` files, `.incomplete` folders, interrupted "
        "saves and downloads, unheld locks of folders that are gone, and `hf_datasets-*` / `pymp-*` "
        "folders in the temp dir (nothing else there).",
    )
    tmp_dir: Path | None = option(
        None,
        "The temp dir to clean with --temp. Default: the one datasets uses (TMPDIR, TEMP, TMP, "
        "else the system default).",
    )
    min_age: float = option(
        DEFAULT_MIN_AGE,
        "Only touch what was modified at least this long ago (s, m, h, d, w). Processes on other "
        "hosts of a shared file system are invisible to gc: there, their leases and age are the "
        "guards (at least 10m for temp files no lease covers).",
        cli_default="1h",
        parse="duration",
    )
    all_users: bool = option(False, "Also remove files other users own (default: only yours).")
    older_than: float | None = option(
        None,
        "Evict entries not used in this long (e.g. 30d): last ledger record, else modified time. "
        "With --quarantine: purge what was moved aside at least this long ago.",
        parse="duration",
    )
    max_size: int | None = option(
        None,
        "Evict least recently used entries until the cache is under this size (e.g. 50GB).",
        parse="size",
    )
    policy: str = option(
        "lru",
        "What --max-size evicts first: lru, the least recently used; cost, the least recompute time "
        "per GB (from the compute time the ledger recorded; never recorded: first, least recently "
        "used first).",
        metavar="cost|lru",
    )
    datasets: tuple[str, ...] = option(
        (), "Only entries of this dataset (e.g. csv or csv/default-…); repeatable.", keyword="dataset"
    )
    #: The command's arguments: entries to evict, as `cachetool ls -q` prints them.
    fingerprints: tuple[str, ...] = option(
        (),
        "Entries to evict: fingerprints (or prefixes) or paths, as `cachetool ls -q` prints them.",
        argument=True,
        show_default=False,
    )
    keep: tuple[str, ...] = option((), "Never evict this fingerprint or its recorded ancestors (repeatable).")
    include_sources: bool = option(False, "Also evict source splits and saved datasets (kept by default).")
    force_root: bool = option(
        False,
        "Clean the folder even if it is /, holds your home folder, or has no datasets "
        "layout (refused by default: there, leftover-looking names may be your own files).",
    )
    other_hosts_idle: bool = option(
        False,
        "On a shared file system (NFS, Lustre, GPFS, CephFS, CIFS, FUSE), allow --min-age below "
        "10m for temp files no lease covers: you know no process on another host writes this cache "
        "outside `cachetool run` or `cachetool.tracing()`.",
    )
    quarantine: bool = option(
        False,
        "Purge the quarantine: delete what `verify --quarantine` moved aside into "
        ".cachetool/quarantine/ (with --older-than: moved aside at least that long ago). Nothing "
        "else is removed in that run.",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "tuple[str, ...]":
                if isinstance(value, str):
                    raise CachetoolError(f"{f.name} must be a sequence of names, not one string")
                value = tuple(value or ())
            elif isinstance(value, str) and f.metadata["parse"] is not None:
                value = _parse(value, f.metadata["parse"], f"--{option_keyword(f).replace('_', '-')}")
            elif f.name == "tmp_dir" and value is not None:
                value = Path(value)
            if f.metadata["parse"] is not None and value is not None:
                value = int(value) if f.name == "max_size" else float(value)
                if value < 0:
                    raise CachetoolError(
                        f"invalid --{f.name.replace('_', '-')} {value!r}: must not be negative"
                    )
            object.__setattr__(self, f.name, value)
        if self.policy not in POLICIES:
            raise CachetoolError(f"invalid --policy {self.policy!r}: use cost or lru")
        if self.quarantine and (
            self.temp or self.max_size is not None or self.datasets or self.fingerprints or self.keep
        ):
            raise CachetoolError(
                "--quarantine purges the quarantine and nothing else: run --temp or an eviction as a "
                "gc of its own (quarantine=True takes only older_than)"
            )
        if self.tmp_dir is not None and not self.temp:
            raise CachetoolError("--tmp-dir only makes sense with --temp (tmp_dir needs temp=True)")

    def to_json(self) -> dict[str, Any]:
        """The options as `--json` shows them (the temp dir is the plan's `temp_dir`)."""
        return json_fields(self, skip=("tmp_dir", "force_root"))

    @property
    def evicts(self) -> bool:
        """True when the run evicts entries (not only leftovers)."""
        return not self.quarantine and bool(
            self.older_than is not None or self.max_size is not None or self.datasets or self.fingerprints
        )

    @property
    def selects(self) -> bool:
        """False when nothing is selected (no `--temp`, no entries named, no limit, no
        `--quarantine`): nothing to do."""
        return self.temp or self.evicts or self.quarantine


def _parse(value: str, how: str, option: str) -> float:
    from cachetool.cache.selection import BYTE_UNITS, parse_duration, parse_quantity

    return (
        parse_duration(value, option)
        if how == "duration"
        else parse_quantity(value, BYTE_UNITS, option, value)
    )


#: What gc says when nothing was selected at all (exit 0; see docs/gc.md).
NOTHING_SELECTED = (
    "nothing to do: no entries named and none of --temp, --older-than, --max-size, --dataset, "
    "--quarantine given "
    "(an empty `cachetool ls -q` selection selects nothing)"
)


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
    #: ledger is past `cachetool.history.writer.AUTO_BYTES`.
    compaction: CompactionReport | None = None

    @property
    def named_but_kept(self) -> list[tuple[str, str]]:
        """(entry, reason) for each entry named in `fingerprints` that gc keeps."""
        names = self.plan.options.fingerprints

        def named(x: Skip | GcItem) -> bool:
            ids = [i for i in (x.fingerprint, *x.aliases) if i]
            return any(os.fsdecode(x.path) == n or any(i.startswith(n) for i in ids) for n in names)

        kept = [(s.id, s.reason) for s in self.plan.skipped if named(s)]
        outcomes = (*self.result.skipped, *self.result.failed) if self.result is not None else ()
        return kept + [(o.item.id, o.reason or o.status) for o in outcomes if named(o.item)]

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
    larger than `cachetool.history.writer.AUTO_BYTES` is compacted (`compact_if_large`); the
    run's `compaction` says what that did (a dry run: what it would do)."""
    from cachetool.cache.locations import existing_root, resolve_cache_root
    from cachetool.maintenance.gc.execute import execute
    from cachetool.maintenance.gc.plan import GcResult, plan_gc, plan_temp_only

    o = options_of(GcOptions, fingerprints=fingerprints, **options)
    default = resolve_cache_root(cache_dir).path.expanduser()
    if cache_dir is None and o.temp and not o.evicts and not os.path.lexists(default):
        plan = plan_temp_only(default, o)  # nothing cached yet: the temp dir may hold leftovers
    else:
        plan = plan_gc(existing_root(cache_dir), o)
    if dry_run and plan.items:
        return GcRun(plan, None, dry_run=True, compaction=_compact_if_large(plan.root, dry_run=True))
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
    return GcRun(plan, result, compaction=_compact_if_large(plan.root))  # the ledger stays bounded


def _compact_if_large(root: Path, dry_run: bool = False) -> CompactionReport | None:
    """`compact_if_large(root)`, its module loaded only for a ledger past `AUTO_BYTES`."""
    from cachetool.history.writer import AUTO_BYTES, foldable_bytes

    if foldable_bytes(root) <= AUTO_BYTES:
        return None
    from cachetool.history.compact import compact_if_large

    return compact_if_large(root, dry_run=dry_run)


gc_cache.__signature__ = keyword_signature(gc_cache, GcOptions)  # type: ignore[attr-defined]
