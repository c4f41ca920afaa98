"""`cachetool gc`: reclaim disk safely — leftovers first, then age and size limits.

A thin layer over `cachetool.maintenance.gc.gc_cache` (same keywords): it asks on a terminal and
renders the plan and the result."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cachetool.cli.common import (
    CacheDirOption,
    FormatOption,
    JsonOption,
    NoTruncateOption,
    Output,
    OutputFormat,
    QuietOption,
    choose_format,
    error,
    handle_errors,
    hint,
    warn,
)
from cachetool.errors import ExitCode
from cachetool.formatting import human_size

if TYPE_CHECKING:
    from cachetool.lineage.compact import CompactionReport
    from cachetool.maintenance.gc import GcPlan, GcResult, GcRun

_Fingerprints = Annotated[
    list[str] | None,
    typer.Argument(
        help="Entries to evict: fingerprints (or prefixes) or paths, as `cachetool ls -q` prints them.",
        show_default=False,
    ),
]
_Temp = Annotated[
    bool,
    typer.Option(
        "--temp",
        help="Remove leftovers of killed processes: `tmp*` files, `.incomplete` folders, interrupted "
        "saves and downloads, unheld locks of folders that are gone, and `hf_datasets-*` / `pymp-*` "
        "folders in the temp dir (nothing else there).",
    ),
]
_TmpDir = Annotated[
    Path | None,
    typer.Option(
        "--tmp-dir",
        help="The temp dir to clean with --temp. Default: the one datasets uses (TMPDIR, TEMP, TMP, "
        "else the system default).",
        show_default=False,
    ),
]
_MinAge = Annotated[
    str,
    typer.Option(
        "--min-age",
        help="Only touch what was modified at least this long ago (s, m, h, d, w). Processes on other "
        "hosts of a shared file system are invisible to gc: there, their leases and age are the "
        "guards (at least 10m for temp files no lease covers).",
    ),
]
_AllUsers = Annotated[
    bool, typer.Option("--all-users", help="Also remove files other users own (default: only yours).")
]
_OlderThan = Annotated[
    str | None,
    typer.Option(
        "--older-than",
        help="Evict entries not used in this long (e.g. 30d): last ledger record, else modified time.",
        show_default=False,
    ),
]
_MaxSize = Annotated[
    str | None,
    typer.Option(
        "--max-size",
        help="Evict least recently used entries until the cache is under this size (e.g. 50GB).",
        show_default=False,
    ),
]
_Dataset = Annotated[
    list[str] | None,
    typer.Option("--dataset", help="Only entries of this dataset (e.g. csv or csv/default-…); repeatable."),
]
_Keep = Annotated[
    list[str] | None,
    typer.Option("--keep", help="Never evict this fingerprint or its recorded ancestors (repeatable)."),
]
_IncludeSources = Annotated[
    bool,
    typer.Option("--include-sources", help="Also evict source splits and saved datasets (kept by default)."),
]
_ForceRoot = Annotated[
    bool,
    typer.Option(
        "--force-root",
        help="Clean the folder even if it is /, holds your home folder, or has no datasets "
        "layout (refused by default: there, leftover-looking names may be your own files).",
    ),
]
_OtherHostsIdle = Annotated[
    bool,
    typer.Option(
        "--other-hosts-idle",
        help="On a shared file system (NFS, Lustre, GPFS, CephFS, CIFS, FUSE), allow --min-age below "
        "10m for temp files no lease covers: you know no process on another host writes this cache "
        "outside `cachetool run` or `cachetool.tracing()`.",
    ),
]
_DryRun = Annotated[
    bool, typer.Option("--dry-run", "-n", help="Show the plan (what, why, bytes, files) and stop.")
]
_Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


# The docstring is the command's --help (description, examples, exit codes): that, not logic,
# makes this function long.
def gc_command(
    fingerprints: _Fingerprints = None,
    temp: _Temp = False,
    tmp_dir: _TmpDir = None,
    min_age: _MinAge = "1h",
    all_users: _AllUsers = False,
    older_than: _OlderThan = None,
    max_size: _MaxSize = None,
    dataset: _Dataset = None,
    keep: _Keep = None,
    include_sources: _IncludeSources = False,
    force_root: _ForceRoot = False,
    other_hosts_idle: _OtherHostsIdle = False,
    dry_run: _DryRun = False,
    yes: _Yes = False,
    cache_dir: CacheDirOption = None,
    fmt: FormatOption = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    no_truncate: NoTruncateOption = False,
) -> None:
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
    Leases that expired, or whose process on this host is gone, are removed and logged.

    **Examples**

        cachetool gc --temp --dry-run

        cachetool gc --temp --min-age 0 -y

        cachetool gc --older-than 30d --max-size 50GB

        cachetool gc --dataset csv --older-than 7d --keep 3f2a9c1b

        cachetool gc $(cachetool ls -q --filter "used>30d") --dry-run

    Exit codes: 0 the plan ran (or there was nothing to do, also when nothing was selected);
    1 some item failed, an entry named on the command line was kept, or another gc is running;
    2 bad options, or confirmation needed (pass --yes).
    """
    _gc(
        choose_format(fmt, as_json, quiet),
        no_truncate,
        cache_dir=cache_dir,
        fingerprints=fingerprints or [],
        temp=temp,
        tmp_dir=tmp_dir,
        min_age=min_age,
        all_users=all_users,
        older_than=older_than,
        max_size=max_size,
        dataset=dataset or [],
        keep=keep or [],
        include_sources=include_sources,
        force_root=force_root,
        other_hosts_idle=other_hosts_idle,
        dry_run=dry_run,
        yes=yes,
    )


@handle_errors
def _gc(fmt: OutputFormat, no_truncate: bool, **keywords: Any) -> None:
    """Run `gc_cache(**keywords)`, asking on a terminal, and render what it did."""
    from cachetool.maintenance.gc import gc_cache
    from cachetool.maintenance.gc.run import ConfirmationNeeded

    out = Output(fmt, no_truncate=no_truncate)
    asked: list[GcPlan] = []

    def ask(plan: GcPlan) -> bool:
        asked.append(plan)
        _warn(plan)
        _show_plan(out, plan, dry_run=False, final=False)
        return typer.confirm(
            f"Remove {len(plan.items)} item(s), {human_size(plan.expected_freed)}?", default=False
        )

    interactive = fmt == OutputFormat.human and sys.stdin.isatty()
    try:
        run = gc_cache(**keywords, confirm=ask if interactive else None)
    except ConfirmationNeeded as e:
        _warn(e.plan)
        _show_plan(out, e.plan, dry_run=False, final=True)
        raise
    _show_run(out, run, plan_shown=bool(asked))


def _warn(plan: GcPlan) -> None:
    for w in plan.warnings:
        warn(w)


def _show_run(out: Output, run: GcRun, *, plan_shown: bool) -> None:
    """Everything a run prints after `gc_cache` returned, and its exit code."""
    from cachetool.maintenance.gc import NOTHING_SELECTED

    plan = run.plan
    if not plan.options.selects:
        # An empty selection (`gc $(cachetool ls -q --filter …)` when nothing matches) is nothing
        # to do, not a mistake: exit 0, and say so on stderr.
        hint(NOTHING_SELECTED)
        if out.format == OutputFormat.json:
            out.json(gc_document(plan, None, run.dry_run))
        return
    if not plan_shown:
        _warn(plan)
    if run.dry_run:
        _show_plan(out, plan, dry_run=True, final=True, compaction=run.compaction)
        _show_compaction(out, run)
        for what, why in run.named_but_kept:
            warn(f"{what} would be kept: {why}")
        return
    if run.declined or run.result is None:
        out.line("Nothing removed.")
        return
    if not plan.items and out.format == OutputFormat.human:
        _show_plan(out, plan, dry_run=False, final=True)
        for lease in run.result.leases_removed:
            out.line(f"Removed the stale lease of {lease}.", style="dim")
    else:
        if not plan_shown and out.format == OutputFormat.human:
            _show_plan(out, plan, dry_run=False, final=False)
        _show_result(out, run.result, run.compaction)
        _show_compaction(out, run)
    for what, why in run.named_but_kept:
        error(f"{what} was named but kept: {why}")
    if run.exit_code != ExitCode.OK:
        raise typer.Exit(int(run.exit_code))


# ------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------


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
    o = plan.options
    return {
        "root": os.fsdecode(plan.root),
        "temp_dir": os.fsdecode(plan.temp_dir) if plan.temp_dir else None,
        "dry_run": dry_run,
        "options": {
            "temp": o.temp,
            "min_age": o.min_age,
            "all_users": o.all_users,
            "older_than": o.older_than,
            "max_size": o.max_size,
            "datasets": list(o.datasets),
            "fingerprints": list(o.fingerprints),
            "keep": list(o.keep),
            "include_sources": o.include_sources,
            "other_hosts_idle": o.other_hosts_idle,
        },
        "plan": plan.to_json(),
        "result": result.to_json() if result is not None else None,
        "compaction": compaction.to_json() if compaction is not None else None,
    }


def render_dry_run(out: Output, plan: GcPlan) -> None:
    """Print a plan as `cachetool gc --dry-run` does (for other commands, e.g. the demo)."""
    _show_plan(out, plan, dry_run=True, final=True)


def _show_compaction(out: Output, run: GcRun) -> None:
    """One line for the ledger compaction that followed (or would follow) the removals."""
    from cachetool.cli.stats import compaction_line
    from cachetool.lineage.compact import AUTO_BYTES

    if run.compaction is not None and out.format == OutputFormat.human:
        out.line(f"{compaction_line(run.compaction)} (over {human_size(AUTO_BYTES)})")
        for w in run.compaction.warnings:
            warn(w)


def _show_plan(
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
    for note in plan.shared.notes(dry_run=dry_run) if plan.shared is not None else ():
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


def _show_result(out: Output, result: GcResult, compaction: CompactionReport | None = None) -> None:
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
