"""`cachetool pin` / `cachetool unpin`: entries that gc never evicts."""

from __future__ import annotations

from pathlib import Path

import typer

from cachetool.cli.common import CACHE_DIR, OUTPUT, REQUIRED, arg, command, opt
from cachetool.cli.output import Output, OutputFormat


@command(
    fingerprint=arg(
        "A fingerprint or a unique prefix of one (not with --list).", str | None, show_default=False
    ),
    list_=opt("--list", "-l", help="List the pins of the cache instead of adding one."),
    cache_dir=CACHE_DIR,
    **OUTPUT,
)
def pin_command(fingerprint: str | None, list_: bool, cache_dir: Path | None, out: Output) -> None:
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
        _list_pins(cache_dir, out)
        return
    if fingerprint is None:
        raise typer.BadParameter("give the fingerprint to pin, or --list", param_hint="FINGERPRINT")
    _change(True, fingerprint, cache_dir, out)


@command(
    fingerprint=arg("A fingerprint or a unique prefix of one.", default=REQUIRED, show_default=False),
    cache_dir=CACHE_DIR,
    **OUTPUT,
)
def unpin_command(fingerprint: str, cache_dir: Path | None, out: Output) -> None:
    """Unpin an entry, so that `cachetool gc` may evict it (and its ancestors) again.

    **Examples**

        cachetool unpin 3f2a9c1b

    Exit codes: 0 unpinned; 2 not pinned, ambiguous prefix, missing cache.
    """
    _change(False, fingerprint, cache_dir, out)


def _change(pin: bool, fingerprint: str, cache_dir: Path | None, out: Output) -> None:
    """Pin or unpin, and say what changed."""
    from cachetool.cache.locations import root_for
    from cachetool.maintenance import pinning
    from cachetool.safejson import json_value

    change = (pinning.pin if pin else pinning.unpin)(root_for(fingerprint, cache_dir), fingerprint)
    if out.emit(lambda: json_value(change), [change.fingerprint]):
        return
    if not change.pinned:
        out.line(f"Unpinned {change.fingerprint}")
    else:
        out.line(
            f"Pinned {change.fingerprint}" if change.changed else f"{change.fingerprint} was already pinned"
        )


def _list_pins(cache_dir: Path | None, out: Output) -> None:
    from cachetool.cache.locations import existing_root
    from cachetool.formatting import human_size, iso_time
    from cachetool.maintenance.pinning import list_pins

    root = existing_root(cache_dir).resolve()
    pins = list_pins(root, entries=out.format != OutputFormat.quiet)
    if out.emit(
        lambda: {"root": str(root), "pins": [p.to_json() for p in pins]}, (p.fingerprint for p in pins)
    ):
        return
    if not pins:
        out.line(f"No pins in {out.path(root, out.width - 12)}.")
        return
    out.table(
        None,
        [("fingerprint", "left"), ("pinned", "left"), ("kind", "left"), ("size", "right")],
        [
            (
                p.fingerprint,
                (iso_time(p.time) or "").replace("T", " ").replace("+00:00", " UTC"),
                p.entry.kind.value if p.entry is not None else "(not on disk: ledger only)",
                human_size(p.entry.size) if p.entry is not None else "",
            )
            for p in pins
        ],
        whole=("fingerprint",),
    )
