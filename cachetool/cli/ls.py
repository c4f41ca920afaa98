"""`cachetool ls`: the listing as data (`list_cache`), its `--json` document, and its human
tables (grouped by dataset folder, or one flat table when sorted) with the totals under them."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cli.common import CACHE_DIR, NO_TRUNCATE, OUTPUT, SHARD, arg, command, is_remote, opt
from cachetool.cli.output import Output, OutputFormat, hint, hint_root_elsewhere, warn
from cachetool.errors import CacheNotFound, CachetoolError

if TYPE_CHECKING:
    from cachetool.cache.model import CacheReport, Entry, RecordedUse
    from cachetool.cache.selection import Listing
    from cachetool.cache.shard import Shard
    from cachetool.history.ledger import Ledger
    from cachetool.maintenance.liveness import InUse


def scan_with_progress(root: Path, ledger: Ledger | bool = True) -> CacheReport:
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
        from cachetool.cache.locations import enclosing_root
        from cachetool.cache.scan import may_have_ledger

        ledger_root = enclosing_root(root)
        if not may_have_ledger(ledger_root):
            return {}  # what the ledger says, without importing it (a third of an `ls`'s imports)
    from cachetool.history.ledger import read_ledger

    return (read_ledger(ledger_root) if ledger is True else ledger).usage()


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


@command(
    path=arg(
        "A cache root, a save_to_disk folder or any folder of Arrow files.", Path | None, show_default=False
    ),
    cache_dir=CACHE_DIR,
    filter=opt(
        "--filter",
        "-f",
        help="Keep entries matching KEY OP VALUE (repeatable; all must match). "
        "Keys: size, rows, files, used (or accessed), modified, kind, dataset, split, content, "
        "fingerprint, pinned.",
        type=list[str] | None,
        metavar="EXPR",
    ),
    sort=opt(
        "--sort",
        help="size|modified|used|accessed|rows|files|kind|name, optionally :asc or :desc "
        "(default desc for size/modified/used/rows/files, asc for name).",
        type=str | None,
        metavar="KEY",
    ),
    limit=opt("--limit", help="Show at most N entries.", type=int | None, min=0, metavar="N"),
    shard=SHARD,
    **OUTPUT,
    no_truncate=NO_TRUNCATE,
)
def ls_command(
    path: Path | None,
    cache_dir: Path | None,
    filter: list[str] | None,
    sort: str | None,
    limit: int | None,
    shard: str | None,
    out: Output,
) -> None:
    """List cached datasets and cache files: kind, fingerprint, rows, size, age, parent.

    One row per dataset state (a fingerprint and all its files), grouped by dataset folder, then
    a totals line with files and bytes per kind. Reads only file headers, never column data, and
    never changes access times. "Last used" is the latest ledger record touching the entry (see
    `cachetool run`), else its modification time.

    **Filters** (`hf cache ls` semantics): `size>100MB`, `rows<1000`, `used>7d` (not used in the
    last 7 days; `accessed>7d` is the same), `modified<1h`, `kind=temp` (or `kind=leftover`),
    `dataset=csv`, `split=train`, `pinned=yes`. Pinned entries are marked in the `pin` column.

    **Examples**

        cachetool ls

        cachetool ls --filter "size>100MB" --sort size --limit 10

        cachetool ls --filter kind=leftover --json

        cachetool ls ./saved/my_dataset

        cachetool ls s3://team-bucket/hf-cache    # a remote (docs/remote.md)

        cachetool gc $(cachetool ls -q --filter "used>30d") --dry-run

        cachetool ls --shard 0/8 --json > 0.json    # one job of 8 (docs/fleet.md)

    Exit codes: 0 listed (problems found while listing are warnings); 2 bad option or missing cache.
    """
    if path is not None and is_remote(path):
        from cachetool.cli.remote import remote_ls

        if shard is not None:
            raise CachetoolError("--shard: a remote is listed whole (one listing), not in shards")
        if filter or sort or cache_dir is not None:
            raise CachetoolError("a remote is listed whole: --filter, --sort and --cache-dir are for a cache")
        return remote_ls(os.fspath(path), out, limit)
    from cachetool.cache.locations import existing_root
    from cachetool.cache.selection import check_query
    from cachetool.cache.shard import parse_shard
    from cachetool.cache.walk import gc_paused

    with gc_paused(freeze=True):
        filters = filter or []
        check_query(filters, sort, limit)  # bad expressions fail before the (possibly long) scan
        chosen = parse_shard(shard)
        if path is not None and cache_dir is not None:
            raise CachetoolError("give either PATH or --cache-dir, not both")
        try:
            target = existing_root(path if path is not None else cache_dir)
        except CacheNotFound as e:
            if not e.default:
                raise
            _nothing_cached(out, e, chosen)
            return
        with scan_progress() as progress:
            listing = list_cache(
                target, filter=filters, sort=sort, limit=limit, progress=progress, shard=chosen
            )
        warn(*listing.warnings)
        report, entries, pinned = listing.report, listing.entries, listing.pinned
        if out.format == OutputFormat.json:
            out.json_pieces(lambda: ls_document_text(report, entries, pinned, chosen))
        elif out.format == OutputFormat.quiet:
            out.ids(e.id for e in entries)
        else:
            render_human(out, report, entries, grouped=sort is None, pinned=pinned, shard=chosen)
            quarantine_line(out, report.root)
            if not report.entries and path is None and cache_dir is None:  # the run cached elsewhere
                hint_root_elsewhere(report.root)
        report_warnings(report)
        hint_not_a_cache(report.root, report.entries)


def _nothing_cached(out: Output, e: CacheNotFound, shard: Shard | None) -> None:
    """The default root does not exist yet: an empty listing, not an error."""
    if out.format == OutputFormat.json:
        from cachetool.cache.model import CacheReport

        out.json(ls_document(CacheReport(Path(e.root), (), ()), shard))
    elif out.human:
        where = out.path(e.root, out.width - 40)
        out.line(f"Nothing cached yet: {where} does not exist (datasets makes it on first use).")
        hint_root_elsewhere(e.root)


def list_cache(
    path: str | os.PathLike[str],
    *,
    filter: Sequence[str] = (),  # the name of the `--filter` option
    sort: str | None = None,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
    shard: Shard | tuple[int, int] | str | None = None,
) -> Listing:
    """What `cachetool ls` lists, as data: `read_listing` of a cache root, a `save_to_disk` folder
    or any folder of Arrow files, with what the ledger recorded of each entry (parent, operation,
    last use) and which files live processes hold. `filter` holds `--filter` expressions (all must
    match: `["size>100MB", "used>30d"]`), `sort` a `--sort` expression (`"size:desc"`), `limit` the
    most entries kept; bad ones raise `BadExpression` before the folder is read. `shard` (`(i, n)`
    or `"i/n"`, `--shard`) lists shard i of n alone (`cachetool.cache.shard` says which entries)."""
    from cachetool.cache.selection import check_query, read_listing

    check_query(filter, sort, limit)
    root = Path(path).expanduser()
    usage = recorded_usage(root.resolve())
    return read_listing(
        root,
        filter=filter,
        sort=sort,
        limit=limit,
        usage=usage,
        liveness=live_in,
        progress=progress,
        shard=shard,
    )


def hint_not_a_cache(root: Path, entries: Sequence[Entry]) -> None:
    """Under a listing of files of which none is one `datasets` writes: a hint that it is not a cache."""
    from cachetool.cache.layout import Kind

    if not entries or any(e.kind != Kind.OTHER for e in entries):
        return
    from cachetool.cache.locations import resolve_cache_root
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


def ls_document(report: CacheReport, shard: Shard | None = None) -> dict[str, object]:
    """The `--json` document (schema in docs/listing.md, key names in docs/json.md) with its
    `entries` left empty: `ls_document_text` writes them."""
    from cachetool.cache.shard import fleet_fields

    totals = report.totals()
    return {
        "root": os.fsdecode(report.root),
        **fleet_fields(shard),
        "entries": [],
        "totals": {k: {"files": n, "bytes": b} for k, (n, b) in totals.items()},
        "warnings": [{"path": os.fsdecode(w.path), "problem": w.problem} for w in report.warnings],
    }


def ls_document_text(
    report: CacheReport,
    entries: Sequence[Entry],
    pinned: frozenset[str] = frozenset(),
    shard: Shard | None = None,
) -> Iterator[str]:
    """The `--json` document of `entries` in its envelope as compact JSON text (what `json.dumps`
    writes), in pieces of a thousand entries: never the dicts or the whole text of a
    100,000-entry listing at once."""
    from cachetool.cache.model import entries_json
    from cachetool.cli.output import envelope

    head = json.dumps(envelope(ls_document(report, shard)))
    cut = head.index('"entries": []') + len('"entries": [')
    yield head[:cut]
    for start in range(0, len(entries), 1000):
        text = entries_json(entries[start : start + 1000], pinned)
        yield text if start == 0 else ", " + text
    yield head[cut:]


def _short(path: Path, root: Path) -> str:
    try:
        return os.fsdecode(path.relative_to(root))
    except ValueError:
        return os.fsdecode(path)


_CONFIG_HASH = re.compile(r"-[0-9a-f]{16}$")
_LONG_HEX = re.compile(r"[0-9a-f]{12,}")


def entry_label(e: Entry, whole: bool = False, width: int = 16) -> str:
    """The fingerprint, else the file or folder name (full paths are in --json and `show`).
    A name longer than `width` shows each hash by its first 8 digits (as git abbreviates), or
    else as `…`, then loses its head; a hash is never shown cut anywhere else."""
    if e.fingerprint:
        return e.fingerprint
    name = os.fsdecode(e.path.name) + ("/" if e.path.is_dir() and not e.path.is_symlink() else "")
    if len(name) <= width or whole:
        return name
    short = _LONG_HEX.sub(lambda m: m.group(0)[:8] + "…", name)
    if len(short) <= width:
        return short
    short = _LONG_HEX.sub("…", name)
    return short if len(short) <= width else "…" + short[1 - width :]


def render_human(
    out: Output,
    report: CacheReport,
    entries: Sequence[Entry],
    grouped: bool = True,
    pinned: frozenset[str] = frozenset(),
    shard: Shard | None = None,
) -> None:
    """Tables grouped by dataset folder (or one flat table when sorted), then the totals."""
    count = len(report.entries)
    texts = _Texts(report.scanned_at)
    part = f" (shard {shard})" if shard is not None else ""
    out.line(f"Cache: {out.path(report.root, out.width - 7 - len(part))}{part}", style="bold")
    if not entries:
        out.line("No entries." if not count else "No entries match.")
    elif grouped:
        groups: dict[str, list[Entry]] = {}
        for e in entries:
            groups.setdefault(e.dataset or "(cache root)", []).append(e)
        for name, members in groups.items():
            where = members[0].dataset_dir  # the first member's folder
            out.line()
            out.line(name, style="bold cyan")
            if where is not None and _short(where, report.root) not in (name, "."):
                out.line(f"  {out.path(_short(where, report.root), out.width - 2)}", style="dim")
            _entry_table(out, report, members, with_dataset=False, pinned=pinned, texts=texts)
    else:
        _entry_table(out, report, entries, with_dataset=True, pinned=pinned, texts=texts)
    out.line()
    for text in totals_line(report, len(entries)).splitlines():
        out.line(text)


class _Texts:
    """The texts of ages, sizes and row counts, each formatted once: they repeat (the files of one
    run share their second, a pipeline's steps their row count). Ages count from `now`."""

    def __init__(self, now: float) -> None:
        from cachetool.formatting import human_size, short_age

        ago = functools.cache(lambda seconds: short_age(seconds) + " ago")
        self.age: Callable[[float | None], str] = lambda ts: "" if ts is None else ago(int(now - ts))
        self.size: Callable[[int], str] = functools.cache(human_size)
        self.rows: Callable[[int | None], str] = functools.cache(lambda n: "" if n is None else f"{n:,}")


def _table_columns(entries: Sequence[Entry], pinned: frozenset[str], texts: _Texts) -> dict[str, list[str]]:
    """Each column's cells, by column name, in the order of `entries`."""
    age = texts.age
    used: list[str] = []
    modified: list[str] = []
    for e in entries:
        mtime = e.modified
        modified.append(age(mtime))
        used.append(age(mtime if e.last_used is None else e.used))
    return {
        "dataset": [e.dataset or "" for e in entries],
        "kind": [e.kind_str for e in entries],
        "fingerprint": [entry_label(e, whole=True) for e in entries],
        "pin": ["yes" if e.pinned_in(pinned) else "" for e in entries] if pinned else [""] * len(entries),
        "files": [str(len(e.files)) for e in entries],
        "rows": [texts.rows(e.rows) for e in entries],
        "cols": [str(len(e.columns) or "") for e in entries],
        "size": [texts.size(e.size) for e in entries],
        "modified": modified,
        "used": used,
        "op": [e.operation or "" for e in entries],
        "parent": [e.parent or "" for e in entries],
    }


def _entry_table(
    out: Output,
    report: CacheReport,
    entries: Sequence[Entry],
    with_dataset: bool,
    pinned: frozenset[str] = frozenset(),
    texts: _Texts | None = None,
) -> None:
    """One row per entry. `op` and `parent` appear once the ledger knows any entry. On a narrow
    terminal the dataset shows without its config hash, parents by their first 8 digits, then
    `cols`, `files`, `modified`, `parent` and `op` give way, in that order, until the table fits
    (all stay in --json and `show`; --no-truncate keeps everything). A `pin` column marks pinned
    entries when there are any."""
    columns = _table_columns(entries, pinned, texts or _Texts(report.scanned_at))
    recorded = any(columns["parent"]) or any(columns["op"])
    names = ["kind", "fingerprint", "files", "rows", "cols", "size", "modified", "used"]
    if any(columns["pin"]):
        names.insert(2, "pin")
    if with_dataset:
        names.insert(0, "dataset")
    if recorded:
        names += ["op", "parent"]
    # A fingerprint is never cut (`new_fingerprint=` may be any string): its column is as wide as
    # the longest.
    longest_fp = max([16, *map(len, columns["fingerprint"])])
    widths = {"kind": (10, 18), "fingerprint": (16, longest_fp), "op": (2, 12)}

    if not out.no_truncate:
        _fit_columns(names, columns, widths, out.width, entries)
    justify = {
        n: ("right" if n in ("files", "rows", "cols", "size", "modified", "used") else "left") for n in names
    }
    out.table(None, [(n, justify[n]) for n in names], widths=widths, cells=[columns[n] for n in names])


def _fit_columns(
    names: list[str],
    columns: dict[str, list[str]],
    widths: dict[str, tuple[int, int]],
    room: int,
    entries: Sequence[Entry],
) -> None:
    """Narrow the table to `room` columns: shorten the names of entries without a fingerprint
    (locks, folders; `entry_label`), datasets and parents in `columns`, then drop columns from
    `names` in the order `_entry_table` documents."""

    def natural(n: str) -> int:
        """The width the table gives column `n`: its longest cell, within the column's bounds."""
        longest = max(len(n), *map(len, columns[n])) if columns[n] else len(n)
        if n not in widths:
            return longest
        low, high = widths[n]
        return max(low, min(longest, high))

    natural_width = {n: natural(n) for n in names}  # once: a listing may hold 100k entries

    def width_of(cols: list[str]) -> int:
        return sum(natural_width[n] for n in cols) + 2 * (len(cols) - 1)

    if width_of(names) > room:  # names get the room the other columns leave, at least 16
        width = max(16, room - width_of(names) + natural_width["fingerprint"])
        columns["fingerprint"] = [entry_label(e, width=width) for e in entries]
        natural_width["fingerprint"] = natural("fingerprint")
    steps: list[tuple[str, Callable[[str], str]]] = [
        ("dataset", lambda cell: _CONFIG_HASH.sub("", cell)),
        ("parent", lambda cell: cell[:8]),
    ]
    for column, shorten in steps:
        if column in names and width_of(names) > room:
            columns[column] = [shorten(cell) for cell in columns[column]]
            natural_width[column] = natural(column)
    for column in ("cols", "files", "modified", "parent", "op"):
        if width_of(names) <= room:
            break
        if column in names:
            names.remove(column)


def totals_line(report: CacheReport, shown: int) -> str:
    """The totals under a listing of `shown` entries."""
    from cachetool.formatting import human_size

    totals = report.totals()  # once: it sums every entry
    count = len(report.entries)
    files = sum(n for n, _ in totals.values())
    size = sum(b for _, b in totals.values())
    parts = [f"{k} {n} file{'s' if n != 1 else ''} {human_size(b)}" for k, (n, b) in totals.items()]
    head = f"{shown} of {count} entries; cache holds {files} files, {human_size(size)}"
    return head + ("\nby kind: " + "; ".join(parts) if parts else "")
