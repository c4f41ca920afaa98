"""The gc lock: two `cachetool gc` runs never work on one cache at once."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.store import flock_within
from cachetool.maintenance.fdops import O_DIR
from cachetool.maintenance.gc.model import LOCK_TIMEOUT, GcBusy

GC_LOCK_NAME = "gc.lock"


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
        state_fd = os.open(layout.LEDGER_DIR, O_DIR, dir_fd=root_fd)
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

        from cachetool.cache.roots import root_key, user_state_dir

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
        if not flock_within(fd, timeout):
            raise GcBusy(root, path, timeout)
        yield path
    finally:
        os.close(fd)  # releases the flock
