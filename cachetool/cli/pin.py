"""`cachetool pin` / `cachetool unpin`: entries that gc never evicts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cachetool.cli.common import (
    CacheDirOption,
    FormatOption,
    JsonOption,
    Output,
    OutputFormat,
    QuietOption,
    choose_format,
    handle_errors,
)

if TYPE_CHECKING:
    from cachetool.cache.scan import Entry

FingerprintArg = Annotated[
    str, typer.Argument(help="A fingerprint or a unique prefix of one.", show_default=False)
]


def pin_command(
    fingerprint: Annotated[
        str | None,
        typer.Argument(help="A fingerprint or a unique prefix of one (not with --list).", show_default=False),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", "-l", help="List the pins of the cache instead of adding one.")
    ] = False,
    cache_dir: CacheDirOption = None,
    fmt: FormatOption = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Pin an entry: `cachetool gc` never evicts it, nor any ancestor the ledger records for it.

    Ancestors count because rerunning a pipeline recomputes every evicted step before the pinned
    one, even when the pinned step itself is still cached. The fingerprint may also be one that
    only the ledger knows (a step that wrote no file). Pins are stored with the cache, in
    `<cache>/.cachetool/pins.json`.

    **Examples**

        cachetool pin 3f2a9c1b

        cachetool pin 3f2a9c1b --cache-dir /data/hf-cache

        cachetool pin --list

        cachetool ls --filter pinned=yes

    Exit codes: 0 pinned (or already pinned), or listed; 2 unknown or ambiguous fingerprint,
    missing cache, no fingerprint and no --list.
    """
    if list_:
        if fingerprint is not None:
            raise typer.BadParameter("give a fingerprint or --list, not both", param_hint="FINGERPRINT")
        _list_pins(cache_dir, choose_format(fmt, as_json, quiet))
        return
    if fingerprint is None:
        raise typer.BadParameter("give the fingerprint to pin, or --list", param_hint="FINGERPRINT")
    _pin(fingerprint, cache_dir, choose_format(fmt, as_json, quiet))


def unpin_command(
    fingerprint: FingerprintArg,
    cache_dir: CacheDirOption = None,
    fmt: FormatOption = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Unpin an entry, so that `cachetool gc` may evict it (and its ancestors) again.

    **Examples**

        cachetool unpin 3f2a9c1b

    Exit codes: 0 unpinned; 2 not pinned, ambiguous prefix, missing cache.
    """
    _unpin(fingerprint, cache_dir, choose_format(fmt, as_json, quiet))


def resolve_fingerprint(root: Path, prefix: str) -> str:
    """The full fingerprint for `prefix` (`cachetool.lineage.ledger.resolve`): an entry's
    fingerprint or alias, else one the ledger knows."""
    from cachetool.cache.scan import scan_cache
    from cachetool.lineage.ledger import Ledger, resolve

    ledger = Ledger.load(root, follow=False)
    return resolve(prefix, scan_cache(root, ledger=ledger), ledger).fingerprint


@handle_errors
def _pin(prefix: str, cache_dir: Path | None, fmt: OutputFormat) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.maintenance.pins import add_pin

    root = existing_root(cache_dir).resolve()
    fp = resolve_fingerprint(root, prefix)
    added = add_pin(root, fp)
    out = Output(fmt)
    if fmt == OutputFormat.json:
        out.json({"root": str(root), "fingerprint": fp, "pinned": True, "changed": added})
    elif fmt == OutputFormat.quiet:
        out.ids([fp])
    else:
        out.line(f"Pinned {fp}" if added else f"{fp} was already pinned")


@handle_errors
def _unpin(prefix: str, cache_dir: Path | None, fmt: OutputFormat) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.maintenance.pins import remove_pin

    root = existing_root(cache_dir).resolve()
    fp = remove_pin(root, prefix)
    out = Output(fmt)
    if fmt == OutputFormat.json:
        out.json({"root": str(root), "fingerprint": fp, "pinned": False, "changed": True})
    elif fmt == OutputFormat.quiet:
        out.ids([fp])
    else:
        out.line(f"Unpinned {fp}")


@handle_errors
def _list_pins(cache_dir: Path | None, fmt: OutputFormat) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.formatting import human_size, iso_time
    from cachetool.maintenance.pins import read_pins

    root = existing_root(cache_dir).resolve()
    pins = read_pins(root)
    out = Output(fmt)
    if fmt == OutputFormat.quiet:
        out.ids(pins)
        return
    from cachetool.cache.scan import scan_cache

    on_disk: dict[str, Entry] = {}
    for entry in scan_cache(root).entries:
        for fp in (entry.fingerprint, *entry.aliases):
            if fp in pins:
                on_disk[fp] = entry
    rows: list[dict[str, Any]] = []
    for fp, meta in pins.items():
        e = on_disk.get(fp)
        when = meta.get("time")
        rows.append(
            {
                "fingerprint": fp,
                "time": iso_time(when) if isinstance(when, (int, float)) else None,
                "host": meta.get("host"),
                "user": meta.get("user"),
                "kind": e.kind.value if e is not None else None,
                "path": str(e.path) if e is not None else None,
                "size": e.size if e is not None else None,
            }
        )
    if fmt == OutputFormat.json:
        out.json({"root": str(root), "pins": rows})
        return
    if not rows:
        out.line(f"No pins in {out.path(root, out.console.width - 12)}.")
        return
    out.table(
        None,
        [("fingerprint", "left"), ("pinned", "left"), ("kind", "left"), ("size", "right")],
        [
            (
                r["fingerprint"],
                (r["time"] or "").replace("T", " ").replace("+00:00", " UTC"),
                r["kind"] or "(not on disk: ledger only)",
                human_size(r["size"]) if r["size"] is not None else "",
            )
            for r in rows
        ],
        whole=("fingerprint",),
    )
