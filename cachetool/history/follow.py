"""Reading a root's ledger segments, and the records of the other known roots a `Ledger` reads
(`read_other_roots`): every one with `--all-roots`, else the `save_to_disk` folders that hold a
state made in the root (`follow_saves`) and the origins of parents the root does not record
(`follow_parents`); and the saves of the root's states recorded elsewhere (`saves_in_other_roots`)."""

from __future__ import annotations

import os
from pathlib import Path

from cachetool.cache.roots import known_roots
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import SourceRecord
from cachetool.history.records.steps import SaveRecord, StepRecord
from cachetool.history.segments import iter_segments, read_segment


def order_key(rec: LedgerRecord) -> tuple[float, str, int]:
    """A ledger's order: by time, then run, then the record's order within its run."""
    return (rec.time, rec.run, rec.seq)


def read_root(root: Path) -> tuple[list[LedgerRecord], list[str], list[Path]]:
    """The records of every segment of `root`'s ledger, the warnings reading them gave, and the
    segments."""
    warnings: list[str] = []
    records: list[LedgerRecord] = []
    segments = list(iter_segments(root))
    label = os.fspath(root)
    for seg in segments:
        records += read_segment(seg, warnings, label)
    return records, warnings, segments


def read_other_roots(
    first: Path,
    records: list[LedgerRecord],
    warnings: list[str],
    segments: list[Path],
    *,
    all_roots: bool,
    follow: bool,
) -> list[Path]:
    """Add to `records`, `warnings` and `segments` (those of `first`, the ledger's root) what the
    other known roots add: every one with `all_roots`, else what `follow_saves` and
    `follow_parents` find (with `follow`). Returns every root read, `first` first."""
    roots = [first]
    registry = known_roots()
    others = [p for p in (Path(r) for r in registry) if p != first and p.is_dir()]
    if all_roots:
        for other in others:
            got, w, segs = read_root(other)
            records += got
            warnings += w
            segments += segs
            roots.append(other)
    elif follow and others:
        cache: dict[Path, list[LedgerRecord]] = {}
        saved = [p for p in others if registry.get(os.fspath(p), {}).get("kind") == "saved"]
        follow_saves(records, warnings, roots, saved, cache)
        follow_parents(records, warnings, roots, others, cache)
    return roots


def follow_saves(
    records: list[LedgerRecord],
    warnings: list[str],
    roots: list[Path],
    saved: list[Path],
    cache: dict[Path, list[LedgerRecord]],
) -> None:
    """Add the records of `save_to_disk` folders that hold a state made here (the folder is a
    root of its own; what was made from it there descends from this root)."""
    made = {r.result for r in records if isinstance(r, StepRecord) and r.result is not None}
    for folder in saved:
        if folder not in cache:
            got, w, _ = read_root(folder)
            cache[folder] = got
            warnings.extend(w)
        steps = [r for r in cache[folder] if isinstance(r, StepRecord)]
        if any(r.result in made for r in steps if isinstance(r, SaveRecord)):
            records += [r for r in cache[folder] if isinstance(r, (StepRecord, SourceRecord))]
            roots.append(folder)
            made |= {r.result for r in steps if r.result is not None}


def follow_parents(
    records: list[LedgerRecord],
    warnings: list[str],
    roots: list[Path],
    others: list[Path],
    cache: dict[Path, list[LedgerRecord]],
) -> None:
    """Add the origins (and their ancestry) of parents that `records` do not explain."""
    whole = set(roots)  # read whole already
    made = {r.result for r in records if isinstance(r, StepRecord) and r.is_origin}
    needed = {p for r in records if isinstance(r, StepRecord) for p in r.parents} - made
    while needed:
        found: list[LedgerRecord] = []
        for other in others:
            if other in whole:
                continue
            if other not in cache:
                got, w, _ = read_root(other)
                cache[other] = got
                warnings.extend(w)
            hit = [r for r in cache[other] if isinstance(r, StepRecord) and r.result in needed]
            if hit and other not in roots:
                roots.append(other)
            found += hit
            # the text of the functions those steps name, for explain
            hashes = {h for r in hit for h in source_hashes(r)}
            found += [r for r in cache[other] if isinstance(r, SourceRecord) and r.hash in hashes]
        if not found:
            return
        records += found
        made |= {r.result for r in found if isinstance(r, StepRecord) and r.is_origin}
        needed = {p for r in found if isinstance(r, StepRecord) for p in r.parents} - made
        needed -= {r.result for r in records if isinstance(r, StepRecord)}


def source_hashes(rec: StepRecord) -> list[str]:
    """The source hashes of the function a step record names and of the helpers it calls."""
    fn = rec.function
    if fn is None:
        return []
    return [h for h in (fn.source_hash, *(d.source_hash for d in fn.deps)) if h]


def saves_in_other_roots(root: Path, made: set[str], own: set[tuple[str, int]]) -> list[SaveRecord]:
    """The `save_to_disk` records, in the known roots other than `root`, of states in `made`
    (not internal, and not those of `own`, by run and seq)."""
    out: list[SaveRecord] = []
    for r in known_roots():
        other = Path(r)
        if other == root or not other.is_dir():
            continue
        got, _, _ = read_root(other)
        out += [
            x
            for x in got
            if isinstance(x, SaveRecord) and not x.internal and x.result in made and (x.run, x.seq) not in own
        ]
    return out
