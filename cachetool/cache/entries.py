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
from cachetool.cache.model import CacheFile, DatasetDir, DirKind, Entry, EntryProblem, RecordedUse


def _content(f: CacheFile) -> str | None:
    s = f.summary
    if s is None or not s.columns:
        return None
    return "indices" if s.is_indices else "data"


def _unreadable(f: CacheFile, ds: DatasetDir | None, fp: str | None) -> Entry:
    problems = header_problems(f) or (EntryProblem("unreadable"),)
    return Entry(Kind.UNREADABLE, f.path, (f,), *where(ds), fingerprint=fp, problems=problems)


def where(ds: DatasetDir | None) -> tuple[str | None, Path | None]:
    """An entry's `dataset` and `dataset_dir`: those of the folder `ds` it is in, if any."""
    return (ds.name, ds.path) if ds else (None, None)


def derived_entry(f: CacheFile, fp: str, ds: DatasetDir | None) -> Entry:
    s = f.summary
    if s is None or not s.columns or (s.format != STREAM and s.format != IPC_FILE):
        return _unreadable(f, ds, fp)
    problems = () if s.error is None else header_problems(f)
    held = s.fingerprint
    if held is not None and held != fp:
        problems += (EntryProblem(code="fingerprint-mismatch", got=held, want=fp),)
    elif held is not None:
        fp = held  # the same text: one string for both (a listing holds 100,000)
    if s.is_indices:
        return Entry(Kind.INDICES, f.path, (f,), *where(ds), fp, content="indices", problems=problems)
    return Entry(Kind.DERIVED, f.path, (f,), *where(ds), fp, content="data", problems=problems)


def plain_arrow_entry(f: CacheFile, ds: DatasetDir | None) -> Entry:
    s = f.summary
    if s is None or s.format not in ("stream", "ipc-file"):
        return _unreadable(f, ds, None)
    return Entry(
        Kind.ARROW,
        f.path,
        (f,),
        *where(ds),
        fingerprint=s.fingerprint,
        content=_content(f),
        problems=header_problems(f),
    )


def header_problems(f: CacheFile, in_set: bool = False) -> tuple[EntryProblem, ...]:
    """Why the headers of `f` do not read to the end, if they do not (`in_set`: naming `f`)."""
    error = f.summary.error if f.summary else None
    return (EntryProblem(error, "unreadable", f.path if in_set else None),) if error else ()


def shard_set_entry(fp: str, files: list[CacheFile], count: int, ds: DatasetDir | None) -> Entry:
    files.sort(key=lambda f: f.shard or (0, 0))
    have, missing = _shards(files, count)
    problems = [EntryProblem(code="partial-shards", got=have, want=count, missing=missing)] if missing else []
    for f in files:
        s = f.summary
        if s is None:
            continue
        if s.error:
            problems += header_problems(f, in_set=True)
        elif f.shard and s.fingerprint is not None:
            expect = layout.shard_fingerprint(fp, *f.shard)
            if s.fingerprint != expect:
                problems.append(
                    EntryProblem(code="fingerprint-mismatch", file=f.path, got=s.fingerprint, want=expect)
                )
    content = next((c for f in files if (c := _content(f))), None)
    return Entry(
        Kind.SHARDS,
        files[0].path,
        tuple(files),
        *where(ds),
        fingerprint=fp,
        content=content,
        expected_files=count,
        problems=tuple(problems),
    )


def _shards(files: Iterable[CacheFile], count: int) -> tuple[int, tuple[int, ...]]:
    """How many distinct shards of a set of `count` are in `files`, and the missing ranks."""
    have = {f.shard[0] for f in files if f.shard}
    return len(have), tuple(i for i in range(count) if i not in have)


def source_entry(
    split: str, files: list[CacheFile], count: int | None, ds: DatasetDir, fp: str | None
) -> Entry:
    """The entry of the prepared split `split` of the builder folder `ds`, whose fingerprint is `fp`."""
    files.sort(key=lambda f: f.shard or (0, 0))
    problems = []
    missing = _shards(files, count)[1] if count is not None else None
    if missing:
        problems.append(EntryProblem(code="missing-shards", want=count, missing=missing))
    for f in files:
        problems += header_problems(f, in_set=True)
    expected = ds.expected_rows(split)
    rows = [f.summary.rows for f in files if f.summary is not None]
    # With a shard missing the row count is short by consequence; say the cause only.
    if expected is not None and rows and all(r is not None for r in rows) and not problems:
        got = sum(r or 0 for r in rows)
        if got != expected:
            problems.append(EntryProblem(code="rows", got=got, want=expected))
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
        mixed = mixed_save(e, info.saves) if info.saves else None
        out.append(
            replace(
                e,
                last_used=info.last_used,
                parent=info.parent,
                operation=info.operation,
                aliases=aliases,
                problems=e.problems if mixed is None else (*e.problems, mixed),
            )
        )
    return out


#: Clock and file-system time granularity between a save's files and its record.
_SAVE_SLACK = 1.0


def mixed_save(e: Entry, saves: Iterable[tuple[str, float]]) -> EntryProblem | None:
    """A saved dataset whose state.json is still the one a recorded save (`saves`: its folder and
    end time) wrote while some of its data files were written after it: a later `save_to_disk`
    into the folder did not finish (datasets rewrites the data files in place and state.json
    last), so `load_from_disk` reads the files of both saves as one dataset. A state.json written
    after the recorded save (a copy that did not keep times, a save nobody traced) proves nothing
    either way: None."""
    if e.kind != Kind.SAVED or e.fingerprint is None or e.problems:
        return None
    state = next((f for f in e.files if f.path.name == layout.STATE_JSON), None)
    folder = os.fspath(e.path)
    if state is None or not any(state.mtime <= end + _SAVE_SLACK for path, end in saves if path == folder):
        return None
    after = state.mtime + _SAVE_SLACK
    newer = sorted(f.name for f in e.files if f.name.startswith("data-") and f.mtime > after)
    return EntryProblem(", ".join(newer), code="mixed-save") if newer else None
