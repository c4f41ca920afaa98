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

    root = existing_root(cache_dir)
    out = Output(fmt, no_truncate=no_truncate)
    report = scan_with_progress(root, out)
    entry = report.find(prefix)
    records = _records(report.root, entry)
    pinned = is_pinned(entry, read_pinned(report.root))
    if fmt == OutputFormat.json:
        out.json({**show_document(report, entry, records), "pinned": pinned})
    elif fmt == OutputFormat.quiet:
        out.ids([entry.id])
    else:
        render(out, report, entry, records, pinned)
    report_warnings(report)


def _records(root: Path, entry: Entry) -> list[dict[str, Any]]:
    try:
        from cachetool.lineage.ledger import records_for
    except ImportError:
        return []
    out: list[dict[str, Any]] = []
    for fp in (entry.fingerprint, *entry.aliases):
        if fp:
            out.extend(records_for(root, fp))
    return out


def show_document(report: CacheReport, e: Entry, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The `--json` document of `show` (schema in docs/listing.md)."""
    doc = e.to_json()
    doc["root"] = os.fsdecode(report.root)
    doc["files"] = [f.to_json() for f in e.files]
    doc["schema"] = [{"name": n, "type": t} for n, t in e.columns]
    features = next((f.summary.features for f in e.files if f.summary and f.summary.features), None)
    doc["features"] = features
    doc["records"] = records
    return doc


def render(
    out: Output, report: CacheReport, e: Entry, records: list[dict[str, Any]], pinned: bool = False
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

    rows: list[tuple[object, ...]] = []
    for f in e.files:
        s = f.summary
        if s is None:
            rows.append((name(f.path), f.size_str, "", "", "", ""))
            continue
        if s.fingerprint is None:
            fp_note = "(none)"
        elif (e.fingerprint and s.fingerprint in (e.fingerprint,)) or (
            f.shard and e.fingerprint and s.fingerprint.startswith(e.fingerprint + "_")
        ):
            fp_note = "matches" if not out.no_truncate else f"{s.fingerprint} (matches)"
        else:
            fp_note = f"{s.fingerprint} (differs)"
        state = "complete" if s.complete else (s.error or s.format)
        rows.append(
            (
                name(f.path),
                f.size_str,
                "" if s.rows is None else f"{s.rows:,}",
                "" if s.batches is None else s.batches,
                fp_note,
                state,
            )
        )
    out.table(
        "Files",
        [
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
        rec_rows = []
        for r in records[-10:]:
            fn = r.get("function") or {}
            duration = r.get("duration")
            rec_rows.append(
                (
                    _clock(r.get("time")),
                    r.get("operation") or "",
                    r.get("cache") or "",
                    f"{duration:.2f}s" if isinstance(duration, (int, float)) else "",
                    ", ".join(p[:16] for p in r.get("parents") or []),
                    fn.get("qualname", "") if isinstance(fn, dict) else "",
                    _site(r.get("call_site")),
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
        fallback = next((r["random_fallback"] for r in reversed(records) if r.get("random_fallback")), None)
        if isinstance(fallback, dict):
            out.line(
                f"datasets used a random fingerprint: {fallback.get('argument') or 'the transform'} "
                f"could not be hashed ({fallback.get('error')})",
                style="red",
            )


def _clock(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return ""
    from datetime import datetime

    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _site(site: Any) -> str:
    if not isinstance(site, dict):
        return ""
    return f"{os.path.basename(str(site.get('file', '?')))}:{site.get('line', '?')}"


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
