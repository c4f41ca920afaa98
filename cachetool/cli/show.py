"""`cachetool show`: everything known about one entry."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cli.common import CACHE_DIR, NO_TRUNCATE, OUTPUT, REQUIRED, arg, command
from cachetool.cli.output import Output, hint, warn
from cachetool.formatting import local_time, time_ago
from cachetool.hints import shell_command

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile, Entry
    from cachetool.history.lineage_view import EntryReport
    from cachetool.history.records.parts import CallSite
    from cachetool.history.records.steps import StepRecord


@command(
    fingerprint=arg("A fingerprint, a unique prefix of one, an alias, or a path.", default=REQUIRED),
    cache_dir=CACHE_DIR,
    **OUTPUT,
    no_truncate=NO_TRUNCATE,
)
def run_show(fingerprint: str, cache_dir: Path | None, out: Output) -> None:
    """Show everything known about one cache entry.

    Files with sizes and paths, content (data or indices), schema and `features`, row count, the
    fingerprint recorded inside each file and whether it matches the name, completeness (the
    end-of-stream marker), timestamps, expected rows for source splits, and the recorded lineage
    when the pipeline ran under `cachetool run`. A unique prefix of a fingerprint is enough.

    **Examples**

        cachetool show 7a5731241fa9ef8b

        cachetool show 7a57 --json

        cachetool show 7a57 --cache-dir /data/hf-cache

    Exit codes: 0 shown; 2 unknown or ambiguous fingerprint (candidates listed), or missing cache.
    """
    from cachetool.cache.locations import root_for
    from cachetool.cli.ls import report_warnings, scan_with_progress
    from cachetool.history.lineage_view import show_entry

    shown = show_entry(
        root_for(fingerprint, cache_dir),
        fingerprint,
        progress=lambda root, ledger: scan_with_progress(Path(root), ledger),
    )
    warn(*shown.warnings)
    if not out.emit(shown.to_json, [shown.entry.id if shown.entry is not None else shown.fingerprint]):
        render(out, shown)
    if shown.entry is not None:
        report_warnings(shown.report)


def render(out: Output, shown: EntryReport) -> None:
    """Human output: the facts, the files, the schema, then the recorded steps (only those when no
    cache file holds the fingerprint)."""
    e = shown.entry
    if e is None:
        n, start = len(shown.records), shown.unended
        if start is not None:  # a step began to make it and never ended
            site = start.call_site
            at = f" @ {os.path.basename(site.file or '?')}:{site.line}" if site is not None else ""
            out.line(
                f"{shown.fingerprint}: no cache file holds it: the step that was making it "
                f"({start.operation or 'a step'}{at}) never ended, its run {start.run} was killed in it "
                f"(`cachetool lineage {shown.fingerprint}`)"
            )
        else:
            made = f"the ledger records {n} step(s) that made it"
            out.line(f"{shown.fingerprint}: no cache file holds it; {made}")
        if shown.removed is not None:
            out.line(f"Its files were {shown.removed.said(local_time(shown.removed.time))}.")
        _render_records(out, shown.records)
        return
    facts = _facts(out, e, shown.pinned)
    if shown.stale:
        command = shell_command("explain", shown.fingerprint, "--cache-dir", os.fspath(shown.report.root))
        facts.append(("stale", f"yes: {shown.stale.removeprefix('stale: ')} (`{command}` says why)"))
    out.table(None, [("", "left"), ("", "left")], [(k, v) for k, v in facts if v not in (None, "")])
    for p in e.problems:
        out.line(f"problem: {p}", style="red")
    out.line()
    _render_files(out, shown.report.root, e)
    if any(f.summary is not None and f.summary.complete for f in e.files):  # a flipped byte reads `ok`
        deep = shell_command(
            "verify", "--deep", shown.fingerprint, "--cache-dir", os.fspath(shown.report.root)
        )
        hint(f"the check reads each file's schema and end; only `{deep}` reads every byte")
    if e.columns:
        out.line()
        features = shown.features or {}
        out.table(
            "Schema",
            [("column", "left"), ("arrow type", "left"), ("feature", "left")],
            [(n, t, _feature(features.get(n))) for n, t in e.columns],
        )
    if shown.records:
        out.line()
        _render_records(out, shown.records)


def _facts(out: Output, e: Entry, pinned: bool) -> list[tuple[str, Any]]:
    return [
        ("fingerprint", e.fingerprint or "(none)"),
        ("aliases", ", ".join(e.aliases) if e.aliases else None),
        ("kind", e.kind_str),
        ("dataset", e.dataset),
        ("split", e.split),
        ("content", e.content),
        ("path", out.path(e.path, out.width - 16)),
        ("rows", None if e.rows is None else f"{e.rows:,}"),
        ("expected rows", None if e.expected_rows is None else f"{e.expected_rows:,} (dataset_info.json)"),
        ("size", f"{e.size_str} ({e.size:,} bytes) in {len(e.files)} file(s)"),
        ("complete", None if e.complete is None else ("yes" if e.complete else "NO")),
        ("modified", _when(e.modified)),
        ("last used", _when(e.used)),
        ("operation", e.operation),
        ("parent", e.parent),
        ("deleted with", out.path(e.unit, out.width - 16) if e.unit and e.unit != e.path else None),
        ("pinned", "yes (gc never evicts it or its recorded ancestors)" if pinned else None),
    ]


def _render_files(out: Output, root: Path, e: Entry) -> None:
    """The files table. File names are never split: the table names files inside their common
    folder, given once. On a narrow terminal the fingerprint and state columns fold into one
    `check` column, so the file names keep their room: `ok`, or what is wrong."""
    folder = os.path.commonpath([f.path.parent for f in e.files]) if e.files else None
    if folder is not None:
        try:
            where = os.fsdecode(Path(folder).relative_to(root))
        except ValueError:
            where = out.path(Path(folder), 40)
        out.line(f"in {out.path(where, out.width - 3)}" if where != "." else "in (cache root)", style="dim")
    narrow = not out.no_truncate and out.width < 100
    rows = [_file_row(out, e, f, os.path.relpath(f.path, folder or "."), narrow) for f in e.files]
    wide = [("batches", "right"), ("fingerprint in file", "left"), ("state", "left")]
    columns = [
        ("file", "left"),
        ("size", "right"),
        ("rows", "right"),
        *([("check", "left")] if narrow else wide),
    ]
    out.table("Files", columns, rows, whole=("file",))


def _file_row(out: Output, e: Entry, f: CacheFile, name: str, narrow: bool) -> tuple[object, ...]:
    s = f.summary
    if s is None:
        return (name, f.size_str, "", "") if narrow else (name, f.size_str, "", "", "", "")
    from cachetool.history.lineage_view import fingerprint_check

    check = fingerprint_check(e, f)
    if check == "none":
        fp_note = "(none)"
    elif check == "matches":
        fp_note = "matches" if not out.no_truncate else f"{s.fingerprint} (matches)"
    else:
        fp_note = f"{s.fingerprint} (differs)"
    state = "complete" if s.complete else (s.error or s.format)
    n_rows = "" if s.rows is None else f"{s.rows:,}"
    if narrow:
        wrong = ([f"fingerprint {fp_note}"] if check == "differs" else []) + ([] if s.complete else [state])
        return (name, f.size_str, n_rows, "; ".join(wrong) or "ok")
    return (name, f.size_str, n_rows, "" if s.batches is None else s.batches, fp_note, state)


def _render_records(out: Output, records: Sequence[StepRecord]) -> None:
    if records:
        rec_rows = [
            (
                local_time(r.time, seconds=False),  # the row fits 80 columns whole
                r.operation or "",
                r.cache,
                f"{r.duration:.2f}s",
                ", ".join(p[:16] for p in r.parents),
                (r.function.qualname or "") if r.function else "",
                _site(r.call_site),
            )
            for r in records[-10:]
        ]
        headers = ("when", "op", "cache", "took", "parent", "function", "call site")
        out.table(
            f"Recorded ({len(records)} record(s), latest last)",
            [(h, "right" if h == "took" else "left") for h in headers],
            rec_rows,
            # times and parents stay whole (copyable); a long function or call site is cut
            widths={
                "when": (16, 16),
                "op": (2, 16),
                "cache": (5, 5),
                "parent": (16, max(16, *(len(r[4]) for r in rec_rows))),
                "function": (4, 24),
                "call site": (min(40, max((len(r[6]) for r in rec_rows), default=9)), 40),
            },
        )
        fallback = next((r.random_fallback for r in reversed(records) if r.random_fallback), None)
        if fallback is not None:
            out.line(
                f"datasets used a random fingerprint: {fallback.argument or 'the transform'} "
                f"could not be hashed ({fallback.error})",
                style="red",
            )


def _site(site: CallSite | None) -> str:
    if site is None:
        return ""
    return f"{os.path.basename(site.file or '?')}:{site.line if site.line is not None else '?'}"


def _feature(f: Any) -> str:
    if f is None:
        return ""
    if isinstance(f, dict) and f.get("_type") == "Value":
        return f"Value({f.get('dtype')})"
    if isinstance(f, dict) and "_type" in f:
        return str(f["_type"])
    return type(f).__name__


def _when(ts: float | None) -> str | None:
    return None if ts is None else f"{local_time(ts)} ({time_ago(ts)})"
