"""Pins: fingerprints that `cachetool gc` never evicts, with their recorded ancestors.

Pins live with the cache they protect, in `<root>/.cachetool/pins.json` (a copied or shared cache
keeps its pins), written under a file lock and replaced atomically::

    {"v": 1, "pins": {"<fingerprint>": {"time": 1700000000.0, "host": "...", "user": 1000}}}

A pinned result stays cheap to reproduce only if the steps before it stay cached too: rerunning
the pipeline recomputes every evicted ancestor even when the pinned step itself is a cache hit.
So gc protects the pinned fingerprints *and* every fingerprint the ledger records as their
ancestor (`cachetool.maintenance.gc.plan.recorded_parents`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cachetool.cache.layout import LEDGER_DIR
from cachetool.errors import CachetoolError

PINS_FILE = "pins.json"


class NotPinned(CachetoolError):
    """`cachetool unpin` of a fingerprint that is not pinned."""

    def __init__(self, prefix: str, root: Path) -> None:
        super().__init__(f"'{prefix}' is not pinned in {root}")
        self.prefix = prefix
        self.root = root


def pins_path(root: str | os.PathLike[str]) -> Path:
    """`<root>/.cachetool/pins.json`."""
    return Path(root) / LEDGER_DIR / PINS_FILE


def read_pins(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The pins of `root`: `{fingerprint: {"time", "host", "user"}}`; `{}` when there are none.

    An unreadable pins file is an error rather than "no pins": gc must not evict what a user pinned
    because a file got damaged."""
    path = pins_path(root)
    from cachetool.cache.store import read_state_json

    try:
        doc = read_state_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise CachetoolError(f"cannot read the pins of this cache ({path}): {e}") from None
    pins = doc.get("pins") if isinstance(doc, dict) else None
    if not isinstance(pins, dict):
        raise CachetoolError(f"cannot read the pins of this cache ({path}): no 'pins' object")
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in pins.items()}


@contextmanager
def _editing(root: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The pins of `root`, read under its lock and written back if the block changed them."""
    from cachetool.cache.store import lock_state, write_whole

    path = pins_path(root)
    try:
        with lock_state(path.with_name(path.name + ".lock"), timeout=10):
            pins = read_pins(root)
            before = set(pins)
            yield pins
            if set(pins) != before:
                doc = {"v": 1, "pins": dict(sorted(pins.items()))}
                write_whole(
                    path, (json.dumps(doc, indent=1) + "\n").encode(), mode=0o644, create_folders=True
                )
    except OSError as e:
        raise CachetoolError(f"cannot write the pins of {root}: {e.strerror or e}") from None


def add_pin(root: str | os.PathLike[str], fingerprint: str) -> bool:
    """Pin `fingerprint` in `root`. Returns False when it was already pinned."""
    with _editing(Path(root)) as pins:
        if fingerprint in pins:
            return False
        import socket  # here: listings read pins, only pinning needs the host name

        pins[fingerprint] = {"time": time.time(), "host": socket.gethostname(), "user": os.geteuid()}
        return True


def remove_pin(root: str | os.PathLike[str], prefix: str) -> str:
    """Unpin the one pinned fingerprint starting with `prefix`; returns it.

    Raises `NotPinned`, or `AmbiguousFingerprint` when the prefix names several pins."""
    from cachetool.errors import AmbiguousFingerprint

    with _editing(Path(root)) as pins:
        matches = [fp for fp in pins if fp == prefix]
        matches = matches or [fp for fp in pins if prefix and fp.startswith(prefix)]
        if not matches:
            raise NotPinned(prefix, Path(root))
        if len(matches) > 1:
            raise AmbiguousFingerprint(prefix, sorted(matches))
        del pins[matches[0]]
        return matches[0]
