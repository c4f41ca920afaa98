"""Carrying out a gc plan item by item under the gc lock, trusting none of it: each target is
checked again (`recheck`), set aside under a name no one can open, checked once more, and
removed through folder descriptors (`cachetool.maintenance.fdops`). One item failing never stops
the others; every removal is recorded in the root's ledger."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
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
from cachetool.maintenance.leases import Lease
from cachetool.maintenance.liveness import InUse, pids_holding
from cachetool.maintenance.locks import guard_alive
from cachetool.maintenance.shared import remove_stale_leases


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
    ctx = RunContext(
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
    if log and "root" in anchors:  # never a ledger where there is no cache (yet)
        from cachetool.lineage.gclog import GcLog

        gclog = GcLog(plan.root)
    outcomes: list[Outcome] = []
    try:
        for item in plan.items:
            outcome = _run_item(item, ctx)
            outcomes.append(outcome)
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
        leases: tuple[Lease, ...] = ()
        if plan.shared is not None and "root" in anchors:
            leases = tuple(remove_stale_leases(anchors["root"][1], plan.shared, gclog))
    finally:
        if gclog is not None:
            gclog.close()
    return GcResult(plan, tuple(outcomes), time.time(), leases)


def _run_item(item: GcItem, ctx: RunContext) -> Outcome:
    freed = [0, 0]  # bytes, files: counted as they go, also when the item fails half-way
    fds: list[int] = []
    # One descriptor per distinct folder: a unit of thousands of shards in one folder must not
    # run into the open-file limit.
    parents: dict[Path, int] = {}
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
        _refresh_snapshot(item, ctx)
        checked = []
        for t in item.targets:
            got = check_target(item, t, anchor, ctx, parents)
            if got is not None:
                checked.append(got)
                if got[2] is not None:
                    fds.append(got[2])
        if not checked:
            return Outcome(item, "skipped", "already gone")
        if item.kind == Kind.LOCK and guard_alive(item.path, ctx.root) is not False:
            raise Refused("its folder exists again, or cannot be told")
        _remove(_set_aside(checked, ctx), freed)
        return Outcome(item, "removed", None, *freed)
    except Refused as r:
        return Outcome(item, "skipped", str(r), *freed)
    except OSError as e:
        detail = f", at {e.filename}" if e.filename and os.fspath(e.filename) != os.fspath(item.path) else ""
        return Outcome(item, "failed", f"{e.strerror or e} ({item.path}{detail})", *freed)
    except Exception as e:  # one broken item must not stop the others
        return Outcome(item, "failed", f"{type(e).__name__}: {e}", *freed)
    finally:
        for fd in [*reversed(fds), *parents.values()]:
            with contextlib.suppress(OSError):
                os.close(fd)


def _refresh_snapshot(item: GcItem, ctx: RunContext) -> None:
    """A folder may be written in bursts (save_to_disk between two shards holds nothing open):
    judge it by a snapshot taken right now, not at the start of the run; so is any item once the
    snapshot is older than `SNAPSHOT_MAX_AGE`. The new snapshot serves the items after it too."""
    stale = time.monotonic() - ctx.taken > SNAPSHOT_MAX_AGE
    if ctx.refresh and item is not ctx.first_item and (stale or any(t.is_dir for t in item.targets)):
        from cachetool.maintenance.liveness import scan_in_use

        ctx.in_use = scan_in_use(root=ctx.root)
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


_Checked = tuple[int, str, "int | None", os.stat_result]


def _set_aside(checked: list[_Checked], ctx: RunContext) -> list[_Checked]:
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
                raise Refused("replaced while it was being removed")
            keys.add((st.st_dev, st.st_ino))
            if dir_fd is not None:
                keys |= {(s.st_dev, s.st_ino) for s in inventory(dir_fd) if not stat.S_ISDIR(s.st_mode)}
        holders = pids_holding(keys)
        if holders:
            pids = sorted({p for v in holders.values() for p in v})
            raise Refused(f"became in use by pid {', '.join(map(str, pids[:5]))} (put back)")
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
