"""`cachetool gc`: reclaim disk safely — leftovers first, then age and size limits."""

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
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import human_size

if TYPE_CHECKING:
    from cachetool.maintenance.gc import GcOptions, GcPlan, GcResult


def gc_command(
    fingerprints: Annotated[
        list[str] | None,
        typer.Argument(
            help="Entries to evict: fingerprints (or prefixes) or paths, as `cachetool ls -q` prints them.",
            show_default=False,
        ),
    ] = None,
    temp: Annotated[
        bool,
        typer.Option(
            "--temp",
            help="Remove leftovers of killed processes: `tmp*` files, `.incomplete` folders, interrupted "
            "saves and downloads, unheld locks of folders that are gone, and `hf_datasets-*` / `pymp-*` "
            "folders in the temp dir (nothing else there).",
        ),
    ] = False,
    tmp_dir: Annotated[
        Path | None,
        typer.Option(
            "--tmp-dir",
            help="The temp dir to clean with --temp. Default: the one datasets uses (TMPDIR, TEMP, TMP, "
            "else the system default).",
            show_default=False,
        ),
    ] = None,
    min_age: Annotated[
        str,
        typer.Option(
            "--min-age",
            help="Only touch what was modified at least this long ago (s, m, h, d, w). Processes on other "
            "hosts of a shared file system are invisible to gc: there, their leases and age are the "
            "guards (at least 10m for temp files no lease covers).",
        ),
    ] = "1h",
    all_users: Annotated[
        bool, typer.Option("--all-users", help="Also remove files other users own (default: only yours).")
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Evict entries not used in this long (e.g. 30d): last ledger record, else modified time.",
            show_default=False,
        ),
    ] = None,
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size",
            help="Evict least recently used entries until the cache is under this size (e.g. 50GB).",
            show_default=False,
        ),
    ] = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset", help="Only entries of this dataset (e.g. csv or csv/default-…); repeatable."
        ),
    ] = None,
    keep: Annotated[
        list[str] | None,
        typer.Option("--keep", help="Never evict this fingerprint or its recorded ancestors (repeatable)."),
    ] = None,
    include_sources: Annotated[
        bool,
        typer.Option(
            "--include-sources", help="Also evict source splits and saved datasets (kept by default)."
        ),
    ] = False,
    force_root: Annotated[
        bool,
        typer.Option(
            "--force-root",
            help="Clean the folder even if it is /, holds your home folder, or has no datasets "
            "layout (refused by default: there, leftover-looking names may be your own files).",
        ),
    ] = False,
    other_hosts_idle: Annotated[
        bool,
        typer.Option(
            "--other-hosts-idle",
            help="On a shared file system (NFS, Lustre, GPFS, CephFS, CIFS, FUSE), allow --min-age below "
            "10m for temp files no lease covers: you know no process on another host writes this cache "
            "outside `cachetool run` or `cachetool.tracing()`.",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Show the plan (what, why, bytes, files) and stop.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
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
        fingerprints or [],
        temp,
        tmp_dir,
        min_age,
        all_users,
        older_than,
        max_size,
        dataset or [],
        keep or [],
        include_sources,
        dry_run,
        yes,
        cache_dir,
        choose_format(fmt, as_json, quiet),
        force_root,
        no_truncate,
        other_hosts_idle,
    )


def parse_options(
    fingerprints: list[str],
    temp: bool,
    tmp_dir: Path | None,
    min_age: str,
    all_users: bool,
    older_than: str | None,
    max_size: str | None,
    datasets: list[str],
    keep: list[str],
    include_sources: bool,
    force_root: bool = False,
    other_hosts_idle: bool = False,
) -> GcOptions:
    """Turn the command line into `GcOptions`; a bad value is a usage error quoting it."""
    from cachetool.cache.query import BYTE_UNITS, parse_duration, parse_quantity
    from cachetool.maintenance.gc import GcOptions

    age = parse_duration(min_age, "--min-age")
    older = parse_duration(older_than, "--older-than") if older_than is not None else None
    size = int(parse_quantity(max_size, BYTE_UNITS, "--max-size", max_size)) if max_size is not None else None
    options = GcOptions(
        temp=temp,
        tmp_dir=tmp_dir,
        min_age=age,
        all_users=all_users,
        older_than=older,
        max_size=size,
        datasets=tuple(datasets),
        fingerprints=tuple(fingerprints),
        keep=tuple(keep),
        include_sources=include_sources,
        force_root=force_root,
        other_hosts_idle=other_hosts_idle,
    )
    if tmp_dir is not None and not temp:
        raise CachetoolError("--tmp-dir only makes sense with --temp")
    return options


@handle_errors
def _gc(
    fingerprints: list[str],
    temp: bool,
    tmp_dir: Path | None,
    min_age: str,
    all_users: bool,
    older_than: str | None,
    max_size: str | None,
    datasets: list[str],
    keep: list[str],
    include_sources: bool,
    dry_run: bool,
    yes: bool,
    cache_dir: Path | None,
    fmt: OutputFormat,
    force_root: bool = False,
    no_truncate: bool = False,
    other_hosts_idle: bool = False,
) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.maintenance.gc import execute, plan_gc

    options = parse_options(
        fingerprints,
        temp,
        tmp_dir,
        min_age,
        all_users,
        older_than,
        max_size,
        datasets,
        keep,
        include_sources,
        force_root,
        other_hosts_idle,
    )
    root = existing_root(cache_dir)
    out = Output(fmt, no_truncate=no_truncate)
    if not options.temp and not options.evicts:
        # An empty selection (`gc $(cachetool ls -q --filter …)` when nothing matches) is nothing
        # to do, not a mistake: exit 0, and say so on stderr.
        from cachetool.maintenance.gc import GcPlan

        hint(NOTHING_SELECTED)
        if fmt == OutputFormat.json:
            out.json(gc_document(GcPlan(root, None, options, ()), None, dry_run))
        return
    plan = plan_gc(root, options)
    for w in plan.warnings:
        warn(w)
    if dry_run:
        _show_plan(out, plan, dry_run=True, final=True)
        for what, why in _named_but_kept(fingerprints, plan, None):
            warn(f"{what} would be kept: {why}")
        return
    if not plan.items:
        from cachetool.maintenance.gc import GcResult

        # Stale leases go without a question: they protect nothing any more.
        result = execute(plan) if plan.shared and plan.shared.stale else GcResult(plan, ())
        if fmt == OutputFormat.human:
            _show_plan(out, plan, dry_run=False, final=True)
            for lease in result.leases_removed:
                out.line(f"Removed the stale lease of {lease}.", style="dim")
        else:
            _show_result(out, result)
        _fail_if_named_kept(fingerprints, plan, None)
        return
    if not yes:
        if fmt != OutputFormat.human or not sys.stdin.isatty():
            _show_plan(out, plan, dry_run=False, final=True)
            raise CachetoolError(
                f"refusing to remove {len(plan.items)} item(s) without confirmation: pass --yes"
            )
        _show_plan(out, plan, dry_run=False, final=False)
        if not typer.confirm(
            f"Remove {len(plan.items)} item(s), {human_size(plan.expected_freed)}?", default=False
        ):
            out.line("Nothing removed.")
            return
    elif fmt == OutputFormat.human:
        _show_plan(out, plan, dry_run=False, final=False)
    result = execute(plan)
    _show_result(out, result)
    _fail_if_named_kept(fingerprints, plan, result)
    if result.exit_code != ExitCode.OK:
        raise typer.Exit(int(result.exit_code))


#: What gc says when nothing was selected at all (exit 0; see docs/gc.md).
NOTHING_SELECTED = (
    "nothing to do: no entries named and none of --temp, --older-than, --max-size, --dataset given "
    "(an empty `cachetool ls -q` selection selects nothing)"
)


def _named_but_kept(names: list[str], plan: GcPlan, result: GcResult | None) -> list[tuple[str, str]]:
    from cachetool.maintenance.gc import named_but_kept

    return named_but_kept(names, plan, result)


def _fail_if_named_kept(names: list[str], plan: GcPlan, result: GcResult | None) -> None:
    """Naming an entry asks for its removal: if gc keeps it, say why on stderr and exit 1."""
    kept = _named_but_kept(names, plan, result)
    if not kept:
        return
    for what, why in kept:
        error(f"{what} was named but kept: {why}")
    raise typer.Exit(int(ExitCode.PROBLEMS_FOUND))


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


def gc_document(plan: GcPlan, result: GcResult | None, dry_run: bool) -> dict[str, Any]:
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
    }


def render_dry_run(out: Output, plan: GcPlan) -> None:
    """Print a plan as `cachetool gc --dry-run` does (for other commands, e.g. the demo)."""
    _show_plan(out, plan, dry_run=True, final=True)


def _show_plan(out: Output, plan: GcPlan, *, dry_run: bool, final: bool) -> None:
    """The plan in the chosen sink. `final`: nothing else will be printed (dry run, refusal)."""
    if out.format == OutputFormat.json:
        if final:
            out.json(gc_document(plan, None, dry_run))
        return
    if out.format == OutputFormat.quiet:
        if final:
            out.ids(i.id for i in plan.items)
        return
    out.line(f"Cache: {out.path(plan.root, out.console.width - 7)}", style="bold")
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
    if plan.skipped:
        out.line()
        out.line("Kept:", style="bold")
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
    out.line()
    if plan.items:
        verb = "Would free" if dry_run else "Frees"
        freed = f"{human_size(plan.expected_freed)} in {plan.expected_files} file(s)"
        out.line(f"{verb} {freed} ({len(plan.items)} item(s)); {plan.keeps_sentence()}.")
    else:
        out.line(f"Nothing to remove; {plan.keeps_sentence()}.")
    if dry_run and plan.items:
        hint("run again without --dry-run to remove them (each item is checked again right before)")


def _show_result(out: Output, result: GcResult) -> None:
    plan = result.plan
    if out.format == OutputFormat.json:
        out.json(gc_document(plan, result, False))
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
