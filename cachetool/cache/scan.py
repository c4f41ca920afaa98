"""Scan a cache root into a `CacheReport`. Nothing else in cachetool walks the folder.

`scan_cache(root)` returns a `CacheReport`: the dataset folders, one `Entry` per dataset state
(a fingerprint, possibly several files) and the problems met on the way. A scan never stops at a
bad file: truncated, empty, foreign, unreadable files and odd names become entries of kind
`unreadable`/`other` plus warnings. It never follows a symlink, never opens anything but regular
files, and never reads column data (see `cachetool.cache.arrow`).

The parts: `model` (the dataclasses), `walk` (listing folders, reading files), `recognize` (what
a folder is), `classify` and `nondata` (the rules that make entries), `entries` (building them),
`lookup` (finding one by name), `lean` (entries of unchanged cache files kept as tuples, for
`scan_cache_lean`). The names below stay importable from here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache import layout
from cachetool.cache.classify import Scanner
from cachetool.cache.dirs import enclosing_root
from cachetool.cache.entries import attach_usage, attribute_locks
from cachetool.cache.index import ReadIndex
from cachetool.cache.layout import Kind
from cachetool.cache.lean import LeanEntry, Listed, entry_of, fingerprint_of, path_text
from cachetool.cache.lookup import find_entry
from cachetool.cache.model import CacheFile, CacheReport, DatasetDir, Entry, RecordedUse, ScanWarning
from cachetool.cache.roots import user_state_dir
from cachetool.cache.walk import gc_paused
from cachetool.errors import CacheNotFound, NotADirectory

if TYPE_CHECKING:
    from cachetool.history.ledger import Ledger

__all__ = [
    "CacheFile",
    "CacheReport",
    "DatasetDir",
    "Entry",
    "Kind",
    "RecordedUse",
    "ScanWarning",
    "find_entry",
    "gc_paused",
    "scan_cache",
]


def scan_cache(
    root: str | os.PathLike[str],
    *,
    use_index: bool = True,
    ledger: bool | Ledger = True,
    usage: Mapping[str, RecordedUse] | None = None,
    progress: Callable[[int], None] | None = None,
) -> CacheReport:
    """Scan a datasets cache root (or a `save_to_disk` folder, or any folder of Arrow files).

    Reads only `stat` results, JSON metadata and Arrow headers. With `use_index`, what was read is
    remembered in the user's cache folder (`cachetool.cache.dirs.derived_dir`; nothing is written
    into the root), so a repeat scan only stats unchanged files. Recorded lineage (parent,
    operation, last use) is attached to entries from `usage` (fingerprint to what the ledger says
    of it) when given, else from the ledger: `ledger=True` reads the root's, a `Ledger` is one the
    command already loaded, `False` attaches none.
    """
    report, _ = _scan(root, use_index, ledger, usage, progress, lean=False)
    return report


def scan_cache_lean(
    root: str | os.PathLike[str],
    *,
    ledger: bool | Ledger = True,
    progress: Callable[[int], None] | None = None,
    prelisted: dict[str, Any] | None = None,
) -> tuple[CacheReport, list[Listed]]:
    """`scan_cache(root)` for a listing that writes JSON: the entries of unchanged
    `cache-<fp>.arrow` files are kept lean (`cachetool.cache.lean`). Returns the report of every
    other entry (its `entries` leave the lean ones out) and all entries in listing order;
    `lean.entries_of` of the latter is `scan_cache(root).entries`. `prelisted` holds folders already
    listed (`snapshot.ListingText.listed`), taken instead of listing them again."""
    return _scan(root, True, ledger, None, progress, lean=True, prelisted=prelisted)


def _scan(
    root: str | os.PathLike[str],
    use_index: bool,
    ledger: bool | Ledger,
    usage: Mapping[str, RecordedUse] | None,
    progress: Callable[[int], None] | None,
    lean: bool,
    prelisted: dict[str, Any] | None = None,
) -> tuple[CacheReport, list[Listed]]:
    root_path = Path(root).expanduser()
    if not root_path.exists() and not root_path.is_symlink():
        raise CacheNotFound(root_path)
    if not root_path.is_dir():
        raise NotADirectory(root_path)
    root_path = root_path.resolve()
    own = _is_cachetool_state(root_path)
    with gc_paused():
        # A subfolder of a cache (a dataset's folder, a saved split) reads its root's ledger.
        ledger_root = enclosing_root(root_path) if ledger is True else root_path
        if usage is None and ledger is True and not _may_have_ledger(ledger_root):
            usage = {}  # what the ledger says without importing it (a third of an `ls`'s imports)
        elif usage is None and ledger is not False:
            from cachetool.history.ledger import usage_by_fingerprint

            usage = usage_by_fingerprint(ledger_root if ledger is True else ledger)
        index = ReadIndex(root_path, enabled=use_index and not own)
        scanner = Scanner(root_path, index, progress)
        lean_entries: list[LeanEntry] = []
        if lean:
            scanner.lean = lean_entries
            scanner.listed = prelisted
        if not own:
            try:
                scanner.read_ahead()
                scanner.walk(root_path)
            finally:
                scanner.close()
        index.save()
        entries = attribute_locks(scanner.entries, scanner.datasets)
        if usage:
            if lean_entries:  # those with recorded lineage get their `Entry`, and it
                entries += _recorded(lean_entries, usage)
            entries = attach_usage(entries, usage)
        listed = _in_listing_order(entries, lean_entries)
        # The report's entries: every `Entry`, in listing order.
        entries = [e for e in listed if not isinstance(e, tuple)]
        datasets = sorted(scanner.datasets, key=lambda d: str(d.path))
    report = CacheReport(root_path, tuple(datasets), tuple(entries), tuple(scanner.warnings), time.time())
    return report, listed


def _recorded(lean_entries: list[LeanEntry], usage: Mapping[str, RecordedUse]) -> list[Entry]:
    """The entries of the lean entries whose fingerprint `usage` knows (taken out of the list)."""
    subset = getattr(usage, "subset", None)  # an index answers a whole listing in a few queries
    known = subset(map(fingerprint_of, lean_entries)) if subset is not None else usage
    out = [entry_of(e) for e in lean_entries if fingerprint_of(e) in known]
    if out:
        lean_entries[:] = [e for e in lean_entries if fingerprint_of(e) not in known]
    return out


def _in_listing_order(entries: list[Entry], lean: Sequence[LeanEntry] = ()) -> list[Listed]:
    """`entries` (and `lean` entries) sorted by dataset, kind, split, then path text. Grouped
    first, so the texts of one group's paths exist at a time, not those of every entry of a large
    cache."""
    groups: dict[tuple[str, str, str], list[Listed]] = {}
    for e in entries:
        key = (e.dataset or "~", e.kind._value_, e.split or "")
        of_key = groups.get(key)
        if of_key is None:
            groups[key] = [e]
        else:
            of_key.append(e)
    # Groups that need sorting by path text: those of Entries, and those whose lean entries
    # come from more than one folder (a folder's own come in name order, so in path order).
    single: dict[tuple[str, str, str], str | None] = dict.fromkeys(groups)
    last: tuple[object, object, str] | None = None
    group: list[Listed] = []
    for le in lean:  # a `LeanEntry`: its folder, kind and dataset folder, in runs
        if last is None or le[0] is not last[2] or le[2] is not last[0] or le[3] is not last[1]:
            ds = le[3]
            prefix = le[0]
            last = (le[2], ds, prefix)
            key = ((None if ds is None else ds.name) or "~", le[2]._value_, "")
            found = groups.get(key)
            if found is None:
                group = groups[key] = []
                single[key] = prefix
            else:
                group = found
                if single[key] != prefix:
                    single[key] = None
        group.append(le)
    out: list[Listed] = []
    for key in sorted(groups):
        done = groups.pop(key)
        if len(done) > 1 and single[key] is None:
            done.sort(key=_path_text)
        out += done
    return out


def _path_text(e: Listed) -> str:
    return path_text(e) if isinstance(e, tuple) else str(e.path)


def _may_have_ledger(root: Path) -> bool:
    """Whether a folder that may hold ledger segments of `root` holds any file named like one
    (`usage_by_fingerprint` of a root without segments is empty). The per-user fallback's name
    (a hash of the root's path) is made only where the per-user `ledgers` folder exists."""
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
