"""The checks `execute` makes again right before removing each target, whatever the plan said:
not open or mapped by a live process, no lock held, old enough, owned by this user, inside the
root (or the temp dir) and not a symlink, reached through descriptors opened with `O_NOFOLLOW`."""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.tfdata import tf_leftover_name
from cachetool.maintenance.fdops import O_DIR, inventory, open_parent
from cachetool.maintenance.gc.model import GcItem, GcOptions, Target
from cachetool.maintenance.gc.planner import gc_alive, too_young
from cachetool.maintenance.gc.tempdir import check_owner_refusal, owner_refusal
from cachetool.maintenance.liveness import InUse, TempDirUser, socket_reason
from cachetool.maintenance.locks import LockBusy, acquire, guard_alive
from cachetool.maintenance.shared import leased_reason

#: The leases of a liveness snapshot older than this are read again before the next item (a run
#: on another host may have started since; a long eviction must not judge its last items by the
#: leases of its first). `/proc` is not read again: the final check after the set-aside does.
SNAPSHOT_MAX_AGE = 2.0


class Refused(Exception):
    """A re-check failed: keep the item and say why."""


@dataclass
class RunContext:
    anchors: dict[str, tuple[Path, int]]
    in_use: InUse
    sockets: frozenset[str]
    now: float
    euid: int
    options: GcOptions
    temp_users: tuple[TempDirUser, ...] = ()
    root: Path | None = None
    refresh: bool = True  # False when the caller handed in a snapshot: use only that one
    trash_seq: int = 0  # names of what this run set aside: .cachetool-gc-<pid>-<seq>
    anchor_errors: dict[str, str] = field(default_factory=dict)
    pool_users: tuple[TempDirUser, ...] = ()
    taken: float = field(default_factory=time.monotonic)  # when `in_use` was taken


def _relative_parts(anchor: Path, path: Path) -> tuple[str, ...]:
    try:
        rel = path.relative_to(anchor)
    except ValueError:
        raise Refused(f"outside {anchor}") from None
    parts = rel.parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise Refused(f"not strictly inside {anchor}")
    return parts


def open_parent_safely(anchor: tuple[Path, int], path: Path) -> tuple[int, str]:
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
            raise Refused(f"{e.filename} on the way is now a symlink or not a folder") from None
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(e.errno, e.strerror, e.filename) from None
        raise


def take_lock(anchor: tuple[Path, int], lock: Path) -> int | None:
    """Win the filelock at `lock` without blocking and without creating it; held until the item
    is done, so no preparation or download can start on what is being removed."""
    try:
        parent_fd, name = open_parent_safely(anchor, lock)
    except FileNotFoundError:
        return None
    try:
        return acquire(name, dir_fd=parent_fd)
    except LockBusy as busy:
        raise Refused(busy.message()) from None
    finally:
        os.close(parent_fd)


def check_target(
    item: GcItem, t: Target, anchor: tuple[Path, int], ctx: RunContext, parents: dict[Path, int]
) -> tuple[int, str, int | None, os.stat_result] | None:
    """Re-check one target; returns (parent fd, name, folder fd or None, stat) or None if gone.
    Parent folders are opened once and kept in `parents` (closed by the caller)."""
    name = t.path.name
    if t.path.parent in parents:
        parent_fd = parents[t.path.parent]
    else:
        try:
            parent_fd, name = open_parent_safely(anchor, t.path)
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
            raise Refused("is a symlink (never followed)")
        if stat.S_ISDIR(st.st_mode) != t.is_dir:
            raise Refused("changed type since the plan")
        stats = [st]
        if t.is_dir:
            try:
                dir_fd = os.open(name, O_DIR, dir_fd=parent_fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused("is now a symlink") from None
                raise
            stats += inventory(dir_fd)
        judge(item, t, stats, ctx, dir_fd)
        keep_open = True
        return parent_fd, name, dir_fd, st
    finally:
        if not keep_open and dir_fd is not None:
            os.close(dir_fd)


def judge(item: GcItem, t: Target, stats: list[os.stat_result], ctx: RunContext, dir_fd: int | None) -> None:
    o = ctx.options
    if not o.all_users:
        other = next((s.st_uid for s in stats if s.st_uid != ctx.euid), None)
        if other is not None:
            raise Refused(f"owned by uid {other}, not by you (pass --all-users)")
    pids: set[int] = set()
    for s in stats:
        pids |= ctx.in_use.pids(s)
    if pids:
        raise Refused(f"in use by pid {', '.join(map(str, sorted(pids)[:5]))}")
    if t.is_dir:
        prefix = os.fspath(t.path) + "/"
        if any(s.startswith(prefix) for s in ctx.sockets):
            raise Refused(socket_reason(t.path))
    if item.scope == "temp" and t.is_dir:
        cwd = ctx.in_use.cwd_pids_under(t.path)
        if cwd:
            raise Refused(f"in use by pid {', '.join(map(str, sorted(cwd)[:5]))} (its working folder)")
        kind = layout.temp_folder_kind(t.path.name) or "pymp"
        made_by = min(stats[0].st_mtime, stats[0].st_ctime)
        if kind == "determinism":
            why = check_owner_refusal(t.path.name, made_by, ctx.pool_users)
        else:
            why = owner_refusal(kind, made_by, ctx.temp_users, ctx.pool_users)
        if why:
            raise Refused(why.text)
    if item.kind != Kind.LOCK and item.action != "purge":  # a quarantined file's age is its move's
        newest = max(s.st_mtime for s in stats)
        lease = ctx.in_use.lease_over(newest) if item.scope == "root" else None
        if lease is not None:
            raise Refused(leased_reason(lease))
        young = too_young(ctx.now - newest, o.min_age)
        if young is not None:
            raise Refused(str(young))
    top = stats[0]
    if item.action == "evict" and not t.is_dir and (top.st_size != t.size or top.st_mtime != t.mtime):
        raise Refused("changed since the plan")
    name = t.path.name
    if item.kind == Kind.TEMP and item.scope == "root":
        trash = layout.GC_TRASH_RE.match(name)
        if not (layout.TEMP_FILE_RE.match(name) or trash):
            raise Refused("not a temp file name")
        if trash and gc_alive(int(trash.group("pid"))):
            raise Refused(f"the gc that set it aside (pid {trash.group('pid')}) is still running")
    if item.kind == Kind.TF_CACHE and not tf_leftover_name(name):
        raise Refused("not a tf.data lockfile or temp state name")
    if item.kind == Kind.INCOMPLETE_SAVE and dir_fd is not None:
        try:
            os.stat(layout.STATE_JSON, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise Refused("state.json appeared: the save finished")
    if item.kind == Kind.LOCK and guard_alive(t.path, ctx.root) is not False:
        raise Refused("its folder exists again, or cannot be told")
