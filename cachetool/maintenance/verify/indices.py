"""Indices files (from `select`, `shuffle`, `sort`, ...) must point inside the data they index;
one whose data is gone is an orphan (harmless, removable, never quarantined)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cachetool.cache.layout import Kind
from cachetool.cache.model import Entry
from cachetool.history.ledger import Ledger
from cachetool.maintenance.verify.checks import Checker

_DATA_KINDS = (Kind.SOURCE, Kind.DERIVED, Kind.SHARDS, Kind.SAVED)


def check_indices(
    checker: Checker, entries: Sequence[Entry], parents: dict[str, str | None], ledger: Ledger
) -> None:
    """An indices mapping must point inside the data it indexes. The recorded parent tells
    which data that is; without a record, an index past the end of every data file in the
    folder is wrong whatever it indexes."""
    by_fp = {fp: e for e in entries for fp in (e.fingerprint, *e.aliases) if fp}
    by_path = {f.path: x for x in checker.report.entries for f in x.files}
    for e in entries:
        if e.kind != Kind.INDICES or not e.files or e.files[0].summary is None or e.files[0].summary.error:
            continue
        biggest = _max_index(e.files[0].path)
        if biggest is None:
            continue
        parent_fp = parents.get(e.fingerprint or "")
        parent = by_fp.get(parent_fp or "")
        if parent_fp and parent is None:
            parent = _data_on_disk(parent_fp, ledger, by_fp, by_path)
        if parent_fp and parent is None:
            _orphan(checker, e, f"the data it indexes ({parent_fp}) is no longer in the cache")
            continue
        if parent is not None and (parent.problems or parent.complete is False):
            continue  # the parent is the broken one: its own finding says so
        if parent is not None and parent.rows is not None and parent.kind != Kind.INDICES:
            if biggest >= parent.rows:
                checker.add(
                    "index-out-of-bounds",
                    e,
                    e.files[0].path,
                    f"index {biggest} points past the end of its data ({parent.rows} rows in {parent.id})",
                    checker.recompute(e),
                )
            continue
        _unrecorded(checker, e, entries, biggest, ledger)


def _unrecorded(checker: Checker, e: Entry, entries: Sequence[Entry], biggest: int, ledger: Ledger) -> None:
    """An indices file without a recorded parent, against every dataset left in its folder."""
    sizes = [
        x.rows
        for x in entries
        if x.dataset_dir == e.dataset_dir and x.rows is not None and not x.problems and x.kind in _DATA_KINDS
    ]
    if not sizes or biggest < max(sizes):
        return
    if _data_removed(checker, e, ledger):
        _orphan(
            checker,
            e,
            f"index {biggest} is past the end of every dataset left in its folder (largest has "
            f"{max(sizes)} rows): the data it indexes was removed",
        )
        return
    checker.add(
        "index-out-of-bounds",
        e,
        e.files[0].path,
        f"index {biggest} points past the end of every dataset in its folder (largest has {max(sizes)} rows)",
        checker.recompute(e),
    )


def _orphan(checker: Checker, e: Entry, why: str) -> None:
    """An indices file whose data is gone: harmless (datasets never reads it without its
    data), removable, and never quarantined."""
    checker.removable("orphan-indices", e, f"orphan: {why}", e.files[0].path, e.id)


def _data_removed(checker: Checker, e: Entry, ledger: Ledger) -> bool:
    """The data an unrecorded indices file points into is gone: its folder has no source
    split left, or gc removed data files from it."""
    if checker.removed_folders is None:
        checker.removed_folders = _removed_folders(ledger)
    folder = e.files[0].path.parent
    no_source = not any(
        x.kind == Kind.SOURCE and x.files and x.files[0].path.parent == folder for x in checker.report.entries
    )
    return no_source or folder in checker.removed_folders


def _removed_folders(ledger: Ledger) -> frozenset[Path]:
    """Folders from which gc (as its log in the ledger says) removed data files."""
    out: set[Path] = set()
    for rec in ledger.gc_records():
        if rec.kind in ("source", "derived", "shards", "arrow"):
            out.update(Path(p).parent for p in rec.paths)
    return frozenset(out)


def _data_on_disk(
    fp: str, ledger: Ledger, by_fp: dict[str, Entry], by_path: dict[Path, Entry]
) -> Entry | None:
    """The cache entry holding the data of the recorded step `fp` when no entry has its
    fingerprint: a step that wrote no file (`select` of a range, `set_format`) holds its parent's
    data, and one that wrote under another fingerprint (`cast_column` through its internal `map`)
    holds the files its record lists. None when that data is gone."""
    seen: set[str] = set()
    while fp not in seen:
        seen.add(fp)
        if fp in by_fp:
            return by_fp[fp]
        made = [r for r in ledger.for_result(fp, include_internal=True) if r.is_origin]
        if not made:
            return None
        rec = made[-1]
        if rec.files:
            return next((by_path[p] for f in rec.files if (p := Path(f.path)) in by_path), None)
        if len(rec.parents) != 1:
            return None
        fp = rec.parents[0]
    return None


def _max_index(path: Path) -> int | None:
    """The largest value of an indices file (reads its single uint64 column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        with pa.memory_map(os.fspath(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
            if table.num_rows == 0:
                return None
            value = pc.max(table.column(0)).as_py()
            return int(value) if value is not None else None
    except Exception:  # a damaged file has no bounds to check; its own finding says so
        return None
