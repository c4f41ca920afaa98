"""`cachetool ls`: list the cache as entries, grouped by dataset folder (options in `ls_command`)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cli.output import Output, OutputFormat, hint, warn
from cachetool.errors import CacheNotFound, CachetoolError

if TYPE_CHECKING:
    from cachetool.cache.listing import Listing
    from cachetool.cache.model import CacheReport, Entry, RecordedUse
    from cachetool.history.ledger import Ledger
    from cachetool.maintenance.liveness import InUse


def resolve_target(path: Path | None, cache_dir: Path | None) -> Path:
    """PATH argument or --cache-dir (not both), else the default cache root; must exist."""
    from cachetool.cache.dirs import existing_root

    if path is not None and cache_dir is not None:
        raise CachetoolError("give either PATH or --cache-dir, not both")
    return existing_root(path if path is not None else cache_dir)


def scan_with_progress(root: Path, out: Output, ledger: Ledger | bool = True) -> CacheReport:
    """Scan, showing a live file count on a terminal (stderr) for long scans; `ledger` as
    `recorded_usage` takes it."""
    from cachetool.cache.scan import scan_cache

    with scan_progress() as progress:
        return scan_cache(root, usage=recorded_usage(root, ledger), liveness=live_in, progress=progress)


def recorded_usage(root: Path, ledger: Ledger | bool = True) -> Mapping[str, RecordedUse]:
    """What recorded lineage says of each fingerprint, for a scan of `root`: from the ledger of
    the root enclosing it (`True`), from a loaded `Ledger`, or nothing (`False`)."""
    if ledger is False:
        return {}
    if ledger is True:
        from cachetool.cache.dirs import enclosing_root
        from cachetool.cache.scan import may_have_ledger

        ledger_root = enclosing_root(root)
        if not may_have_ledger(ledger_root):
            return {}  # what the ledger says, without importing it (a third of an `ls`'s imports)
    from cachetool.history.ledger import usage_by_fingerprint

    return usage_by_fingerprint(ledger_root if ledger is True else ledger)


def live_in(*, root: Path) -> InUse:
    """Which files live processes hold, and the live leases of `root` (a scan's `liveness`)."""
    from cachetool.maintenance.liveness import scan_in_use

    return scan_in_use(root=root)


@contextlib.contextmanager
def scan_progress() -> Iterator[Callable[[int], None] | None]:
    """A callback showing a live file count on a terminal (stderr); None when not a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.status import Status

    from cachetool.cli.output import stderr_console

    with Status("Scanning…", console=stderr_console()) as status:

        def progress(n: int) -> None:
            status.update(f"Scanning… {n} files")

        yield progress


def report_warnings(report: CacheReport) -> None:
    """One hint line on stderr; the details are `cachetool verify`'s job."""
    if not report.warnings:
        return
    first = report.warnings[0]
    more = f" and {len(report.warnings) - 1} more" if len(report.warnings) > 1 else ""
    from cachetool.hints import shell_command

    verify = shell_command("verify", "--cache-dir", os.fsdecode(report.root))
    hint(f"{len(report.warnings)} problem(s) found ({first}{more}); run `{verify}` for details")


def run_ls(
    path: Path | None,
    cache_dir: Path | None,
    filters: list[str],
    sort: str | None,
    limit: int | None,
    fmt: OutputFormat,
    no_truncate: bool = False,
) -> None:
    """`cachetool ls` once its options are read, in a process about to exit (`gc_paused(freeze=True)`)."""
    from cachetool.cache.listing import check_query
    from cachetool.cache.walk import gc_paused

    with gc_paused(freeze=True):
        check_query(filters, sort, limit)  # bad expressions fail before the (possibly long) scan
        out = Output(fmt, no_truncate=no_truncate)
        try:
            target = resolve_target(path, cache_dir)
        except CacheNotFound as e:
            if not e.default:
                raise
            _nothing_cached(out, e)
            return
        _ls(out, target, filters, sort, limit)


def _nothing_cached(out: Output, e: CacheNotFound) -> None:
    """The default root does not exist yet: an empty listing, not an error."""
    if out.format == OutputFormat.json:
        out.json({"root": os.fsdecode(e.root), "entries": [], "totals": {}, "warnings": []})
    elif out.format == OutputFormat.human:
        where = out.path(e.root, out.width - 40)
        out.line(f"Nothing cached yet: {where} does not exist (datasets makes it on first use).")


def list_cache(
    path: str | os.PathLike[str],
    *,
    filter: Sequence[str] = (),  # the name of the `--filter` option
    sort: str | None = None,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Listing:
    """What `cachetool ls` lists, as data: `read_listing` of a cache root, a `save_to_disk` folder
    or any folder of Arrow files, with what the ledger recorded of each entry (parent, operation,
    last use) and which files live processes hold. `filter` holds `--filter` expressions (all must
    match: `["size>100MB", "used>30d"]`), `sort` a `--sort` expression (`"size:desc"`), `limit` the
    most entries kept; bad ones raise `BadExpression` before the folder is read."""
    from cachetool.cache.listing import check_query, read_listing

    check_query(filter, sort, limit)
    root = Path(path).expanduser()
    usage = recorded_usage(root.resolve())
    return read_listing(
        root, filter=filter, sort=sort, limit=limit, usage=usage, liveness=live_in, progress=progress
    )


def _ls(out: Output, target: Path, filters: list[str], sort: str | None, limit: int | None) -> None:
    with scan_progress() as progress:
        listing = list_cache(target, filter=filters, sort=sort, limit=limit, progress=progress)
    for message in listing.warnings:
        warn(message)
    report, entries, pinned = listing.report, listing.entries, listing.pinned
    if out.format == OutputFormat.json:
        out.json_pieces(
            lambda: ls_document(report, entries, pinned),
            lambda: ls_document_text(report, entries, pinned),
        )
    elif out.format == OutputFormat.quiet:
        out.ids(e.id for e in entries)
    else:
        from cachetool.cli.ls_table import render_human  # human mode only: JSON needs no table

        render_human(out, report, entries, grouped=sort is None, pinned=pinned)
        quarantine_line(out, report.root)
    report_warnings(report)
    hint_not_a_cache(report.root, report.entries)


def hint_not_a_cache(root: Path, entries: Sequence[Entry]) -> None:
    """Under a listing of files of which none is one `datasets` writes: a hint that it is not a cache."""
    from cachetool.cache.layout import Kind

    if not entries or any(e.kind != Kind.OTHER for e in entries):
        return
    from cachetool.cache.dirs import resolve_cache_root
    from cachetool.hints import shell_command

    default = resolve_cache_root().path
    hint(
        f"{os.fsdecode(root)} holds no file datasets writes (no Arrow cache file, dataset_info.json or "
        f"state.json): it is not a datasets cache; the default cache is {os.fsdecode(default)} "
        f"(`{shell_command('dirs')}` says why)"
    )


def quarantine_line(out: Output, root: Path) -> None:
    """Under a listing: what `verify --quarantine` moved aside in the root, and how to list it."""
    from cachetool.cache.layout import LEDGER_DIR

    if not os.path.isdir(root / LEDGER_DIR / "quarantine"):
        return  # the usual case: one stat
    from cachetool.formatting import human_size
    from cachetool.hints import shell_command
    from cachetool.maintenance.verify.quarantine import quarantined

    items = quarantined(root)
    if items:
        n = len(items)
        size = human_size(sum(q.size for q in items))
        command = shell_command("verify", "--quarantine", "--list", "--cache-dir", os.fsdecode(root))
        out.line(f"quarantine: {n} item{'s' if n != 1 else ''}, {size} (`{command}`)")


def ls_document(
    report: CacheReport, entries: Sequence[Entry], pinned: frozenset[str] = frozenset()
) -> dict[str, object]:
    """The `--json` document (schema in docs/listing.md, key names in docs/json.md)."""
    totals = report.totals()
    return {
        "root": os.fsdecode(report.root),
        "entries": _entry_docs(entries, pinned),
        "totals": {k: {"files": n, "bytes": b} for k, (n, b) in totals.items()},
        "warnings": [{"path": os.fsdecode(w.path), "problem": w.problem} for w in report.warnings],
    }


def ls_document_text(
    report: CacheReport, entries: Sequence[Entry], pinned: frozenset[str] = frozenset()
) -> Iterator[str]:
    """`ls_document` in its envelope as compact JSON text (what `json.dumps` writes), in pieces
    of a thousand entries: never the dicts or the whole text of a 100,000-entry listing at once."""
    from cachetool.cli.output import envelope

    head = json.dumps(envelope(ls_document(report, [], pinned)))
    cut = head.index('"entries": []') + len('"entries": [')
    yield head[:cut]
    for start in range(0, len(entries), 1000):
        text = json.dumps(_entry_docs(entries[start : start + 1000], pinned))[1:-1]
        yield text if start == 0 else ", " + text
    yield head[cut:]


def _entry_docs(entries: Sequence[Entry], pinned: frozenset[str]) -> list[dict[str, object]]:
    """Each entry's `to_json`, with whether it is pinned."""
    docs = [e.to_json() for e in entries]
    if pinned:
        from cachetool.cache.query import is_pinned

        for e, doc in zip(entries, docs, strict=True):
            doc["pinned"] = is_pinned(e, pinned)
    else:
        for doc in docs:
            doc["pinned"] = False
    return docs
