"""`pin`, `unpin` and `pin --list` by the names users type; the pins file itself is
`cachetool.cache.pins`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.formatting import iso_time

if TYPE_CHECKING:
    from cachetool.cache.model import Entry


@dataclass(frozen=True)
class PinChange:
    """What `pin` or `unpin` did: the fingerprint, whether it is pinned now, and whether that is
    new (`changed` False: it was pinned already)."""

    root: Path
    fingerprint: str
    pinned: bool
    changed: bool


@dataclass(frozen=True)
class Pin:
    """One pin, with the entry that holds it now (None: only the ledger knows the fingerprint)."""

    fingerprint: str
    time: float | None
    host: str | None
    user: int | None
    entry: Entry | None = None

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "fingerprint": self.fingerprint,
            "time": iso_time(self.time),
            "host": self.host,
            "user": self.user,
            "kind": e.kind.value if e is not None else None,
            "path": str(e.path) if e is not None else None,
            "size": e.size if e is not None else None,
        }


def _root(root: str | os.PathLike[str]) -> Path:
    return Path(os.path.expanduser(os.fspath(root))).resolve()


def pin(root: str | os.PathLike[str], fingerprint: str) -> PinChange:
    """Pin the fingerprint `fingerprint` names (a unique prefix, an alias, a path: the rule of
    `cachetool.cache.lookup.resolve`; one only the ledger knows too): `gc` never evicts it,
    nor any ancestor the ledger records for it. The Python side of `cachetool pin`."""
    from cachetool.cache.pins import add_pin
    from cachetool.history.ledger import named_elsewhere, resolve_in_root

    root_path = _root(root)
    with named_elsewhere(root_path, fingerprint, "pin"):
        fp = resolve_in_root(root_path, fingerprint)[0].fingerprint
    return PinChange(root_path, fp, pinned=True, changed=add_pin(root_path, fp))


def unpin(root: str | os.PathLike[str], fingerprint: str) -> PinChange:
    """Unpin the one pinned fingerprint `fingerprint` is (or starts): a pin is removed even when
    neither the cache nor the ledger knows its fingerprint any more. Raises `NotPinned`, or
    `AmbiguousFingerprint`. The Python side of `cachetool unpin`."""
    from cachetool.cache.pins import remove_pin

    root_path = _root(root)
    return PinChange(root_path, remove_pin(root_path, fingerprint), pinned=False, changed=True)


def list_pins(root: str | os.PathLike[str], *, entries: bool = True) -> tuple[Pin, ...]:
    """The pins of `root`, each with the cache entry that holds it (`entries=False`: without
    scanning the cache). The Python side of `cachetool pin --list`."""
    from cachetool.cache.pins import read_pins

    root_path = _root(root)
    pins = read_pins(root_path)
    on_disk: dict[str, Entry] = {}
    if entries and pins:
        from cachetool.cache.locations import enclosing_root
        from cachetool.cache.scan import scan_cache
        from cachetool.history.ledger import read_ledger
        from cachetool.maintenance.liveness import scan_in_use

        usage = read_ledger(enclosing_root(root_path)).usage()
        for entry in scan_cache(root_path, usage=usage, liveness=scan_in_use).entries:
            for fp in (entry.fingerprint, *entry.aliases):
                if fp in pins:
                    on_disk[fp] = entry
    out = []
    for fp, meta in pins.items():
        when, host, user = meta.get("time"), meta.get("host"), meta.get("user")
        out.append(
            Pin(
                fingerprint=fp,
                time=float(when) if isinstance(when, (int, float)) else None,
                host=host if isinstance(host, str) else None,
                user=user if isinstance(user, int) else None,
                entry=on_disk.get(fp),
            )
        )
    return tuple(out)
