"""Carrying out a gc plan item by item under the gc lock, trusting none of it: each target is
checked again (`recheck`), set aside under a name no one can open, checked once more, and
removed through folder descriptors (`cachetool.maintenance.fdops`). One item failing never stops
the others; every removal is recorded in the root's ledger."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.maintenance.fdops import inventory, remove_tree, rename_noreplace, same_file
from cachetool.maintenance.gc.gclock import gc_lock
from cachetool.maintenance.gc.model import LOCK_TIMEOUT, GcItem, GcPlan, GcResult, Outcome
from cachetool.maintenance.gc.recheck import (
    SNAPSHOT_MAX_AGE,
    Refused,
    RunContext,
    check_target,
    take_lock,
)
from cachetool.maintenance.liveness import InUse, pids_holding
from cachetool.maintenance.locks import guard_alive
from cachetool.maintenance.shared import remove_stale_leases
from cachetool.trace.leases import Lease


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
    is recorded in the root's ledger (`cachetool.history.gclog`) after its files are gone."""
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

    snapshot = in_use if in_use is not None else scan_in_use(root=plan.root, writers=False)
    temp_items = plan.temp_dir is not None and any(i.scope == "temp" for i in plan.items)
    users = temp_dir_users(plan.temp_dir) if temp_items and plan.temp_dir is not None else ()
    pools = temp_dir_users(plan.temp_dir, python=True) if temp_items and plan.temp_dir is not None else ()
    ctx = RunContext(
        anchors,
        snapshot,
        bound_socket_paths(),
        time.time(),
        os.geteuid(),
        plan.options,
        users,
        plan.root,
        in_use is None,
    )
    ctx.anchor_errors = anchor_errors
    ctx.pool_users = pools
    gclog = None
    if log and "root" in anchors:  # never a ledger where there is no cache (yet)
        from cachetool.history.gclog import GcLog

        gclog = GcLog(plan.root)
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

    try:
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
    finally:
        if gclog is not None:
            gclog.close()
    return GcResult(plan, tuple(outcomes[i] for i in sorted(outcomes)), time.time(), leases)


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
        if item.kind == Kind.LOCK and guard_alive(item.path, ctx.root) is not False:
            raise Refused("its folder exists again, or cannot be told")
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
                pids = sorted({pid for k in p.keys for pid in holders.get(k, ())})
                if pids:
                    _put_back(p.aside, p.checked)
                    raise Refused(f"became in use by pid {', '.join(map(str, pids[:5]))} (put back)")
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
        from cachetool.maintenance.liveness import live_leases

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
