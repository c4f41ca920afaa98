"""A gc run as plain data: the plan (items to remove, what it keeps and why), the outcome of each
item, and the keep rules the plan and `execute` both ask (`Rules`: not yours, in use, leased, too
young, a live owner in the temp dir). Decisions are typed; every message is rendered from them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from cachetool.cache import layout
from cachetool.cache.layout import Kind, TempKind
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import compact_age, compact_duration, human_size, iso_time
from cachetool.maintenance.liveness import InUse, Lease, TempDirUser, leased_reason, pids_text, socket_reason
from cachetool.processes import alive, process_start
from cachetool.safejson import json_fields

if TYPE_CHECKING:
    from cachetool.maintenance.gc import GcOptions
    from cachetool.maintenance.liveness import SharedState

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
    created_at: float = field(default=0.0, compare=False)
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
    finished_at: float = field(default=0.0, compare=False)
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
        return {
            "removed": [o.to_json() for o in self.removed],
            "skipped": [o.to_json() for o in self.skipped],
            "failed": [o.to_json() for o in self.failed],
            "freed_bytes": self.freed_bytes,
            "freed_files": self.freed_files,
            "leases_removed": [lease.to_json() for lease in self.leases_removed],
        }


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


_R = TypeVar("_R", bound="Rules")


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
        cls: type[_R],
        options: GcOptions,
        root: Path | None,
        temp_dir: Path | None,
        in_use: InUse | None = None,
    ) -> _R:
        """A liveness snapshot of this host (and `root`'s leases; `in_use` when given) for the
        rules, with the possible owners of folders in `temp_dir` (None: no such folder to judge)."""
        from cachetool.maintenance.liveness import bound_sockets, scan_in_use, temp_dir_users

        in_use = in_use if in_use is not None else scan_in_use(root=root, writers=False)
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
            return Refusal("leased", leased_reason(lease))
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
