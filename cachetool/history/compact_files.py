"""The file side of a ledger compaction (`cachetool.history.compact`): the ledger folder held
open by descriptor (removals go through it, never through a symlink), the segments locked against
their writers, the compacted segment written under a temporary name and renamed into place, and
what a killed compaction left removed."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from cachetool.cache.roots import SEGMENT_SUFFIX, is_segment_name
from cachetool.history.segments import COMPACTED_PREFIX, replaced_segments
from cachetool.processes import alive


def _max_replaced() -> int:
    """Half the descriptors this process may open (each lock is one): 512 under the common soft
    limit of 1,024, so a ledger of a thousand runs compacts at once where the limit is higher."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 512
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(16, min(soft // 2, 65536))


#: Segments one compaction locks and replaces at most (each lock is an open descriptor); the
#: rest wait for the next compaction.
MAX_REPLACED = _max_replaced()
LOCK_NAME = ".compact.lock"
_TMP_PREFIX = ".compact-"
#: Test hook: a compaction whose environment names one of its kill points ("written": the
#: compacted segment written under its temporary name; "renamed": renamed into place, the
#: replaced segments not yet removed) SIGKILLs itself there (the kill tests use it).
KILL_AT_ENV = "CACHETOOL_TEST_KILL_AT"


@contextlib.contextmanager
def folder_fd(folder: Path) -> Iterator[int]:
    """A descriptor of `folder` itself (never a symlink's target): removals go through it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(dfd: int, names: list[str]) -> Iterator[set[str]]:
    """The names of `names` whose segment this process locked exclusively, held until the block
    ends (each an open descriptor: callers pass at most `MAX_REPLACED`). A writer holds a shared
    lock on its open segment (`cachetool.history.writer.SegmentWriter`): a segment it is writing
    is not among them, whatever the pid in its name says. Where locks are not supported (some
    NFS), the pid rule alone decides."""
    fds: list[int] = []
    got: set[str] = set()
    try:
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                continue
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue  # its writer holds it
            got.add(name)
        yield got
    finally:
        for fd in fds:
            os.close(fd)


def unlink_replaced(dfd: int, name: str, size: int) -> None:
    """Remove the replaced segment `name` of the folder open as `dfd`, if it is a regular file
    with the name of a segment that still has the size it was read at."""
    if not is_segment_name(name):
        return
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            os.unlink(name, dir_fd=dfd)


def kill_point(point: str) -> None:
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def write_compacted(folder: Path, data: bytes, now: float) -> Path:
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    final = folder / f"{COMPACTED_PREFIX}{stamp}-{os.getpid()}{SEGMENT_SUFFIX}"
    tmp = folder / f"{_TMP_PREFIX}{os.getpid()}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    kill_point("written")
    os.replace(tmp, final)
    sync_dir(folder)
    return final


def remove_leftovers(folder: Path, dfd: int) -> None:
    """What a killed compaction left: its temporary file, and segments it replaced."""
    names = os.listdir(dfd)
    for name in names:
        if name.startswith(_TMP_PREFIX) and name.endswith(".tmp"):
            pid = name[len(_TMP_PREFIX) : -len(".tmp")]
            if pid.isdigit() and not alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
    compacted = [n for n in names if n.startswith(COMPACTED_PREFIX) and n.endswith(SEGMENT_SUFFIX)]
    for name, size in replaced_segments(folder, compacted).items():
        unlink_replaced(dfd, name, size)


def sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
