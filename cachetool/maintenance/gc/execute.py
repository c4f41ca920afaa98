"""Carrying out a gc plan under the gc lock, trusting none of it: each target is checked again, set
aside under a name no one can open, checked once more against `/proc`, and removed through folder
descriptors. One item failing never stops the others; every removal is logged in the ledger."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.lease import Lease
from cachetool.maintenance.fdops import (
    O_DIR,
    inventory,
    open_parent,
    parts_under,
    remove_tree,
    rename_noreplace,
    same_file,
)
from cachetool.maintenance.gc.plan import (
    LOCK_TIMEOUT,
    GcBusy,
    GcItem,
    GcPlan,
    GcResult,
    Outcome,
    Refusal,
    Rules,
    Target,
    gc_alive,
)
from cachetool.maintenance.liveness import (
    InUse,
    LockBusy,
    acquire,
    live_leases,
    lock_guard,
    pids_holding,
    pids_text,
    remove_stale_leases,
    socket_reason,
)

GC_LOCK_NAME = "gc.lock"
#: The leases of a liveness snapshot older than this are read again before the next item (a run
#: on another host may have started since; a long eviction must not judge its last items by the
#: leases of its first). `/proc` is not read again: the final check after the set-aside does.
SNAPSHOT_MAX_AGE = 2.0


class Refused(Exception):
    """A re-check failed: keep the item and say why."""


@dataclass(kw_only=True)
class RunContext(Rules):
    """The rules on the snapshot taken under the gc lock, and what the run holds open."""

    anchors: dict[str, tuple[Path, int]] = field(default_factory=dict)
    root: Path | None = None
    refresh: bool = True  # False when the caller handed in a snapshot: use only that one
    trash_seq: int = 0  # names of what this run set aside: .cachetool-gc-<pid>-<seq>
    anchor_errors: dict[str, str] = field(default_factory=dict)
    taken: float = field(default_factory=time.monotonic)  # when `in_use` was taken


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
    is recorded in the root's ledger (`cachetool.history.writer.GcLog`) after its files are gone."""
    with contextlib.ExitStack() as stack:
        anchors: dict[str, tuple[Path, int]] = {}
        anchor_errors: dict[str, str] = {}
        anchored = (("root", plan.root, plan.root_id), ("temp", plan.temp_dir, plan.temp_id))
        for scope, anchor, expected in anchored:
            if anchor is None:
                continue
            try:
                # The one time a path is resolved: from here on everything is relative to this
                # descriptor, and it must be the very folder the plan was made for.
                fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue  # its items fail their re-check below
            stack.callback(os.close, fd)
            st = os.fstat(fd)
            if expected is not None and (st.st_dev, st.st_ino) != expected:
                anchor_errors[scope] = (
                    f"{anchor} is no longer the folder the plan was made for (a folder on the way "
                    "was replaced); nothing in it is touched"
                )
                continue
            anchors[scope] = (anchor, fd)
        gclog = None
        if "root" in anchors:  # without the root every item of it is refused: nothing needs the lock
            stack.enter_context(gc_lock(plan.root, lock_timeout, anchors["root"][1]))
            if log:  # never a ledger where there is no cache (yet)
                from cachetool.history.writer import GcLog

                gclog = stack.enter_context(contextlib.closing(GcLog(plan.root)))
        temp = plan.temp_dir if any(i.scope == "temp" for i in plan.items) else None
        rules = Rules.take(plan.options, live_leases(plan.root), temp, in_use=in_use)
        ctx = RunContext(**vars(rules), anchors=anchors, anchor_errors=anchor_errors, root=plan.root)
        ctx.refresh = in_use is None
        outcomes: dict[int, Outcome] = {}

        def done(index: int, outcome: Outcome) -> None:
            outcomes[index] = outcome
            item = outcome.item
            if gclog is not None and (outcome.status == "removed" or outcome.files > 0):
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

        batch = _Batch()
        try:
            for index, item in enumerate(plan.items):
                # A lock is judged by whether its folder exists: never while that folder is set
                # aside in the batch (it may come back).
                if batch.open_fds() >= BATCH_FDS or (item.kind == Kind.LOCK and batch.holds_non_locks):
                    _finish(batch, done)
                    batch = _Batch()
                outcome = _set_item_aside(index, item, ctx, batch)
                if outcome is not None:
                    done(index, outcome)
            _finish(batch, done)
        finally:
            batch.close()
        leases: tuple[Lease, ...] = ()
        if plan.shared is not None and "root" in anchors:
            leases = tuple(remove_stale_leases(anchors["root"][1], plan.shared, gclog))
    return GcResult(plan, tuple(outcomes[i] for i in sorted(outcomes)), leases)


#: Descriptors a batch may hold open (folders on the way, locks, the folders set aside) before its
#: final check runs: far below the usual limit of 1024.
BATCH_FDS = 256


_Checked = tuple[int, str, "int | None", os.stat_result]


@dataclass
class _Pending:
    """An item taken out of reach, waiting for its batch's final check."""

    index: int
    item: GcItem
    checked: list[_Checked]
    aside: list[_Checked]
    keys: set[tuple[int, int]]
    fds: list[int]
    freed: list[int]  # bytes, files


@dataclass
class _Batch:
    """Items set aside one after the other, then checked against `/proc` in one pass: the pass
    costs as much as the host has processes, so it is made once per batch, not once per item.
    Folders on the way are opened once per batch (a unit of thousands of shards in one folder
    must not run into the open-file limit)."""

    pending: list[_Pending] = field(default_factory=list)
    parents: dict[Path, int] = field(default_factory=dict)
    holds_non_locks: bool = False
    item_fds: int = 0  # held by the pending items

    def open_fds(self) -> int:
        return len(self.parents) + self.item_fds

    def close(self) -> None:
        """Close every descriptor; what is still set aside (the run was interrupted before the
        final check) gets its name back first."""
        for p in self.pending:
            _put_back(p.aside, p.checked)
            _close(p.fds)
        _close(list(self.parents.values()))
        self.pending.clear()
        self.parents.clear()


def _close(fds: list[int]) -> None:
    for fd in reversed(fds):
        with contextlib.suppress(OSError):
            os.close(fd)


def _set_item_aside(index: int, item: GcItem, ctx: RunContext, batch: _Batch) -> Outcome | None:
    """Check one item again and take it out of reach, into the batch; its outcome when it stops
    here (kept, gone, failed), None when it waits for the batch's final check."""
    freed = [0, 0]
    fds: list[int] = []
    try:
        anchor = ctx.anchors.get(item.scope)
        if anchor is None:
            raise Refused(
                ctx.anchor_errors.get(item.scope)
                or f"cannot open the {'cache root' if item.scope == 'root' else 'temp dir'}"
            )
        if item.lock is not None:
            lock_fd = take_lock(anchor, item.lock)
            if lock_fd is not None:
                fds.append(lock_fd)
        _refresh_leases(ctx)
        checked = []
        for t in item.targets:
            got = check_target(item, t, anchor, ctx, batch.parents)
            if got is not None:
                checked.append(got)
                if got[2] is not None:
                    fds.append(got[2])
        if not checked:
            _close(fds)
            return Outcome(item, "skipped", "already gone")
        aside, keys = _set_aside(checked, ctx)
        batch.pending.append(_Pending(index, item, checked, aside, keys, fds, freed))
        batch.holds_non_locks |= item.kind != Kind.LOCK
        batch.item_fds += len(fds)
        return None
    except BaseException as e:
        _close(fds)
        if isinstance(e, Exception):
            return _failure(item, e, freed)
        raise


def _finish(batch: _Batch, done: Callable[[int, Outcome], None]) -> None:
    """The final check of a batch, one pass over `/proc` for all its items: an item that a live
    process holds open, maps or works in is put back; the others are removed."""
    if batch.pending:
        holders = pids_holding(set().union(*(p.keys for p in batch.pending)))
        batch.pending.reverse()  # popped from the end, in plan order
        while batch.pending:
            p = batch.pending.pop()
            try:
                pids = {pid for k in p.keys for pid in holders.get(k, ())}
                if pids:
                    _put_back(p.aside, p.checked)
                    raise Refused(f"became in use by pid {pids_text(pids, 5)} (put back)")
                _remove(p.aside, p.freed)
                outcome = Outcome(p.item, "removed", None, *p.freed)
            except Exception as e:  # one broken item must not stop the others
                outcome = _failure(p.item, e, p.freed)
            finally:
                _close(p.fds)
            done(p.index, outcome)
    batch.close()


def _failure(item: GcItem, e: Exception, freed: list[int]) -> Outcome:
    """The outcome of an item stopped by `e`: kept on a failed re-check, failed on an error."""
    if isinstance(e, Refused):
        return Outcome(item, "skipped", str(e), *freed)
    if isinstance(e, OSError):
        detail = f", at {e.filename}" if e.filename and os.fspath(e.filename) != os.fspath(item.path) else ""
        return Outcome(item, "failed", f"{e.strerror or e} ({item.path}{detail})", *freed)
    return Outcome(item, "failed", f"{type(e).__name__}: {e}", *freed)


def _refresh_leases(ctx: RunContext) -> None:
    """Once the snapshot is older than `SNAPSHOT_MAX_AGE`, read the root's leases again: a run on
    another host may have started since. (What this host's processes hold is checked once more,
    in `/proc`, after each item is set aside.)"""
    if ctx.refresh and ctx.root is not None and time.monotonic() - ctx.taken > SNAPSHOT_MAX_AGE:
        ctx.in_use = dataclasses.replace(ctx.in_use, leases=live_leases(ctx.root))
        ctx.taken = time.monotonic()


def _remove(aside: list[_Checked], freed: list[int]) -> None:
    """Remove what `_set_aside` took out of reach, counting what is freed ([bytes, files])."""
    for parent_fd, name, dir_fd, st in aside:
        if dir_fd is not None:
            remove_tree(dir_fd, freed)
            # rmdir goes by name: make sure the name still leads to the folder just emptied.
            now = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if not same_file(now, os.fstat(dir_fd)):
                raise Refused("replaced by a new folder while it was being removed")
            os.rmdir(name, dir_fd=parent_fd)
        else:
            os.unlink(name, dir_fd=parent_fd)
            if stat.S_ISREG(st.st_mode):
                freed[0] += st.st_size
                freed[1] += 1


def _set_aside(checked: list[_Checked], ctx: RunContext) -> tuple[list[_Checked], set[tuple[int, int]]]:
    """Take every target of an item out of reach; returns the targets under their new names and
    the (device, inode) of everything in them, for the final check (`_finish`).

    Between the last liveness check and an unlink, a reader could open and map the file. After
    the rename to `.cachetool-gc-<pid>-<n>` in the same folder, no one can open it by its name
    any more, so a check made after the rename is final: a process that opened the file before
    holds a descriptor or a mapping that this check sees (and one that works in a folder set
    aside has it as its working folder)."""
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
                raise Refused("replaced while it was being removed")
            keys.add((st.st_dev, st.st_ino))
            if dir_fd is not None:
                keys |= {(s.st_dev, s.st_ino) for s in inventory(dir_fd)}
    except BaseException:
        _put_back(aside, checked)
        raise
    return aside, keys


def _put_back(aside: list[_Checked], checked: list[_Checked]) -> None:
    """Undo `_set_aside`: every target gets its name back, unless something new took the name
    meanwhile; then it stays set aside, and the next gc removes it once no one holds it."""
    for (parent_fd, new, _, _), (_, old, _, _) in zip(aside, checked, strict=False):
        with contextlib.suppress(OSError):
            rename_noreplace(parent_fd, new, parent_fd, old)


def open_parent_safely(anchor: tuple[Path, int], path: Path) -> tuple[int, str]:
    """Open the folder holding `path` one component at a time from the anchor, never following a
    symlink: a component swapped for a symlink makes the open fail (ELOOP/ENOTDIR)."""
    root, root_fd = anchor
    try:
        parts = parts_under(root, path)
    except ValueError:
        raise Refused(f"outside {root}") from None
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
        raise Refused(str(busy)) from None
    finally:
        os.close(parent_fd)


def check_target(
    item: GcItem, t: Target, anchor: tuple[Path, int], ctx: RunContext, parents: dict[Path, int]
) -> _Checked | None:
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
    """Raise `Refused` unless the target may go now: the plan's rules on the fresh snapshot, then
    what only this moment tells (changed since the plan, its name, a save that finished)."""
    top = stats[0]
    pids = {pid for s in stats for pid in ctx.in_use.pids(s)}
    aged = item.kind != Kind.LOCK and item.action != "purge"  # a quarantined file's age is its move's
    newest = max(s.st_mtime for s in stats)
    why = ctx.refusal([s.st_uid for s in stats], newest, pids, aged, item.scope)
    if why is None and t.is_dir and item.scope == "temp":
        cwd = ctx.in_use.cwd_pids_under(t.path)
        kind = layout.temp_folder_kind(t.path.name) or "pymp"
        why = (
            Refusal("in-use", f"in use by pid {pids_text(cwd, 5)} (its working folder)")
            if cwd
            else ctx.temp_refusal(t.path, kind, min(top.st_mtime, top.st_ctime))
        )
    elif why is None and t.is_dir and any(s.startswith(os.fspath(t.path) + "/") for s in ctx.sockets):
        why = Refusal("socket", socket_reason(t.path, ctx.sockets, ctx.in_use))
    if why is not None:
        raise Refused(why.text)
    if item.action == "evict" and not t.is_dir and (top.st_size != t.size or top.st_mtime != t.mtime):
        raise Refused("changed since the plan")
    name = t.path.name
    if item.kind == Kind.TEMP and item.scope == "root":
        trash = layout.GC_TRASH_RE.match(name)
        if not (layout.TEMP_FILE_RE.match(name) or trash):
            raise Refused("not a temp file name")
        if trash and gc_alive(int(trash.group("pid"))):
            raise Refused(f"the gc that set it aside (pid {trash.group('pid')}) is still running")
    if item.kind == Kind.TF_CACHE:
        from cachetool.cache.tfdata import tf_leftover_name

        if not tf_leftover_name(name):
            raise Refused("not a tf.data lockfile or temp state name")
    if item.kind == Kind.INCOMPLETE_SAVE and dir_fd is not None:
        try:
            os.stat(layout.STATE_JSON, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise Refused("state.json appeared: the save finished")
    if item.kind == Kind.LOCK and ((guard := lock_guard(t.path, ctx.root)) is None or guard.alive()):
        raise Refused("its folder exists again, or cannot be told")


@contextlib.contextmanager
def gc_lock(root: Path, timeout: float = LOCK_TIMEOUT, root_fd: int | None = None) -> Iterator[Path]:
    """Hold the exclusive gc lock of `root` (`<root>/.cachetool/gc.lock`, or a per-user lock when
    the root cannot be written), so two gc runs never work on one cache at once. It is an `flock`,
    the lock `filelock` takes, so older runs and this one exclude each other; with `root_fd` the
    lock file is reached from that descriptor (no path is resolved again)."""
    from cachetool.cache.store import flock_within, open_state

    path = root / layout.LEDGER_DIR / GC_LOCK_NAME
    base = Path(f"/proc/self/fd/{root_fd}") if root_fd is not None else root
    try:
        fd = open_state(base / layout.LEDGER_DIR / GC_LOCK_NAME, os.O_RDWR | os.O_CREAT, create_folders=True)
    except OSError:  # a read-only root: a lock of this user's, outside the root
        from cachetool.cache.roots import root_key, user_state_dir

        path = user_state_dir() / "gc-locks" / f"{root_key(root)}.lock"
        fd = open_state(path, os.O_RDWR | os.O_CREAT, create_folders=True)
    try:
        if not flock_within(fd, timeout):
            raise GcBusy(root, path, timeout)
        yield path
    finally:
        os.close(fd)  # releases the flock
