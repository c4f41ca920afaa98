"""`cachetool ls`'s arguments, options and help; the work is `cachetool.cli.ls.run_ls`."""

from __future__ import annotations

from pathlib import Path

from cachetool.cli.common import CACHE_DIR, NO_TRUNCATE, OUTPUT, arg, command, opt
from cachetool.cli.ls import run_ls
from cachetool.cli.output import OutputFormat


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
    **OUTPUT,
    no_truncate=NO_TRUNCATE,
)
def ls_command(
    path: Path | None,
    cache_dir: Path | None,
    filter: list[str] | None,
    sort: str | None,
    limit: int | None,
    fmt: OutputFormat,
    no_truncate: bool,
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

        cachetool gc $(cachetool ls -q --filter "used>30d") --dry-run

    Exit codes: 0 listed (problems found while listing are warnings); 2 bad option or missing cache.
    """
    run_ls(path, cache_dir, filter or [], sort, limit, fmt, no_truncate)
