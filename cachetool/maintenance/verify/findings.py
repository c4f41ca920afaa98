"""What verify says, as typed values (`Finding`, whose code decides its severity and everything
verify does with it; `VerifyReport`), and the checks that say it (`Checker` per entry,
`check_indices`). A file a live process is writing is never reported as corrupt.
"""

from __future__ import annotations

import functools
import os
import shlex
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args

from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheReport, Entry, EntryProblem
from cachetool.cache.shard import Shard, fleet_fields
from cachetool.errors import ExitCode
from cachetool.hints import gc_command, shell_command
from cachetool.history.ledger import Ledger
from cachetool.history.records.steps import StepStartRecord
from cachetool.maintenance.fdops import identity
from cachetool.maintenance.liveness import InUse, LockState, lock_guard, pids_text, probe, scan_in_use
from cachetool.safejson import json_fields


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


ErrorCode = Literal[  # the entry is broken; `--quarantine` moves it aside
    "damaged",  # the scan found the entry damaged (missing shards, state.json, rows, ...)
    "unreadable-header",  # a file's Arrow headers do not read to the end
    "fingerprint-mismatch",  # the fingerprint inside the file is not the one its name says
    "shard-length",  # a source shard's rows differ from dataset_info.json's shard_lengths
    "index-out-of-bounds",  # an indices file points past the end of its data
    "invalid-data",  # --deep: a buffer does not validate, or datasets cannot load the schema
    "checksum-changed",  # --deep: bytes differ from the checksum recorded earlier (never moved)
    "interrupted-save",  # data-*.arrow without state.json, old enough to be interrupted
    "mixed-save",  # data files newer than the recorded save's state.json: a later save did not finish
    "tf-incomplete",  # a finished tf.data cache misses data its index names
    "stale-code",  # --stale: computed by code that has changed since
]
WarningCode = Literal[  # leftovers and oddities; gc removes them
    "not-regular-file",  # a symlink, FIFO, socket or device in the cache
    "incomplete-download",
    "tf-abandoned",  # a killed tf.data writer's lockfile
    "leftover-temp",  # a temporary file of a killed writer
    "leftover-prepare",  # an interrupted load_dataset preparation
    "recent-save",  # a save in progress or an interrupted one (state.json comes last)
    "stale-lock",  # a lock whose guarded folder is gone and that nobody holds
    "orphan-indices",  # an indices file whose data is gone
    "checksums-not-stored",  # --record could not write its checksums
    "checksums-unread",  # --deep could not read the stored checksums (another user's)
    "partial-shards",  # a num_proc shard set missing shards (a killed map): datasets reuses the rest
    "not-quarantined",  # --quarantine left a broken file where it is, and why
]
InfoCode = Literal[
    "odd-file",  # anything else the scan says about a file datasets does not write
    "being-written",  # a live process on this host is writing it
    "held-open",  # a temporary file a live process holds open
    "leased",  # a live lease (this host or another) may cover it
    "shards-in-progress",  # a num_proc shard set whose other shards are still being written
    "tf-being-written",
    "record-file-gone",  # a ledger record's file was removed since
    "rewritten",  # --deep: written anew since its checksum was recorded (--record records it again)
]
#: What a finding is about. Each code has one severity (`SEVERITY`).
Code = Literal[ErrorCode, WarningCode, InfoCode]

SEVERITY: dict[Code, Severity] = {
    **dict.fromkeys(get_args(ErrorCode), Severity.ERROR),
    **dict.fromkeys(get_args(WarningCode), Severity.WARNING),
    **dict.fromkeys(get_args(InfoCode), Severity.INFO),
}


@dataclass(frozen=True)
class Finding:
    """One thing verify has to say: its code (which decides its severity and everything verify
    does with it), the sentence a person reads, about which entry and file, and what to do."""

    code: Code
    problem: str
    entry: str  # the entry id (fingerprint, or path)
    kind: str  # the entry's kind (`Kind` value), or "record" / "stale" for ledger findings
    path: Path
    hint: str = ""
    #: The file version the finding is about (device, inode, size, mtime ns), taken when it was
    #: read; `quarantine` moves nothing else. None for folders; CHANGED when it changed meanwhile.
    identity: tuple[int, int, int, int] | None = field(default=None, compare=False, repr=False)

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.code]

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "severity", "entry", "kind", "path", "problem", "hint")


#: The identity of a file that changed between the scan and the finding: matches no file.
CHANGED = (0, 0, -1, 0)


@dataclass(frozen=True)
class VerifyReport:
    root: Path
    findings: tuple[Finding, ...]
    entries_checked: int
    files_checked: int
    bytes_checked: int = 0  # bytes read in full (deep)
    deep: bool = False
    recorded: int = 0  # checksums stored (record)
    quarantined: tuple[tuple[Path, Path], ...] = field(default=())
    #: `quarantine=True, dry_run=True`: what would move (nothing moved). None without a dry run.
    would_quarantine: tuple[Path, ...] | None = None
    #: `restore=True`: (from, to) of each file put back before verifying, and what was not.
    restored: tuple[tuple[Path, Path], ...] = field(default=())
    restore_notes: tuple[str, ...] = field(default=())
    #: Warnings fail too (`verify_cache(strict=True)`, `cachetool verify --strict`).
    strict: bool = False
    #: The shard checked (`verify_cache(shard=(i, n))`, `--shard i/n`); None: every entry.
    shard: Shard | None = None

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == Severity.ERROR)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == Severity.WARNING)

    @property
    def exit_code(self) -> int:
        """What `cachetool verify` exits with: 1 when errors were found (or warnings, `strict`)."""
        failed = bool(self.errors) or (self.strict and bool(self.warnings))
        return int(ExitCode.PROBLEMS_FOUND) if failed else int(ExitCode.OK)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "version": 1,
            **json_fields(self, "root"),
            **fleet_fields(self.shard),
            **json_fields(self, "deep", "entries_checked", "files_checked", "bytes_checked"),
            "checksums_recorded": self.recorded,
            "counts": {s.value: sum(f.severity == s for f in self.findings) for s in Severity},
            **json_fields(self, "findings"),
            "quarantined": [{"from": os.fsdecode(a), "to": os.fsdecode(b)} for a, b in self.quarantined],
        }
        if self.would_quarantine is not None:
            doc["would_quarantine"] = [os.fsdecode(p) for p in self.would_quarantine]
        return doc


def rel(path: Path, root: Path) -> str:
    """`path` relative to `root` when inside it, else whole."""
    try:
        return os.fsdecode(path.relative_to(root))
    except ValueError:
        return os.fsdecode(path)


def owner(e: Entry) -> int | None:
    """The uid owning the entry's files (its path for a folder that could not be listed)."""
    if e.files:
        return e.files[0].uid
    try:
        return e.path.lstat().st_uid
    except OSError:
        return None


# -- the checks --------------------------------------------------------------------------------

#: An interrupted save younger than this may still be running (state.json comes last).
RECENT_SAVE_SECONDS = 300.0


class Checker:
    """Collects the findings about the entries of one scan (`entry(e)` for each)."""

    def __init__(
        self,
        report: CacheReport,
        liveness: Callable[..., InUse] = scan_in_use,
        killed_saves: Callable[[], Mapping[Path, StepStartRecord]] = dict,
    ) -> None:
        self.report = report
        self.liveness = liveness  # called as `liveness(root=...)`, as `scan_cache` calls it
        #: The folders recorded saves were writing when their process died (`killed_saves`),
        #: read when a recent save without state.json asks.
        self.killed_saves = functools.cache(killed_saves)
        self.now = time.time()
        self.findings: list[Finding] = []

    @functools.cached_property
    def in_use(self) -> InUse:
        """Who holds which file, taken the first time a check needs it (a leftover, a lock, a
        shard set being written): a cache without any spends nothing on reading every process's
        files."""
        return self.liveness(root=self.report.root)

    def recompute(self, e: Entry) -> str:
        """The hint for a damaged entry `e`: quarantine moves it aside, datasets recomputes it;
        nothing recomputes a `save_to_disk` folder, and `--quarantine` never moves it."""
        if e.kind == Kind.SAVED:
            return "nothing recomputes a save_to_disk folder: save it again with the code that made it"
        uid = owner(e)
        if uid not in (os.geteuid(), None) and "permission denied" in map(str, e.problems):
            return f"another user's file (uid {uid}): its owner or root can check it"
        command = shell_command("verify", "--quarantine", "--cache-dir", os.fsdecode(self.report.root))
        return f"move it aside with `{command}`; datasets will recompute it"

    def removable(
        self, code: Code, e: Entry, detail: str, path: Path | None = None, target: str = ""
    ) -> None:
        """A finding whose hint is the gc command that removes `target` (the entry's path): it was
        just proven unheld."""
        self.add(code, e, path or e.path, detail, gc_command(self.report.root, target or os.fsdecode(e.path)))

    def add(
        self,
        code: Code,
        e: Entry,
        path: Path,
        detail: str,
        hint: str = "",
        ident: tuple[int, int, int, int] | None = None,
    ) -> None:
        if ident is None:
            ident = _scanned_identity(e, path)
        self.findings.append(Finding(code, detail, e.id, e.kind.value, path, hint, ident))

    def pids(self, path: Path, writers: bool = False) -> frozenset[int]:
        """The live processes on this host that hold `path` open (`writers`: for writing)."""
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return frozenset()
        return (self.in_use.writer_pids(st) if writers else self.in_use.pids(st)) or frozenset()

    def live_writer(self, e: Entry) -> frozenset[int]:
        return next((pids for f in e.files if (pids := self.pids(f.path, writers=True))), frozenset())

    def being_written(self, e: Entry, what: str = "", path: Path | None = None) -> bool:
        """A live process on this host writes `e` (or its file `path`): say so, as info."""
        pids = self.pids(path, writers=True) if path is not None else self.live_writer(e)
        if pids:
            self.add("being-written", e, path or e.path, f"{what}being written by pid {pids_text(pids)}")
        return bool(pids)

    def leased(self, e: Entry) -> bool:
        """A live lease's process (on this host or another) may be writing `e`: say so, as info."""
        lease = self.in_use.lease_over(e.modified)
        if lease is None:
            return False
        self.add("leased", e, e.path, f"may be being written by {lease} (a live lease)")
        return True

    # -- per entry ---------------------------------------------------------------------------
    def entry(self, e: Entry) -> None:
        leftover = _LEFTOVERS.get(e.kind)
        if leftover is not None:
            return leftover(self, e)
        if e.kind == Kind.DOWNLOAD and e.problems:
            self.removable("incomplete-download", e, "; ".join(map(str, e.problems)))
            return None
        if e.kind == Kind.OTHER:
            # The scan gives an entry of its own to symlinks and non-regular files only with a
            # problem; the file's mode, not the sentence, says which it is.
            odd = any(not stat.S_ISREG(f.mode) for f in e.files)
            for p in e.problems:
                self.add("not-regular-file" if odd else "odd-file", e, e.path, str(p))
            return None
        if e.kind == Kind.SHARDS and e.problems and self.shards_in_progress(e):
            self.add("shards-in-progress", e, e.path, "shard set being written right now")
            return None
        unreadable = {p.file for p in e.problems if p.code == "unreadable"}
        for p in e.problems:
            if p.code == "unreadable" or (p.code == "fingerprint-mismatch" and p.file not in unreadable):
                self.file(e, p)
        for p in e.problems:
            if p.code == "partial-shards":
                # A num_proc map that did not finish: datasets loads each finished shard from the
                # cache and computes only the missing ones, so the finished ones are not damage.
                remove = gc_command(self.report.root, e.fingerprint or os.fsdecode(e.path))
                hint = f"the next run of the map finishes it; if none will, remove it with `{remove}`"
                self.add("partial-shards", e, e.path, f"{p}: {_REUSED}", hint)
            elif p.code == "mixed-save":
                self.add("mixed-save", e, e.path, p.detail, self.recompute(e))
            elif p.code not in ("unreadable", "fingerprint-mismatch"):
                self.add("damaged", e, e.path, str(p), self.recompute(e))
        if e.kind == Kind.SOURCE:
            self.shard_lengths(e)
        return None

    def tf_cache(self, e: Entry) -> None:
        """A finished tf.data cache must have an index that parses and every data shard it names,
        as long as the index says; a killed writer's lockfile blocks the next run."""
        if e.state == "incomplete":
            for p in e.problems:
                self.add("tf-incomplete", e, e.path, str(p), _TF_RECOMPUTE)
        elif e.state == "abandoned":
            self.removable("tf-abandoned", e, "; ".join(map(str, e.problems)))
        elif e.state == "being-written":
            self.add("tf-being-written", e, e.path, "; ".join(map(str, e.problems)))

    def file(self, e: Entry, p: EntryProblem) -> None:
        """A problem the scan found with one of the entry's files (None: the entry's own)."""
        path = p.file or e.path
        if p.code == "fingerprint-mismatch":
            hint = "the file was written under another name or overwritten; " + self.recompute(e)
            self.add("fingerprint-mismatch", e, path, p.detail, hint)
        elif not self.being_written(e, path=path):
            self.add("unreadable-header", e, path, p.detail, self.recompute(e))

    def shards_in_progress(self, e: Entry) -> bool:
        """A num_proc map renames each shard into place when it finishes; while the others are
        still tmp* files held by live workers, the set is in progress, not broken."""
        assert e.fingerprint is not None
        folder = e.path.parent
        for other in self.report.entries:
            if other.kind != Kind.TEMP or other.path.parent != folder:
                continue
            if any(a.startswith(e.fingerprint + "_") for a in other.aliases) and self.live_writer(other):
                return True
        return False

    def shard_lengths(self, e: Entry) -> None:
        ds = next((d for d in self.report.datasets if d.path == e.dataset_dir), None)
        if ds is None or e.split is None:
            return
        lengths = ds.expected_shard_lengths(e.split)
        if not lengths or len(lengths) != len(e.files):
            return
        for f, want in zip(e.files, lengths, strict=True):
            got = f.summary.rows if f.summary else None
            if got is not None and f.summary is not None and f.summary.error is None and got != want:
                self.add(
                    "shard-length",
                    e,
                    f.path,
                    f"{got} rows, dataset_info.json shard_lengths says {want}",
                    self.recompute(e),
                )

    def temp(self, e: Entry) -> None:
        if self.being_written(e):
            return
        holders = frozenset().union(*(self.pids(f.path) for f in e.files))
        if holders:
            self.add("held-open", e, e.path, f"temporary file held open by pid {pids_text(holders)}")
            return
        if self.leased(e):
            return
        uid = owner(e)
        if uid not in (os.geteuid(), None):  # its writer's files in /proc are hidden from this user
            detail = f"temporary file of another user's (uid {uid}): a writer in progress or killed"
            hint = (
                f"only uid {uid} or root sees whether its writer still runs: `cachetool gc --temp` as "
                "that user removes it once it is left over"
            )
            self.add("leftover-temp", e, e.path, detail, hint)
            return
        if e.resumable_rows:  # as ls and gc --temp call it; the hint stays a command to paste
            of = f" of {e.aliases[0]}" if e.aliases else ""
            self.removable(
                "leftover-temp",
                e,
                f"resumable partial{of} left by a killed writer: {e.resumable_rows:,} rows in complete "
                "batches that a rerun under `cachetool run` takes back (the hint removes them instead)",
            )
            return
        self.removable("leftover-temp", e, "leftover temporary file of a killed writer")

    def leftover_prepare(self, e: Entry) -> None:
        if not (self.being_written(e, "load_dataset preparation in progress: ") or self.leased(e)):
            self.removable("leftover-prepare", e, "leftover of an interrupted load_dataset preparation")

    def incomplete_save(self, e: Entry) -> None:
        """A save_to_disk folder without state.json (of a DatasetDict: a split without it, the
        whole dict's folder being the entry): recent, it may still be running; older, it was
        interrupted, and the hint removes the folder (gc never removes the root: `rm -r` then)."""
        if self.being_written(e, "save_to_disk in progress: ") or self.leased(e):
            return
        what = f"its split {e.split} has no state.json" if e.split else "data-*.arrow without state.json"
        age = self.now - (e.modified or 0.0)
        # A recorded writer proven dead (this host, its pid and start time) tells at once. A
        # DatasetDict's save is recorded per split, into the split's folder.
        folder = e.path / e.split if e.split else e.path
        writer = self.killed_saves().get(folder) if age < RECENT_SAVE_SECONDS else None
        if age < RECENT_SAVE_SECONDS and writer is None:
            self.add(
                "recent-save",
                e,
                e.path,
                f"{what}, last written {int(age)}s ago: a save in progress or an interrupted one",
                "verify again later; if it stays, it is interrupted",
            )
            return
        if e.path == self.report.root:
            hint = f"save it again, or remove the folder: `{shlex.join(['rm', '-r', os.fsdecode(e.path)])}`"
        else:
            hint = "save it again; " + gc_command(self.report.root, os.fsdecode(e.path))
        killed = "" if writer is None else f" (its writer, pid {writer.pid}, was killed)"
        self.add("interrupted-save", e, e.path, f"{what}: an interrupted save_to_disk{killed}", hint)

    def lock(self, e: Entry) -> None:
        """A lock is stale when what it guards is gone and nobody holds it (`maintenance.liveness`)."""
        guard = lock_guard(e.path, self.report.root)
        if guard is not None and not guard.alive() and probe(e.path) == LockState.FREE:
            self.removable("stale-lock", e, f"stale lock: {guard.name} no longer exists")


#: The entry kinds whose problems are all about their files or their own completeness, and the
#: check of each.
_LEFTOVERS: dict[Kind, Callable[[Checker, Entry], None]] = {
    Kind.TEMP: Checker.temp,
    Kind.INCOMPLETE_PREPARE: Checker.leftover_prepare,
    Kind.INCOMPLETE_SAVE: Checker.incomplete_save,
    Kind.LOCK: Checker.lock,
    Kind.TF_CACHE: Checker.tf_cache,
}


_TF_RECOMPUTE = "remove the cache's files; the next run of the tf.data pipeline writes it again"
_REUSED = "a num_proc map that did not finish; datasets reuses the finished shards and computes the rest"


def _scanned_identity(e: Entry, path: Path) -> tuple[int, int, int, int] | None:
    """The identity of `path` as the scan read it: its stat now, if size and mtime are still the
    scan's; CHANGED if not; None for what is not one of the entry's regular files."""
    f = next((f for f in e.files if f.path == path), None)
    if f is None:
        return None
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return CHANGED
    if not stat.S_ISREG(st.st_mode):
        return None
    return identity(st) if (st.st_size, st.st_mtime) == (f.size, f.mtime) else CHANGED


# -- indices files ---------------------------------------------------------------------------------

_DATA_KINDS = (Kind.SOURCE, Kind.DERIVED, Kind.SHARDS, Kind.SAVED)


def check_indices(
    checker: Checker, entries: Sequence[Entry], parents: dict[str, str | None], ledger: Ledger
) -> None:
    """An indices mapping must point inside the data it indexes. The recorded parent tells
    which data that is; without a record, an index past the end of every data file in the
    folder is wrong whatever it indexes."""
    by_fp = {fp: e for e in entries for fp in (e.fingerprint, *e.aliases) if fp}
    by_path = {f.path: x for x in checker.report.entries for f in x.files}
    removed = functools.cache(lambda: _removed_folders(ledger))  # read only when needed
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
            if parent is None:
                _orphan(checker, e, f"the data it indexes ({parent_fp}) is no longer in the cache")
                continue
        if parent is not None and (parent.problems or parent.complete is False):
            continue  # the parent is the broken one: its own finding says so
        if parent is not None and parent.rows is not None and parent.content != "indices":
            if biggest >= parent.rows:
                checker.add(
                    "index-out-of-bounds",
                    e,
                    e.files[0].path,
                    f"index {biggest} points past the end of its data ({parent.rows} rows in {parent.id})",
                    checker.recompute(e),
                )
            continue
        _unrecorded(checker, e, entries, biggest, removed)


def _unrecorded(
    checker: Checker, e: Entry, entries: Sequence[Entry], biggest: int, removed: Callable[[], frozenset[Path]]
) -> None:
    """An indices file without a recorded parent, against every dataset left in its folder. The
    data it points into is gone when its folder has no source split left, or gc removed data
    files from it."""
    sizes = [
        x.rows
        for x in entries
        if x.dataset_dir == e.dataset_dir and x.rows is not None and not x.problems and x.kind in _DATA_KINDS
    ]
    if not sizes or biggest < max(sizes):
        return
    folder = e.files[0].path.parent
    if folder in removed() or not any(
        x.kind == Kind.SOURCE and x.files and x.files[0].path.parent == folder for x in checker.report.entries
    ):
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


def _removed_folders(ledger: Ledger) -> frozenset[Path]:
    """Folders from which gc (as its log in the ledger says) removed data files."""
    kinds = ("source", "derived", "shards", "arrow")
    return frozenset(Path(p).parent for rec in ledger.gc_records() if rec.kind in kinds for p in rec.paths)


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
