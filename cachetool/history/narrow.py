"""Naming a fingerprint of a long-lived cache without scanning all of it.

`resolve` (`cachetool.cache.lookup`) looks at every entry of a scan, but the answer depends
only on the entries whose fingerprint or alias starts with the name, and on the entries that hold
the files the ledger recorded for the fingerprints it knows with that prefix. `narrow_report`
finds the folders that can hold such entries and scans those alone, so `resolve` on that partial
report gives what it gives on the whole scan:

* one pass over the folders reads only names (no `stat`, no Arrow header), descending as the scan
  does (not into cachetool's state, interrupted prepares, gc leftovers or `downloads/extracted`);
* a folder is scanned when a file's name says its fingerprint starts with the name
  (`cache-<fp>.arrow`, of one shard too), when a prepared split's fingerprint (computed from the
  folder and the split, as the scan does) starts with it, when it holds a file whose fingerprint
  only its content tells (a leftover `tmp*` file, an Arrow file of another name), or when the
  ledger recorded a file there for a fingerprint with that prefix (`cast_column`'s result lives in
  a file named after another fingerprint);
* anything the rule does not cover gives None, and the command scans the whole cache: a name that
  is a path, a saved dataset inside the root (its entry's fingerprint is in `state.json`), a
  folder that cannot be listed, a file holding cache files, or more than `MAX_CANDIDATES`
  fingerprints of the ledger with that prefix.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.model import CacheReport
from cachetool.cache.recognize import read_json, relative_data_dir
from cachetool.fingerprint.plain import source_split_fingerprint

#: More fingerprints of the ledger than this start with the name: a short prefix, read whole.
MAX_CANDIDATES = 64


class _Unsure(Exception):
    """The names alone cannot tell which folders hold a candidate: scan the whole cache."""


def narrow_report(
    root: str | os.PathLike[str], name: str, con: sqlite3.Connection, *, usage: bool = True
) -> CacheReport | None:
    """A scan of the folders of `root` that can hold an entry `name` resolves to (see the module
    docstring), with the usage of the ledger index `con` attached (`usage`); None when only the
    whole scan can tell."""
    from cachetool.cache.lookup import cache_file_key

    if not name or os.sep in name or name in (".", ".."):
        return None  # a path: the entry at it, wherever it is
    key = cache_file_key(name)
    root_path = Path(os.fspath(root)).expanduser()
    if not root_path.is_dir() or root_path.is_symlink():
        return None
    root_path = root_path.resolve()
    base = os.fspath(root_path)
    if layout.LEDGER_DIR in root_path.parts:
        return None
    try:
        recorded = _recorded_folders(con, key, base)
        folders, seen = _name_pass(base, key)
    except _Unsure:
        return None
    folders |= recorded & seen  # a folder the scan never reaches holds no entry
    if base in folders:
        return None
    return _scan(root_path, folders, con if usage else None)


def _recorded_folders(con: sqlite3.Connection, key: str, base: str) -> set[str]:
    """The folders under `base` of the files the ledger recorded for fingerprints starting with
    `key`."""
    from cachetool.history.part import IndexedFingerprints, records_of_results
    from cachetool.history.records import StepRecord

    fps = IndexedFingerprints(con).starting_with(key)
    if len(fps) > MAX_CANDIDATES:
        raise _Unsure
    inside = os.path.join(base, "")
    out = set()
    for rec in records_of_results(con, Path(base), fps):
        if isinstance(rec, StepRecord):
            for f in rec.files:
                folder = os.path.dirname(rec.located(f.path))
                if folder.startswith(inside):
                    out.add(folder)
    return out


def _name_pass(base: str, key: str) -> tuple[set[str], set[str]]:
    """(folders that can hold an entry whose fingerprint starts with `key`, every folder the scan
    walks), from names alone."""
    wanted: set[str] = set()
    seen: set[str] = set()
    todo = [base]
    while todo:
        folder = todo.pop()
        seen.add(folder)
        try:
            with os.scandir(folder) as it:
                listed = [
                    (de.name, de.is_dir(follow_symlinks=False), de.is_file(follow_symlinks=False))
                    for de in it
                ]
        except OSError:
            raise _Unsure from None
        files = [n for n, _, is_file in listed if is_file]
        names = set(files)
        if layout.STATE_JSON in names or layout.DATASET_DICT_JSON in names:
            raise _Unsure  # a saved dataset: its fingerprint is in state.json
        if any(layout.SAVED_SHARD_RE.match(n) for n in files):
            raise _Unsure  # an interrupted save
        splits = _splits(Path(folder), names)
        rel = relative_data_dir(Path(folder)) if splits else None
        for n in files:
            if _may_name(n, key, splits, rel):
                wanted.add(folder)
                break
        for n, is_dir, _ in listed:
            if not is_dir or n == layout.LEDGER_DIR or layout.GC_TRASH_RE.match(n):
                continue
            if layout.is_incomplete_dir(n):
                continue
            if folder == base and n == "downloads":
                _downloads(os.path.join(folder, n), todo)
                continue
            todo.append(os.path.join(folder, n))
    return wanted, seen


def _downloads(path: str, todo: list[str]) -> None:
    """The folders of `downloads/` the scan walks as cache folders (all but `extracted`)."""
    try:
        with os.scandir(path) as it:
            todo += [de.path for de in it if de.is_dir(follow_symlinks=False) and de.name != "extracted"]
    except OSError:
        raise _Unsure from None


def _splits(folder: Path, names: set[str]) -> list[str] | None:
    """The splits of a builder folder as the scan reads them from `dataset_info.json` (those with
    a row count), None when the folder is not one."""
    if layout.DATASET_INFO not in names or relative_data_dir(folder) is None:
        return None
    info = read_json(folder / layout.DATASET_INFO)
    splits = (info.get("splits") or {}) if isinstance(info, dict) else {}
    if not isinstance(splits, dict):
        return []
    return [
        str(n) for n, s in splits.items() if isinstance(s, dict) and isinstance(s.get("num_examples"), int)
    ]


def _may_name(name: str, key: str, splits: list[str] | None, rel: str | None) -> bool:
    """A file of this name can make an entry whose fingerprint (or alias) starts with `key`."""
    if name.startswith("cache-"):
        parsed = layout.parse_cache_file(name)
        if parsed is not None:
            return parsed[0].startswith(key)
    if name.startswith("tmp") and layout.TEMP_FILE_RE.match(name):
        return True  # a writer's file: its fingerprint is in its header
    if splits and rel is not None:
        src = layout.source_split_of(name, splits)
        if src is not None:
            return source_split_fingerprint(rel, src[0]).startswith(key)
    return name.endswith(".arrow")  # an Arrow file of another name: the header tells


def _scan(root: Path, folders: set[str], con: sqlite3.Connection | None) -> CacheReport:
    """The entries of `folders` (each with what is below it), as the whole scan makes them."""
    from cachetool.cache.classify import Scanner
    from cachetool.cache.entries import attach_usage, attribute_locks
    from cachetool.cache.index import ReadIndex
    from cachetool.cache.walk import gc_paused

    starts = sorted(folders)
    starts = [
        f for i, f in enumerate(starts) if not any(f.startswith(os.path.join(s, "")) for s in starts[:i])
    ]
    with gc_paused():
        scanner = Scanner(root, ReadIndex(root, enabled=False), None)
        try:
            for folder in starts:
                scanner.walk(Path(folder))
        finally:
            scanner.close()
        entries = attribute_locks(scanner.entries, scanner.datasets)
        if con is not None:
            from cachetool.history.index import UsageIndex

            entries = attach_usage(entries, UsageIndex(con))
        entries.sort(key=lambda e: (e.dataset or "~", e.kind._value_, e.split or "", str(e.path)))
        datasets = sorted(scanner.datasets, key=lambda d: str(d.path))
    return CacheReport(root, tuple(datasets), tuple(entries), tuple(scanner.warnings), time.time())
