"""`cachetool verify`: integrity of every cache file; non-zero exit on problems (a CI step)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from cachetool.cli.common import (
    CacheDirOption,
    JsonOption,
    Output,
    OutputFormat,
    QuietOption,
    choose_format,
    format_option,
    handle_errors,
    hint,
    warn,
)
from cachetool.errors import CachetoolError, ExitCode


def verify_command(
    fingerprints: Annotated[
        list[str] | None,
        typer.Argument(
            help="Check only these entries (fingerprints, unique prefixes or paths).", show_default=False
        ),
    ] = None,
    cache_dir: CacheDirOption = None,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Also read and validate every buffer (offsets, UTF-8, "
            "nulls) and checksum every byte (xxh3).",
        ),
    ] = False,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="With --deep: store the checksums, so a later "
            "`verify --deep` reports files whose bytes changed.",
        ),
    ] = False,
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Move files with errors into <root>/.cachetool/quarantine/ (never deletes; logged).",
        ),
    ] = False,
    restore: Annotated[
        bool, typer.Option("--restore", help="Put quarantined files back, then verify.")
    ] = False,
    stale: Annotated[
        bool,
        typer.Option(
            "--stale",
            help="Also report entries computed by code that changed since: functions from your own "
            "modules, which datasets hashes by name (needs runs recorded by `cachetool run`).",
        ),
    ] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings too.")] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Threads for --deep (default: one per core).")
    ] = None,
    fmt: Annotated[
        OutputFormat, format_option("github", quiet="the entries with errors, one a line")
    ] = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
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

    Exit codes: 0 no errors (warnings alone exit 0 unless --strict); 1 errors found; 2 usage
    (bad option, missing cache, unknown fingerprint).

    **Examples**

        cachetool verify

        cachetool verify --deep --record    # remember checksums

        cachetool verify --deep             # later: which bytes changed?

        cachetool verify 7a57 --json

        cachetool verify --quarantine       # move broken files aside

        cachetool verify --format github    # annotations in a GitHub Actions step

        cachetool verify --stale            # results of code edited since
    """
    _verify(
        fingerprints or [],
        cache_dir,
        deep,
        record,
        quarantine,
        restore,
        strict,
        jobs,
        choose_format(fmt, as_json, quiet),
        stale,
    )


@handle_errors
def _verify(
    fingerprints: list[str],
    cache_dir: Path | None,
    deep: bool,
    record: bool,
    quarantine: bool,
    restore: bool,
    strict: bool,
    jobs: int | None,
    fmt: OutputFormat,
    stale: bool = False,
) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.maintenance import verify as v

    if record and not deep:
        raise CachetoolError("--record needs --deep (checksums come from reading every byte)")
    root = existing_root(cache_dir)
    out = Output(fmt)
    if restore:
        back = v.restore(root, warn=warn)
        for _, dst in back:
            hint(f"restored {dst}")
        if not back:
            hint("nothing to restore")
    progress = None
    status = None
    if sys.stderr.isatty() and fmt == OutputFormat.human:
        from rich.progress import Progress

        from cachetool.cli.common import stderr_console

        status = Progress(console=stderr_console(), transient=True)
        task = status.add_task("Reading headers", total=None)
        status.start()

        def progress(done: int, total: int) -> None:
            # total 0: the header walk (a running count); then --deep's files, with a bar
            if total:
                status.update(task, description="Validating", completed=done, total=total)
            else:
                status.update(task, description=f"Reading headers ({done} files)")

    try:
        report = v.verify_cache(root, fingerprints, deep=deep, record=record, jobs=jobs, progress=progress)
    finally:
        if status is not None:
            status.stop()
    if stale:
        report = v.with_stale_findings(report)
    if quarantine:
        report = v.quarantine(report)
    if fmt == OutputFormat.json:
        out.json(report.to_json())
    elif fmt == OutputFormat.quiet:
        shown = report.errors + (report.warnings if strict else ())
        out.ids(dict.fromkeys(f.entry or os.fsdecode(f.path) for f in shown))
    elif fmt == OutputFormat.github:
        from cachetool.annotations import annotation

        for f in report.findings:
            level = {"error": "error", "warning": "warning", "info": "notice"}[f.severity.value]
            msg = f"{f.problem}" + (f" — {f.hint}" if f.hint else "")
            sys.stdout.write(annotation(level, msg, file=os.fsdecode(f.path)) + "\n")
    else:
        render(out, report)
    if report.failed(strict):
        raise typer.Exit(int(ExitCode.PROBLEMS_FOUND))


def render(out: Output, report: object) -> None:
    from cachetool.maintenance.verify import VerifyReport

    assert isinstance(report, VerifyReport)

    def rel(p: Path) -> str:
        try:
            return os.fsdecode(p.relative_to(report.root))
        except ValueError:
            return os.fsdecode(p)

    styles = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for f in report.findings:
        label = f.entry if f.entry and "/" not in f.entry else f.kind
        out.line(f"{f.severity.value:<8}{f.problem}", style=styles[f.severity.value])
        where = out.path(rel(f.path), out.console.width - 11 - len(label))  # names whole
        out.line(f"        {label} · {where}", style="dim")
        if f.hint:  # a command stays on one line, to paste as printed
            out.line(f"        hint: {f.hint}", style="dim", wrap=not f.hint.startswith("cachetool "))
    if report.findings:
        out.line()
    for src, dst in report.quarantined:
        out.line(f"quarantined {rel(src)} -> {rel(dst)}")
    n_err, n_warn = len(report.errors), len(report.warnings)
    n_info = len(report.findings) - n_err - n_warn
    deep = f", {report.bytes_checked:,} bytes read in full" if report.deep else ""
    rec = f", {report.recorded} checksums recorded" if report.recorded else ""
    out.line(
        f"Checked {report.entries_checked} entries, {report.files_checked} files{deep}{rec}: "
        f"{n_err} error(s), {n_warn} warning(s), {n_info} info.",
        style="bold red" if n_err else ("yellow" if n_warn else "green"),
    )
