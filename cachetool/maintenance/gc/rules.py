"""The rules that keep anything, asked the same way by the plan and again by `execute`: not
yours, in use, leased, too young, a live owner in the temp dir. `Rules` holds them with the
liveness snapshot they read; `Planner` adds the lists a plan's steps fill (`leftovers`,
`eviction`)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from cachetool.cache import layout
from cachetool.cache.layout import Kind, TempKind
from cachetool.formatting import compact_age, compact_duration
from cachetool.maintenance.gc.options import GcOptions
from cachetool.maintenance.gc.plan import GcItem, KeepCode, KeptBecause, Refusal, Scope, Skip
from cachetool.maintenance.liveness import InUse, TempDirUser, leased_reason, pids_text, socket_reason
from cachetool.processes import alive, process_start

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile
    from cachetool.cache.scan import CacheReport, Entry
    from cachetool.maintenance.gc.leftovers import TempScan

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
    sockets: frozenset[str] = frozenset()
    temp_users: tuple[TempDirUser, ...] = ()  # may own `hf_datasets-*` folders
    pool_users: tuple[TempDirUser, ...] = ()  # may own `pymp-*` and check folders
    now: float = field(default_factory=time.time)
    euid: int = field(default_factory=os.geteuid)

    @classmethod
    def take(
        cls: type[_R],
        options: GcOptions,
        root: Path | None,
        temp_dir: Path | None,
        kinds: Iterable[str],
        in_use: InUse | None = None,
    ) -> _R:
        """A liveness snapshot of this host (and `root`'s leases; `in_use` when given) for the
        rules; the temp dir's possible owners only for the `kinds` of its folders to judge."""
        from cachetool.maintenance.liveness import bound_sockets, scan_in_use, temp_dir_users

        kinds = set(kinds)
        in_use = in_use if in_use is not None else scan_in_use(root=root, writers=False)
        users = temp_dir_users(temp_dir) if temp_dir is not None and "hf_datasets" in kinds else ()
        pools = (
            temp_dir_users(temp_dir, python=True) if temp_dir is not None and kinds - {"hf_datasets"} else ()
        )
        return cls(options, in_use, frozenset(bound_sockets()), users, pools)

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
            return Refusal("socket", socket_reason(path))
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
        users, who = (self.temp_users, "datasets") if kind == "hf_datasets" else (self.pool_users, "Python")
        owners = possible_owners(made_by, users)
        if owners:
            return Refusal(
                "may-be-owned", f"a live {who} process using this temp dir (pid {owners[0]}) may own it"
            )
        return None


def possible_owners(made_by: float, users: Iterable[TempDirUser]) -> list[int]:
    """Pids of live processes using the temp dir that started before a folder made at `made_by`
    existed: any of them may be its owner, idle between writes."""
    return sorted(u.pid for u in users if u.started <= made_by + _START_SLACK)


@dataclass(kw_only=True)
class Planner(Rules):
    """The rules, the inputs of one plan and its growing output; nothing here touches the file
    system beyond `lstat` and lock probes."""

    report: CacheReport
    pins: set[str] = field(default_factory=set)
    parents: Mapping[str, Iterable[str]] = field(default_factory=dict)
    temp: TempScan | None = None
    listings: dict[Path, list[str]] = field(default_factory=dict)  # for decoding root locks
    items: list[GcItem] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    removing: set[Path] = field(default_factory=set)

    @property
    def root(self) -> Path:
        return self.report.root

    @property
    def o(self) -> GcOptions:
        return self.options

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

    def add(self, item: GcItem) -> None:
        newest = max((t.mtime for t in item.targets if t.mtime is not None), default=None)
        future = future_mtime(self.now - newest) if newest is not None else None
        if future is not None and item.kind != Kind.LOCK:
            item = dataclasses.replace(item, reason=f"{item.reason}; {future}")
        self.items.append(item)
        self.removing.update(t.path for t in item.targets)


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
