"""Scanning a datasets cache: `scan_cache(root)` walks the tree once and returns a `CacheReport`.

Only `stat`, small JSON metadata files and Arrow headers are read; a symlink is never followed,
nothing but regular files is opened. Leftovers and odd names become entries of kind
`unreadable`/`other` plus warnings. The parts: `model` (the dataclasses), `walk`, `recognize`
(what a folder is), `classify` and `nondata` (the rules), `entries` (building them).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.classify import Scanner
from cachetool.cache.entries import attach_usage, attribute_locks
from cachetool.cache.model import (
    CacheReport,
    Entry,
    Liveness,
    RecordedUse,
)
from cachetool.cache.roots import user_state_dir
from cachetool.cache.walk import gc_paused
from cachetool.errors import CacheNotFound, NotADirectory


def scan_cache(
    root: str | os.PathLike[str],
    *,
    use_index: bool = True,
    usage: Mapping[str, RecordedUse] | None = None,
    liveness: Callable[..., Liveness] | None = None,
    progress: Callable[[int], None] | None = None,
) -> CacheReport:
    """Scan a datasets cache root (or a `save_to_disk` folder, or any folder of Arrow files).

    With `use_index`, what was read is remembered in the user's cache folder (never in the root),
    so a repeat scan only stats unchanged files. What a higher layer knows comes in as data:
    `usage` (fingerprint to what the ledger says of it, e.g.
    `cachetool.history.ledger.read_ledger(root).usage()`) fills parent, operation and last use;
    `liveness` (e.g. `cachetool.maintenance.liveness.scan_in_use`), called as
    `liveness(root=root)` at most once, tells a tf.data cache being written from an abandoned one
    (without it, no process is live).
    """
    root_path = Path(root).expanduser()
    if not root_path.exists() and not root_path.is_symlink():
        raise CacheNotFound(root_path)
    if not root_path.is_dir():
        raise NotADirectory(root_path)
    root_path = root_path.resolve()
    own = _is_cachetool_state(root_path)
    with gc_paused():
        scanner = Scanner(root_path, use_index, progress, liveness)
        if not own:
            scanner.walk(root_path)
        if scanner.index is not None:
            scanner.index.save()
        entries = attribute_locks(scanner.entries, scanner.datasets)
        if usage:
            entries = attach_usage(entries, usage)
        entries = _in_listing_order(entries)
        datasets = sorted(scanner.datasets, key=lambda d: str(d.path))
    return CacheReport(root_path, tuple(datasets), tuple(entries), tuple(scanner.warnings), time.time())


def _in_listing_order(entries: list[Entry]) -> list[Entry]:
    """`entries` by dataset, kind, split, then path text (grouped first, so only one group's path
    texts exist at a time)."""
    groups: dict[tuple[str, str, str], list[Entry]] = {}
    for e in entries:
        key = (e.dataset or "~", e.kind._value_, e.split or "")
        group = groups.get(key)
        if group is None:
            groups[key] = [e]
        else:
            group.append(e)
    out: list[Entry] = []
    for key in sorted(groups):
        group = groups.pop(key)
        group.sort(key=lambda e: str(e.path))
        out += group
    return out


def may_have_ledger(root: Path) -> bool:
    """Whether a folder that may hold ledger segments of `root` holds a file named like one (a
    caller can skip importing the ledger otherwise)."""
    from cachetool.cache.roots import SEGMENT_SUFFIX, present_ledger_dirs

    for folder in present_ledger_dirs(root):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(n.endswith(SEGMENT_SUFFIX) for n in names):
            return True
    return False


def _is_cachetool_state(path: Path) -> bool:
    """A folder of cachetool's own state (a root's `.cachetool/`, or the per-user state folder):
    nothing in it is a cache entry."""
    if layout.LEDGER_DIR in path.parts:
        return True
    state = user_state_dir()
    with contextlib.suppress(OSError):
        state = state.resolve()
    # Only the folder itself and its ledgers: CACHETOOL_HOME may be a broad folder holding caches.
    return path == state or state / "ledgers" in (path, *path.parents)
