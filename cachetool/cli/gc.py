"""`cachetool gc`: reclaim disk safely — leftovers first, then age and size limits.

A thin layer over `cachetool.maintenance.gc.gc_cache` (same keywords): it asks on a terminal and
renders the plan and the result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cachetool.cli.common import (
    CacheDirOption,
    FormatOption,
    JsonOption,
    NoTruncateOption,
    QuietOption,
    confirm,
    handle_errors,
)
from cachetool.cli.gc_render import gc_document, show_compaction, show_plan, show_result
from cachetool.cli.output import Output, OutputFormat, choose_format, error, hint, warn
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import human_size

if TYPE_CHECKING:
    from cachetool.maintenance.gc import GcPlan, GcRun

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
        help="Evict entries not used in this long (e.g. 30d): last ledger record, else modified time. "
        "With --quarantine: purge what was moved aside at least this long ago.",
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
_Quarantine = Annotated[
    bool,
    typer.Option(
        "--quarantine",
        help="Purge the quarantine: delete what `verify --quarantine` moved aside into "
        ".cachetool/quarantine/ (with --older-than: moved aside at least that long ago). Nothing "
        "else is removed in that run.",
    ),
]
_BreakLease = Annotated[
    str | None,
    typer.Option(
        "--break-lease",
        metavar="ID",
        help="Remove the lease ID (as gc shows it) and do nothing else: for a run you know is gone "
        "(its host died, or the lease is forged). Logged in the ledger.",
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
    quarantine: _Quarantine = False,
    break_lease: _BreakLease = None,
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
    Leases that expired, or whose process on this host is gone, are removed and logged. A lease
    lives at most an hour after its last renewal, whatever it says; gc shows each live one with
    its file, host, pid and expiry, and `--break-lease ID` removes one whose run you know is gone.

    **Examples**

        cachetool gc --temp --dry-run

        cachetool gc --temp --min-age 0 -y

        cachetool gc --older-than 30d --max-size 50GB

        cachetool gc --dataset csv --older-than 7d --keep 3f2a9c1b

        cachetool gc $(cachetool ls -q --filter "used>30d") --dry-run

        cachetool gc --quarantine --older-than 30d

    Exit codes: 0 the plan ran (or there was nothing to do, also when nothing was selected);
    1 some item failed, an entry named on the command line was kept, or another gc is running;
    2 bad options, or confirmation needed (pass --yes).
    """
    if break_lease is not None:
        _break_lease(cache_dir, break_lease)
        return
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
        quarantine=quarantine,
        dry_run=dry_run,
        yes=yes,
    )


@handle_errors
def _break_lease(cache_dir: Path | None, name: str) -> None:
    """Run `break_lease` on the cache root and say what went."""
    from cachetool.cache.dirs import existing_root
    from cachetool.maintenance.shared import break_lease

    lease = break_lease(existing_root(cache_dir), name)
    typer.echo(f"Removed the lease of {lease} (logged in the ledger).")


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
        show_plan(out, plan, dry_run=False, final=False)
        return confirm(f"Remove {len(plan.items)} item(s), {human_size(plan.expected_freed)}?")

    interactive = fmt == OutputFormat.human and sys.stdin.isatty()
    try:
        run = gc_cache(**keywords, confirm=ask if interactive else None)
    except ConfirmationNeeded as e:
        _warn(e.plan)
        show_plan(out, e.plan, dry_run=False, final=True)
        _hints(e.plan)
        n = len(e.plan.items)
        raise CachetoolError(f"refusing to remove {n} item(s) without confirmation: pass --yes") from None
    _show_run(out, run, plan_shown=bool(asked))


def _warn(plan: GcPlan) -> None:
    for w in plan.warnings:
        warn(w)


def _hints(plan: GcPlan) -> None:
    for h in plan.hints:
        hint(h)


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
        show_plan(out, plan, dry_run=True, final=True, compaction=run.compaction)
        show_compaction(out, run)
        for what, why in run.named_but_kept:
            warn(f"{what} would be kept: {why}")
        _hints(plan)
        return
    if run.declined or run.result is None:
        out.line("Nothing removed.")
        return
    if not plan.items and out.format == OutputFormat.human:
        show_plan(out, plan, dry_run=False, final=True)
        for lease in run.result.leases_removed:
            out.line(f"Removed the stale lease of {lease}.", style="dim")
    else:
        if not plan_shown and out.format == OutputFormat.human:
            show_plan(out, plan, dry_run=False, final=False)
        show_result(out, run.result, run.compaction)
        show_compaction(out, run)
    _hints(plan)
    for what, why in run.named_but_kept:
        error(f"{what} was named but kept: {why}")
    if run.exit_code != ExitCode.OK:
        raise typer.Exit(int(run.exit_code))
