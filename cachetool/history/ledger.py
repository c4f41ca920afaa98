"""The ledger of a cache root read: segments into typed records, the `Ledger` of a root (read
once per command, with the other roots it reaches), what it says about each fingerprint
(`Usage`), and naming a fingerprint in a root (`resolve_in_root`, `named_elsewhere`). Its steps
indexed: `cachetool.history.graph` (`Ledger.view`).

How the ledger is kept, and its record schema: docs/ledger.md.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.layout import parse_cache_file
from cachetool.cache.roots import SEGMENT_SUFFIX, is_segment_name, known_roots, ledger_dirs
from cachetool.cache.store import NotRegularFile, open_state
from cachetool.history.records.base import RECORD_TYPES, BadRecord, LedgerRecord, order_key
from cachetool.history.records.other import (
    COMPACTED_PREFIX,
    FpSums,
    GcRecord,
    RunSummaryRecord,
    SourceRecord,
    add_sums,
    step_sums,
)
from cachetool.history.records.steps import (  # every type registers
    SaveRecord,
    StepRecord,
    StepStartRecord,
    source_hashes,
)

if TYPE_CHECKING:
    from cachetool.cache.lookup import Resolved
    from cachetool.cache.model import CacheReport
    from cachetool.history.graph import StepGraph

#: A record longer than this is not one cachetool wrote (source texts stop at 20,000 characters,
#: argument summaries at 2.5 kB each): skipped with a warning.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: A segment is read up to this size; the rest is skipped with a warning (a runaway writer, or a
#: file that is not a segment).
MAX_SEGMENT_BYTES = 256 * 1024 * 1024


def iter_segments(root: str | os.PathLike[str], warnings: list[str] | None = None) -> Iterator[Path]:
    """Segment files of `root` (own ledger and user fallback), in name order (`segments_in`). A
    ledger folder this user may not list (another user's, made under umask 077) is a warning in
    `warnings`: its runs are there, unread."""
    for d in ledger_dirs(root):
        yield from segments_in(d, warnings)


def segments_in(folder: Path, warnings: list[str] | None = None) -> list[Path]:
    """The segment files of one ledger folder, in name order; a segment a compacted segment
    replaces is left out while it still has the size it was read at (a compaction killed before
    removing it: the next compaction removes it)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(SEGMENT_SUFFIX))
    except PermissionError as e:
        if warnings is not None:
            warnings.append(f"{folder}: {e.strerror}: its recorded runs are not read")
        return []
    except OSError:
        return []
    replaced = replaced_segments(folder, [n for n in names if n.startswith(COMPACTED_PREFIX)])
    return [folder / n for n in names if n not in replaced or segment_size(folder / n) != replaced[n]]


def replaced_segments(folder: Path, compacted: list[str]) -> dict[str, int]:
    """{name: size} of the segments the compacted segments `compacted` of `folder` replace (each
    names them in its first record)."""
    out: dict[str, int] = {}
    for name in compacted:
        try:
            with os.fdopen(open_state(folder / name), "rb") as f:
                first = f.readline(MAX_LINE_BYTES)
        except OSError:  # NotRegularFile included
            continue
        rec = _parse_line(folder / name, 1, first.rstrip(b"\n"), [], None)
        replaces = getattr(rec, "replaces", None) if rec is not None and rec.type == "compaction" else None
        out.update((n, size) for n, size in replaces or () if is_segment_name(n))
    return out


def segment_size(path: Path) -> int | None:
    """The size of the file at `path` (not followed if a symlink); None if there is none."""
    try:
        return path.lstat().st_size
    except OSError:
        return None


def read_partly(path: Path) -> bool:
    """Readers read only part of the segment at `path`: it holds more than `MAX_SEGMENT_BYTES`."""
    return (segment_size(path) or 0) > MAX_SEGMENT_BYTES


def _read_capped(path: Path, warnings: list[str]) -> bytes | None:
    """The first `MAX_SEGMENT_BYTES` of a regular file; None (with a warning) for anything else."""
    try:
        fd = open_state(path)
    except NotRegularFile:
        warnings.append(f"{path}: skipped: not a regular file")
        return None
    except OSError as e:
        warnings.append(f"{path}: {e.strerror or e}")
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_SEGMENT_BYTES + 1)
    except OSError as e:
        warnings.append(f"{path}: {e.strerror or e}")
        return None
    if len(data) > MAX_SEGMENT_BYTES:
        cut = data.rfind(b"\n", 0, MAX_SEGMENT_BYTES) + 1
        warnings.append(
            f"{path}: read the first {cut} bytes only (a segment holds at most {MAX_SEGMENT_BYTES})"
        )
        data = data[:cut]
    return data


def read_segment(
    path: Path, warnings: list[str] | None = None, read_from: str | None = None
) -> list[LedgerRecord]:
    """The records of one segment, typed; a torn last line and every line that is not a record
    are skipped with a warning naming the line."""
    return [rec for _, rec in read_segment_from(path, warnings, read_from)[0]]


def read_segment_from(
    path: Path, warnings: list[str] | None = None, read_from: str | None = None
) -> tuple[list[tuple[int, LedgerRecord]], int, int]:
    """`read_segment` with each record's offset, the offset after the last whole line, and how
    many whole lines were skipped."""
    sink: list[str] = [] if warnings is None else warnings
    data = _read_capped(path, sink)
    if not data:
        return [], 0, 0
    whole = data.rfind(b"\n") + 1
    if data[whole:].strip():
        sink.append(
            f"{path}: skipped a torn last record ({len(data) - whole} bytes; its writer was killed mid-write)"
        )
    out = []
    skipped = len(sink)
    at = 0
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        rec = _parse_line(path, number, line, sink, read_from)
        if rec is not None:
            out.append((at, rec))
        at += len(line) + 1
    return out, whole, len(sink) - skipped


_raw_decode = json.JSONDecoder().raw_decode


def _decode(line: bytes) -> Any:
    """`json.loads(line)`, without the cost of its wrapper (a sixth of decoding a ledger) for a
    line as cachetool writes it: UTF-8, one value and nothing around it. Any other line is
    decoded by `json.loads`, which raises what it raises."""
    try:
        text = line.decode()
        obj, end = _raw_decode(text)
        if end == len(text):
            return obj
    except ValueError:  # not UTF-8 (a byte order mark, UTF-16), or not JSON there
        pass
    return json.loads(line)


def parse_record(obj: Any, read_from: str | None = None) -> LedgerRecord:
    """The typed record for one decoded JSON line (found in the ledger of the root `read_from`);
    `BadRecord` says why it is not one."""
    if not isinstance(obj, dict):
        raise BadRecord("not a JSON object")
    v = obj.get("v")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise BadRecord("no record version")
    kind = obj.get("type")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise BadRecord(f"unknown record type {str(kind)[:40]!r}")
    return cls.parse(obj, read_from)


def _parse_line(
    path: Path, number: int, line: bytes, sink: list[str], read_from: str | None
) -> LedgerRecord | None:
    """One line's record, or None (with a warning unless blank)."""
    if not line.strip():
        return None
    if len(line) > MAX_LINE_BYTES:
        sink.append(f"{path}:{number}: skipped a record of {len(line)} bytes (at most {MAX_LINE_BYTES})")
        return None
    try:
        obj = _decode(line)
    except RecursionError:
        sink.append(f"{path}:{number}: skipped a record nested too deeply")
        return None
    except ValueError:
        sink.append(f"{path}:{number}: skipped an unreadable record")
        return None
    try:
        return parse_record(obj, read_from)
    except BadRecord as e:
        sink.append(f"{path}:{number}: skipped a record: {e}")
    except RecursionError:
        sink.append(f"{path}:{number}: skipped a record nested too deeply")
    return None


@dataclass(frozen=True)
class Usage:
    """What the ledger says about one fingerprint: its latest use and its recorded origin."""

    last_used: float
    parent: str | None
    operation: str | None
    parents: tuple[str, ...] = ()
    records: int = 0
    hits: int = 0
    misses: int = 0
    random_fallback: bool = False
    #: The fingerprint the step that made it gave its result, where that differs (the file of a
    #: `cast_column` is named after the `map` it runs): the entry's alias.
    made_as: str | None = None
    #: The folder and end time of each recorded `save_to_disk` of it (whether a later save into
    #: the folder did not finish: `cachetool.cache.entries.mixed_save`).
    saves: tuple[tuple[str, float], ...] = ()


def read_root(root: Path) -> tuple[list[LedgerRecord], list[str], list[Path]]:
    """The records of every segment of `root`'s ledger, the warnings reading them gave, and the
    segments."""
    warnings: list[str] = []
    records: list[LedgerRecord] = []
    segments = list(iter_segments(root, warnings))
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
    other known roots add: every one with `all_roots`; else, with `follow`, the `save_to_disk`
    folders that hold a state made here (what was made from them descends from it), and the
    origins (with their ancestry) of the parents no record read explains. Returns every root
    read, `first` first. The warnings of a root that adds nothing are left out: nothing shown
    came from it."""
    roots = [first]
    registry = known_roots()
    others = [p for p in (Path(r) for r in registry) if p != first and p.is_dir()]
    read: dict[Path, list[LedgerRecord]] = {}
    warned: dict[Path, list[str]] = {}

    def records_of(other: Path) -> list[LedgerRecord]:
        if other not in read:
            got, warned[other], segs = read_root(other)
            read[other] = got
            segments.extend(segs if all_roots else ())
        return read[other]

    def add(other: Path) -> None:
        roots.append(other)
        warnings.extend(warned.get(other, ()))

    if all_roots or not follow or not others:  # no other root to read: nothing to look up
        for other in others if all_roots else ():
            records += records_of(other)
            add(other)
        return roots
    made = {r.result for r in records if isinstance(r, StepRecord) and r.result is not None}
    for folder in (p for p in others if registry.get(os.fspath(p), {}).get("kind") == "saved"):
        steps = [r for r in records_of(folder) if isinstance(r, StepRecord)]
        if any(r.result in made for r in steps if isinstance(r, SaveRecord)):
            records += [r for r in read[folder] if isinstance(r, (StepRecord, SourceRecord))]
            add(folder)
            made |= {r.result for r in steps if r.result is not None}
    whole = set(roots)  # read whole already
    made = {r.result for r in records if isinstance(r, StepRecord) and r.is_origin and r.result}
    needed = {p for r in records if isinstance(r, StepRecord) for p in r.parents} - made
    sought: set[str] = set()
    while needed:
        sought |= needed
        found: list[LedgerRecord] = []
        # A fingerprint is taken from one root, the roots its children came from first: the same
        # source loaded in another cache is that cache's history, not this lineage's. A save
        # names the state it saved without saying where it comes from: the search goes on.
        for other in sorted((p for p in others if p not in whole), key=lambda p: p not in roots):
            hit = [r for r in records_of(other) if isinstance(r, StepRecord) and r.result in needed]
            needed = needed - {r.result for r in hit if r.is_origin}
            if hit and other not in roots:
                add(other)
            # with the text of the functions those steps name, for explain
            hashes = {h for r in hit for h in source_hashes(r)}
            found += hit + [r for r in read[other] if isinstance(r, SourceRecord) and r.hash in hashes]
        if not found:
            return roots
        records += found  # each fingerprint is sought once: nothing is found twice
        made |= {r.result for r in found if isinstance(r, StepRecord) and r.is_origin and r.result}
        needed = {p for r in found if isinstance(r, StepRecord) for p in r.parents} - made - sought
    return roots


@dataclass(frozen=True)
class Ledger:
    """The records of one cache root, read once per command, oldest first, with those of the other
    roots `read_other_roots` adds (each keeps the root it was read from: `is_foreign`)."""

    root: Path
    records: tuple[LedgerRecord, ...] = ()
    warnings: tuple[str, ...] = ()
    segments: tuple[Path, ...] = field(default=(), compare=False)
    roots: tuple[Path, ...] = ()  # every root read, `root` first
    all_roots: bool = False  # every known root was read whole: their records count as this root's

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, root: str | os.PathLike[str], *, all_roots: bool = False, follow: bool = True) -> Ledger:
        """Read the ledger of `root`. With `follow`, the origins of parents that `root` does not
        record are looked up in the other known roots (and their own parents, transitively);
        with `all_roots`, every known root is read whole."""
        first = Path(os.path.abspath(os.fspath(root)))
        records, warnings, segments = read_root(first)
        roots = read_other_roots(first, records, warnings, segments, all_roots=all_roots, follow=follow)
        records.sort(key=order_key)
        return cls(first, tuple(records), tuple(warnings), tuple(segments), tuple(roots), all_roots)

    @functools.cached_property
    def view(self) -> StepGraph:
        """The steps indexed for `lineage`, `show`, `explain`, stale entries and `stats` (built
        once per read)."""
        from cachetool.history.graph import StepGraph

        return StepGraph(self)

    # -- views ----------------------------------------------------------------------------------
    def is_foreign(self, rec: LedgerRecord) -> bool:
        """The record was read from another root than this ledger's (both paths are absolute and
        normalized: `read_root` labels its records with the root's path)."""
        return rec.read_from is not None and rec.read_from != os.fspath(self.root)

    def steps(self, *, include_internal: bool = False) -> list[StepRecord]:
        """Step records (transforms, roots, saves, checkpoints), oldest first."""
        return [r for r in self.records if isinstance(r, StepRecord) and (include_internal or not r.internal)]

    def own_steps(self, *, include_internal: bool = False) -> list[StepRecord]:
        """Step records of this root only."""
        return [r for r in self.steps(include_internal=include_internal) if not self.is_foreign(r)]

    def gc_records(self) -> list[GcRecord]:
        """gc's removals recorded in this root, oldest first."""
        return [r for r in self.records if isinstance(r, GcRecord) and not self.is_foreign(r)]

    def for_result(self, fingerprint: str, *, include_internal: bool = False) -> list[StepRecord]:
        """Every step record of this root whose result is `fingerprint` (oldest first)."""
        return [r for r in self.own_steps(include_internal=include_internal) if r.result == fingerprint]

    def fingerprints(self, *, include_internal: bool = True) -> set[str]:
        """Every fingerprint a step record names, as a result or as a parent."""
        out: set[str] = set()
        for r in self.steps(include_internal=include_internal):
            if r.result is not None:
                out.add(r.result)
            out.update(r.parents)
        return out

    def saves_elsewhere(self) -> list[SaveRecord]:
        """`save_to_disk` records of states made in this root: a save is recorded in the saved
        folder's own ledger (a root of its own), so they are looked up in the other known roots,
        each labelled with the root it was read from."""
        made = {r.result for r in self.own_steps(include_internal=True) if r.result is not None}
        own = {(r.run, r.seq) for r in self.own_steps() if isinstance(r, SaveRecord)}
        others = [Path(r) for r in known_roots() if made and Path(r) != self.root and Path(r).is_dir()]
        return [
            x
            for got in (read_root(other)[0] for other in others)
            for x in got
            if isinstance(x, SaveRecord) and not x.internal and x.result in made and (x.run, x.seq) not in own
        ]

    def summaries(self) -> list[RunSummaryRecord]:
        """The summaries of this root's runs a compaction folded away, oldest first."""
        return [r for r in self.records if isinstance(r, RunSummaryRecord) and not self.is_foreign(r)]

    def usage(self) -> dict[str, Usage]:
        """Per fingerprint of this root: last use, recorded origin, hits and misses (of summarised
        runs too)."""
        sums: dict[str, FpSums] = {}
        origin: dict[str, StepRecord | StepStartRecord] = {}
        for start in self.records:  # a step that raised or was killed: only its start names what it made
            if not isinstance(start, StepStartRecord) or self.is_foreign(start):
                continue
            for path in start.paths:
                parsed = parse_cache_file(os.path.basename(path))
                if parsed is not None:
                    origin[parsed[0]] = start
                    sums.setdefault(parsed[0], (start.time, 0, 0, 0, 0))
        for summary in self.summaries():  # runs a compaction folded away: their uses and origin counts
            for fp, got in summary.fps.items():
                sums[fp] = add_sums(sums.get(fp), got)
        for rec in self.own_steps():  # oldest first: the latest origin wins
            if rec.is_origin:  # a save or a no-op map says nothing about where it comes from
                for made in rec.made:
                    origin[made] = rec
            for fp, got in step_sums(rec):
                sums[fp] = add_sums(sums.get(fp), got)
        saves = self._save_ends()
        out: dict[str, Usage] = {}
        for fp, (when, records, hits, misses, random) in sums.items():
            o = origin.get(fp)
            out[fp] = Usage(
                last_used=when,
                parent=o.parents[0] if o and o.parents else None,
                operation=o.operation if o else None,
                parents=o.parents if o else (),
                records=records,
                hits=hits,
                misses=misses,
                random_fallback=bool(random),
                made_as=o.result if isinstance(o, StepRecord) and o.result != fp else None,
                saves=saves.get(fp, ()),
            )
        return out

    def _save_ends(self) -> dict[str, tuple[tuple[str, float], ...]]:
        """Per fingerprint saved: the folder and end time of each recorded `save_to_disk`."""
        ends: dict[str, set[tuple[str, float]]] = {}
        for r in self.records:  # one pass, no step lists: internal saves count too
            if isinstance(r, SaveRecord) and r.result is not None and not self.is_foreign(r):
                folders = {os.fspath(Path(f.path).parent) for f in r.files}
                ends.setdefault(r.result, set()).update((d, r.time + r.duration) for d in folders)
        return {fp: tuple(sorted(e)) for fp, e in ends.items()}


def read_ledger(root: str | os.PathLike[str]) -> Ledger:
    """The ledger of `root` alone (no other root)."""
    return Ledger.load(root, follow=False)


def resolve_in_root(
    root: str | os.PathLike[str], name: str, ledger: Ledger | None = None
) -> tuple[Resolved, CacheReport, Ledger]:
    """`resolve` for a command that has only the root: the ledger of `root` (loaded once unless
    given) and a scan of its cache, returned too so the command reads neither again. A root that
    cannot be scanned (gone since the records were made) resolves against the ledger alone."""
    from cachetool.cache.lookup import resolve
    from cachetool.cache.model import CacheReport
    from cachetool.cache.scan import scan_cache
    from cachetool.errors import CachetoolError

    if ledger is None:
        ledger = Ledger.load(root, follow=False)
    try:
        report = scan_cache(root, usage=ledger.usage())
    except CachetoolError:
        report = CacheReport(root=Path(os.path.abspath(os.fspath(root))), datasets=(), entries=())
    return resolve(name, report, ledger), report, ledger


@contextmanager
def named_elsewhere(root: Path, name: str, command: str) -> Iterator[None]:
    """Turn an `UnknownFingerprint` of `name` in `root` into `InAnotherRoot` when other known
    roots record a step result `name` (a fingerprint or its prefix, a cache file's name) names:
    a `save_to_disk` folder, a folder a map wrote its `cache_file_name=` in, another cache. The
    message names them and `cachetool COMMAND NAME --cache-dir <it>`. Only then is every known
    root's ledger read; never for a path or the empty name (every fingerprint starts with it)."""
    from cachetool.cache.lookup import cache_file_key
    from cachetool.errors import InAnotherRoot, UnknownFingerprint

    try:
        yield
    except UnknownFingerprint as e:
        key = cache_file_key(name)
        # a recorded-only fingerprint says so already
        if type(e) is not UnknownFingerprint or os.sep in name or not key:
            raise
        ledger = Ledger.load(root, all_roots=True)
        others = {
            r.read_from
            for r in ledger.records
            if isinstance(r, StepRecord)
            and r.read_from is not None
            and ledger.is_foreign(r)
            and r.result is not None
            and r.result.startswith(key)
        }
        if not others:
            raise
        raise InAnotherRoot(name, root, sorted(others), command) from None
