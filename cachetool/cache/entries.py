"""The entries of dataset states, built from the files that hold them: a `cache-<fp>.arrow`
(derived or indices), a set of `num_proc` shards, a prepared split, any other Arrow file; then
the lock files given the folder they guard and recorded lineage attached by fingerprint."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.arrow import IPC_FILE, STREAM
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, DatasetDir, DirKind, Entry, RecordedUse


def _content(f: CacheFile) -> str | None:
    s = f.summary
    if s is None or not s.columns:
        return None
    return "indices" if s.is_indices else "data"


def _unreadable(f: CacheFile, ds: DatasetDir | None, fp: str | None) -> Entry:
    problem = f.summary.error if f.summary and f.summary.error else "unreadable"
    return Entry(Kind.UNREADABLE, f.path, (f,), *_where(ds), fingerprint=fp, problems=(problem,))


def _where(ds: DatasetDir | None) -> tuple[str | None, Path | None]:
    """An entry's `dataset` and `dataset_dir`: those of the folder `ds` it is in, if any."""
    return (ds.name, ds.path) if ds else (None, None)


def derived_entry(f: CacheFile, fp: str, ds: DatasetDir | None) -> Entry:
    s = f.summary
    if s is None or not s.columns or (s.format != STREAM and s.format != IPC_FILE):
        return _unreadable(f, ds, fp)
    error = s.error
    problems: tuple[str, ...] = (error,) if error else ()
    held = s.fingerprint
    if held is not None and held != fp:
        problems += (f"file holds fingerprint {held}, name says {fp}",)
    elif held is not None:
        fp = held  # the same text: one string for both (a listing holds 100,000)
    indices = s.is_indices
    return Entry(
        Kind.INDICES if indices else Kind.DERIVED,
        f.path,
        (f,),
        *_where(ds),
        fingerprint=fp,
        content="indices" if indices else "data",
        problems=problems,
    )


def plain_arrow_entry(f: CacheFile, ds: DatasetDir | None) -> Entry:
    s = f.summary
    if s is None or s.format not in ("stream", "ipc-file"):
        return _unreadable(f, ds, None)
    return Entry(
        Kind.ARROW,
        f.path,
        (f,),
        *_where(ds),
        fingerprint=s.fingerprint,
        content=_content(f),
        problems=(s.error,) if s.error else (),
    )


def shard_set_entry(fp: str, files: list[CacheFile], count: int, ds: DatasetDir | None) -> Entry:
    files.sort(key=lambda f: f.shard or (0, 0))
    gap = shard_gap(files, count)
    problems = [gap] if gap else []
    for f in files:
        s = f.summary
        if s is None:
            continue
        if s.error:
            problems.append(f"{f.name}: {s.error}")
        elif f.shard and s.fingerprint is not None:
            expect = layout.shard_fingerprint(fp, *f.shard)
            if s.fingerprint != expect:
                problems.append(f"{f.name}: file holds fingerprint {s.fingerprint}, name says {expect}")
    content = next((c for f in files if (c := _content(f))), None)
    return Entry(
        Kind.SHARDS,
        files[0].path,
        tuple(files),
        *_where(ds),
        fingerprint=fp,
        content=content,
        expected_files=count,
        problems=tuple(problems),
    )


def shard_gap(files: Iterable[CacheFile], count: int) -> str | None:
    """The problem of a `num_proc` shard set that misses shards ("partial: 1 of 2 shards (missing
    00001)"), None when every shard is there."""
    have, missing = _shards(files, count)
    return f"partial: {have} of {count} shards (missing {_ranks(missing)})" if missing else None


def _shards(files: Iterable[CacheFile], count: int) -> tuple[int, list[int]]:
    """How many distinct shards of a set of `count` are in `files`, and the missing ranks."""
    have = {f.shard[0] for f in files if f.shard}
    return len(have), [i for i in range(count) if i not in have]


def source_entry(split: str, files: list[CacheFile], count: int | None, ds: DatasetDir | None) -> Entry:
    from cachetool.fingerprint.hashing import source_split_fingerprint  # (not for a walk of leftovers)

    assert ds is not None
    files.sort(key=lambda f: f.shard or (0, 0))
    fp = source_split_fingerprint(ds.relative_data_dir, split) if ds.relative_data_dir else None
    problems = []
    missing = _shards(files, count)[1] if count is not None else None
    if missing:
        problems.append(f"missing shards {_ranks(missing)} of {count}")
    for f in files:
        if f.summary is not None and f.summary.error:
            problems.append(f"{f.name}: {f.summary.error}")
    expected = ds.expected_rows(split)
    rows = [f.summary.rows for f in files if f.summary is not None]
    # With a shard missing the row count is short by consequence; say the cause only.
    if expected is not None and rows and all(r is not None for r in rows) and not problems:
        got = sum(r or 0 for r in rows)
        if got != expected:
            problems.append(f"{got} rows, dataset_info.json says {expected}")
    return Entry(
        Kind.SOURCE,
        files[0].path,
        tuple(files),
        dataset=ds.name,
        dataset_dir=ds.path,
        fingerprint=fp,
        split=split,
        content="data",
        expected_rows=expected,
        expected_files=count,
        problems=tuple(problems),
    )


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(f"{r:05d}" for r in ranks)


def attribute_locks(entries: list[Entry], datasets: list[DatasetDir]) -> list[Entry]:
    """Give lock files the dataset folder they guard: `<hash>_builder.lock` and
    `<hash>.incomplete_info.lock` sit next to it; the root's lock encodes its absolute path
    with "/" turned into "_" (`DatasetBuilder.__init__`)."""
    guarded: list[tuple[Path, str | None]] = [(d.path, d.name) for d in datasets if d.kind == DirKind.BUILDER]
    guarded += [
        (e.dataset_dir, e.dataset)
        for e in entries
        if e.kind == Kind.INCOMPLETE_PREPARE and e.dataset_dir is not None
    ]
    by_lock_path: dict[Path, tuple[Path, str | None]] = {}
    by_lock_name: dict[str, tuple[Path, str | None]] = {}
    for path, name in guarded:
        by_lock_path[path.parent / layout.builder_lock_name(path.name)] = (path, name)
        by_lock_path[path.parent / layout.info_lock_name(path.name)] = (path, name)
        by_lock_name[layout.root_lock_name(os.fsdecode(path.as_posix()))] = (path, name)
    out = []
    for e in entries:
        hit = None
        if e.kind == Kind.LOCK and e.dataset is None:
            hit = by_lock_path.get(e.path) or by_lock_name.get(e.path.name)
        if hit is not None:
            e = replace(e, dataset=hit[1], dataset_dir=hit[0])
        out.append(e)
    return out


def attach_usage(entries: list[Entry], usage: Mapping[str, RecordedUse]) -> list[Entry]:
    """Fill `parent`, `operation` and `last_used` from recorded lineage, by fingerprint or alias;
    the fingerprint the recorded step gave a file named after another becomes an alias."""
    out = []
    for e in entries:
        info = next((usage[fp] for fp in (e.fingerprint, *e.aliases) if fp and fp in usage), None)
        if info is None:
            out.append(e)
            continue
        alias = info.made_as
        aliases = e.aliases if alias is None or alias in e.aliases else (*e.aliases, alias)
        out.append(
            replace(
                e, last_used=info.last_used, parent=info.parent, operation=info.operation, aliases=aliases
            )
        )
    return out
