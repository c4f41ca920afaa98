"""`cachetool verify`: integrity of every cache file; non-zero exit on problems (a CI step)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cli.common import CACHE_DIR, command, confirm, is_remote, opt, output
from cachetool.cli.output import Output, OutputFormat, hint, warn
from cachetool.errors import CachetoolError

if TYPE_CHECKING:
    from cachetool.maintenance.verify.findings import VerifyReport
    from cachetool.maintenance.verify.quarantine import QuarantinePlan


@command(
    None,
    "cachetool.maintenance.verify.VerifyOptions",
    "fingerprints cache_dir deep record quarantine list_quarantine restore stale dry_run yes "
    "strict jobs shard fmt as_json quiet",
    cache_dir=CACHE_DIR,
    yes=opt("--yes", "-y", help="With --quarantine: do not ask for confirmation."),
    **output("github", quiet="the entries with errors, one a line"),
)
def verify_command(cache_dir: Path | None, out: Output, yes: bool, **options: Any) -> int:
    """Prove every cache file is whole and what it claims to be.

    Checks each entry: the file is an Arrow IPC stream that reads to its end-of-stream marker
    (a stream cut at a message boundary reads without an error in pyarrow, so both are checked);
    the fingerprint inside matches the file name; shard sets and source-split shards are
    complete; source splits have the rows `dataset_info.json` promises; every file `state.json`
    names exists and is whole; indices point inside their data. Leftovers (`tmp*`,
    `*.incomplete/`, stale locks) are warnings; a file a live process is writing right now is
    reported as "being written by pid N", never as corrupt. Ledger records whose files are gone
    are information. With --stale, an entry computed by code that has changed since (a function
    of your own module, which datasets hashes by name) is an error too.

    --quarantine is a plan first: `--dry-run` prints what would move; otherwise the plan is shown
    and confirmed (`-y` skips the question; without a terminal and without `--yes` the plan is
    printed and nothing moves). Right before each move the file is checked again: still the
    version verify read, not a symlink, not held or mapped by a live process.

    Exit codes: 0 no errors (warnings alone exit 0 unless --strict); 1 errors found; 2 usage
    (bad option, missing cache, unknown fingerprint), or --quarantine needs confirmation (pass
    --yes).

    **Examples**

        cachetool verify

        cachetool verify --deep --record    # remember checksums

        cachetool verify --deep             # later: which bytes changed?

        cachetool verify 7a57 --json

        cachetool verify --quarantine --dry-run    # what would move aside

        cachetool verify --quarantine -y    # move broken files aside

        cachetool verify --quarantine --list    # what the quarantine holds

        cachetool verify --format github    # annotations in a GitHub Actions step

        cachetool verify --stale            # results of code edited since

        cachetool verify --deep --shard 3/8 --json > 3.json    # one job of 8

        cachetool verify s3://team-bucket/hf-cache --deep   # a remote
    """
    options["fingerprints"] = options["fingerprints"] or ()
    if is_remote(next(iter(options["fingerprints"]), None)):
        from cachetool.cli.remote import remote_verify

        if options["shard"] is not None:
            raise CachetoolError("--shard: a remote is verified whole, not in shards")
        local = [k for k in ("record", "quarantine", "list_quarantine", "restore", "stale") if options[k]]
        if local or cache_dir is not None:
            flag = "--" + (local[0].replace("_", "-") if local else "cache-dir")
            raise CachetoolError(f"{flag} is for a local cache, not a remote")
        url, *fps = options["fingerprints"]
        return remote_verify(url, fps, options["deep"], out)
    with _deep_run() if options["deep"] and not options["list_quarantine"] else nullcontext():
        from cachetool.cache.locations import existing_root
        from cachetool.maintenance.verify import VerifyOptions, run_verify

        opts = VerifyOptions(**options)
        root = existing_root(cache_dir)
        if opts.list_quarantine:
            _list_quarantine(out, root)
            return 0
        with _progress(out) as (update, stop):

            def ask(plan: QuarantinePlan) -> bool:
                stop()
                return _confirm(out, plan)

            report = run_verify(root, opts, progress=update, confirm=None if yes else ask)
        warn(*report.restore_notes)
        hint(*(f"restored {dst}" for _, dst in report.restored))
        if opts.restore and not report.restored:
            hint("nothing to restore")
        _show(out, report)
        if report.would_quarantine:
            hint("run again without --dry-run to move them (each is checked again right before)")
        return int(report.exit_code)


def _list_quarantine(out: Output, root: Path) -> None:
    """`verify --quarantine --list`: what the quarantine holds (`quarantined(root)`)."""
    from cachetool.formatting import compact_age, human_size
    from cachetool.maintenance.verify.findings import rel
    from cachetool.maintenance.verify.quarantine import quarantined

    items = quarantined(root)
    if out.emit(
        lambda: {"root": os.fsdecode(root), "quarantine": [q.to_json() for q in items]},
        (os.fsdecode(q.path) for q in items),
    ):
        return
    if not items:
        out.line("The quarantine is empty.")
        return
    now = time.time()
    rows = [
        (
            rel(q.original, root),
            human_size(q.size),
            f"{compact_age(now - q.time)} ago",
            q.problem + (f" (cannot go back: {q.stays})" if q.stays else ""),
        )
        for q in items
    ]
    columns = [("from", "left"), ("size", "right"), ("moved", "right"), ("problem", "left")]
    out.table(None, columns, rows, whole=("from",))
    size = human_size(sum(q.size for q in items))
    out.line(f"{len(items)} item(s), {size} in {rel(root / '.cachetool' / 'quarantine', root)}")


@contextmanager
def _deep_run() -> Iterator[None]:
    """What a deep verify's process needs: pyarrow imports numpy, whose OpenBLAS starts a thread
    per core that spins for a while (0.05 s of CPU here), and --deep does no linear algebra and
    wants those cores for reading; its imports, scan and reads make many objects and few cycles,
    so no garbage collection runs (they were 10% of its start-up's CPU), nor walks them after."""
    from cachetool.cache.walk import gc_paused

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with gc_paused(freeze=True):  # what it made is left out of any later collection's walk
        yield


def _confirm(out: Output, plan: QuarantinePlan) -> bool:
    """Ask before moving anything; without a terminal (or outside human output) print the plan
    and refuse: a prompt nobody can answer stops with "pass --yes" (exit 2)."""
    n = len(plan.paths)
    if not out.human or not sys.stdin.isatty():
        _show(out, plan.dry_run())
        raise CachetoolError(f"refusing to quarantine {n} file(s) without confirmation: pass --yes")
    from cachetool.maintenance.verify.findings import rel

    out.line("Would move to .cachetool/quarantine/ (each checked again right before):", style="bold")
    for p in plan.paths:
        out.line(f"  {rel(p, plan.report.root)}")
    if confirm(f"Quarantine {n} file(s)?"):
        return True
    hint("nothing moved")
    return False


@contextmanager
def _progress(out: Output) -> Iterator[tuple[Callable[[int, int], None] | None, Callable[[], None]]]:
    """The status line on a terminal's stderr (human output only), as (update, stop): the header
    walk, then --deep's files with a bar. No update where nothing is drawn."""
    if not (sys.stderr.isatty() and out.human):
        yield None, lambda: None
        return
    from rich.progress import Progress

    from cachetool.cli.output import stderr_console

    with Progress(console=stderr_console(), transient=True) as status:
        task = status.add_task("Reading headers", total=None)

        def update(done: int, total: int) -> None:
            # total 0: the header walk (a running count); then --deep's files, with a bar
            if total:
                status.update(task, description="Validating", completed=done, total=total)
            else:
                status.update(task, description=f"Reading headers ({done} files)")

        yield update, status.stop


def _show(out: Output, report: VerifyReport) -> None:
    """The report in the chosen sink."""
    shown = report.errors + (report.warnings if report.strict else ())
    if out.format == OutputFormat.github:
        from cachetool.formatting import annotation

        for f in report.findings:
            level = {"error": "error", "warning": "warning", "info": "notice"}[f.severity.value]
            msg = f.problem + (f" — {f.hint}" if f.hint else "")
            sys.stdout.write(annotation(level, msg, file=os.fsdecode(f.path)) + "\n")
    elif not out.emit(report.to_json, dict.fromkeys(f.entry or os.fsdecode(f.path) for f in shown)):
        render(out, report)


def render(out: Output, report: VerifyReport) -> None:
    """The human report: each finding, what moved (or would), the counts."""
    from cachetool.maintenance.verify.findings import rel as relative

    def rel(p: Path) -> str:
        return relative(p, report.root)

    styles = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for f in report.findings:
        label = f.entry if f.entry and "/" not in f.entry else f.kind
        out.line(f"{f.severity.value:<8}{f.problem}", style=styles[f.severity.value])
        where = out.path(rel(f.path), out.width - 11 - len(label))  # names whole
        out.line(f"        {label} · {where}", style="dim")
        if f.hint:  # never wrapped: the command in it stays on one line, to paste as printed
            out.line(f"        hint: {f.hint}", style="dim", wrap=False)
    if report.findings:
        out.line()
    for src, dst in report.quarantined:
        out.line(f"quarantined {rel(src)} -> {rel(dst)}")
    for src in report.would_quarantine or ():
        out.line(f"would quarantine {rel(src)}")
    n_err, n_warn = len(report.errors), len(report.warnings)
    n_info = len(report.findings) - n_err - n_warn
    deep = f", {report.bytes_checked:,} bytes read in full" if report.deep else ""
    rec = f", {report.recorded} checksums recorded" if report.recorded else ""
    part = f" of shard {report.shard}" if report.shard is not None else ""
    out.line(
        f"Checked {report.entries_checked} entries{part}, {report.files_checked} files{deep}{rec}: "
        f"{n_err} error(s), {n_warn} warning(s), {n_info} info.",
        style="bold red" if n_err else ("yellow" if n_warn else "green"),
    )
