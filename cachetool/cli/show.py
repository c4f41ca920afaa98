"""`cachetool show`: everything known about one entry."""

from __future__ import annotations

import os
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
    handle_errors,
)

if TYPE_CHECKING:
    from cachetool.cache.scan import CacheReport, Entry
    from cachetool.lineage.ledger import Ledger
    from cachetool.lineage.records import CallSite, StepRecord


def show_command(
    fingerprint: Annotated[
        str, typer.Argument(help="A fingerprint, a unique prefix of one, an alias, or a path.")
    ],
    cache_dir: CacheDirOption = None,
    fmt: FormatOption = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    no_truncate: NoTruncateOption = False,
) -> None:
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
    _show(fingerprint, cache_dir, choose_format(fmt, as_json, quiet), no_truncate)


@handle_errors
def _show(prefix: str, cache_dir: Path | None, fmt: OutputFormat, no_truncate: bool = False) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.cache.query import is_pinned
    from cachetool.cli.ls import read_pinned, report_warnings, scan_with_progress
    from cachetool.lineage.ledger import Ledger, resolve

    root = existing_root(cache_dir)
    out = Output(fmt, no_truncate=no_truncate)
    ledger = Ledger.load(root.expanduser().resolve(), follow=False)
    report = scan_with_progress(root, out, ledger)
    got = resolve(prefix, report, ledger)
    entry = got.entry
    if entry is None:
        _show_recorded_only(out, fmt, report, got.fingerprint, ledger.for_result(got.fingerprint))
        return
    records = _records(ledger, entry, got.fingerprint)
    pinned = is_pinned(entry, read_pinned(report.root))
    if fmt == OutputFormat.json:
        out.json({**show_document(report, entry, records), "pinned": pinned})
    elif fmt == OutputFormat.quiet:
        out.ids([entry.id])
    else:
        render(out, report, entry, records, pinned)
    report_warnings(report)


def _show_recorded_only(
    out: Output, fmt: OutputFormat, report: CacheReport, fp: str, records: list[StepRecord]
) -> None:
    """A fingerprint the ledger records but no cache file holds (in memory, or removed since)."""
    if fmt == OutputFormat.json:
        out.json(
            {
                "fingerprint": fp,
                "kind": None,
                "root": os.fsdecode(report.root),
                "files": [],
                "records": [r.to_json() for r in records],
            }
        )
        return
    if fmt == OutputFormat.quiet:
        out.ids([fp])
        return
    out.line(f"{fp}: no cache file holds it; the ledger records {len(records)} step(s) that made it")
    _render_records(out, records)


def _records(ledger: Ledger, entry: Entry, named: str) -> list[StepRecord]:
    """The records of the entry's fingerprints, and of the one named when its step wrote the
    entry's files under another name (oldest first)."""
    fps = dict.fromkeys(fp for fp in (entry.fingerprint, *entry.aliases, named) if fp)
    return sorted((r for fp in fps for r in ledger.for_result(fp)), key=lambda r: (r.time, r.run, r.seq))


def show_document(report: CacheReport, e: Entry, records: list[StepRecord]) -> dict[str, Any]:
    """The `--json` document of `show` (schema in docs/listing.md)."""
    doc = e.to_json()
    doc["root"] = os.fsdecode(report.root)
    doc["files"] = [f.to_json() for f in e.files]
    doc["schema"] = [{"name": n, "type": t} for n, t in e.columns]
    features = next((f.summary.features for f in e.files if f.summary and f.summary.features), None)
    doc["features"] = features
    doc["records"] = [r.to_json() for r in records]
    return doc


def render(
    out: Output, report: CacheReport, e: Entry, records: list[StepRecord], pinned: bool = False
) -> None:
    def rel(p: Path) -> str:
        try:
            return os.fsdecode(p.relative_to(report.root))
        except ValueError:
            return out.path(p, 40)

    facts: list[tuple[str, Any]] = [
        ("fingerprint", e.fingerprint or "(none)"),
        ("aliases", ", ".join(e.aliases) if e.aliases else None),
        ("kind", e.kind_str),
        ("dataset", e.dataset),
        ("split", e.split),
        ("content", e.content),
        ("path", out.path(e.path, out.console.width - 16)),
        ("rows", None if e.rows is None else f"{e.rows:,}"),
        ("expected rows", None if e.expected_rows is None else f"{e.expected_rows:,} (dataset_info.json)"),
        ("size", f"{e.size_str} ({e.size:,} bytes) in {len(e.files)} file(s)"),
        ("complete", None if e.complete is None else ("yes" if e.complete else "NO")),
        ("modified", _when(e.modified)),
        ("last used", _when(e.used)),
        ("operation", e.operation),
        ("parent", e.parent),
        ("deleted with", out.path(e.unit, out.console.width - 16) if e.unit and e.unit != e.path else None),
        ("pinned", "yes (gc never evicts it or its recorded ancestors)" if pinned else None),
    ]
    out.table(None, [("", "left"), ("", "left")], [(k, v) for k, v in facts if v not in (None, "")])
    for p in e.problems:
        out.line(f"problem: {p}", style="red")
    out.line()
    # File names are never split: the table names files inside their common folder, given once.
    folder = os.path.commonpath([f.path.parent for f in e.files]) if e.files else None
    if folder is not None:
        out.line(f"in {out.path(rel(Path(folder)), out.console.width - 3)}", style="dim")

    def name(p: Path) -> str:
        return os.path.relpath(p, folder) if folder is not None else rel(p)

    # On a narrow terminal the fingerprint and state columns fold into one `check` column, so
    # the file names keep their room: `ok`, or what is wrong.
    narrow = not out.no_truncate and out.console.width < 100
    rows: list[tuple[object, ...]] = []
    for f in e.files:
        s = f.summary
        if s is None:
            rows.append(
                (name(f.path), f.size_str, "", "") if narrow else (name(f.path), f.size_str, "", "", "", "")
            )
            continue
        matches = s.fingerprint is None or bool(
            e.fingerprint
            and (
                s.fingerprint == e.fingerprint or (f.shard and s.fingerprint.startswith(e.fingerprint + "_"))
            )
        )
        if s.fingerprint is None:
            fp_note = "(none)"
        elif matches:
            fp_note = "matches" if not out.no_truncate else f"{s.fingerprint} (matches)"
        else:
            fp_note = f"{s.fingerprint} (differs)"
        state = "complete" if s.complete else (s.error or s.format)
        n_rows = "" if s.rows is None else f"{s.rows:,}"
        if narrow:
            wrong = ([] if matches else [f"fingerprint {fp_note}"]) + ([] if s.complete else [state])
            rows.append((name(f.path), f.size_str, n_rows, "; ".join(wrong) or "ok"))
            continue
        rows.append(
            (name(f.path), f.size_str, n_rows, "" if s.batches is None else s.batches, fp_note, state)
        )
    out.table(
        "Files",
        [("file", "left"), ("size", "right"), ("rows", "right"), ("check", "left")]
        if narrow
        else [
            ("file", "left"),
            ("size", "right"),
            ("rows", "right"),
            ("batches", "right"),
            ("fingerprint in file", "left"),
            ("state", "left"),
        ],
        rows,
        whole=("file",),
    )
    if e.columns:
        out.line()
        features = next((f.summary.features for f in e.files if f.summary and f.summary.features), None) or {}
        out.table(
            "Schema",
            [("column", "left"), ("arrow type", "left"), ("feature", "left")],
            [(n, t, _feature(features.get(n))) for n, t in e.columns],
        )
    if records:
        out.line()
        _render_records(out, records)


def _render_records(out: Output, records: list[StepRecord]) -> None:
    if records:
        rec_rows = []
        for r in records[-10:]:
            rec_rows.append(
                (
                    _clock(r.time),
                    r.operation or "",
                    r.cache,
                    f"{r.duration:.2f}s",
                    ", ".join(p[:16] for p in r.parents),
                    (r.function.qualname or "") if r.function else "",
                    _site(r.call_site),
                )
            )
        out.table(
            f"Recorded ({len(records)} record(s), latest last)",
            [
                ("when", "left"),
                ("op", "left"),
                ("cache", "left"),
                ("took", "right"),
                ("parent", "left"),
                ("function", "left"),
                ("call site", "left"),
            ],
            rec_rows,
        )
        fallback = next((r.random_fallback for r in reversed(records) if r.random_fallback), None)
        if fallback is not None:
            out.line(
                f"datasets used a random fingerprint: {fallback.argument or 'the transform'} "
                f"could not be hashed ({fallback.error})",
                style="red",
            )


def _clock(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return ""
    from datetime import datetime

    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


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
    if ts is None:
        return None
    from datetime import datetime

    import humanize

    when = datetime.fromtimestamp(ts)
    return f"{when.isoformat(sep=' ', timespec='seconds')} ({humanize.naturaltime(when)})"
