"""`cachetool gc`: reclaim disk safely — leftovers first, then age and size limits.

A thin layer over `cachetool.maintenance.gc.gc_cache`: its arguments and options are the fields of
`GcOptions`, passed through as keywords. It asks on a terminal and renders the plan and the result."""

from __future__ import annotations

import inspect
import sys
from dataclasses import fields
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
from cachetool.maintenance.gc import NOTHING_SELECTED, GcOptions, option_keyword

if TYPE_CHECKING:
    from cachetool.maintenance.gc import GcRun
    from cachetool.maintenance.gc.plan import GcPlan

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
    break_lease: _BreakLease = None,
    dry_run: _DryRun = False,
    yes: _Yes = False,
    cache_dir: CacheDirOption = None,
    fmt: FormatOption = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    no_truncate: NoTruncateOption = False,
    **options: Any,
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
        dry_run=dry_run,
        yes=yes,
        **options,
    )


def _option_parameters() -> list[inspect.Parameter]:
    """The command's arguments and options, as `GcOptions` declares them (help, flag, default)."""
    out = []
    for f in fields(GcOptions):
        keyword, help, default = option_keyword(f), f.metadata["help"], f.metadata["cli_default"]
        flag = "--" + keyword.replace("_", "-")
        if f.name == "fingerprints":
            annotation: Any = Annotated[list[str] | None, typer.Argument(help=help, show_default=False)]
        elif f.type == "bool":
            annotation, default = Annotated[bool, typer.Option(flag, help=help)], False
        elif f.type == "tuple[str, ...]":
            annotation = Annotated[list[str] | None, typer.Option(flag, help=help)]
        else:
            kind = Path if f.name == "tmp_dir" else str
            annotation = Annotated[
                kind | None, typer.Option(flag, help=help, show_default=default is not None)
            ]
        out.append(
            inspect.Parameter(keyword, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    return out


def _signature() -> inspect.Signature:
    sig = inspect.signature(gc_command, eval_str=True)
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != "options"
    ]
    first = sorted(_option_parameters(), key=lambda p: p.name != "fingerprints")  # the argument first
    return sig.replace(parameters=[*first, *own])


gc_command.__signature__ = _signature()  # type: ignore[attr-defined]


@handle_errors
def _break_lease(cache_dir: Path | None, name: str) -> None:
    """Run `break_lease` on the cache root and say what went."""
    from cachetool.cache.dirs import existing_root
    from cachetool.maintenance.liveness import break_lease

    lease = break_lease(existing_root(cache_dir), name)
    typer.echo(f"Removed the lease of {lease} (logged in the ledger).")


@handle_errors
def _gc(fmt: OutputFormat, no_truncate: bool, **keywords: Any) -> None:
    """Run `gc_cache(**keywords)`, asking on a terminal, and render what it did."""
    from cachetool.maintenance.gc import ConfirmationNeeded, gc_cache

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
