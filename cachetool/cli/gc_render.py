"""How `cachetool gc` shows a plan and what a run did: the human tables (what would go, what is
kept and why, what a run removed, kept on a last check or failed), the `--json` document
(`gc_document`) and the ids of `-q`. No Typer here: `cachetool.cli.gc` is the command."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cli.output import Output, OutputFormat, hint, warn
from cachetool.formatting import human_size

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport
    from cachetool.maintenance.gc import GcRun
    from cachetool.maintenance.gc.plan import GcPlan, GcResult


def _where(path: Path, plan: GcPlan, whole: bool = False) -> str:
    """The item's path inside the cache (or the temp dir, named above the table), shortened from
    the middle for a table; names, hashes among them, stay whole. The full path is in --json."""
    from cachetool.formatting import short_path

    for base in (plan.root, plan.temp_dir):
        if base is None:
            continue
        try:
            rel = path.relative_to(base)
        except ValueError:
            continue
        return short_path(rel, None if whole else 40)
    return short_path(path, None if whole else 40)


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
        "compaction": compaction.to_json() if compaction is not None else None,
    }


def show_compaction(out: Output, run: GcRun) -> None:
    """One line for the ledger compaction that followed (or would follow) the removals."""
    if run.compaction is not None and out.format == OutputFormat.human:
        from cachetool.cli.stats import compaction_line
        from cachetool.history.compact import AUTO_BYTES

        out.line(f"{compaction_line(run.compaction)} (over {human_size(AUTO_BYTES)})")
        for w in run.compaction.warnings:
            warn(w)


def show_plan(
    out: Output, plan: GcPlan, *, dry_run: bool, final: bool, compaction: CompactionReport | None = None
) -> None:
    """The plan in the chosen sink. `final`: nothing else will be printed (dry run, refusal)."""
    if out.format == OutputFormat.json:
        if final:
            out.json(gc_document(plan, None, dry_run, compaction))
        return
    if out.format == OutputFormat.quiet:
        if final:
            out.ids(i.id for i in plan.items)
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
    rows = [
        (
            i.kind.value,
            i.fingerprint or _where(i.path, plan, out.no_truncate),
            human_size(i.size),
            i.files,
            i.reason,
        )
        for i in plan.items
    ]
    out.table(
        None,
        [("kind", "left"), ("what", "left"), ("size", "right"), ("files", "right"), ("why", "left")],
        rows,
        whole=("what",),
    )


def _skipped_table(out: Output, plan: GcPlan) -> None:
    out.table(
        None,
        [("kind", "left"), ("what", "left"), ("size", "right"), ("why", "left")],
        [
            (
                s.kind.value,
                s.fingerprint or _where(s.path, plan, out.no_truncate),
                human_size(s.size),
                s.reason,
            )
            for s in plan.skipped
        ],
    )


def show_result(out: Output, result: GcResult, compaction: CompactionReport | None = None) -> None:
    plan = result.plan
    if out.format == OutputFormat.json:
        out.json(gc_document(plan, result, False, compaction))
        return
    if out.format == OutputFormat.quiet:
        out.ids(o.item.id for o in result.removed)
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
                    o.item.fingerprint or _where(o.item.path, plan, out.no_truncate),
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
    for lease in result.leases_removed:
        out.line(f"Removed the stale lease of {lease}.", style="dim")
