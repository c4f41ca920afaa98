"""`cachetool gc`: reclaim disk safely — leftovers first, then age and size limits.

A thin layer over `cachetool.maintenance.gc.gc_cache`: its arguments and options are the fields of
`GcOptions`, passed through as keywords. It asks on a terminal and renders the plan and the result
(also `cachetool demo`'s)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cli.common import CACHE_DIR, NO_TRUNCATE, OUTPUT, command, confirm, is_remote, opt
from cachetool.cli.output import Output, OutputFormat, error, hint, warn
from cachetool.errors import CachetoolError
from cachetool.formatting import human_size, short_duration
from cachetool.safejson import json_value

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport
    from cachetool.maintenance.gc import GcRun
    from cachetool.maintenance.gc.plan import GcItem, GcPlan, GcResult, Skip


@command(
    None,
    "cachetool.maintenance.gc.GcOptions",
    "fingerprints temp tmp_dir min_age all_users older_than max_size policy dataset keep include_sources "
    "force_root other_hosts_idle quarantine break_lease dry_run yes cache_dir fmt as_json quiet no_truncate",
    break_lease=opt(
        "--break-lease",
        help="Remove the lease ID (as gc shows it) and do nothing else: for a run you know is gone "
        "(its host died, or the lease is forged). Logged in the ledger.",
        type=str | None,
        metavar="ID",
    ),
    dry_run=opt("--dry-run", "-n", help="Show the plan (what, why, bytes, files) and stop."),
    yes=opt("--yes", "-y", help="Do not ask for confirmation."),
    cache_dir=CACHE_DIR,
    **OUTPUT,
    no_truncate=NO_TRUNCATE,
)
def gc_command(break_lease: str | None, cache_dir: Path | None, out: Output, **keywords: Any) -> int:
    """Reclaim disk: remove what killed runs left behind, evict entries by age or size.

    Always a plan first. `--dry-run` prints what would go, why, and what it frees; otherwise the
    plan is shown and confirmed (`-y` skips the question; without a terminal and without `--yes`
    the plan is printed and nothing is removed). Whole entries only: every shard of a fingerprint,
    a saved DatasetDict as one folder. Pinned entries (`cachetool pin`) and their recorded
    ancestors, `--keep` entries, source splits and saved datasets (unless `--include-sources`)
    always stay.

    Right before each removal gc checks again that no live process on this host has the item open
    or memory-mapped, that no lock on it is held, that it is older than `--min-age`, that it is
    yours (unless `--all-users`), inside the cache (or the temp dir) and not a symlink; it deletes
    through folder descriptors that never follow symlinks. When in doubt an item is kept, with the
    reason. Every removal is recorded in the cache's ledger.

    Runs under `cachetool run` or `cachetool.tracing()` hold a lease in the cache
    (`.cachetool/leases/`): what they may be writing stays while the lease lives, on every host.
    Leases that expired, or whose process on this host is gone, are removed and logged (the step
    leases of `run --once`, `.cachetool/once/`, too). A lease lives at most an hour after its
    last renewal, whatever it says; gc shows each live one with its file, host, pid and expiry,
    and `--break-lease ID` removes one whose run you know is gone.

    **Examples**

        cachetool gc --temp --dry-run

        cachetool gc --temp --min-age 0 -y

        cachetool gc --older-than 30d --max-size 50GB

        cachetool gc --dataset csv --older-than 7d --keep 3f2a9c1b

        cachetool gc $(cachetool ls -q --filter "used>30d") --dry-run

        cachetool gc --quarantine --older-than 30d

        cachetool gc s3://team-bucket/hf-cache --older-than 90d --dry-run

        cachetool gc s3://team-bucket/hf-cache --max-size 500GB -y

    Exit codes: 0 the plan ran (or there was nothing to do, also when nothing was selected);
    1 some item failed, an entry named on the command line was kept, or another gc is running;
    2 bad options, or confirmation needed (pass --yes).
    """
    from cachetool.maintenance.gc import ConfirmationNeeded, gc_cache

    fingerprints = keywords.get("fingerprints") or ()
    if break_lease is None and is_remote(next(iter(fingerprints), None)):  # gc s3://bucket/prefix
        from cachetool.cli.remote import remote_gc

        return remote_gc({**keywords, "fingerprints": fingerprints}, cache_dir, out)
    if break_lease is not None:
        from cachetool.cache.locations import existing_root
        from cachetool.maintenance.liveness import break_lease as remove_lease

        lease = remove_lease(existing_root(cache_dir), break_lease)
        out.line(f"Removed the lease of {lease} (logged in the ledger).", wrap=False)
        return 0
    asked: list[GcPlan] = []

    def ask(plan: GcPlan) -> bool:
        asked.append(plan)
        warn(*plan.warnings)
        show_plan(out, plan, dry_run=False, final=False)
        return confirm(f"Remove {len(plan.items)} item(s), {human_size(plan.expected_freed)}?")

    interactive = out.human and sys.stdin.isatty()
    try:
        run = gc_cache(cache_dir=cache_dir, **keywords, confirm=ask if interactive else None)
    except ConfirmationNeeded as e:
        warn(*e.plan.warnings)
        show_plan(out, e.plan, dry_run=False, final=True)
        hint(*e.plan.hints)
        n = len(e.plan.items)
        raise CachetoolError(f"refusing to remove {n} item(s) without confirmation: pass --yes") from None
    return _show_run(out, run, plan_shown=bool(asked))


def _show_run(out: Output, run: GcRun, *, plan_shown: bool) -> int:
    """Everything a run prints after `gc_cache` returned, and its exit code."""
    from cachetool.maintenance.gc import NOTHING_SELECTED

    plan = run.plan
    if not plan.options.selects:
        # An empty selection (`gc $(cachetool ls -q --filter …)` when nothing matches) is nothing
        # to do, not a mistake: exit 0, and say so on stderr.
        hint(NOTHING_SELECTED)
        if out.format == OutputFormat.json:
            out.json(gc_document(plan, None, run.dry_run))
        return 0
    if not plan_shown:
        warn(*plan.warnings)
    if run.dry_run:
        show_plan(out, plan, dry_run=True, final=True, compaction=run.compaction)
        show_compaction(out, run)
        for what, why in run.named_but_kept:
            warn(f"{what} would be kept: {why}")
        hint(*plan.hints)
        return 0
    if run.declined or run.result is None:
        out.line("Nothing removed.")
        return 0
    if not plan.items and out.human:
        show_plan(out, plan, dry_run=False, final=True)
        _say_leases_removed(out, run.result)
    else:
        if not plan_shown and out.human:
            show_plan(out, plan, dry_run=False, final=False)
        show_result(out, run.result, run.compaction)
        show_compaction(out, run)
    hint(*plan.hints)
    for what, why in run.named_but_kept:
        error(f"{what} was named but kept: {why}")
    return int(run.exit_code)


# ------------------------------------------------------------------------------------------
# How a plan and a run are shown: the human tables (what would go, what is kept and why, what a
# run removed, kept on a last check or failed), the `--json` document and the ids of `-q`.
# ------------------------------------------------------------------------------------------


def _what(item: GcItem | Skip, plan: GcPlan, whole: bool) -> str:
    """The item's fingerprint, else its path inside the cache (or the temp dir, named above the
    table), shortened from the middle to 40 columns unless `whole`; names, hashes among them, stay
    whole. The full path is in --json."""
    from cachetool.formatting import short_path

    if item.fingerprint:
        return item.fingerprint
    path = item.path
    base = next((b for b in (plan.root, plan.temp_dir) if b is not None and path.is_relative_to(b)), None)
    return short_path(path if base is None else path.relative_to(base), None if whole else 40)


def gc_document(
    plan: GcPlan, result: GcResult | None, dry_run: bool, compaction: CompactionReport | None = None
) -> dict[str, Any]:
    """The `--json` document (schema in docs/gc.md)."""
    return {
        "root": os.fsdecode(plan.root),
        "temp_dir": os.fsdecode(plan.temp_dir) if plan.temp_dir else None,
        "dry_run": dry_run,
        "options": plan.options.to_json(),
        "plan": plan.to_json(),
        "result": result.to_json() if result is not None else None,
        "compaction": json_value(compaction),
    }


def show_compaction(out: Output, run: GcRun) -> None:
    """One line for the ledger compaction that followed (or would follow) the removals."""
    if run.compaction is not None and out.human:
        from cachetool.cli.stats import compaction_line
        from cachetool.history.writer import AUTO_BYTES

        out.line(f"{compaction_line(run.compaction)} (over {human_size(AUTO_BYTES)})")
        warn(*run.compaction.warnings)


def show_plan(
    out: Output, plan: GcPlan, *, dry_run: bool, final: bool, compaction: CompactionReport | None = None
) -> None:
    """The plan in the chosen sink. `final`: nothing else will be printed (dry run, refusal)."""
    if not out.human:
        if final:
            out.emit(lambda: gc_document(plan, None, dry_run, compaction), (i.id for i in plan.items))
        return
    out.line(f"Cache: {out.path(plan.root, out.width - 7)}", style="bold")
    if plan.temp_dir is not None:
        out.line(
            f"Temp dir: {out.path(plan.temp_dir, 40)} "
            "(only hf_datasets-*, pymp-* and cachetool-determinism-*)",
            style="dim",
        )
    for note in plan.shared.notes() if plan.shared is not None else ():
        out.line(note, style="dim")
    if plan.items:
        out.line()
        out.line("Would remove:" if dry_run else "Plan:", style="bold")
        _items_table(out, plan)
    if plan.skipped:
        out.line()
        out.line("Kept:", style="bold")
        _skipped_table(out, plan)
    out.line()
    if plan.items:
        verb = "Would free" if dry_run else "Frees"
        freed = f"{human_size(plan.expected_freed)} in {plan.expected_files} file(s)"
        out.line(f"{verb} {freed} ({len(plan.items)} item(s)); {plan.keeps_sentence()}.")
    else:
        out.line(f"Nothing to remove; {plan.keeps_sentence()}.")
    if dry_run and plan.items:
        hint("run again without --dry-run to remove them (each item is checked again right before)")


def _items_table(out: Output, plan: GcPlan) -> None:
    # Evictions say what recomputing each would cost (its recorded compute time).
    evicts = any(i.action == "evict" for i in plan.items)
    rows = [
        (
            i.kind.value,
            _what(i, plan, out.no_truncate),
            human_size(i.size),
            i.files,
            *((_recompute(i),) if evicts else ()),
            i.reason,
        )
        for i in plan.items
    ]
    recompute = [("recompute", "right")] if evicts else []
    columns = [("kind", "left"), ("what", "left"), ("size", "right"), ("files", "right")]
    out.table(None, [*columns, *recompute, ("why", "left")], rows, whole=("what",))


def _recompute(item: GcItem) -> str:
    if item.action != "evict":
        return ""
    return "unknown" if item.recompute is None else short_duration(item.recompute)


def _skipped_table(out: Output, plan: GcPlan) -> None:
    out.table(
        None,
        [("kind", "left"), ("what", "left"), ("size", "right"), ("why", "left")],
        [
            (
                s.kind.value,
                _what(s, plan, out.no_truncate),
                human_size(s.size),
                s.reason,
            )
            for s in plan.skipped
        ],
    )


def show_result(out: Output, result: GcResult, compaction: CompactionReport | None = None) -> None:
    plan = result.plan
    if out.emit(lambda: gc_document(plan, result, False, compaction), (o.item.id for o in result.removed)):
        return
    out.line()
    if result.skipped or result.failed:
        out.table(
            None,
            [("status", "left"), ("kind", "left"), ("what", "left"), ("why", "left")],
            [
                (
                    o.status,
                    o.item.kind.value,
                    _what(o.item, plan, out.no_truncate),
                    o.reason or "",
                )
                for o in (*result.failed, *result.skipped)
            ],
        )
    freed = f"{human_size(result.freed_bytes)} in {result.freed_files} file(s)"
    out.line(
        f"Removed {len(result.removed)} item(s), freed {freed}; "
        f"{len(result.skipped)} kept on a last check, {len(result.failed)} failed."
    )
    _say_leases_removed(out, result)


def _say_leases_removed(out: Output, result: GcResult) -> None:
    from cachetool.maintenance.liveness import lease_kind

    for lease in result.leases_removed:
        out.line(f"Removed the stale {lease_kind(lease)} of {lease}.", style="dim")
