"""gc on a cache that other runs and other hosts share: the file system, the leases, the floor.

* The plan says which file system the root is on and, on a network or cluster one, that
  processes on other hosts are invisible to `/proc`: only their leases speak for them.
* On such a file system a `--min-age` below `SHARED_MIN_AGE_FLOOR` is refused for the temp files
  no lease covers, unless the user says no unleased writer runs on another host
  (`--other-hosts-idle` / `GcOptions(other_hosts_idle=True)`).
* Leases that are over (expired on another host, or of a process of this host that is gone) are
  removed by `execute()` and each removal is logged in the ledger.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.fstype import FileSystem, file_system
from cachetool.cache.layout import LEDGER_DIR
from cachetool.errors import CachetoolError, ExitCode
from cachetool.formatting import compact_duration, safe_text
from cachetool.maintenance.fdops import O_DIR, open_parent
from cachetool.trace.leases import (
    LEASES_DIR,
    Lease,
    LeaseState,
    judge_leases,
    leases_dir,
    read_lease,
    this_host,
)

if TYPE_CHECKING:
    from cachetool.history.writer import GcLog

#: The smallest `--min-age` gc accepts for unleased temp files on a shared file system: a writer
#: on another host that holds no lease shows only through its file's age.
SHARED_MIN_AGE_FLOOR = 600.0


class SharedMinAgeRefused(CachetoolError):
    """`--min-age` below the floor on a shared file system, without the override."""

    exit_code = ExitCode.USAGE

    def __init__(self, root: Path, fs: FileSystem, min_age: float) -> None:
        super().__init__(
            f"{root} is on {fs.type} (a file system other hosts may write): --min-age {min_age:g}s is "
            f"below the {SHARED_MIN_AGE_FLOOR / 60:g} min floor for temp files no lease covers, "
            "since writers on other hosts are invisible here; pass --other-hosts-idle if no process on "
            "another host writes this cache without a cachetool lease"
        )


@dataclass(frozen=True)
class SharedState:
    """What gc knows about other writers of one root: its file system and its leases."""

    filesystem: FileSystem | None
    leases: tuple[tuple[Lease, LeaseState], ...] = ()
    #: For a stale lease (by its file name): the other known roots where the same run holds one
    #: (a `save_to_disk` folder a map after `load_from_disk` wrote in): its leftovers may be there.
    elsewhere: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def live(self) -> tuple[Lease, ...]:
        return tuple(lease for lease, state in self.leases if state == "live")

    @property
    def stale(self) -> tuple[tuple[Lease, LeaseState], ...]:
        return tuple((lease, state) for lease, state in self.leases if state != "live")

    root: str = ""  # for the command that breaks a lease

    def notes(self, now: float | None = None, *, dry_run: bool = False) -> list[str]:
        """Lines for the plan: the file system when shared, the live and stale leases (which a
        dry run leaves in place)."""
        now = time.time() if now is None else now
        out = []
        fs = self.filesystem
        if fs is not None and fs.shared:
            out.append(
                f"the cache is on {fs.type} ({fs.source or '?'} at {fs.mount_point or '?'}), shared with "
                "other hosts: their processes are invisible here, only their leases protect their files"
            )
        for lease in self.live:
            out.append(
                f"live lease: {lease} (renewed {max(0.0, now - lease.renewed):.0f}s ago, "
                f"{_expiry(lease, now)}): {safe_text(os.fsdecode(lease.path))}"
            )
            out.append(f"  if its process is gone: `{break_command(self.root, lease)}`")
        # A plan, shown before it runs (or when it is refused): what happened is the result's.
        for lease, state in self.stale:
            out.append(f"{_stale_reason(lease, state, now)}: its lease would be removed")
            for other in self.elsewhere.get(lease.path.name, ()):
                from cachetool.hints import shell_command

                command = shell_command("gc", "--temp", "--cache-dir", other)
                out.append(f"  it also wrote in {other}, a cache root of its own: `{command}`")
        return out

    def to_json(self) -> dict[str, Any]:
        leases = []
        for lease, state in self.leases:
            doc = dict(lease.to_json(), state=state)
            if state != "live":
                doc["also_in"] = list(self.elsewhere.get(lease.path.name, ()))
            leases.append(doc)
        return {"filesystem": self.filesystem.to_json() if self.filesystem else None, "leases": leases}


def dead_writer_hint(
    root: Path, state: SharedState, young: Mapping[Path, float | None], min_age: float
) -> str | None:
    """The command that removes now the leftovers kept only as younger than `min_age` (paths to
    their last modification) that a traced run of this host may have left: its process is gone
    (its lease is dead) and it was running when they were last written, and no process holds
    them (else they would not be kept for their age). None on a shared file system, where a
    writer on another host may hold what `/proc` does not show."""
    fs = state.filesystem
    if fs is not None and fs.shared:
        return None
    dead = [lease for lease, s in state.stale if s == "dead"]
    by_lease: dict[Lease, list[Path]] = {}
    for path, mtime in sorted(young.items()):
        lease = next((x for x in dead if mtime is not None and x.start - 1.0 <= mtime <= x.expires), None)
        if lease is not None:
            by_lease.setdefault(lease, []).append(path)
    if not by_lease:
        return None
    leases = ", ".join(str(lease) for lease in by_lease)
    paths = [p for ps in by_lease.values() for p in ps]
    n = f"{len(paths)} file{'s' if len(paths) != 1 else ''}"
    them = "them" if len(paths) != 1 else "it"
    from cachetool.hints import gc_command

    command = gc_command(root, *(os.fsdecode(p) for p in paths))
    return (
        f"{leases}, a traced run that wrote here, is gone, and no process holds the {n} kept as younger "
        f"than --min-age {compact_duration(min_age)} that it may have left unfinished: `{command}` "
        f"removes {them} now (checked again right before)"
    )


def _expiry(lease: Lease, now: float) -> str:
    """`expires in 45s (2026-11-28 05:30:00 UTC)`, or what says when this host checks it."""
    if lease.is_local(this_host()):
        return "lives while its process on this host does"
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lease.expires))
    return f"expires in {max(0.0, lease.expires - now):.0f}s ({at})"


def break_command(root: str | os.PathLike[str], lease: Lease) -> str:
    """`cachetool gc --break-lease ID --cache-dir ROOT` (ID: the lease file's name without `.json`)."""
    from cachetool.hints import shell_command

    lease_id = lease.path.name.removesuffix(".json")
    return shell_command("gc", "--break-lease", lease_id, "--cache-dir", os.fsdecode(root))


class NoSuchLease(CachetoolError):
    """`gc --break-lease ID` names no lease of the root."""

    exit_code = ExitCode.USAGE

    def __init__(self, root: Path, name: str) -> None:
        super().__init__(f"no lease {safe_text(name)} in {safe_text(os.fsdecode(root))} (gc lists them)")


def break_lease(root: str | os.PathLike[str], name: str) -> Lease:
    """Remove the lease `name` (its file name, with or without `.json`) of `root`, live or not:
    for a lease whose process the user knows is gone (a host that died, a forged lease). Logged
    in the ledger as gc's removals are. NoSuchLease when the root has no such lease."""
    from cachetool.history.writer import GcLog

    root_path = Path(os.path.abspath(os.fspath(root)))
    file = name if name.endswith(".json") else f"{name}.json"
    lease = read_lease(leases_dir(root_path) / file) if "/" not in file and file != ".json" else None
    if lease is None:
        raise NoSuchLease(root_path, name)
    root_fd = os.open(root_path, O_DIR)
    try:
        size, _ = _unlink_lease(root_fd, file)
    except (FileNotFoundError, LookupError):
        raise NoSuchLease(root_path, name) from None
    finally:
        os.close(root_fd)
    log = GcLog(root_path)
    try:
        _log_removal(log, lease, size, f"{lease}: broken by the user (gc --break-lease)")
    finally:
        log.close()
    return lease


def _unlink_lease(
    root_fd: int, file: str, why: Callable[[Lease], str | None] = lambda _: ""
) -> tuple[int, str]:
    """Remove the lease file `file`, reached from the root's descriptor without following a
    symlink, when `why(the lease as read now)` gives a reason; its size and that reason (else
    `LookupError`)."""
    fd = open_parent(root_fd, (LEDGER_DIR, LEASES_DIR, file))
    try:
        again = read_lease(Path(f"/proc/self/fd/{fd}") / file)
        reason = why(again) if again is not None else None
        if reason is None:
            raise LookupError(file)
        size = os.stat(file, dir_fd=fd, follow_symlinks=False).st_size
        os.unlink(file, dir_fd=fd)
        return size, reason
    finally:
        os.close(fd)


def _log_removal(log: GcLog, lease: Lease, size: int, reason: str) -> None:
    log.removed(kind="lease", paths=[lease.path], size=size, files=1, reason=reason, when=time.time())


def leased_reason(lease: Lease) -> str:
    """Why gc keeps what a live lease's process may be writing (starts "in use", as every
    reason of a live writer does)."""
    return f"in use by a run holding a lease ({lease}): it may be writing this"


def _stale_reason(lease: Lease, state: LeaseState, now: float) -> str:
    if state == "dead":
        return f"{lease}: this host, its process is gone"
    return f"{lease}: expired {max(0.0, now - lease.expires):.0f}s ago (not renewed)"


def shared_state(root: str | os.PathLike[str]) -> SharedState:
    """The file system of `root` and every lease in it, judged now; for each stale one, the other
    known roots where its run holds a lease too."""
    try:
        fs: FileSystem | None = file_system(root)
    except OSError:
        fs = None
    leases = tuple(judge_leases(root))
    stale = [lease for lease, state in leases if state != "live"]
    return SharedState(fs, leases, _elsewhere(Path(root), stale), os.fsdecode(root))


def _elsewhere(root: Path, stale: list[Lease]) -> dict[str, tuple[str, ...]]:
    """Lease file name -> the other roots of the registry (`cachetool.cache.roots`) holding a
    lease of that name: one run (host, pid, start) leases every root it writes in."""
    if not stale:
        return {}
    from cachetool.cache.roots import other_roots

    others = [path for path, _ in other_roots(root)]
    found = {}
    for lease in stale:
        name = lease.path.name
        there = tuple(r for r in others if os.path.isfile(leases_dir(r) / name))
        if there:
            found[name] = there
    return found


def check_min_age(root: Path, state: SharedState, min_age: float, temp: bool, other_hosts_idle: bool) -> None:
    """Refuse a `--temp` run with `--min-age` under the floor on a shared file system."""
    fs = state.filesystem
    if temp and fs is not None and fs.shared and min_age < SHARED_MIN_AGE_FLOOR and not other_hosts_idle:
        raise SharedMinAgeRefused(root, fs, min_age)


def remove_stale_leases(root_fd: int, state: SharedState, log: GcLog | None) -> list[Lease]:
    """Remove the leases that were stale at plan time and still are (a lease renewed since, or
    whose process turns out alive, stays). Every removal is logged."""
    from cachetool.trace.leases import lease_state

    def still_stale(lease: Lease) -> str | None:
        now = lease_state(lease)
        return None if now == "live" else _stale_reason(lease, now, time.time())

    removed: list[Lease] = []
    for lease, _ in state.stale:
        try:
            size, reason = _unlink_lease(root_fd, lease.path.name, still_stale)
        except (OSError, LookupError):
            continue
        removed.append(lease)
        if log is not None:
            with contextlib.suppress(Exception):
                _log_removal(log, lease, size, reason)
    return removed
