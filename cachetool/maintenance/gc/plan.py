"""A gc run as plain data and how it is decided: the plan (items to remove, what it keeps and
why), the outcome of each item, the keep rules the plan and `execute` both ask (`Rules`), and the
planner (`plan_gc`): a scan, a liveness snapshot, pins and the ledger's parents in, nothing removed.
Leftovers are each proven dead; eviction removes whole units (every shard of a fingerprint, a saved
folder, a builder folder's splits). Decisions are typed; every message is rendered from them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import stat
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cachetool.cache import layout
from cachetool.cache.layout import DATA_KINDS, WRITTEN_BY_DATASETS, Kind, LockKind, TempKind
from cachetool.cache.lease import Lease
from cachetool.cache.model import CacheReport
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import compact_age, compact_duration, human_size, iso_time, short_duration
from cachetool.maintenance.fdops import O_DIR, inventory
from cachetool.maintenance.gc import DEFAULT_MIN_AGE, NOTHING_SELECTED, GcOptions
from cachetool.maintenance.liveness import (
    InUse,
    LockState,
    SharedState,
    TempDirUser,
    check_min_age,
    dead_writer_hint,
    lock_guard,
    pids_text,
    probe,
    shared_state,
    socket_reason,
)
from cachetool.processes import alive, process_start
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile, Entry
    from cachetool.history.ledger import Ledger

#: How long a second gc waits for the first before giving up.
LOCK_TIMEOUT = 30.0

#: "leftover": what a killed process left (`--temp`, or named); "evict": a whole cache entry;
#: "purge": something `verify --quarantine` moved aside (`--quarantine`).
Action = Literal["leftover", "evict", "purge"]
#: "root": inside the cache root; "temp": a folder in the temp dir.
Scope = Literal["root", "temp"]
#: What execute did with one item.
Status = Literal["removed", "skipped", "failed"]


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
    action: Action = "leftover"
    scope: Scope = "root"
    fingerprint: str | None = None
    aliases: tuple[str, ...] = ()
    dataset: str | None = None
    used: float | None = None
    lock: Path | None = None  # held (non-blocking) across the removal; someone holding it keeps the item
    #: An eviction: the seconds its recorded computation took, what recomputing it costs (None:
    #: never recorded).
    recompute: float | None = None

    @property
    def id(self) -> str:
        return self.fingerprint or os.fsdecode(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "id", "action", "kind", "scope", "path"),
            "paths": [os.fsdecode(t.path) for t in self.targets],
            **json_fields(self, "fingerprint", "aliases", "dataset", "size", "files"),
            "used": iso_time(self.used),
            "reason": self.reason,
            "recompute_seconds": self.recompute,
        }


#: Why gc keeps something it looked at, typed (`Skip.code`); `Skip.reason` renders it with detail.
KeepCode = Literal[
    "other-user",  # owned by another user (without --all-users)
    "in-use",  # a live process holds, maps or writes it
    "leased",  # a live run's lease covers it: it may be writing it
    "too-young",  # modified less than --min-age ago
    "resumable",  # a map's partial output a traced rerun resumes from, less than a day old
    "lock-held",  # its lock is held: a preparation or download is running
    "lock-unknown",  # its lock cannot be probed: counted as held
    "guard-unknown",  # a lock whose guarded folder cannot be told
    "lock-live",  # a lock named on the command line whose folder or download exists
    "not-regular",  # not a regular file (or, in the temp dir, not a folder: never followed)
    "not-datasets",  # its name or place says datasets did not write it
    "being-written",  # a tf.data cache a live writer is writing
    "gc-running",  # set aside by a gc that is still running
    "cache-root",  # it is the cache root itself
    "socket",  # a live process listens on a socket inside
    "may-be-owned",  # a live process may own this temp folder
    "pinned",  # pinned, or a recorded ancestor of a pinned entry
    "keep",  # named by --keep, or a recorded ancestor of one
    "source",  # a source split or saved dataset (without --include-sources)
    "not-evictable",  # named, but of a kind gc does not evict
]


@dataclass(frozen=True)
class Refusal:
    """One reason to keep something: typed (`code`) and rendered (`text`)."""

    code: KeepCode
    text: str


@dataclass(frozen=True)
class Skip:
    """Something gc looked at and keeps, and why (a leftover not proven dead, a protected entry)."""

    path: Path
    kind: Kind
    code: KeepCode
    reason: str
    size: int = 0
    fingerprint: str | None = None
    scope: Scope = "root"
    #: The entry's other fingerprints (a saved dataset's, as `load_from_disk` gives it): a kept
    #: entry named by one of them is named too.
    aliases: tuple[str, ...] = field(default=(), compare=False)

    @property
    def id(self) -> str:
        return self.fingerprint or os.fsdecode(self.path)

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "id", "kind", "scope", "path", "fingerprint", "size", "code", "reason")


class KeptBecause(str, Enum):
    """Why a cache entry survives a run, as the keeps sentence counts it. Members are listed in
    the order the sentence names them: protections first, then what the selection left out."""

    PINNED = "pinned"
    PINNED_ANCESTOR = "ancestors of pinned entries"
    KEEP = "kept by --keep"
    IN_USE = "in use"
    OTHER_USERS = "owned by other users"
    TOO_YOUNG = "younger than --min-age"
    SOURCES = "source splits and saved datasets"
    OUTSIDE = "outside the selection"
    RECENT = "used recently"  # rendered with --older-than
    QUARANTINED_RECENTLY = "quarantined recently"  # rendered with --quarantine --older-than
    FITS = "that fit under --max-size"  # rendered with --max-size
    NOT_SELECTED = "not selected"
    NOT_EVICTABLE = "unreadable or not evictable"
    CACHE_ROOT = "in the saved dataset that is the cache root"  # gc never removes the folder it cleans
    UNTOUCHED = "untouched (--temp removes only leftovers)"

    def render(self, options: GcOptions) -> str:
        """The words for the keeps sentence and the JSON `kept.reasons` keys."""
        if self == KeptBecause.QUARANTINED_RECENTLY and options.older_than is not None:
            return f"quarantined in the last {compact_duration(options.older_than)}"
        if self == KeptBecause.RECENT and options.older_than is not None:
            return f"used in the last {compact_duration(options.older_than)}"
        if self == KeptBecause.FITS and options.max_size is not None:
            return f"that fit under {human_size(options.max_size)}"
        return self.value


#: pinned, their ancestors, --keep, in use, other users': the members that protect, in order.
_PROTECTIONS = tuple(KeptBecause)[:5]


def order_kept(counts: dict[KeptBecause, int], options: GcOptions) -> tuple[tuple[KeptBecause, int], ...]:
    """Protections first, in the order they apply; then the rest, most common first."""
    rank = {r: i for i, r in enumerate(_PROTECTIONS)}
    return tuple(
        sorted(counts.items(), key=lambda kv: (rank.get(kv[0], len(rank)), -kv[1], kv[0].render(options)))
    )


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
    kept_reasons: tuple[tuple[KeptBecause, int], ...] = ()  # (why, entries): `order_kept`
    warnings: tuple[str, ...] = ()
    #: (st_dev, st_ino) of the cache root and the temp dir when the plan was made: execute works
    #: only inside those very folders, whatever their paths lead to by then.
    root_id: tuple[int, int] | None = field(default=None, compare=False)
    temp_id: tuple[int, int] | None = field(default=None, compare=False)
    #: The root's file system and leases (`cachetool.maintenance.liveness`).
    shared: SharedState | None = field(default=None, compare=False)
    #: Commands that do what this plan keeps from doing (`shared.dead_writer_hint`).
    hints: tuple[str, ...] = field(default=(), compare=False)

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
        parts = [f"{n} {why.render(self.options)}" for why, n in self.kept_reasons]
        if not parts:
            return head
        body = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"{head}: {body}"

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "root", "temp_dir", "items"),
            "bytes": self.expected_freed,
            "files": self.expected_files,
            **json_fields(self, "skipped"),
            "kept": {
                "entries": self.kept_entries,
                "bytes": self.kept_bytes,
                "reasons": {why.render(self.options): n for why, n in self.kept_reasons},
                "summary": self.keeps_sentence(),
            },
            "warnings": list(self.warnings),
            "hints": list(self.hints),
            **(self.shared.to_json() if self.shared is not None else {}),
        }


@dataclass(frozen=True)
class Outcome:
    """What execute did with one item."""

    item: GcItem
    status: Status
    reason: str | None = None
    freed: int = 0
    files: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            **self.item.to_json(),
            **json_fields(self, "status", "reason", "freed"),
            "files_removed": self.files,
        }


@dataclass(frozen=True)
class GcResult:
    """The outcome of every item of a plan, in plan order."""

    plan: GcPlan
    outcomes: tuple[Outcome, ...]
    #: Leases removed: expired (another host) or of a process of this host that is gone.
    leases_removed: tuple[Lease, ...] = field(default=(), compare=False)

    def _with(self, status: Status) -> tuple[Outcome, ...]:
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
        return json_fields(
            self, "removed", "skipped", "failed", "freed_bytes", "freed_files", "leases_removed"
        )


#: How the keeps sentence counts an entry that a refusal (`Rules.refusal`) keeps.
KEPT_BECAUSE: dict[KeepCode, KeptBecause] = {
    "other-user": KeptBecause.OTHER_USERS,
    "in-use": KeptBecause.IN_USE,
    "leased": KeptBecause.IN_USE,  # a live run may be writing it
    "too-young": KeptBecause.TOO_YOUNG,
}

#: Clock slack when comparing a process start time (boot-time based) with a file time.
_START_SLACK = 2.0


def too_young(age: float, min_age: float) -> Refusal | None:
    """Why something modified `age` seconds ago stays under `--min-age`. A modification time in
    the future (another host's clock) tells no age: it stays under any `--min-age` but 0."""
    if min_age <= 0 or age >= min_age:
        return None
    when = future_mtime(age) or f"modified {compact_age(max(0.0, age))} ago"
    return Refusal("too-young", f"{when}, younger than --min-age {compact_duration(min_age)}")


def future_mtime(age: float) -> str | None:
    """What to say of a modification time ahead of this host's clock by more than a second."""
    if age > -1.0:
        return None
    return f"modified {compact_age(-age)} in the future (another host's clock?)"


@dataclass
class Rules:
    """The keep rules of one run and the liveness snapshot they read (`take`)."""

    options: GcOptions
    in_use: InUse
    sockets: Mapping[str, int] = field(default_factory=dict)  # bound Unix sockets: path -> inode
    temp_users: tuple[TempDirUser, ...] = ()  # may own folders of the temp dir
    now: float = field(default_factory=time.time)
    euid: int = field(default_factory=os.geteuid)

    @classmethod
    def take(
        cls,
        options: GcOptions,
        leases: tuple[Lease, ...],
        temp_dir: Path | None,
        in_use: InUse | None = None,
    ) -> Rules:
        """A liveness snapshot of this host with the root's live `leases` (`in_use` when given)
        for the rules, with the possible owners of folders in `temp_dir` (None: none to judge)."""
        from cachetool.maintenance.liveness import bound_sockets, scan_in_use, temp_dir_users

        if in_use is None:
            in_use = dataclasses.replace(scan_in_use(writers=False), leases=leases)
        users = temp_dir_users(temp_dir, in_use) if temp_dir is not None else ()
        return cls(options, in_use, bound_sockets(), users)

    def refusal(
        self,
        uids: Iterable[int],
        newest: float | None,
        pids: Iterable[int],
        age_applies: bool = True,
        scope: Scope = "root",
    ) -> Refusal | None:
        """Why something must stay whatever it is: another user's (without --all-users), held by
        a live process, under a live lease, or younger than --min-age."""
        if not self.options.all_users:
            others = sorted({u for u in uids if u != self.euid})
            if others:
                return Refusal("other-user", f"owned by uid {others[0]}, not by you (pass --all-users)")
        held = set(pids)
        if held:
            return Refusal("in-use", f"in use by pid {pids_text(held, 5)}")
        lease = self.in_use.lease_over(newest) if age_applies and scope == "root" else None
        if lease is not None:
            # Starts "in use", as every reason of a live writer does.
            return Refusal("leased", f"in use by a run holding a lease ({lease}): it may be writing this")
        if age_applies and newest is not None:
            return too_young(self.now - newest, self.options.min_age)
        return None

    def temp_refusal(self, path: Path, kind: TempKind, made_by: float) -> Refusal | None:
        """Why a temp-dir folder stays though nothing in it is held: a live process listens on a
        socket inside, or may own it (it uses this temp dir and started before the folder)."""
        prefix = os.fspath(path) + "/"
        if any(s.startswith(prefix) for s in self.sockets):
            return Refusal("socket", socket_reason(path, self.sockets, self.in_use))
        if kind == "determinism":
            # `cachetool-determinism-<pid>-*` is that check's while it lives and started before
            # the folder was made (a reused pid started later); older names carry no pid.
            m = layout.CHECK_DIR_RE.match(path.name)
            if m is not None:
                pid = int(m.group("pid"))
                started = process_start(pid)
                started = 0.0 if started is None and alive(pid) else started  # alive, start unknown
                if started is not None and started <= made_by + _START_SLACK:
                    return Refusal("may-be-owned", f"the check that made it (pid {pid}) is still running")
                return None
        # Any live process of the kind that makes such folders, using this temp dir and started
        # before the folder existed, may be its owner, idle between writes.
        arrow = kind == "hf_datasets"
        owners = sorted(
            u.pid
            for u in self.temp_users
            if (u.arrow if arrow else u.python) and u.started <= made_by + _START_SLACK
        )
        if owners:
            who = "datasets" if arrow else "Python"
            return Refusal(
                "may-be-owned", f"a live {who} process using this temp dir (pid {owners[0]}) may own it"
            )
        return None


def owner_uid(path: Path) -> int:
    try:
        return os.lstat(path).st_uid
    except OSError:
        return os.geteuid()


def gc_alive(pid: int) -> bool:
    """Is `pid` a live cachetool process (the gc whose set-aside name carries it)?"""
    if pid == os.getpid():
        return True
    if not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"cachetool" in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: keep it


@dataclass(frozen=True)
class TempFolder:
    """An `hf_datasets-*` or `pymp-*` entry of the temp dir, as `lstat` and a walk tell it."""

    path: Path
    kind: TempKind
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
    id: tuple[int, int] | None = None  # (st_dev, st_ino): execute works only in this very folder


def scan_temp_dir(path: str | os.PathLike[str]) -> TempScan:
    """List the `hf_datasets-*` and `pymp-*` folders of a temp dir; nothing else there is read."""
    resolved = Path(os.path.realpath(path))
    try:
        names = sorted(os.listdir(resolved))
    except OSError as e:
        return TempScan(resolved, (), e.strerror or str(e), _folder_id(resolved))
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
        is_dir, inside = stat.S_ISDIR(st.st_mode), []
        if is_dir:
            with contextlib.suppress(OSError):
                fd = os.open(p, O_DIR)
                try:
                    inside = inventory(fd)
                finally:
                    os.close(fd)
        files = [s for s in inside if not stat.S_ISDIR(s.st_mode)]
        newest = max([st.st_mtime, *(s.st_mtime for s in inside)])
        size = sum(s.st_size for s in files)
        out.append(TempFolder(p, kind, is_dir, st.st_uid, size, len(files), newest, made_by))
    return TempScan(resolved, tuple(out), None, _folder_id(resolved))


def newest_mtime(e: Entry) -> float | None:
    """The newest modification time of an entry's files and of the entry itself."""
    got = max((f.mtime for f in e.files), default=None)
    try:
        own = os.lstat(e.path).st_mtime
    except OSError:
        return got
    return own if got is None else max(got, own)


#: How long `gc --temp` keeps a resumable partial by default (not named, no `--min-age`).
RESUMABLE_FOR = 24 * 3600.0

#: Kinds kept unless `--include-sources`: what cannot be computed again from the cache alone.
SOURCE_LIKE = frozenset({Kind.SOURCE, Kind.SAVED, Kind.ARROW})
#: Kinds an entry named on the command line may be evicted as.
EVICTABLE = frozenset({Kind.DERIVED, Kind.INDICES, Kind.SHARDS}) | SOURCE_LIKE


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


#: Why a unit must stay: counted as the first, shown in the skips as the second.
_Protected = tuple[KeptBecause, Refusal]


@dataclass(kw_only=True)
class Planner(Rules):
    """The rules, the inputs of one plan and its growing output; nothing here touches the file
    system beyond `lstat` and lock probes."""

    report: CacheReport
    pins: set[str] = field(default_factory=set)
    parents: Mapping[str, Iterable[str]] = field(default_factory=dict)
    #: Fingerprint -> the wall seconds its recorded computation took (`recompute_costs`).
    costs: Mapping[str, float] = field(default_factory=dict)
    temp: TempScan | None = None
    listings: dict[Path, list[str]] = field(default_factory=dict)  # for decoding root locks
    items: list[GcItem] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    removing: set[Path] = field(default_factory=set)

    @property
    def root(self) -> Path:
        return self.report.root

    def file_pids(self, files: Iterable[CacheFile]) -> set[int]:
        return {pid for f in files for pid in self.in_use.pids_for_path(os.fspath(f.path))}

    def skip(
        self,
        e: Entry | None,
        why: Refusal,
        *,
        path: Path | None = None,
        kind: Kind | None = None,
        size: int | None = None,
        scope: Scope = "root",
    ) -> None:
        self.skipped.append(
            Skip(
                path or (e.path if e else self.root),
                kind or (e.kind if e else Kind.OTHER),
                why.code,
                why.text,
                size if size is not None else (e.size if e else 0),
                e.fingerprint if e else None,
                scope,
                e.aliases if e else (),
            )
        )

    def offer(
        self,
        e: Entry | None,
        item: GcItem,
        uids: Iterable[int],
        pids: Iterable[int],
        *,
        aged: bool = True,
        also: Callable[[], Refusal | None] = lambda: None,
        young: Refusal | None = None,
    ) -> None:
        """Plan `item` unless a rule (or `also`) keeps it: then a skip, of `e` at the item's path.
        `aged`: its age counts (a lock's says nothing: filelock never touches its mtime).
        `young`: why it stays though old enough for `--min-age` (said instead of too young)."""
        newest = max((t.mtime for t in item.targets if t.mtime is not None), default=None) if aged else None
        why = self.refusal(uids, newest, pids, age_applies=aged, scope=item.scope)
        if young is not None and (why is None or why.code == "too-young"):
            why = young
        why = why or also()
        if why is None:
            self.add(item)
        else:
            self.skip(e, why, path=item.path, kind=item.kind, size=item.size, scope=item.scope)

    @property
    def recorded(self) -> list[str]:
        """Every fingerprint the ledger records, as a result or as a parent."""
        return [*self.parents, *(x for v in self.parents.values() for x in v)]

    def add(self, item: GcItem) -> None:
        newest = max((t.mtime for t in item.targets if t.mtime is not None), default=None)
        future = future_mtime(self.now - newest) if newest is not None else None
        if future is not None and item.kind != Kind.LOCK:
            item = dataclasses.replace(item, reason=f"{item.reason}; {future}")
        self.items.append(item)
        self.removing.update(t.path for t in item.targets)

    def leftovers(self, only: set[Path] | None = None, named: set[Path] | None = None) -> None:
        """Plan the leftovers (`only` these, when given); those `named` on the command line (all
        of `only`) are not kept as resumable partials."""
        named = only if only is not None else named or set()
        # Folders `datasets` writes cache files into: dataset folders, and folders holding its
        # cache-<fp>.arrow files. A folder of a user's own .arrow files is not one of them.
        data_dirs = {d.path for d in self.report.datasets}
        data_dirs |= {e.path.parent for e in self.report.entries if e.kind in WRITTEN_BY_DATASETS}
        locks: list[Entry] = []
        plan = {
            Kind.INCOMPLETE_PREPARE: self.incomplete_prepare,
            Kind.INCOMPLETE_SAVE: self.incomplete_save,
            Kind.DOWNLOAD: self.incomplete_download,
            Kind.LOCK: locks.append,
            Kind.TF_CACHE: self.tf_leftovers,
        }
        for e in self.report.entries:
            if only is not None and e.path not in only:
                continue
            if e.kind == Kind.TEMP and layout.GC_TRASH_RE.match(e.path.name):
                self.gc_trash(e)
            elif e.kind == Kind.TEMP:
                self.temp_file(e, data_dirs, named=e.path in named)
            elif e.kind in plan:
                plan[e.kind](e)
        # Locks last: whether a lock still guards something depends on the folders removed above.
        for e in locks:
            self.lock(e, named=only is not None)

    def temp_file(self, e: Entry, data_dirs: set[Path], named: bool = False) -> None:
        f = e.files[0] if e.files else None
        if f is None or not stat.S_ISREG(f.mode):
            self.skip(e, Refusal("not-regular", "not a regular file"))
            return
        if e.dataset_dir is None and e.path.parent not in data_dirs:
            self.skip(e, Refusal("not-datasets", "not in a dataset folder: datasets did not write it"))
            return
        age = self.now - f.mtime
        young = None
        if (
            e.resumable_rows
            and not named
            and self.options.min_age == DEFAULT_MIN_AGE
            and 0 <= age < RESUMABLE_FOR
        ):
            # A day for its pipeline to run again and take the rows back (docs/resume.md); held by
            # a live process or another user's, it is kept for that.
            fp = e.aliases[0] if e.aliases else "its step"
            ago = compact_age(max(0.0, age))
            why = (
                f"resumable partial of {fp} ({e.resumable_rows:,} rows), modified {ago} ago: a traced "
                "rerun of its step reuses them; kept a day unless named or --min-age is given"
            )
            young = Refusal("resumable", why)
        reason = ("empty" if f.size == 0 else "partial") + " tmp file of a killed writer"
        self.leftover_file(e, f, Kind.TEMP, reason, young=young, dataset=e.dataset, aliases=e.aliases)

    def leftover_file(
        self, e: Entry, f: CacheFile, kind: Kind, reason: str, young: Refusal | None = None, **extra: Any
    ) -> None:
        """Plan to remove one leftover file as one item, unless a rule (or `young`) keeps it."""
        item = GcItem(f.path, kind, f.size, 1, reason, (Target(f.path, False, f.size, f.mtime),), **extra)
        self.offer(e, item, [f.uid], self.file_pids([f]), aged=kind != Kind.LOCK, young=young)

    def tf_leftovers(self, e: Entry) -> None:
        """What a killed `tf.data` writer left (its lockfiles and partial shards), as one item;
        never a finished cache's index or data."""
        if e.state == "being-written":
            self.skip(e, Refusal("being-written", str(e.problems[-1]) if e.problems else "being written"))
            return
        if e.state != "abandoned":
            return
        from cachetool.cache.tfdata import tf_leftover_name

        files = [f for f in e.files if tf_leftover_name(f.name)]
        if not files or any(not stat.S_ISREG(f.mode) for f in files):
            self.skip(e, Refusal("not-regular", "not a regular file"))
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
        if m and gc_alive(int(m.group("pid"))):
            self.skip(
                e, Refusal("gc-running", f"the gc that set it aside (pid {m.group('pid')}) is still running")
            )
            return
        reason = "set aside by a gc that did not finish"
        if not e.files or any(f.path != e.path for f in e.files):
            self.leftover_folder(e, reason)
            return
        self.leftover_file(e, e.files[0], Kind.TEMP, reason)

    def incomplete_prepare(self, e: Entry) -> None:
        final = e.dataset_dir or e.path.with_name(e.path.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)])
        if not layout.PREPARE_NAME_RE.match(final.name):
            self.skip(
                e, Refusal("not-datasets", "not named <hash or version>.incomplete: datasets did not make it")
            )
            return
        lock = final.with_name(layout.builder_lock_name(final.name))
        if not self.busy(e, "a preparation", lock):
            self.leftover_folder(e, "interrupted preparation, its builder lock is free", lock=lock)

    def busy(self, e: Entry, who: str, lock: Path, path: Path | None = None, size: int | None = None) -> bool:
        """Whether `who` (a preparation, a download) may be running: its `lock` is held or cannot be
        probed. Then `e` (or its file `path`) stays, with that reason."""
        state = probe(lock)
        if state == LockState.HELD:
            self.skip(
                e, Refusal("lock-held", f"{who} is running ({lock.name} is held)"), path=path, size=size
            )
        elif state.held:
            why = Refusal("lock-unknown", f"{who} may be running ({lock.name} cannot be probed)")
            self.skip(e, why, path=path, size=size)
        return state.held

    def incomplete_save(self, e: Entry) -> None:
        """An interrupted save's folder (a half-saved DatasetDict's whole folder) as one item. The
        root itself stays: where no live writer keeps it, the reason says how to remove it."""
        if e.path == self.root:
            uids = [f.uid for f in e.files] + [owner_uid(e.path)]
            why = self.refusal(uids, newest_mtime(e), self.in_use.pids_under(e.path))
            if why is None or why.code == "too-young":
                rm = shlex.join(["rm", "-r", os.fsdecode(e.path)])
                why = Refusal("cache-root", f"is the cache root itself: save it again, or remove it: `{rm}`")
            self.skip(e, why)
            return
        what = f"its split {e.split} has no state.json" if e.split else "no state.json"
        self.leftover_folder(e, f"interrupted save_to_disk ({what})")

    def leftover_folder(self, e: Entry, reason: str, lock: Path | None = None) -> None:
        """Plan to remove a leftover folder as one item, unless something in it says keep."""
        target = Target(e.path, True, e.size, newest_mtime(e))
        item = GcItem(e.path, e.kind, e.size, len(e.files), reason, (target,), dataset=e.dataset, lock=lock)
        self.offer(e, item, [f.uid for f in e.files] + [owner_uid(e.path)], self.in_use.pids_under(e.path))

    def incomplete_download(self, e: Entry) -> None:
        for f in e.files:
            if not f.name.endswith(layout.INCOMPLETE_DIR_SUFFIX) or not stat.S_ISREG(f.mode):
                continue
            base = f.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)]
            lock = f.path.with_name(layout.download_lock_name(base))
            if not self.busy(e, "a download", lock, path=f.path, size=f.size):
                reason = "interrupted download, its lock is free"
                self.leftover_file(e, f, Kind.DOWNLOAD, reason, dataset=e.dataset, lock=lock)

    def lock(self, e: Entry, named: bool = False) -> None:
        f = e.files[0] if e.files else None
        if f is None or not stat.S_ISREG(f.mode):
            self.skip(e, Refusal("not-regular", "not a regular file"))
            return
        guard = lock_guard(e.path, self.root, self.listings)
        if guard is None:
            self.skip(e, Refusal("guard-unknown", "cannot tell which folder it guards"))
            return
        if guard.alive(frozenset(self.removing)):
            if named:  # a lock of a live folder is part of the cache: said only when asked for
                live = next(p for p in guard.paths if os.path.lexists(p))
                self.skip(e, Refusal("lock-live", f"guards {os.path.relpath(live, self.root)}, which exists"))
            return
        state = probe(e.path)
        if state.held:
            held = state == LockState.HELD
            self.skip(e, Refusal("lock-held", "held by a live process") if held else _UNPROBED)
            return
        what = "download" if guard.kind == LockKind.DOWNLOAD else "folder"
        reason = f"{guard.kind} nobody holds; its {what} is gone"
        self.leftover_file(e, f, Kind.LOCK, reason, dataset=e.dataset, lock=e.path)

    def temp_folders(self) -> None:
        if self.temp is None:
            return
        if self.temp.error:
            self.warnings.append(f"cannot read the temp dir {self.temp.path}: {self.temp.error}")
        for tf in self.temp.folders:
            if not tf.is_dir:
                why = "a symlink or not a folder (never followed)"
                self.skipped.append(Skip(tf.path, Kind.TEMP, "not-regular", why, scope="temp"))
                continue
            reason, target = _TEMP_REASONS[tf.kind], Target(tf.path, True, tf.size, tf.newest)
            item = GcItem(tf.path, Kind.TEMP, tf.size, tf.files, reason, (target,), scope="temp")
            pids = self.in_use.pids_under(tf.path) | self.in_use.cwd_pids_under(tf.path)
            also = partial(self.temp_refusal, tf.path, tf.kind, tf.made_by)
            self.offer(None, item, [tf.uid], pids, also=also)

    def resolve_protections(self) -> None:
        """Pins, `--keep` and their recorded ancestors (the one naming rule for `--keep`:
        ambiguous is an error; a name nothing matches is only warned about)."""
        from cachetool.errors import UnknownFingerprint

        self.keep_fps: set[str] = set()
        for p in self.options.keep:
            from cachetool.cache.lookup import resolve  # here: most runs name nothing to keep

            try:
                got = resolve(p, self.report, recorded=self.recorded)
            except UnknownFingerprint:
                self.warnings.append(f"--keep {p}: no entry or recorded fingerprint matches")
                continue
            e = got.entry
            self.keep_fps |= {
                got.fingerprint,
                *((fp for fp in (e.fingerprint, *e.aliases) if fp) if e else ()),
            }
        self.pin_ancestors = ancestors(sorted(self.pins), self.parents)
        self.keep_ancestors = ancestors(sorted(self.keep_fps), self.parents)
        self._units: list[_Unit] = []

    def units(self) -> list[_Unit]:
        entries = self.report.entries
        meta_by_dir = {d.path: d.meta_files for d in self.report.datasets}
        out: list[_Unit] = []
        # A saved folder given as the root is never a unit: gc never removes the root.
        keys = {e.unit or e.path for e in entries if e.kind == Kind.SAVED} - {self.root}
        within: dict[Path, list[Entry]] = {k: [] for k in keys}  # each entry in every folder it is in
        for e in entries:
            for k in keys.intersection((e.path, *e.path.parents)):
                within[k].append(e)
        metas_within: dict[Path, list[CacheFile]] = {k: [] for k in keys}
        for d, fs in meta_by_dir.items():
            for k in keys.intersection((d, *d.parents)):
                metas_within[k].extend(fs)
        for key in sorted(keys):
            members = sorted(within[key], key=lambda e: (e.kind != Kind.SAVED, os.fsdecode(e.path)))
            metas = metas_within[key]
            out.append(
                _unit(key, Kind.SAVED, members, [f for e in members for f in e.files] + metas, folder=True)
            )
        by_source_dir: dict[Path, list[Entry]] = {}
        for e in entries:
            if e.kind == Kind.SOURCE and e.dataset_dir is not None:
                by_source_dir.setdefault(e.dataset_dir, []).append(e)
        for d, members in sorted(by_source_dir.items()):
            # dataset_info.json goes first: without it datasets prepares again rather than
            # trusting a folder whose splits are half gone.
            metas = sorted(meta_by_dir.get(d, ()), key=lambda f: f.name != layout.DATASET_INFO)
            out.append(_unit(d, Kind.SOURCE, members, [*metas, *(f for e in members for f in e.files)]))
        for e in entries:
            if e.kind in (Kind.DERIVED, Kind.INDICES, Kind.SHARDS, Kind.ARROW):
                out.append(_unit(e.path, e.kind, [e], list(e.files)))
        return out

    def cost(self, u: _Unit) -> float | None:
        """What recomputing `u` costs: the recorded compute seconds of its entries (None: none
        recorded)."""
        known = [
            next((self.costs[fp] for fp in (e.fingerprint, *e.aliases) if fp and fp in self.costs), None)
            for e in u.members
        ]
        return sum(c for c in known if c is not None) if any(c is not None for c in known) else None

    def eviction_order(self, units: list[_Unit]) -> list[_Unit]:
        """`units` in the order `--max-size` evicts them (`--policy`): least recently used first;
        or least recompute seconds per GB first, those whose cost was never recorded before all
        (least recently used first among equals)."""

        def lru(u: _Unit) -> tuple[float, int, str]:
            return (u.used if u.used is not None else 0.0, -u.size, os.fsdecode(u.key))

        if self.options.policy != "cost":
            return sorted(units, key=lru)
        costs = {u.key: self.cost(u) for u in units}
        return sorted(units, key=lambda u: (*cost_rank(costs[u.key], u.size), *lru(u)))

    def protection(self, u: _Unit) -> _Protected | None:
        """Why a unit must stay, or None."""
        fps = u.fingerprints
        if fps & self.pins:
            return KeptBecause.PINNED, Refusal("pinned", "pinned (cachetool unpin to release)")
        hit = next((fp for fp in sorted(fps) if fp in self.pin_ancestors), None)
        if hit:
            return KeptBecause.PINNED_ANCESTOR, Refusal(
                "pinned", f"ancestor of pinned {self.pin_ancestors[hit]}"
            )
        if fps & self.keep_fps:
            return KeptBecause.KEEP, Refusal("keep", "kept by --keep")
        hit = next((fp for fp in sorted(fps) if fp in self.keep_ancestors), None)
        if hit:
            return KeptBecause.KEEP, Refusal("keep", f"ancestor of --keep {self.keep_ancestors[hit]}")
        if u.kind in SOURCE_LIKE and not self.options.include_sources:
            return KeptBecause.SOURCES, Refusal(
                "source", "source split or saved dataset (pass --include-sources)"
            )
        pids = self.file_pids(f for e in u.members for f in e.files)
        if u.kind == Kind.SAVED:
            pids |= self.in_use.pids_under(u.key)
        uids = [f.uid for e in u.members for f in e.files]
        refused = self.refusal(uids, u.newest, pids)
        return None if refused is None else (KEPT_BECAUSE[refused.code], refused)

    def evictions(self, explicit: list[Entry] | None) -> dict[Path, KeptBecause]:
        """Plan evictions; returns, per unit key, why a unit that stays stays (for the sentence).
        `explicit`: the evictable entries named on the command line, None when none were named
        (an empty list when every name was refused: then nothing is in scope)."""
        o = self.options
        units = self._units = self.units()
        explicit_keys = {_unit_key_of(e) for e in explicit or ()}
        scoped = self.scoped(units, explicit_keys if explicit is not None else None)
        scoped_keys = {u.key for u in scoped}
        protected = {u.key: self.protection(u) for u in scoped}
        why_kept: dict[Path, KeptBecause] = {
            u.key: KeptBecause.OUTSIDE for u in units if u.key not in scoped_keys
        }
        selected: list[_Unit] = []
        if o.older_than is not None:
            for u in scoped:
                if u.used is not None and self.now - u.used > o.older_than:
                    selected.append(u)
                else:
                    why_kept[u.key] = KeptBecause.RECENT
        elif o.max_size is None:
            selected = list(scoped)
        chosen: list[_Unit] = []
        for u in selected:
            p = protected[u.key]
            if p is None:
                chosen.append(u)
            else:
                why_kept[u.key] = p[0]
                self.protected_skip(u, p[1], explicit_keys)
        by_size: set[Path] = set()
        if o.max_size is not None:
            selected_keys = {u.key for u in selected}
            rest = [u for u in scoped if u.key not in selected_keys]
            by_size = self.fit_under(o.max_size, rest, chosen, protected, why_kept, explicit_keys)
        for u in _outermost(chosen):
            self.add(self._evict_item(u, by_size=u.key in by_size))
        return why_kept

    def scoped(self, units: list[_Unit], explicit_keys: set[Path] | None) -> list[_Unit]:
        """The units named on the command line (all without names), of `--dataset` if given."""
        scoped = units if explicit_keys is None else [u for u in units if u.key in explicit_keys]
        if self.options.datasets:
            from cachetool.cache.selection import compile_filter

            tests = [compile_filter(f"dataset={name}") for name in self.options.datasets]
            scoped = [u for u in scoped if any(t(e, self.now) for e in u.members for t in tests)]
        return scoped

    def fit_under(
        self,
        max_size: int,
        rest: list[_Unit],
        chosen: list[_Unit],
        protected: Mapping[Path, _Protected | None],
        why_kept: dict[Path, KeptBecause],
        explicit_keys: set[Path],
    ) -> set[Path]:
        """Choose units of `rest` in `eviction_order` (adding them to `chosen`) until the cache
        fits under `max_size`; returns the keys chosen for size."""
        leftover_bytes = sum(i.size for i in self.items if i.scope == "root")
        current = self.report.size - leftover_bytes - sum(u.size for u in _outermost(chosen))
        by_size: set[Path] = set()
        for u in self.eviction_order(rest):
            if current <= max_size:
                why_kept.setdefault(u.key, KeptBecause.FITS)
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
        if current > max_size:
            self.warnings.append(
                f"the cache stays above {human_size(max_size)} ({human_size(current)}): the rest is protected"
            )
        return by_size

    def protected_skip(self, u: _Unit, why: Refusal, explicit_keys: set[Path]) -> None:
        # Sources and saved datasets stay by default; listing each of them would bury the skips
        # that matter (pinned, in use, too young) unless the user named them.
        if u.kind in SOURCE_LIKE and not self.options.include_sources and u.key not in explicit_keys:
            return
        self.skip(u.members[0], why, path=u.key, size=u.size)

    def _evict_item(self, u: _Unit, by_size: bool = False) -> GcItem:
        o = self.options
        ago = f" (last used {compact_age(self.now - u.used)} ago)" if u.used is not None else ""
        cost = self.cost(u)
        if by_size and o.max_size is not None and o.policy == "cost":
            per_gb = "never recorded" if cost is None else f"{short_duration(cost_rank(cost, u.size)[1])}/GB"
            reason = f"least recompute time per GB ({per_gb}), cache over {human_size(o.max_size)}"
        elif by_size and o.max_size is not None:
            reason = f"least recently used{ago}, cache over {human_size(o.max_size)}"
        elif o.older_than is not None:
            reason = f"not used in {compact_duration(o.older_than)}{ago}"
        elif o.fingerprints:
            reason = "named on the command line"
        else:
            reason = f"in --dataset {', '.join(o.datasets)}"
        e = u.members[0]
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
            recompute=cost,
        )

    def kept(
        self, why_kept: Mapping[Path, KeptBecause], evicting: bool, named: bool = False
    ) -> tuple[int, int, dict[KeptBecause, int]]:
        """How many data entries (and bytes) survive the plan, counted by why (`named`: the run
        removes only the entries named on the command line). The bytes count what the plan's rows
        count of them: a source split's dataset_info.json, a saved folder's state.json, once."""
        removed = {t.path for i in self.items for t in i.targets}
        counts: Counter[KeptBecause] = Counter()
        n = size = 0
        reason_of_entry: dict[Path, KeptBecause] = {}
        for u in self._units if evicting else []:
            for e in u.members:
                reason_of_entry.setdefault(e.path, why_kept.get(u.key, KeptBecause.NOT_SELECTED))
        holders: set[Path] = set()  # the dataset folders and saved folders of kept entries
        for e in self.report.entries:
            if e.kind not in DATA_KINDS:
                continue
            if any(p in removed for p in (e.path, *e.path.parents, *(f.path for f in e.files))):
                continue
            n += 1
            size += e.size
            if e.kind == Kind.SOURCE and e.dataset_dir is not None:
                holders.add(e.dataset_dir)
            elif e.kind == Kind.SAVED:
                holders.add(e.unit or e.path)
            if evicting:
                # A saved folder given as the root is no unit: gc never removes the root.
                unit_less = (
                    KeptBecause.CACHE_ROOT if _unit_key_of(e) == self.root else KeptBecause.NOT_EVICTABLE
                )
                reason = reason_of_entry.get(e.path, unit_less)
            else:
                reason = KeptBecause.OUTSIDE if named else KeptBecause.UNTOUCHED
            counts[reason] += 1
        # Their metadata (dataset_info.json, state.json), which gc removes with them: once per folder.
        for d in self.report.datasets:
            if d.path in holders or not holders.isdisjoint(d.path.parents):
                size += sum(f.size for f in d.meta_files)
        return n, size, dict(counts)


#: Why a temp dir folder is removed, by its kind.
_TEMP_REASONS: dict[str, str] = {
    "hf_datasets": "temp folder of a process that is gone (caching disabled)",
    "determinism": "temp folder of a check-determinism that is gone",
    "pymp": "multiprocess pool folder, its processes are gone",
}
_UNPROBED = Refusal("lock-unknown", "cannot tell whether a live process holds it (it cannot be probed)")


def cost_rank(seconds: float | None, size: int) -> tuple[int, float]:
    """Where `--policy cost` puts an entry of `size` bytes whose recomputation costs `seconds`
    (None: never recorded): (0, 0) for an unknown cost, first; else (1, seconds per GB)."""
    if seconds is None:
        return (0, 0.0)
    return (1, seconds / max(size, 1) * 1e9)


def _unit(key: Path, kind: Kind, members: list[Entry], files: list[CacheFile], folder: bool = False) -> _Unit:
    """A unit of `members` removing `files` (as one folder, or file by file)."""
    size = sum(f.size for f in files)
    newest = max((f.mtime for f in files), default=None)
    used = max((u for e in members if (u := e.used) is not None), default=None)
    targets = (
        (Target(key, True, size, newest),)
        if folder
        else tuple(Target(f.path, False, f.size, f.mtime) for f in files)
    )
    return _Unit(key, kind, members, targets, size, len(files), used, newest, members[0].dataset)


def _unit_key_of(e: Entry) -> Path:
    if e.kind == Kind.SAVED:
        return e.unit or e.path
    if e.kind == Kind.SOURCE and e.dataset_dir is not None:
        return e.dataset_dir
    return e.path


def _outermost(units: Sequence[_Unit]) -> list[_Unit]:
    """Drop units inside a chosen saved folder: removing the folder removes them."""
    folders = [u.key for u in units if u.kind == Kind.SAVED]
    return [u for u in units if not any(f in u.key.parents for f in folders)]


def recorded_parents(ledger: Ledger) -> dict[str, frozenset[str]]:
    """Every parent `ledger` records for each fingerprint, across all runs.

    All records count, internal ones too (a `set_format` inside `load_from_disk` links two
    fingerprints of one state): for protection, a superset of the true ancestry is the safe side."""
    parents: dict[str, set[str]] = {}
    for rec in ledger.own_steps(include_internal=True):
        if rec.result is None:
            continue
        got = parents.setdefault(rec.result, set())
        got.update(p for p in rec.parents if p != rec.result)
    return {k: frozenset(v) for k, v in parents.items()}


def ancestors(fingerprints: Iterable[str], parents: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Every recorded ancestor of `fingerprints` -> the first of `fingerprints` it was reached from.

    The fingerprints themselves are not included (unless one is an ancestor of another)."""
    out: dict[str, str] = {}
    queue: deque[tuple[str, str]] = deque((fp, fp) for fp in fingerprints)
    seen: set[str] = set()
    while queue:
        fp, origin = queue.popleft()
        if fp in seen:
            continue
        seen.add(fp)
        for p in parents.get(fp, ()):
            if p not in out:
                out[p] = origin
            queue.append((p, origin))
    return out


def build_plan(
    report: CacheReport,
    rules: Rules,
    *,
    temp: TempScan | None = None,
    pins: Mapping[str, Any] | None = None,
    parents: Mapping[str, Iterable[str]] | None = None,
    root_refused: str | None = None,
    costs: Mapping[str, float] | None = None,
) -> GcPlan:
    """Decide what a gc run removes, from a scan and the rules on a liveness snapshot (plus lock
    probes). Nothing is removed here: `execute()` runs the same rules again before each item."""
    options = rules.options
    b = Planner(
        **vars(rules),
        report=report,
        pins=set(pins or {}),
        parents=parents or {},
        temp=temp,
        costs=costs or {},
    )
    b.resolve_protections()
    if not rules.in_use.complete and options.all_users:
        # Without --all-users only our own files are touched, which other users' processes
        # (the ones we cannot inspect) rarely hold; with it, say that the check is partial.
        b.warnings.append("some processes could not be inspected; files they hold look unused")
    explicit: list[Entry] = []
    if options.fingerprints:
        from cachetool.cache.lookup import find_entry

        explicit = [find_entry(report, fp, recorded=b.recorded) for fp in options.fingerprints]
    leftover_kinds = layout.LEFTOVER_KINDS | {Kind.LOCK, Kind.DOWNLOAD, Kind.TF_CACHE}
    named_leftovers = {e.path for e in explicit if e.kind in leftover_kinds}
    explicit = [e for e in explicit if e.kind not in leftover_kinds]
    if root_refused is not None:
        # Not a datasets cache: only the temp dir is cleaned (eviction was refused earlier).
        b.warnings.append(f"not cleaning {report.root}: {root_refused}; pass --force-root if you mean it")
        b.temp_folders()
    elif options.temp:
        b.leftovers(named=named_leftovers)
        b.temp_folders()
    elif named_leftovers:
        b.leftovers(only=named_leftovers)
    evicting = (
        bool(explicit or options.datasets) or options.older_than is not None or options.max_size is not None
    )
    why_kept: dict[Path, KeptBecause] = {}
    if evicting:
        for e in explicit:
            if e.kind not in EVICTABLE:
                why = Refusal(
                    "not-evictable", f"a {e.kind.value} entry is not evicted (see cachetool verify)"
                )
                b.skip(e, why)
            elif e.kind == Kind.SAVED and (e.unit or e.path) == b.root:
                why = Refusal("cache-root", "is the cache root itself: gc never removes the folder it cleans")
                b.skip(e, why)
        # Names narrow the run even when none of them can be evicted: `[]` is "nothing in scope".
        why_kept = b.evictions([e for e in explicit if e.kind in EVICTABLE] if options.fingerprints else None)
    n, size, counts = b.kept(why_kept, evicting, named=bool(options.fingerprints) and not options.temp)
    return GcPlan(
        report.root,
        temp.path if temp else None,
        options,
        tuple(b.items),
        tuple(b.skipped),
        n,
        size,
        order_kept(counts, options),
        tuple(b.warnings),
        temp_id=temp.id if temp else None,
    )


_LAYOUT_KINDS = WRITTEN_BY_DATASETS | {
    Kind.INCOMPLETE_PREPARE,
    Kind.INCOMPLETE_SAVE,
    Kind.DOWNLOAD,
    Kind.EXTRACTED,
    Kind.TF_CACHE,
}

#: Why gc will not clean a root without `--force-root`; "not-a-cache": whatever matches a
#: leftover name there is somebody's file.
_ROOT_REFUSALS = {
    "fs-root": "it is the file system root",
    "home": "it is or holds your home folder",
    "not-a-cache": "nothing in it looks like a datasets cache (no dataset folder, cache file or download)",
}


def root_refusal(report: CacheReport) -> str | None:
    """Why gc will not clean this root without `--force-root` (a key of `_ROOT_REFUSALS`): it is
    `/` or holds a home folder, or nothing in it looks like a `datasets` cache."""
    root = os.path.realpath(report.root)
    home = os.path.realpath(os.path.expanduser("~"))
    if root == "/":
        return "fs-root"
    if home != "/" and (root == home or home.startswith(root.rstrip("/") + "/")):
        return "home"
    if report.datasets or any(e.kind in _LAYOUT_KINDS for e in report.entries):
        return None
    if any(layout.VERSION_RE.match(p.name) for p in Path(report.root).glob("*/*/*") if p.is_dir()):
        return None  # builder folders (`<name>/<config>/<version>`) not prepared yet
    return "not-a-cache"


def _pins_elsewhere(root: Path) -> tuple[str, Path] | None:
    """The cache root around `root` (`enclosing_root`) or below it (a folder or two down:
    `datasets/` of an HF home) that holds pins gc would not read when told to evict from `root`,
    with how the two are placed; None when there is none."""
    from cachetool.cache.layout import LEDGER_DIR
    from cachetool.cache.locations import enclosing_root
    from cachetool.cache.pins import read_pins

    up = enclosing_root(root)
    if up != root:
        return ("it is inside the cache root", up) if read_pins(up) else None
    below = sorted(root.glob(f"*/{LEDGER_DIR}")) + sorted(root.glob(f"*/*/{LEDGER_DIR}"))
    return next((("it holds the cache root", p.parent) for p in below if read_pins(p.parent)), None)


def plan_gc(root: str | os.PathLike[str], options: GcOptions) -> GcPlan:
    """Scan `root` (and the temp dir with `--temp`), take a liveness snapshot, read pins and the
    ledger's parents, and build the plan. When `options` select nothing (no `temp`, nothing
    named, no limit) nothing is scanned: the plan is empty and its one warning says so. A root
    that is not an existing folder is a `CachetoolError` (exit 2), as for the command."""
    from cachetool.cache.locations import existing_root

    root = existing_root(root)
    if not options.selects:
        return GcPlan(root, None, options, (), warnings=(NOTHING_SELECTED,))
    if options.quarantine:
        return plan_purge(root, options)
    from cachetool.cache.scan import scan_cache

    root_id = _folder_id(root)
    ledger = None
    if options.evicts:
        # Evicting needs the whole ledger: what was not read may name the recorded ancestors
        # of a pinned entry (or the last use of an entry), which gc would then choose.
        from cachetool.history.ledger import MAX_SEGMENT_BYTES, Ledger, read_partly

        ledger = Ledger.load(Path(root).expanduser().resolve(), follow=False)
        cut = [p for p in ledger.segments if read_partly(p)]
        if cut:
            raise CachetoolError(
                f"the ledger of {root} could not be read whole ({cut[0]} holds more than the "
                f"{human_size(MAX_SEGMENT_BYTES)} read of a segment): gc evicts nothing, since what was "
                "not read may name the ancestors of a pinned entry; gc --temp still removes leftovers"
            )
    from cachetool.maintenance.liveness import scan_in_use

    report = scan_cache(root, usage=ledger.usage() if ledger is not None else None, liveness=scan_in_use)
    if _folder_id(report.root) != root_id:
        raise CachetoolError(
            f"the cache root {report.root} was replaced while it was scanned; nothing removed"
        )
    why = None if options.force_root or not report.entries else root_refusal(report)
    if why is not None and (options.evicts or why != "not-a-cache"):
        raise CachetoolError(
            f"refusing to clean {report.root}: {_ROOT_REFUSALS[why]}; pass --force-root if you mean it"
        )
    if options.evicts and not options.force_root and (held := _pins_elsewhere(Path(report.root))):
        how, other = held
        raise CachetoolError(
            f"refusing to evict from {report.root}: {how} {other}, whose pins (and their recorded "
            f"ancestors) gc reads there: pass --cache-dir {other} (--force-root evicts without them)"
        )
    shared = shared_state(report.root)
    check_min_age(report.root, shared, options.min_age, options.temp, options.other_hosts_idle)
    pins: dict[str, Any] = {}
    parents: dict[str, frozenset[str]] = {}
    costs: dict[str, float] = {}
    if ledger is not None:  # only eviction asks what is pinned and what it descends from
        from cachetool.cache.pins import read_pins
        from cachetool.history.ledger_stats import recompute_costs

        pins = read_pins(report.root)
        parents = recorded_parents(ledger) if pins or options.keep or options.fingerprints else {}
        costs = recompute_costs(ledger.own_steps())
    refused = _ROOT_REFUSALS[why] if why else None
    plan = _build_live(
        report, options, shared.guarding, pins=pins, parents=parents, root_refused=refused, costs=costs
    )
    # What a killed run may have left unfinished: leftovers (a complete result is another run's).
    modified = {e.path: e.modified for e in report.entries if e.kind in layout.LEFTOVER_KINDS}
    hints = []
    for code, kept_as in _KEPT_AS.items():
        kept = {s.path: modified[s.path] for s in plan.skipped if s.code == code and s.path in modified}
        hints.append(dead_writer_hint(report.root, shared, kept, options.min_age, kept_as))
    return dataclasses.replace(plan, root_id=root_id, shared=shared, hints=tuple(h for h in hints if h))


#: The leftovers a dead run may have left that gc keeps, by why, as its hint says so ("": as too young).
_KEPT_AS: dict[KeepCode, str] = {
    "too-young": "",
    "resumable": "as resumable partials (a traced rerun of its pipeline reuses their rows)",
}


def plan_purge(root: Path, options: GcOptions) -> GcPlan:
    """The plan of `--quarantine`: what `verify --quarantine` moved aside into
    `<root>/.cachetool/quarantine/` (as `quarantined(root)` lists it, the log checked, not
    trusted), all of it or, with `older_than`, what was moved aside at least that long ago.
    Execute checks each again (not a symlink, not in use, yours) as for any item."""
    from cachetool.maintenance.verify.quarantine import quarantined

    root = root.resolve()  # as the quarantine's records name their paths
    now = time.time()
    items: list[GcItem] = []
    kept, kept_bytes = 0, 0
    for q in quarantined(root):
        if options.older_than is not None and now - q.time < options.older_than:
            kept, kept_bytes = kept + 1, kept_bytes + q.size
            continue
        try:
            st = os.lstat(q.path)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        items.append(
            GcItem(
                q.path,
                Kind.UNREADABLE,
                q.size,
                q.files,
                f"quarantined {iso_time(q.time)} from {q.original}: {q.problem}",
                (Target(q.path, is_dir, q.size, st.st_mtime),),
                action="purge",
            )
        )
    reasons = ((KeptBecause.QUARANTINED_RECENTLY, kept),) if kept else ()
    return GcPlan(root, None, options, tuple(items), (), kept, kept_bytes, reasons, root_id=_folder_id(root))


def _build_live(
    report: CacheReport, options: GcOptions, leases: tuple[Lease, ...] = (), **keywords: Any
) -> GcPlan:
    """`build_plan` with the temp dir's scan (with `--temp`) and this host's liveness, taken last:
    the snapshot should be younger than everything it judges."""
    from cachetool.cache.locations import temp_dir

    temp = scan_temp_dir(options.tmp_dir or temp_dir().path) if options.temp else None
    rules = Rules.take(options, leases, temp.path if temp and temp.folders else None)
    return build_plan(report, rules, temp=temp, **keywords)


def plan_temp_only(root: Path, options: GcOptions) -> GcPlan:
    """The plan of `--temp` when the default cache root does not exist yet (nothing cached): the
    temp dir alone; nothing is read or made at `root`."""
    plan = _build_live(CacheReport(root, (), ()), options)
    note = f"nothing cached yet ({root} does not exist): only the temp dir is cleaned"
    return dataclasses.replace(plan, warnings=(note, *plan.warnings))


def _folder_id(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
