"""`cachetool gc` as a plan: decide what goes (pure data), show it, then execute it item by item.

Two kinds of work, both planned the same way:

* **leftovers** (`--temp`): what killed processes leave behind — `tmp*` files of a killed writer,
  `<hash or version>.incomplete/` folders of an interrupted preparation, interrupted
  `save_to_disk` folders, `*.incomplete` downloads, lock files that guard nothing any more, and in
  the temp dir `datasets` uses only `hf_datasets-*` and `pymp-*` folders;
* **eviction** (`--older-than`, `--max-size`, `--dataset`, fingerprints): whole entries — every
  shard of a fingerprint together, a saved DatasetDict folder as one unit, the source splits of a
  builder folder together with its `dataset_info.json` (so `datasets` prepares it again instead
  of trusting a folder with holes).

`build_plan()` decides from a scan, a liveness snapshot and a few lock probes; `execute()` trusts
none of it: right before each item it takes a fresh look — not open or memory-mapped by a live
process (one `/proc` pass just before executing), no lock held, old enough, owned by this user,
inside the root (or the temp dir) and not a symlink — and it deletes through directory file
descriptors opened with `O_NOFOLLOW`, so a folder swapped for a symlink after the check makes the
open fail instead of redirecting the delete. One item failing never stops the others.

Processes on other machines of a shared file system are invisible to the liveness check; there,
`--min-age` is the only guard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import DATA_KINDS, Kind
from cachetool.cache.scan import CacheFile, CacheReport, Entry
from cachetool.cache.tfdata import tf_leftover_name
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import human_size, iso_time
from cachetool.maintenance.fdops import inventory, open_parent, rename_noreplace, same_file
from cachetool.maintenance.liveness import InUse, Lease, TempDirUser, cwd_pids_under, pids_holding
from cachetool.maintenance.locks import LockBusy, LockState, acquire, guard_alive, lock_guard, probe
from cachetool.maintenance.shared import (
    SharedState,
    check_min_age,
    leased_reason,
    remove_stale_leases,
    shared_state,
)

#: Default `--min-age`: younger leftovers may belong to a writer this host cannot see.
DEFAULT_MIN_AGE = 3600.0
#: How long a second gc waits for the first before giving up.
LOCK_TIMEOUT = 30.0
GC_LOCK_NAME = "gc.lock"

# datasets names an incomplete prepare after the folder it becomes: a module hash or a version.
_PREPARE_NAME_RE = re.compile(r"^(?:[0-9a-f]{16,64}|\d+\.\d+\.\d+)$")
_SOURCE_LIKE = frozenset({Kind.SOURCE, Kind.SAVED, Kind.ARROW})
_EVICTABLE = frozenset({Kind.DERIVED, Kind.INDICES, Kind.SHARDS}) | _SOURCE_LIKE
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class GcBusy(CachetoolError):
    """Another `cachetool gc` holds this cache's gc lock."""

    exit_code = ExitCode.PROBLEMS_FOUND

    def __init__(self, root: Path, lock: Path, timeout: float) -> None:
        super().__init__(
            f"another cachetool gc is running on {root} (waited {timeout:g}s for {lock}); "
            "try again when it ends"
        )
        self.root = root
        self.lock = lock


# ------------------------------------------------------------------------------------------
# The plan: plain frozen data
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GcOptions:
    """Every choice of a gc run; mirrors `cachetool gc`'s options one to one."""

    temp: bool = False
    tmp_dir: Path | None = None  # None: the temp dir datasets uses (TMPDIR, TEMP, TMP, system default)
    min_age: float = DEFAULT_MIN_AGE
    all_users: bool = False
    older_than: float | None = None
    max_size: int | None = None
    datasets: tuple[str, ...] = ()
    fingerprints: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    include_sources: bool = False
    force_root: bool = False  # clean a root that is `/`, a home folder, or has no datasets layout
    other_hosts_idle: bool = False  # on a shared file system: no unleased writer runs on another host

    @property
    def evicts(self) -> bool:
        """True when the run evicts entries (not only leftovers)."""
        return bool(
            self.older_than is not None or self.max_size is not None or self.datasets or self.fingerprints
        )


@dataclass(frozen=True)
class Target:
    """One file or folder an item removes, as the plan saw it (execute compares)."""

    path: Path
    is_dir: bool
    size: int
    mtime: float | None  # for folders: the newest modification time inside


@dataclass(frozen=True)
class GcItem:
    """One unit of deletion: removed entirely or not at all (short of an I/O error)."""

    path: Path
    kind: Kind
    size: int
    files: int  # files freed (inodes matter: caches hit inode quotas)
    reason: str
    targets: tuple[Target, ...]
    action: str = "leftover"  # "leftover" | "evict"
    scope: str = "root"  # "root": inside the cache root; "temp": a folder in the temp dir
    fingerprint: str | None = None
    aliases: tuple[str, ...] = ()
    dataset: str | None = None
    used: float | None = None
    lock: Path | None = None  # held (non-blocking) across the removal; someone holding it keeps the item

    @property
    def id(self) -> str:
        return self.fingerprint or os.fsdecode(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "kind": self.kind.value,
            "scope": self.scope,
            "path": os.fsdecode(self.path),
            "paths": [os.fsdecode(t.path) for t in self.targets],
            "fingerprint": self.fingerprint,
            "aliases": list(self.aliases),
            "dataset": self.dataset,
            "size": self.size,
            "files": self.files,
            "used": iso_time(self.used),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Skip:
    """Something gc looked at and keeps, and why (a leftover not proven dead, a protected entry)."""

    path: Path
    kind: Kind
    reason: str
    size: int = 0
    fingerprint: str | None = None
    scope: str = "root"

    @property
    def id(self) -> str:
        return self.fingerprint or os.fsdecode(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "scope": self.scope,
            "path": os.fsdecode(self.path),
            "fingerprint": self.fingerprint,
            "size": self.size,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class GcPlan:
    """What a gc run would remove, what it keeps and why. `execute(plan)` carries it out."""

    root: Path
    temp_dir: Path | None
    options: GcOptions
    items: tuple[GcItem, ...]
    skipped: tuple[Skip, ...] = ()
    kept_entries: int = 0
    kept_bytes: int = 0
    kept_reasons: tuple[tuple[str, int], ...] = ()  # (reason, entries), most common first
    warnings: tuple[str, ...] = ()
    created_at: float = field(default=0.0, compare=False)
    #: (st_dev, st_ino) of the cache root and the temp dir when the plan was made: execute works
    #: only inside those very folders, whatever their paths lead to by then.
    root_id: tuple[int, int] | None = field(default=None, compare=False)
    temp_id: tuple[int, int] | None = field(default=None, compare=False)
    #: The root's file system and leases (`cachetool.maintenance.shared`).
    shared: SharedState | None = field(default=None, compare=False)

    @property
    def expected_freed(self) -> int:
        return sum(i.size for i in self.items)

    @property
    def expected_files(self) -> int:
        return sum(i.files for i in self.items)

    def keeps_sentence(self) -> str:
        """One sentence on what survives: "keeps 12 entries (3.1 GB): 2 pinned, ... and 9 used in
        the last 30d"."""
        n = self.kept_entries
        head = f"keeps {n} entr{'y' if n == 1 else 'ies'} ({human_size(self.kept_bytes)})"
        parts = [f"{n} {reason}" for reason, n in self.kept_reasons]
        if not parts:
            return head
        body = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"{head}: {body}"

    def to_json(self) -> dict[str, Any]:
        return {
            "root": os.fsdecode(self.root),
            "temp_dir": os.fsdecode(self.temp_dir) if self.temp_dir else None,
            "items": [i.to_json() for i in self.items],
            "bytes": self.expected_freed,
            "files": self.expected_files,
            "skipped": [s.to_json() for s in self.skipped],
            "kept": {
                "entries": self.kept_entries,
                "bytes": self.kept_bytes,
                "reasons": dict(self.kept_reasons),
                "summary": self.keeps_sentence(),
            },
            "warnings": list(self.warnings),
            **(self.shared.to_json() if self.shared is not None else {}),
        }


@dataclass(frozen=True)
class Outcome:
    """What execute did with one item."""

    item: GcItem
    status: str  # "removed" | "skipped" | "failed"
    reason: str | None = None
    freed: int = 0
    files: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            **self.item.to_json(),
            "status": self.status,
            "reason": self.reason,
            "freed": self.freed,
            "files_removed": self.files,
        }


@dataclass(frozen=True)
class GcResult:
    """The outcome of every item of a plan, in plan order."""

    plan: GcPlan
    outcomes: tuple[Outcome, ...]
    finished_at: float = field(default=0.0, compare=False)
    #: Leases removed: expired (another host) or of a process of this host that is gone.
    leases_removed: tuple[Lease, ...] = field(default=(), compare=False)

    def _with(self, status: str) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == status)

    @property
    def removed(self) -> tuple[Outcome, ...]:
        return self._with("removed")

    @property
    def skipped(self) -> tuple[Outcome, ...]:
        return self._with("skipped")

    @property
    def failed(self) -> tuple[Outcome, ...]:
        return self._with("failed")

    @property
    def freed_bytes(self) -> int:
        return sum(o.freed for o in self.outcomes)

    @property
    def freed_files(self) -> int:
        return sum(o.files for o in self.outcomes)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.PROBLEMS_FOUND if self.failed else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "removed": [o.to_json() for o in self.removed],
            "skipped": [o.to_json() for o in self.skipped],
            "failed": [o.to_json() for o in self.failed],
            "freed_bytes": self.freed_bytes,
            "freed_files": self.freed_files,
            "leases_removed": [lease.to_json() for lease in self.leases_removed],
        }


# ------------------------------------------------------------------------------------------
# The temp dir: only hf_datasets-*, pymp-* and cachetool-determinism-* are ever looked at
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TempFolder:
    """An `hf_datasets-*` or `pymp-*` entry of the temp dir, as `lstat` and a walk tell it."""

    path: Path
    kind: str  # "hf_datasets" | "pymp" | "determinism"
    is_dir: bool  # False for a symlink or a file with such a name (never followed, never removed)
    uid: int
    size: int = 0
    files: int = 0
    newest: float = 0.0
    made_by: float = 0.0  # the latest the folder can have been created: min(its mtime, its ctime)


@dataclass(frozen=True)
class TempScan:
    """The temp dir and its `datasets` leftovers."""

    path: Path
    folders: tuple[TempFolder, ...] = ()
    error: str | None = None


def scan_temp_dir(path: str | os.PathLike[str]) -> TempScan:
    """List the `hf_datasets-*` and `pymp-*` folders of a temp dir; nothing else there is read."""
    resolved = Path(os.path.realpath(path))
    try:
        names = sorted(os.listdir(resolved))
    except OSError as e:
        return TempScan(resolved, (), e.strerror or str(e))
    out = []
    for name in names:
        kind = layout.temp_folder_kind(name)
        if kind is None:
            continue
        p = resolved / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        made_by = min(st.st_mtime, st.st_ctime)
        if not stat.S_ISDIR(st.st_mode):
            out.append(TempFolder(p, kind, False, st.st_uid, 0, 0, st.st_mtime, made_by))
            continue
        size, files, newest = _tree_totals(p, st.st_mtime)
        out.append(TempFolder(p, kind, True, st.st_uid, size, files, newest, made_by))
    return TempScan(resolved, tuple(out))


def _tree_totals(path: Path, newest: float) -> tuple[int, int, float]:
    size = files = 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for de in it:
                    try:
                        st = de.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    newest = max(newest, st.st_mtime)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(Path(de.path))
                    else:
                        size += st.st_size
                        files += 1
        except OSError:
            continue
    return size, files, newest


#: Clock slack when comparing a process start time (boot-time based) with a file time.
_START_SLACK = 2.0


def _owner_refusal(
    kind: str, made_by: float, datasets_users: Iterable[TempDirUser], python_users: Iterable[TempDirUser]
) -> str | None:
    """Why a temp-dir folder may still have an owner that holds nothing in it right now."""
    if kind == "hf_datasets":
        owners = possible_owners(made_by, datasets_users)
        if owners:
            return f"a live datasets process using this temp dir (pid {owners[0]}) may own it"
    elif kind == "pymp":
        owners = possible_owners(made_by, python_users)
        if owners:
            return f"a live Python process using this temp dir (pid {owners[0]}) may own it"
    return None


def _check_owner_refusal(name: str, made_by: float, python_users: Iterable[TempDirUser]) -> str | None:
    """A `cachetool-determinism-<pid>-*` folder belongs to that check while the process lives and
    started before the folder was made (a reused pid started later). Without a pid in the name
    (older checks), any live Python process using this temp dir may own it."""
    m = layout.CHECK_DIR_RE.match(name)
    pid = m.group("pid") if m else None
    if pid is None:
        owners = possible_owners(made_by, python_users)
        return f"a live Python process using this temp dir (pid {owners[0]}) may own it" if owners else None
    started = _process_start(int(pid))
    if started is not None and started <= made_by + _START_SLACK:
        return f"the check that made it (pid {pid}) is still running"
    return None


def _process_start(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None when it is gone."""
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # NoSuchProcess, AccessDenied, no psutil: judged gone only when absent
        return None if not os.path.exists(f"/proc/{pid}") else 0.0


def possible_owners(made_by: float, users: Iterable[TempDirUser]) -> list[int]:
    """Pids of live datasets processes using this temp dir that started before an `hf_datasets-*`
    folder existed: any of them may be its owner, idle between writes."""
    return sorted(u.pid for u in users if u.started <= made_by + _START_SLACK)


# ------------------------------------------------------------------------------------------
# Building the plan
# ------------------------------------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """`30d`, `1h`, `90s`: the shortest exact form, as the options are written."""
    s = int(seconds)
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def format_age(seconds: float) -> str:
    """`42s`, `16m`, `3h`, `2d`, `5w`: an age rounded down to its largest unit."""
    s = max(0, int(seconds))
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _too_young(age: float, min_age: float) -> str:
    return f"modified {format_age(age)} ago, younger than --min-age {format_duration(min_age)}"


@dataclass
class _Unit:
    key: Path
    kind: Kind
    members: list[Entry]
    targets: tuple[Target, ...]
    size: int
    files: int
    used: float | None
    newest: float | None
    label: str | None

    @property
    def fingerprints(self) -> set[str]:
        return {fp for e in self.members for fp in (e.fingerprint, *e.aliases) if fp}

    @property
    def primary(self) -> Entry:
        return self.members[0]


class _Builder:
    def __init__(
        self,
        report: CacheReport,
        in_use: InUse,
        options: GcOptions,
        now: float,
        euid: int,
        pins: Mapping[str, Any],
        parents: Mapping[str, Iterable[str]],
        sockets: frozenset[str],
        temp: TempScan | None,
        temp_users: Sequence[TempDirUser] = (),
        pool_users: Sequence[TempDirUser] = (),
    ) -> None:
        self.report = report
        self.root = report.root
        self.in_use = in_use
        self.o = options
        self.now = now
        self.euid = euid
        self.sockets = sockets
        self.temp = temp
        self.temp_users = tuple(temp_users)
        self.pool_users = tuple(pool_users)
        self.listings: dict[Path, list[str]] = {}  # folder listings for decoding root locks, per plan
        self._units: list[_Unit] = []
        self.items: list[GcItem] = []
        self.skipped: list[Skip] = []
        self.warnings: list[str] = []
        self.removing: set[Path] = set()
        self.pins = set(pins)
        self.keep_fps = self._resolve_keep(options.keep, parents)
        from cachetool.maintenance.pins import ancestors

        self.pin_ancestors = ancestors(sorted(self.pins), parents)
        self.keep_ancestors = ancestors(sorted(self.keep_fps), parents)
        if not in_use.complete and options.all_users:
            # Without --all-users only our own files are touched, which other users' processes
            # (the ones we cannot inspect) rarely hold; with it, say that the check is partial.
            self.warnings.append("some processes could not be inspected; files they hold look unused")

    def _resolve_keep(self, prefixes: Sequence[str], parents: Mapping[str, Iterable[str]]) -> set[str]:
        """Each `--keep` by the one naming rule (`cachetool.lineage.ledger.resolve`): ambiguous is
        an error; a name nothing matches is only warned about (there is nothing to keep)."""
        from cachetool.errors import UnknownFingerprint
        from cachetool.lineage.ledger import resolve

        out: set[str] = set()
        for p in prefixes:
            try:
                got = resolve(p, self.report, recorded=[*parents, *(x for v in parents.values() for x in v)])
            except UnknownFingerprint:
                self.warnings.append(f"--keep {p}: no entry or recorded fingerprint matches")
                continue
            e = got.entry
            out |= {got.fingerprint, *((fp for fp in (e.fingerprint, *e.aliases) if fp) if e else ())}
        return out

    # -- shared refusals ------------------------------------------------------------------------
    def refusal(
        self,
        uids: Iterable[int],
        newest: float | None,
        pids: Iterable[int],
        age_applies: bool = True,
        scope: str = "root",
    ) -> str | None:
        if not self.o.all_users:
            others = sorted({u for u in uids if u != self.euid})
            if others:
                return f"owned by uid {others[0]}, not by you (pass --all-users)"
        held = sorted(set(pids))
        if held:
            return f"in use by pid {', '.join(map(str, held[:5]))}" + (" …" if len(held) > 5 else "")
        lease = self.in_use.lease_over(newest) if age_applies and scope == "root" else None
        if lease is not None:
            return leased_reason(lease)
        if age_applies and newest is not None and self.now - newest < self.o.min_age:
            age = max(0.0, self.now - newest)
            return _too_young(age, self.o.min_age)
        return None

    def file_pids(self, files: Iterable[CacheFile]) -> set[int]:
        out: set[int] = set()
        for f in files:
            out |= self.in_use.pids_for_path(os.fspath(f.path))
        return out

    def skip(
        self,
        e: Entry | None,
        reason: str,
        *,
        path: Path | None = None,
        kind: Kind | None = None,
        size: int | None = None,
        scope: str = "root",
    ) -> None:
        self.skipped.append(
            Skip(
                path or (e.path if e else self.root),
                kind or (e.kind if e else Kind.OTHER),
                reason,
                size if size is not None else (e.size if e else 0),
                e.fingerprint if e else None,
                scope,
            )
        )

    def add(self, item: GcItem) -> None:
        self.items.append(item)
        for t in item.targets:
            self.removing.add(t.path)

    # -- leftovers ----------------------------------------------------------------------------
    def leftovers(self, only: set[Path] | None = None) -> None:
        # Folders `datasets` writes cache files into: dataset folders, and folders holding its
        # cache-<fp>.arrow files. A folder of a user's own .arrow files is not one of them.
        data_dirs = {d.path for d in self.report.datasets}
        data_dirs |= {e.path.parent for e in self.report.entries if e.kind in _WRITTEN_BY_DATASETS}
        locks: list[Entry] = []
        for e in self.report.entries:
            if only is not None and e.path not in only:
                continue
            if e.kind == Kind.TEMP and layout.GC_TRASH_RE.match(e.path.name):
                self.gc_trash(e)
            elif e.kind == Kind.TEMP:
                self.temp_file(e, data_dirs)
            elif e.kind == Kind.INCOMPLETE_PREPARE:
                self.incomplete_prepare(e)
            elif e.kind == Kind.INCOMPLETE_SAVE:
                self.incomplete_save(e)
            elif e.kind == Kind.DOWNLOAD:
                self.incomplete_download(e)
            elif e.kind == Kind.LOCK:
                locks.append(e)
            elif e.kind == Kind.TF_CACHE:
                self.tf_leftovers(e)
        # Locks last: whether a lock still guards something depends on the folders removed above.
        for e in locks:
            self.lock(e)

    def temp_file(self, e: Entry, data_dirs: set[Path]) -> None:
        f = e.files[0] if e.files else None
        if f is None or not stat.S_ISREG(f.mode):
            self.skip(e, "not a regular file")
            return
        if e.dataset_dir is None and e.path.parent not in data_dirs:
            self.skip(e, "not in a dataset folder: datasets did not write it")
            return
        why = self.refusal([f.uid], f.mtime, self.file_pids([f]))
        if why:
            self.skip(e, why)
            return
        reason = ("empty" if f.size == 0 else "partial") + " tmp file of a killed writer"
        self.add(
            GcItem(
                e.path,
                Kind.TEMP,
                f.size,
                1,
                reason,
                (Target(e.path, False, f.size, f.mtime),),
                dataset=e.dataset,
                aliases=e.aliases,
            )
        )

    def tf_leftovers(self, e: Entry) -> None:
        """What a killed `tf.data` writer left (its lockfiles and partial shards), as one item;
        never a finished cache's index or data."""
        if e.state == "being-written":
            self.skip(e, e.problems[-1] if e.problems else "being written")
            return
        if e.state != "abandoned":
            return
        files = [f for f in e.files if tf_leftover_name(f.name)]
        if not files or any(not stat.S_ISREG(f.mode) for f in files):
            self.skip(e, "not a regular file")
            return
        why = self.refusal([f.uid for f in files], max(f.mtime for f in files), self.file_pids(files))
        if why:
            self.skip(e, why)
            return
        self.add(
            GcItem(
                e.path,
                Kind.TF_CACHE,
                sum(f.size for f in files),
                len(files),
                "tf.data cache writer killed mid-write: its lockfile and partial shard",
                tuple(Target(f.path, False, f.size, f.mtime) for f in files),
                dataset=e.dataset,
            )
        )

    def gc_trash(self, e: Entry) -> None:
        """What a gc set aside and could not finish removing (it was killed)."""
        m = layout.GC_TRASH_RE.match(e.path.name)
        if m and _gc_alive(int(m.group("pid"))):
            self.skip(e, f"the gc that set it aside (pid {m.group('pid')}) is still running")
            return
        reason = "set aside by a gc that did not finish"
        if not e.files or any(f.path != e.path for f in e.files):
            self.leftover_folder(e, reason)
            return
        f = e.files[0]
        why = self.refusal([f.uid], f.mtime, self.file_pids([f]))
        if why:
            self.skip(e, why)
            return
        self.add(GcItem(e.path, Kind.TEMP, f.size, 1, reason, (Target(e.path, False, f.size, f.mtime),)))

    def incomplete_prepare(self, e: Entry) -> None:
        final = e.dataset_dir or e.path.with_name(e.path.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)])
        if not _PREPARE_NAME_RE.match(final.name):
            self.skip(e, "not named <hash or version>.incomplete: datasets did not make it")
            return
        lock = final.with_name(layout.builder_lock_name(final.name))
        state = probe(lock)
        if state.held:
            self.skip(e, _busy_reason("a preparation", lock, state))
            return
        self.leftover_folder(e, "interrupted preparation, its builder lock is free", lock=lock)

    def incomplete_save(self, e: Entry) -> None:
        if e.path == self.root:
            self.skip(e, "is the cache root itself")
            return
        self.leftover_folder(e, "interrupted save_to_disk (no state.json)")

    def leftover_folder(self, e: Entry, reason: str, lock: Path | None = None) -> None:
        """Plan to remove a leftover folder as one item, unless something in it says keep."""
        newest = _newest(e)
        uids = [f.uid for f in e.files] + [_uid(e.path)]
        why = self.refusal(uids, newest, self.in_use.pids_under(e.path))
        if why:
            self.skip(e, why)
            return
        target = Target(e.path, True, e.size, newest)
        self.add(
            GcItem(e.path, e.kind, e.size, len(e.files), reason, (target,), dataset=e.dataset, lock=lock)
        )

    def incomplete_download(self, e: Entry) -> None:
        for f in e.files:
            if not f.name.endswith(layout.INCOMPLETE_DIR_SUFFIX) or not stat.S_ISREG(f.mode):
                continue
            base = f.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)]
            lock = f.path.with_name(layout.download_lock_name(base))
            state = probe(lock)
            if state.held:
                self.skip(e, _busy_reason("a download", lock, state), path=f.path, size=f.size)
                continue
            why = self.refusal([f.uid], f.mtime, self.file_pids([f]))
            if why:
                self.skip(e, why, path=f.path, size=f.size)
                continue
            self.add(
                GcItem(
                    f.path,
                    Kind.DOWNLOAD,
                    f.size,
                    1,
                    "interrupted download, its lock is free",
                    (Target(f.path, False, f.size, f.mtime),),
                    dataset=e.dataset,
                    lock=lock,
                )
            )

    def lock(self, e: Entry) -> None:
        f = e.files[0] if e.files else None
        if f is None or not stat.S_ISREG(f.mode):
            self.skip(e, "not a regular file")
            return
        guard = lock_guard(e.path, self.root, self.listings)
        if guard is None:
            self.skip(e, "cannot tell which folder it guards")
            return
        if guard.alive(frozenset(self.removing)):
            return  # a lock of a live folder: nothing to say, it is simply part of the cache
        state = probe(e.path)
        if state.held:
            self.skip(
                e,
                "held by a live process"
                if state == LockState.HELD
                else "cannot tell whether a live process holds it (it cannot be probed)",
            )
            return
        # Age says nothing about a lock: filelock never touches its mtime.
        why = self.refusal([f.uid], None, self.file_pids([f]), age_applies=False)
        if why:
            self.skip(e, why)
            return
        self.add(
            GcItem(
                e.path,
                Kind.LOCK,
                f.size,
                1,
                f"{guard.kind} nobody holds; its {guard.what} is gone",
                (Target(e.path, False, f.size, f.mtime),),
                dataset=e.dataset,
                lock=e.path,
            )
        )

    def temp_folders(self) -> None:
        if self.temp is None:
            return
        if self.temp.error:
            self.warnings.append(f"cannot read the temp dir {self.temp.path}: {self.temp.error}")
        for tf in self.temp.folders:
            if not tf.is_dir:
                self.skip(
                    None,
                    "a symlink or not a folder (never followed)",
                    path=tf.path,
                    kind=Kind.TEMP,
                    size=0,
                    scope="temp",
                )
                continue
            pids = set(self.in_use.pids_under(tf.path)) | set(cwd_pids_under(tf.path))
            prefix = os.fspath(tf.path) + "/"
            bound = any(s.startswith(prefix) for s in self.sockets)
            why = self.refusal([tf.uid], tf.newest, pids, scope="temp")
            if why is None and bound:
                why = "a live process listens on a socket inside"
            if why is None and tf.kind == "determinism":
                why = _check_owner_refusal(tf.path.name, tf.made_by, self.pool_users)
            elif why is None:
                why = _owner_refusal(tf.kind, tf.made_by, self.temp_users, self.pool_users)
            if why:
                self.skip(None, why, path=tf.path, kind=Kind.TEMP, size=tf.size, scope="temp")
                continue
            if tf.kind == "hf_datasets":
                reason = "temp folder of a process that is gone (caching disabled)"
            elif tf.kind == "determinism":
                reason = "temp folder of a check-determinism that is gone"
            else:
                reason = "multiprocess pool folder, its processes are gone"
            self.add(
                GcItem(
                    tf.path,
                    Kind.TEMP,
                    tf.size,
                    tf.files,
                    reason,
                    (Target(tf.path, True, tf.size, tf.newest),),
                    scope="temp",
                )
            )

    # -- eviction -----------------------------------------------------------------------------
    def units(self) -> list[_Unit]:
        entries = self.report.entries
        meta_by_dir = {d.path: d.meta_files for d in self.report.datasets}
        out: list[_Unit] = []
        saved_keys = sorted({e.unit or e.path for e in entries if e.kind == Kind.SAVED})
        for key in saved_keys:
            if key == self.root:
                continue  # a saved folder given as the root: never remove the root
            members = [e for e in entries if e.path == key or key in e.path.parents]
            members.sort(key=lambda e: (e.kind != Kind.SAVED, os.fsdecode(e.path)))
            metas = [f for d, fs in meta_by_dir.items() if d == key or key in d.parents for f in fs]
            files = [f for e in members for f in e.files] + metas
            size = sum(f.size for f in files)
            newest = max((f.mtime for f in files), default=None)
            used = max((u for e in members if (u := e.used) is not None), default=None)
            out.append(
                _Unit(
                    key,
                    Kind.SAVED,
                    members,
                    (Target(key, True, size, newest),),
                    size,
                    len(files),
                    used,
                    newest,
                    members[0].dataset,
                )
            )
        by_source_dir: dict[Path, list[Entry]] = {}
        for e in entries:
            if e.kind == Kind.SOURCE and e.dataset_dir is not None:
                by_source_dir.setdefault(e.dataset_dir, []).append(e)
        for d, members in sorted(by_source_dir.items()):
            metas = sorted(meta_by_dir.get(d, ()), key=lambda f: f.name != layout.DATASET_INFO)
            files = list(metas) + [f for e in members for f in e.files]
            # dataset_info.json goes first: without it datasets prepares again rather than
            # trusting a folder whose splits are half gone.
            targets = tuple(Target(f.path, False, f.size, f.mtime) for f in files)
            used = max((u for e in members if (u := e.used) is not None), default=None)
            newest = max((f.mtime for f in files), default=None)
            out.append(
                _Unit(
                    d,
                    Kind.SOURCE,
                    members,
                    targets,
                    sum(f.size for f in files),
                    len(files),
                    used,
                    newest,
                    members[0].dataset,
                )
            )
        for e in entries:
            if e.kind in (Kind.DERIVED, Kind.INDICES, Kind.SHARDS, Kind.ARROW):
                targets = tuple(Target(f.path, False, f.size, f.mtime) for f in e.files)
                out.append(
                    _Unit(e.path, e.kind, [e], targets, e.size, len(e.files), e.used, e.modified, e.dataset)
                )
        return out

    def protection(self, u: _Unit) -> tuple[str, str] | None:
        """(short reason for the keeps sentence, full reason) when a unit must stay."""
        fps = u.fingerprints
        if fps & self.pins:
            return "pinned", "pinned (cachetool unpin to release)"
        hit = next((fp for fp in sorted(fps) if fp in self.pin_ancestors), None)
        if hit:
            return "ancestors of pinned entries", f"ancestor of pinned {self.pin_ancestors[hit]}"
        if fps & self.keep_fps:
            return "kept by --keep", "kept by --keep"
        hit = next((fp for fp in sorted(fps) if fp in self.keep_ancestors), None)
        if hit:
            return "kept by --keep", f"ancestor of --keep {self.keep_ancestors[hit]}"
        if u.kind in _SOURCE_LIKE and not self.o.include_sources:
            return (
                "source splits and saved datasets",
                "source split or saved dataset (pass --include-sources)",
            )
        pids: set[int] = set()
        for e in u.members:
            pids |= self.file_pids(e.files)
        if u.kind == Kind.SAVED:
            pids |= self.in_use.pids_under(u.key)
        uids = [f.uid for e in u.members for f in e.files]
        why = self.refusal(uids, u.newest, pids)
        if why:
            short = (
                "in use"
                if why.startswith("in use")
                else "younger than --min-age"
                if why.startswith("modified")
                else "owned by other users"
            )
            return short, why
        return None

    def evictions(self, explicit: list[Entry]) -> dict[Path, str]:
        """Plan evictions; returns, per unit key, why a unit that stays stays (for the sentence)."""
        o = self.o
        units = self._units = self.units()
        scoped = units
        explicit_keys = {self._unit_key_of(e) for e in explicit}
        if explicit:
            scoped = [u for u in scoped if u.key in explicit_keys]
        if o.datasets:
            from cachetool.cache.query import compile_filter

            tests = [compile_filter(f"dataset={name}") for name in o.datasets]
            scoped = [u for u in scoped if any(t(e, self.now) for e in u.members for t in tests)]
        scoped_keys = {u.key for u in scoped}
        protected = {u.key: self.protection(u) for u in scoped}
        selected: list[_Unit] = []
        why_kept: dict[Path, str] = {}
        for u in units:
            if u.key not in scoped_keys:
                why_kept[u.key] = "outside the selection"
        if o.older_than is not None:
            for u in scoped:
                if u.used is not None and self.now - u.used > o.older_than:
                    selected.append(u)
                else:
                    why_kept[u.key] = f"used in the last {format_duration(o.older_than)}"
        elif o.max_size is None:
            selected = list(scoped)
        chosen: list[_Unit] = []
        by_size: set[Path] = set()
        for u in selected:
            p = protected[u.key]
            if p is None:
                chosen.append(u)
            else:
                why_kept[u.key] = p[0]
                self.protected_skip(u, p[1], explicit_keys)
        if o.max_size is not None:
            leftover_bytes = sum(i.size for i in self.items if i.scope == "root")
            current = self.report.size - leftover_bytes - sum(u.size for u in _outermost(chosen))
            selected_keys = {u.key for u in selected}
            rest = [u for u in scoped if u.key not in selected_keys]
            rest.sort(key=lambda u: (u.used if u.used is not None else 0.0, -u.size, os.fsdecode(u.key)))
            for u in rest:
                if current <= o.max_size:
                    why_kept.setdefault(u.key, f"that fit under {human_size(o.max_size)}")
                    continue
                p = protected[u.key]
                if p is not None:
                    why_kept[u.key] = p[0]
                    self.protected_skip(u, p[1], explicit_keys)
                    continue
                if any(c.kind == Kind.SAVED and c.key in u.key.parents for c in chosen):
                    continue
                # A saved folder holds entries chosen before it (a map's cache file written into
                # it): their bytes are in its size already.
                current += sum(c.size for c in chosen if u.kind == Kind.SAVED and u.key in c.key.parents)
                chosen.append(u)
                by_size.add(u.key)
                current -= u.size
                why_kept.pop(u.key, None)
            if current > o.max_size:
                self.warnings.append(
                    f"the cache stays above {human_size(o.max_size)} ({human_size(current)}): "
                    "the rest is protected"
                )
        for u in _outermost(chosen):
            self.add(self._evict_item(u, by_size=u.key in by_size))
        return why_kept

    def protected_skip(self, u: _Unit, reason: str, explicit_keys: set[Path]) -> None:
        # Sources and saved datasets stay by default; listing each of them would bury the skips
        # that matter (pinned, in use, too young) unless the user named them.
        if u.kind in _SOURCE_LIKE and not self.o.include_sources and u.key not in explicit_keys:
            return
        self.skip(u.primary, reason, path=u.key, size=u.size)

    def _unit_key_of(self, e: Entry) -> Path:
        if e.kind == Kind.SAVED:
            return e.unit or e.path
        if e.kind == Kind.SOURCE and e.dataset_dir is not None:
            return e.dataset_dir
        return e.path

    def _evict_item(self, u: _Unit, by_size: bool = False) -> GcItem:
        o = self.o
        ago = f" (last used {format_age(self.now - u.used)} ago)" if u.used is not None else ""
        if by_size and o.max_size is not None:
            reason = f"least recently used{ago}, cache over {human_size(o.max_size)}"
        elif o.older_than is not None:
            reason = f"not used in {format_duration(o.older_than)}{ago}"
        elif o.fingerprints:
            reason = "named on the command line"
        else:
            reason = f"in --dataset {', '.join(o.datasets)}"
        e = u.primary
        fp = e.fingerprint if u.kind != Kind.SOURCE or len(u.members) == 1 else None
        aliases = tuple(sorted(u.fingerprints - {fp} if fp else u.fingerprints))
        # A builder folder goes under its builder lock, as `datasets` prepares it: a pipeline that
        # finds the folder incomplete (dataset_info.json goes first) and prepares it again would
        # otherwise `rmtree` it while gc removes the same files (FileNotFoundError in the pipeline).
        lock = u.key.with_name(layout.builder_lock_name(u.key.name)) if u.kind == Kind.SOURCE else None
        return GcItem(
            u.key if u.kind in (Kind.SAVED, Kind.SOURCE) else e.path,
            u.kind,
            u.size,
            u.files,
            reason,
            u.targets,
            action="evict",
            fingerprint=fp,
            aliases=aliases,
            dataset=u.label,
            used=u.used,
            lock=lock,
        )

    def kept(
        self, why_kept: Mapping[Path, str], evicting: bool
    ) -> tuple[int, int, tuple[tuple[str, int], ...]]:
        removed = {t.path for i in self.items for t in i.targets}
        counts: dict[str, int] = {}
        n = size = 0
        units = self._units if evicting else []
        reason_of_entry: dict[Path, str] = {}
        for u in units:
            for e in u.members:
                reason_of_entry.setdefault(e.path, why_kept.get(u.key, "not selected"))
        for e in self.report.entries:
            if e.kind not in DATA_KINDS:
                continue
            if (
                e.path in removed
                or any(p in removed for p in e.path.parents)
                or any(f.path in removed for f in e.files)
            ):
                continue
            n += 1
            size += e.size
            reason = reason_of_entry.get(e.path) if evicting else "untouched (--temp removes only leftovers)"
            if reason is None:
                reason = "unreadable or not evictable"
            counts[reason] = counts.get(reason, 0) + 1
        # Protections first, in the order they apply; then the reasons the selection left out.
        first = ("pinned", "ancestors of pinned entries", "kept by --keep", "in use", "owned by other users")
        rank = {r: i for i, r in enumerate(first)}
        order = sorted(counts.items(), key=lambda kv: (rank.get(kv[0], len(first)), -kv[1], kv[0]))
        return n, size, tuple(order)


def _busy_reason(who: str, lock: Path, state: LockState) -> str:
    if state == LockState.HELD:
        return f"{who} is running ({lock.name} is held)"
    return f"{who} may be running ({lock.name} cannot be probed)"


def _gc_alive(pid: int) -> bool:
    """Is `pid` a live cachetool process (the gc whose set-aside name carries it)?"""
    if pid == os.getpid():
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"cachetool" in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: keep it


def _outermost(units: Sequence[_Unit]) -> list[_Unit]:
    """Drop units inside a chosen saved folder: removing the folder removes them."""
    folders = [u.key for u in units if u.kind == Kind.SAVED]
    return [u for u in units if not any(f in u.key.parents for f in folders)]


def _newest(e: Entry) -> float | None:
    got = max((f.mtime for f in e.files), default=None)
    try:
        own = os.lstat(e.path).st_mtime
    except OSError:
        return got
    return own if got is None else max(got, own)


def _find(report: CacheReport, name: str, recorded: Sequence[str]) -> Entry:
    """The entry `name` means, by the one naming rule; a fingerprint only the ledger knows has
    nothing to remove (`RecordedOnly`)."""
    from cachetool.errors import RecordedOnly
    from cachetool.lineage.ledger import entry_at_path, resolve

    at_path = entry_at_path(report, name)  # a leftover named by its path has no fingerprint
    if at_path is not None:
        return at_path
    got = resolve(name, report, recorded=recorded)
    if got.entry is None:
        raise RecordedOnly(got.fingerprint, report.root)
    return got.entry


def _uid(path: Path) -> int:
    try:
        return os.lstat(path).st_uid
    except OSError:
        return os.geteuid()


def build_plan(
    report: CacheReport,
    in_use: InUse,
    options: GcOptions,
    *,
    temp: TempScan | None = None,
    pins: Mapping[str, Any] | None = None,
    parents: Mapping[str, Iterable[str]] | None = None,
    sockets: frozenset[str] = frozenset(),
    temp_users: Sequence[TempDirUser] = (),
    pool_users: Sequence[TempDirUser] = (),
    now: float | None = None,
    root_refused: str | None = None,
    euid: int | None = None,
) -> GcPlan:
    """Decide what a gc run removes, from a scan and a liveness snapshot (plus lock probes).

    Nothing is removed here. The same rules run again in `execute()` right before each item,
    because processes start and finish between the two."""
    t = time.time() if now is None else now
    b = _Builder(
        report,
        in_use,
        options,
        t,
        os.geteuid() if euid is None else euid,
        pins or {},
        parents or {},
        sockets,
        temp,
        temp_users,
        pool_users,
    )
    recorded = [*(parents or {}), *(x for v in (parents or {}).values() for x in v)]
    explicit = [_find(report, fp, recorded) for fp in options.fingerprints]
    leftover_kinds = layout.LEFTOVER_KINDS | {Kind.LOCK, Kind.DOWNLOAD, Kind.TF_CACHE}
    named_leftovers = {e.path for e in explicit if e.kind in leftover_kinds}
    explicit = [e for e in explicit if e.kind not in leftover_kinds]
    if root_refused is not None:
        # Not a datasets cache: only the temp dir is cleaned (eviction was refused earlier).
        b.warnings.append(f"not cleaning {report.root}: {root_refused}; pass --force-root if you mean it")
        b.temp_folders()
    elif options.temp:
        b.leftovers()
        b.temp_folders()
    elif named_leftovers:
        b.leftovers(only=named_leftovers)
    why_kept: dict[Path, str] = {}
    evicting = (
        bool(explicit)
        or options.older_than is not None
        or options.max_size is not None
        or bool(options.datasets)
    )
    if evicting:
        for e in explicit:
            if e.kind not in _EVICTABLE:
                b.skip(e, f"a {e.kind.value} entry is not evicted (see cachetool verify)")
        why_kept = b.evictions([e for e in explicit if e.kind in _EVICTABLE])
    n, size, reasons = b.kept(why_kept, evicting)
    return GcPlan(
        report.root,
        temp.path if temp else None,
        options,
        tuple(b.items),
        tuple(b.skipped),
        n,
        size,
        reasons,
        tuple(b.warnings),
        t,
    )


_WRITTEN_BY_DATASETS = frozenset({Kind.SOURCE, Kind.DERIVED, Kind.INDICES, Kind.SHARDS, Kind.SAVED})
_LAYOUT_KINDS = _WRITTEN_BY_DATASETS | {
    Kind.INCOMPLETE_PREPARE,
    Kind.INCOMPLETE_SAVE,
    Kind.DOWNLOAD,
    Kind.EXTRACTED,
    Kind.TF_CACHE,
}


def root_refusal(report: CacheReport) -> str | None:
    """Why gc will not clean this root without `--force-root`: it is `/` or holds a home
    folder, or nothing in it looks like a `datasets` cache (then whatever matches a leftover
    name is somebody's own file)."""
    root = os.path.realpath(report.root)
    home = os.path.realpath(os.path.expanduser("~"))
    if root == "/":
        return f"refusing to clean {report.root}: it is the file system root"
    if home != "/" and (root == home or home.startswith(root.rstrip("/") + "/")):
        return f"refusing to clean {report.root}: it is or holds your home folder"
    if report.datasets or any(e.kind in _LAYOUT_KINDS for e in report.entries):
        return None
    if any(layout.VERSION_RE.match(p.name) for p in Path(report.root).glob("*/*/*") if p.is_dir()):
        return None  # builder folders (`<name>/<config>/<version>`) not prepared yet
    return (
        f"refusing to clean {report.root}: nothing in it looks like a datasets cache "
        "(no dataset folder, cache file or download)"
    )


def plan_gc(root: str | os.PathLike[str], options: GcOptions) -> GcPlan:
    """Scan `root` (and the temp dir with `--temp`), take a liveness snapshot, read pins and the
    ledger's parents, and build the plan."""
    from cachetool.cache.dirs import temp_dir
    from cachetool.cache.scan import scan_cache
    from cachetool.lineage.ledger import Ledger
    from cachetool.maintenance.liveness import bound_socket_paths, scan_in_use, temp_dir_users
    from cachetool.maintenance.pins import read_pins, recorded_parents

    root_id = _folder_id(root)
    ledger = Ledger.load(Path(root).expanduser().resolve(), follow=False)
    report = scan_cache(root, ledger=ledger)
    if _folder_id(report.root) != root_id:
        raise CachetoolError(
            f"the cache root {report.root} was replaced while it was scanned; nothing removed"
        )
    why = None if options.force_root or not report.entries else root_refusal(report)
    if why is not None and (options.evicts or "nothing in it looks like" not in why):
        raise CachetoolError(f"{why}; pass --force-root if you mean it")
    temp = None
    temp_id = None
    if options.temp:
        tmp = options.tmp_dir if options.tmp_dir is not None else temp_dir().path
        temp_id = _folder_id(tmp)
        temp = scan_temp_dir(tmp)
    shared = shared_state(report.root)
    check_min_age(report.root, shared, options.min_age, options.temp, options.other_hosts_idle)
    pins = read_pins(report.root)
    named = pins or options.keep or options.fingerprints
    parents = recorded_parents(ledger) if options.evicts and named else {}
    # Liveness last: the snapshot should be younger than everything it judges.
    in_use = scan_in_use(root=report.root)
    users = temp_dir_users(temp.path) if temp is not None and temp.folders else ()
    pools = (
        temp_dir_users(temp.path, python=True)
        if temp is not None and any(f.kind in ("pymp", "determinism") for f in temp.folders)
        else ()
    )
    plan = build_plan(
        report,
        in_use,
        options,
        temp=temp,
        pins=pins,
        parents=parents,
        sockets=bound_socket_paths(),
        temp_users=users,
        pool_users=pools,
        root_refused=why.split(": ", 1)[1] if why else None,
    )
    return dataclasses.replace(plan, root_id=root_id, temp_id=temp_id, shared=shared)


def _folder_id(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


# ------------------------------------------------------------------------------------------
# Executing the plan
# ------------------------------------------------------------------------------------------


class _Refused(Exception):
    """A re-check failed: keep the item and say why."""


@contextlib.contextmanager
def gc_lock(root: Path, timeout: float = LOCK_TIMEOUT, root_fd: int | None = None) -> Iterator[Path]:
    """Hold the exclusive gc lock of `root` (`<root>/.cachetool/gc.lock`, or a per-user lock when
    the root cannot be written), so two gc runs never work on one cache at once.

    With `root_fd` the lock file is reached from that descriptor (no path is resolved again); it
    is an `flock`, the same lock `filelock` takes, so older runs and this one exclude each other."""
    fd = None
    path = root / layout.LEDGER_DIR / GC_LOCK_NAME
    own_root = root_fd is None
    try:
        if root_fd is None:
            root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        with contextlib.suppress(FileExistsError):
            os.mkdir(layout.LEDGER_DIR, dir_fd=root_fd)
        state_fd = os.open(layout.LEDGER_DIR, _O_DIR, dir_fd=root_fd)
        try:
            fd = os.open(
                GC_LOCK_NAME,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                0o644,
                dir_fd=state_fd,
            )
        finally:
            os.close(state_fd)
    except OSError:
        fd = None
    finally:
        if own_root and root_fd is not None:
            os.close(root_fd)
    if fd is None:  # a read-only root: a lock of this user's, outside the root
        from filelock import FileLock, Timeout

        from cachetool.cache.dirs import user_state_dir
        from cachetool.lineage.ledger import root_key

        path = user_state_dir() / "gc-locks" / f"{root_key(root)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path), timeout=timeout)
        try:
            lock.acquire()
        except Timeout:
            raise GcBusy(root, path, timeout) from None
        try:
            yield path
        finally:
            lock.release()
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise GcBusy(root, path, timeout) from None
                time.sleep(0.05)
        yield path
    finally:
        os.close(fd)  # releases the flock


@dataclass
class _Ctx:
    anchors: dict[str, tuple[Path, int]]
    in_use: InUse
    sockets: frozenset[str]
    now: float
    euid: int
    options: GcOptions
    temp_users: tuple[TempDirUser, ...] = ()
    root: Path | None = None
    first_item: GcItem | None = None  # judged by the run's own snapshot, taken just before
    refresh: bool = True  # False when the caller handed in a snapshot: use only that one
    trash_seq: int = 0  # names of what this run set aside: .cachetool-gc-<pid>-<seq>
    anchor_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    pool_users: tuple[TempDirUser, ...] = ()
    taken: float = dataclasses.field(default_factory=time.monotonic)  # when `in_use` was taken


#: A liveness snapshot older than this is taken again before the next item (a reader may have
#: mapped a file since; a long eviction must not judge its last items by its first snapshot).
SNAPSHOT_MAX_AGE = 2.0


def execute(
    plan: GcPlan,
    *,
    in_use: InUse | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
    log: bool = True,
) -> GcResult:
    """Carry out a plan under the gc lock, re-checking every item right before removing it.

    A fresh liveness snapshot is taken after the lock is won (unless one is given). Items that
    fail a re-check are skipped with the reason; an I/O error fails that item only. Every removal
    is recorded in the root's ledger (`cachetool.lineage.gclog`) after its files are gone."""
    anchors: dict[str, tuple[Path, int]] = {}
    anchor_errors: dict[str, str] = {}
    for scope, anchor, expected in (("root", plan.root, plan.root_id), ("temp", plan.temp_dir, plan.temp_id)):
        if anchor is None:
            continue
        try:
            # The one time a path is resolved: from here on everything is relative to this
            # descriptor, and it must be the very folder the plan was made for.
            fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue  # its items fail their re-check below
        st = os.fstat(fd)
        if expected is not None and (st.st_dev, st.st_ino) != expected:
            os.close(fd)
            anchor_errors[scope] = (
                f"{anchor} is no longer the folder the plan was made for (a folder on the way "
                "was replaced); nothing in it is touched"
            )
            continue
        anchors[scope] = (anchor, fd)
    try:
        root_fd = anchors["root"][1] if "root" in anchors else None
        with gc_lock(plan.root, lock_timeout, root_fd=root_fd) if root_fd is not None else _no_lock():
            return _execute_locked(plan, anchors, anchor_errors, in_use, log)
    finally:
        for _, fd in anchors.values():
            os.close(fd)


@contextlib.contextmanager
def _no_lock() -> Iterator[None]:
    yield  # the root cannot be opened: every item of it is refused, nothing needs the lock


def _execute_locked(
    plan: GcPlan,
    anchors: dict[str, tuple[Path, int]],
    anchor_errors: dict[str, str],
    in_use: InUse | None,
    log: bool,
) -> GcResult:
    """The body of `execute()`, under the gc lock."""
    from cachetool.maintenance.liveness import bound_socket_paths, scan_in_use, temp_dir_users

    snapshot = in_use if in_use is not None else scan_in_use(root=plan.root)
    temp_items = plan.temp_dir is not None and any(i.scope == "temp" for i in plan.items)
    users = temp_dir_users(plan.temp_dir) if temp_items and plan.temp_dir is not None else ()
    pools = temp_dir_users(plan.temp_dir, python=True) if temp_items and plan.temp_dir is not None else ()
    ctx = _Ctx(
        anchors,
        snapshot,
        bound_socket_paths(),
        time.time(),
        os.geteuid(),
        plan.options,
        users,
        plan.root,
        plan.items[0] if plan.items else None,
        in_use is None,
    )
    ctx.anchor_errors = anchor_errors
    ctx.pool_users = pools
    gclog = None
    if log:
        from cachetool.lineage.gclog import GcLog

        gclog = GcLog(plan.root)
    outcomes: list[_Outcome] = []
    try:
        for item in plan.items:
            outcome = _run_item(item, ctx)
            outcomes.append(outcome)
            if gclog is not None and outcome.freed_anything:
                gclog.removed(
                    kind=item.kind.value,
                    paths=[t.path for t in item.targets],
                    size=outcome.freed,
                    files=outcome.files,
                    reason=item.reason,
                    fingerprint=item.fingerprint,
                    aliases=item.aliases,
                    dataset=item.dataset,
                    when=time.time(),
                )
        leases: tuple[Lease, ...] = ()
        if plan.shared is not None and "root" in anchors:
            leases = tuple(remove_stale_leases(anchors["root"][1], plan.shared, gclog))
    finally:
        if gclog is not None:
            gclog.close()
    return GcResult(plan, tuple(o.public() for o in outcomes), time.time(), leases)


@dataclass
class _Outcome:
    item: GcItem
    status: str
    reason: str | None = None
    freed: int = 0
    files: int = 0

    @property
    def freed_anything(self) -> bool:
        return self.status == "removed" or self.files > 0

    def public(self) -> Outcome:
        return Outcome(self.item, self.status, self.reason, self.freed, self.files)


def _run_item(item: GcItem, ctx: _Ctx) -> _Outcome:
    out = _Outcome(item, "removed")
    fds: list[int] = []
    # One descriptor per distinct folder: a unit of thousands of shards in one folder must not
    # run into the open-file limit.
    parents: dict[Path, int] = {}
    try:
        anchor = ctx.anchors.get(item.scope)
        if anchor is None:
            raise _Refused(
                ctx.anchor_errors.get(item.scope)
                or f"cannot open the {'cache root' if item.scope == 'root' else 'temp dir'}"
            )
        if item.lock is not None:
            lock_fd = _take_lock(anchor, item.lock)
            if lock_fd is not None:
                fds.append(lock_fd)
        stale = time.monotonic() - ctx.taken > SNAPSHOT_MAX_AGE
        if ctx.refresh and item is not ctx.first_item and (stale or any(t.is_dir for t in item.targets)):
            # A folder may be written in bursts (save_to_disk between two shards holds nothing
            # open): judge it by a snapshot taken right now, not at the start of the run. The new
            # snapshot serves the items after it too.
            from cachetool.maintenance.liveness import scan_in_use

            ctx.in_use = scan_in_use(root=ctx.root)
            ctx.taken = time.monotonic()
        checked = []
        for t in item.targets:
            got = _check_target(item, t, anchor, ctx, parents)
            if got is not None:
                checked.append(got)
                if got[2] is not None:
                    fds.append(got[2])
        if not checked:
            return _Outcome(item, "skipped", "already gone")
        if item.kind == Kind.LOCK and guard_alive(item.path, ctx.root) is not False:
            raise _Refused("its folder exists again, or cannot be told")
        aside = _set_aside(checked, ctx)
        for parent_fd, name, dir_fd, st in aside:
            if dir_fd is not None:
                freed = [0, 0]
                try:
                    _remove_tree(dir_fd, freed)
                finally:
                    out.freed += freed[0]
                    out.files += freed[1]
                # rmdir goes by name: make sure the name still leads to the folder just emptied.
                now = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
                if not same_file(now, os.fstat(dir_fd)):
                    raise _Refused("replaced by a new folder while it was being removed")
                os.rmdir(name, dir_fd=parent_fd)
            else:
                os.unlink(name, dir_fd=parent_fd)
                if stat.S_ISREG(st.st_mode):
                    out.freed += st.st_size
                    out.files += 1
        return out
    except _Refused as r:
        return _Outcome(item, "skipped", str(r), out.freed, out.files)
    except OSError as e:
        detail = f", at {e.filename}" if e.filename and os.fspath(e.filename) != os.fspath(item.path) else ""
        return _Outcome(item, "failed", f"{e.strerror or e} ({item.path}{detail})", out.freed, out.files)
    except Exception as e:  # one broken item must not stop the others
        return _Outcome(item, "failed", f"{type(e).__name__}: {e}", out.freed, out.files)
    finally:
        for fd in [*reversed(fds), *parents.values()]:
            with contextlib.suppress(OSError):
                os.close(fd)


_Checked = tuple[int, str, "int | None", os.stat_result]


def _set_aside(checked: list[_Checked], ctx: _Ctx) -> list[_Checked]:
    """Take every target of an item out of reach, then ask `/proc` again whether any process
    holds one of them; put everything back if one does.

    Between the last liveness check and an unlink, a reader could open and map the file. After
    the rename to `.cachetool-gc-<pid>-<n>` in the same folder, no one can open it by its name
    any more, so a check made after the rename is final: a process that opened the file before
    holds a descriptor or a mapping that this check sees. Returns the targets under their new
    names, ready to be removed."""
    aside: list[_Checked] = []
    keys: set[tuple[int, int]] = set()
    try:
        for parent_fd, name, dir_fd, st in checked:
            ctx.trash_seq += 1
            new = f"{layout.GC_TRASH_PREFIX}{os.getpid()}-{ctx.trash_seq}"
            rename_noreplace(parent_fd, name, parent_fd, new)
            moved = os.stat(new, dir_fd=parent_fd, follow_symlinks=False)
            aside.append((parent_fd, new, dir_fd, st))
            if not same_file(moved, st):
                raise _Refused("replaced while it was being removed")
            keys.add((st.st_dev, st.st_ino))
            if dir_fd is not None:
                keys |= {(s.st_dev, s.st_ino) for s in inventory(dir_fd) if not stat.S_ISDIR(s.st_mode)}
        holders = pids_holding(keys)
        if holders:
            pids = sorted({p for v in holders.values() for p in v})
            raise _Refused(f"became in use by pid {', '.join(map(str, pids[:5]))} (put back)")
    except BaseException:
        _put_back(aside, checked)
        raise
    return aside


def _put_back(aside: list[_Checked], checked: list[_Checked]) -> None:
    """Undo `_set_aside`: every target gets its name back, unless something new took the name
    meanwhile; then it stays set aside, and the next gc removes it once no one holds it."""
    for (parent_fd, new, _, _), (_, old, _, _) in zip(aside, checked, strict=False):
        with contextlib.suppress(OSError):
            rename_noreplace(parent_fd, new, parent_fd, old)


def _relative_parts(anchor: Path, path: Path) -> tuple[str, ...]:
    try:
        rel = path.relative_to(anchor)
    except ValueError:
        raise _Refused(f"outside {anchor}") from None
    parts = rel.parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise _Refused(f"not strictly inside {anchor}")
    return parts


def _open_parent(anchor: tuple[Path, int], path: Path) -> tuple[int, str]:
    """Open the folder holding `path` one component at a time from the anchor, never following a
    symlink: a component swapped for a symlink makes the open fail (ELOOP/ENOTDIR)."""
    root, root_fd = anchor
    parts = _relative_parts(root, path)
    # No path string is resolved here: each component is opened relative to the one before,
    # without following symlinks, starting from the root's own descriptor.
    try:
        return open_parent(root_fd, parts), parts[-1]
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Refused(f"{e.filename} on the way is now a symlink or not a folder") from None
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(e.errno, e.strerror, e.filename) from None
        raise


def _take_lock(anchor: tuple[Path, int], lock: Path) -> int | None:
    """Win the filelock at `lock` without blocking and without creating it; held until the item
    is done, so no preparation or download can start on what is being removed."""
    try:
        parent_fd, name = _open_parent(anchor, lock)
    except FileNotFoundError:
        return None
    try:
        return acquire(name, dir_fd=parent_fd)
    except LockBusy as busy:
        raise _Refused(busy.message()) from None
    finally:
        os.close(parent_fd)


def _check_target(
    item: GcItem, t: Target, anchor: tuple[Path, int], ctx: _Ctx, parents: dict[Path, int]
) -> tuple[int, str, int | None, os.stat_result] | None:
    """Re-check one target; returns (parent fd, name, folder fd or None, stat) or None if gone.
    Parent folders are opened once and kept in `parents` (closed by the caller)."""
    name = t.path.name
    if t.path.parent in parents:
        parent_fd = parents[t.path.parent]
    else:
        try:
            parent_fd, name = _open_parent(anchor, t.path)
        except FileNotFoundError:
            return None
        parents[t.path.parent] = parent_fd
    keep_open = False
    dir_fd: int | None = None
    try:
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise _Refused("is a symlink (never followed)")
        if stat.S_ISDIR(st.st_mode) != t.is_dir:
            raise _Refused("changed type since the plan")
        stats = [st]
        if t.is_dir:
            try:
                dir_fd = os.open(name, _O_DIR, dir_fd=parent_fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _Refused("is now a symlink") from None
                raise
            stats += _inventory(dir_fd)
        _judge(item, t, stats, ctx, dir_fd)
        keep_open = True
        return parent_fd, name, dir_fd, st
    finally:
        if not keep_open and dir_fd is not None:
            os.close(dir_fd)


def _judge(item: GcItem, t: Target, stats: list[os.stat_result], ctx: _Ctx, dir_fd: int | None) -> None:
    o = ctx.options
    if not o.all_users:
        other = next((s.st_uid for s in stats if s.st_uid != ctx.euid), None)
        if other is not None:
            raise _Refused(f"owned by uid {other}, not by you (pass --all-users)")
    pids: set[int] = set()
    for s in stats:
        pids |= ctx.in_use.pids(s)
    if pids:
        raise _Refused(f"in use by pid {', '.join(map(str, sorted(pids)[:5]))}")
    if t.is_dir:
        prefix = os.fspath(t.path) + "/"
        if any(s.startswith(prefix) for s in ctx.sockets):
            raise _Refused("a live process listens on a socket inside")
    if item.scope == "temp" and t.is_dir:
        cwd = cwd_pids_under(t.path)
        if cwd:
            raise _Refused(f"in use by pid {', '.join(map(str, sorted(cwd)[:5]))} (its working folder)")
        kind = layout.temp_folder_kind(t.path.name) or "pymp"
        made_by = min(stats[0].st_mtime, stats[0].st_ctime)
        if kind == "determinism":
            why = _check_owner_refusal(t.path.name, made_by, ctx.pool_users)
        else:
            why = _owner_refusal(kind, made_by, ctx.temp_users, ctx.pool_users)
        if why:
            raise _Refused(why)
    if item.kind != Kind.LOCK:
        newest = max(s.st_mtime for s in stats)
        lease = ctx.in_use.lease_over(newest) if item.scope == "root" else None
        if lease is not None:
            raise _Refused(leased_reason(lease))
        if ctx.now - newest < o.min_age:
            raise _Refused(_too_young(max(0.0, ctx.now - newest), o.min_age))
    top = stats[0]
    if item.action == "evict" and not t.is_dir and (top.st_size != t.size or top.st_mtime != t.mtime):
        raise _Refused("changed since the plan")
    name = t.path.name
    if item.kind == Kind.TEMP and item.scope == "root":
        trash = layout.GC_TRASH_RE.match(name)
        if not (layout.TEMP_FILE_RE.match(name) or trash):
            raise _Refused("not a temp file name")
        if trash and _gc_alive(int(trash.group("pid"))):
            raise _Refused(f"the gc that set it aside (pid {trash.group('pid')}) is still running")
    if item.kind == Kind.TF_CACHE and not tf_leftover_name(name):
        raise _Refused("not a tf.data lockfile or temp state name")
    if item.kind == Kind.INCOMPLETE_SAVE and dir_fd is not None:
        try:
            os.stat(layout.STATE_JSON, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise _Refused("state.json appeared: the save finished")
    if item.kind == Kind.LOCK and guard_alive(t.path, ctx.root) is not False:
        raise _Refused("its folder exists again, or cannot be told")


def _inventory(dir_fd: int) -> list[os.stat_result]:
    """stat of everything below an open folder, walking by descriptors without following links."""
    out: list[os.stat_result] = []
    with os.scandir(dir_fd) as it:
        entries = list(it)
    for de in entries:
        st = os.stat(de.name, dir_fd=dir_fd, follow_symlinks=False)
        out.append(st)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(de.name, _O_DIR, dir_fd=dir_fd)
            try:
                out += _inventory(sub)
            finally:
                os.close(sub)
    return out


_MARKER_FILES = frozenset({"state.json", "dataset_dict.json", "dataset_info.json"})


def _remove_tree(dir_fd: int, freed: list[int]) -> None:
    """Empty an open folder through descriptors: `unlink`/`rmdir` relative to each folder's fd,
    subfolders opened with `O_NOFOLLOW`. A symlink inside is removed as a link, never followed.
    Keeps going past errors and raises the first one at the end; `freed` ([bytes, files]) counts
    what is gone either way."""
    first_error: OSError | None = None
    with os.scandir(dir_fd) as it:
        entries = list(it)
    # The files that make a folder count as a dataset go first: a removal that stops half-way
    # then leaves a folder datasets will not load, never one with data files missing.
    entries.sort(key=lambda de: de.name not in _MARKER_FILES)
    for de in entries:
        try:
            st = os.stat(de.name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(de.name, _O_DIR, dir_fd=dir_fd)
                try:
                    _remove_tree(sub, freed)
                finally:
                    os.close(sub)
                os.rmdir(de.name, dir_fd=dir_fd)
            else:
                os.unlink(de.name, dir_fd=dir_fd)
                if stat.S_ISREG(st.st_mode):
                    freed[0] += st.st_size
                freed[1] += 1
        except OSError as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error
