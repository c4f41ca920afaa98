"""What every planning step shares: the inputs of one plan, the refusals that keep anything (not
yours, in use, leased, too young), and the lists the steps fill. `leftovers` and `eviction` add
their steps to it; `plan.build_plan` runs them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, CacheReport, Entry
from cachetool.formatting import compact_age, compact_duration
from cachetool.maintenance.gc.model import GcItem, GcOptions, KeepCode, KeptBecause, Refusal, Scope, Skip
from cachetool.maintenance.gc.tempdir import TempScan
from cachetool.maintenance.liveness import InUse, TempDirUser
from cachetool.maintenance.shared import leased_reason
from cachetool.processes import alive

#: How the keeps sentence counts an entry that a refusal (`Planner.refusal`) keeps.
KEPT_BECAUSE: dict[KeepCode, KeptBecause] = {
    "other-user": KeptBecause.OTHER_USERS,
    "in-use": KeptBecause.IN_USE,
    "leased": KeptBecause.IN_USE,  # a live run may be writing it
    "too-young": KeptBecause.TOO_YOUNG,
}


def too_young(age: float, min_age: float) -> Refusal | None:
    """Why something modified `age` seconds ago stays under `--min-age`; None when it may go. A
    modification time in the future (another host's clock, or skew) tells no age: it stays
    under any `--min-age` but 0."""
    if min_age <= 0 or age >= min_age:
        return None
    when = future_mtime(age) or f"modified {compact_age(max(0.0, age))} ago"
    return Refusal("too-young", f"{when}, younger than --min-age {compact_duration(min_age)}")


def future_mtime(age: float) -> str | None:
    """What to say of an age below zero (a modification time ahead of this host's clock, by more
    than a second); None for any other."""
    if age > -1.0:
        return None
    return f"modified {compact_age(-age)} in the future (another host's clock?)"


def pids_text(pids: Iterable[int]) -> str:
    held = sorted(set(pids))
    return ", ".join(map(str, held[:5])) + (" …" if len(held) > 5 else "")


class Planner:
    """The inputs and the growing output of one plan; nothing here touches the file system
    beyond `lstat` and lock probes."""

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
        self.parents = parents
        self.pins = set(pins)
        self.listings: dict[Path, list[str]] = {}  # folder listings for decoding root locks, per plan
        self.items: list[GcItem] = []
        self.skipped: list[Skip] = []
        self.warnings: list[str] = []
        self.removing: set[Path] = set()

    def note_partial_liveness(self) -> None:
        if not self.in_use.complete and self.o.all_users:
            # Without --all-users only our own files are touched, which other users' processes
            # (the ones we cannot inspect) rarely hold; with it, say that the check is partial.
            self.warnings.append("some processes could not be inspected; files they hold look unused")

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
        if not self.o.all_users:
            others = sorted({u for u in uids if u != self.euid})
            if others:
                return Refusal("other-user", f"owned by uid {others[0]}, not by you (pass --all-users)")
        held = set(pids)
        if held:
            return Refusal("in-use", f"in use by pid {pids_text(held)}")
        lease = self.in_use.lease_over(newest) if age_applies and scope == "root" else None
        if lease is not None:
            return Refusal("leased", leased_reason(lease))
        if age_applies and newest is not None:
            return too_young(self.now - newest, self.o.min_age)
        return None

    def file_pids(self, files: Iterable[CacheFile]) -> set[int]:
        out: set[int] = set()
        for f in files:
            out |= self.in_use.pids_for_path(os.fspath(f.path))
        return out

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
        for t in item.targets:
            self.removing.add(t.path)


def newest_mtime(e: Entry) -> float | None:
    """The newest modification time of an entry's files and of the entry itself."""
    got = max((f.mtime for f in e.files), default=None)
    try:
        own = os.lstat(e.path).st_mtime
    except OSError:
        return got
    return own if got is None else max(got, own)


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
