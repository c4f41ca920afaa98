"""The filelock files of a `datasets` cache: whether someone holds one, and what it guards.

One probe (`probe`) answers for every caller. It opens the lock without `O_CREAT` (a probe never
creates a lock file) and without following a symlink, then tries a non-blocking exclusive
`flock`, the lock `filelock` takes. When it cannot tell (the file cannot be opened: no
permission, a symlink, a socket; or `flock` fails for another reason than "held") the answer is
`LockState.UNKNOWN`, and `LockState.held` counts that as held: gc keeps the lock and what it
guards, and verify does not call the lock stale. Being wrong that way costs a leftover kept
until the next run; the other way round would remove what a running preparation needs.

What a lock guards is read from its name by `cachetool.cache.layout.parse_lock_name`; this
module adds what only the file system can tell (which folders a root lock's name decodes to,
whether a guarded path still exists).
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import LockKind

_O_PROBE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class LockState(str, Enum):
    """What a non-blocking probe of one lock file found."""

    MISSING = "missing"  # no file: held by nobody
    FREE = "free"  # the probe won the flock (and released it)
    HELD = "held"  # a live process holds it
    UNKNOWN = "unknown"  # could not open or flock it: treated as held

    @property
    def held(self) -> bool:
        """The safe reading: held, or no way to tell."""
        return self in (LockState.HELD, LockState.UNKNOWN)


class LockBusy(Exception):
    """`acquire` could not win the lock: held by a live process (HELD), or no way to tell (UNKNOWN)."""

    def __init__(self, state: LockState, name: str, detail: str = "") -> None:
        self.state = state
        self.name = name
        self.detail = detail
        super().__init__(self.message())

    def message(self) -> str:
        if self.state == LockState.HELD:
            return f"{self.name} is held by a live process"
        return f"cannot tell whether {self.name} is held ({self.detail or 'cannot probe it'})"


def acquire(name: str | os.PathLike[str], dir_fd: int | None = None) -> int | None:
    """Win the lock at `name` (relative to `dir_fd` when given) without blocking and without
    creating it. Returns the descriptor holding it (closing it releases the lock), or None when
    there is no such file. Raises `LockBusy` (HELD or UNKNOWN) when it cannot be won."""
    shown = os.path.basename(os.fsdecode(name))
    try:
        fd = os.open(name, _O_PROBE, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        detail = "a symlink, never followed" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise LockBusy(LockState.UNKNOWN, shown, detail) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise LockBusy(LockState.HELD, shown) from None
        raise LockBusy(LockState.UNKNOWN, shown, e.strerror or str(e)) from None
    return fd


def probe(path: str | os.PathLike[str]) -> LockState:
    """Is the lock at `path` held? Never creates the file, never follows a symlink."""
    try:
        fd = acquire(path)
    except LockBusy as busy:
        return busy.state
    if fd is None:
        return LockState.MISSING
    os.close(fd)  # closing releases the flock we won
    return LockState.FREE


@dataclass(frozen=True)
class Guard:
    """What one lock file guards: it is useful while any of `paths` exists."""

    kind: LockKind
    name: str  # the guarded file or folder's name; for a root lock, its mangled path
    paths: tuple[Path, ...]  # for a root lock: the existing folders its name decodes to

    @property
    def what(self) -> str:
        """ "download" or "folder": what a stale lock's guarded thing was."""
        return "download" if self.kind == LockKind.DOWNLOAD else "folder"

    def alive(self, ignoring: frozenset[Path] = frozenset()) -> bool:
        """Does something it guards still exist (not counting `ignoring`, about to go)?"""
        return any(os.path.lexists(g) and g not in ignoring for g in self.paths)


def lock_guard(
    lock: Path, root: Path | None = None, listings: dict[Path, list[str]] | None = None
) -> Guard | None:
    """What the lock file `lock` guards. `<dir>_builder.lock` and `<dir>.incomplete_info.lock`
    guard `<dir>` (and its `.incomplete` while preparing); `downloads/<name>.lock` the download
    (and its `.incomplete`); `extracted/<sha>.lock` its folder; a lock directly in the cache
    `root` named after an absolute folder path guards that folder (decoded against the file
    system; `listings` caches folder listings across calls). None: a lock nobody can attribute,
    or a decoding that could not finish."""
    parent = lock.parent
    got = layout.parse_lock_name(
        lock.name, parent.name, parent.parent.name, root is not None and parent == root
    )
    if got is None:
        return None
    kind, base = got
    if kind == LockKind.ROOT:
        found = _decode_root_lock(base, listings if listings is not None else {})
        return None if found is None else Guard(kind, base, found)
    if kind == LockKind.EXTRACTION:
        return Guard(kind, base, (parent / base,))
    return Guard(kind, base, (parent / base, parent / (base + layout.INCOMPLETE_DIR_SUFFIX)))


def stale_guard(lock: Path, root: Path | None) -> Guard | None:
    """The guard of a stale lock: what it guards is gone and the probe won it. None when the
    lock is useful, held, unattributable, or the probe cannot tell."""
    guard = lock_guard(lock, root)
    if guard is None or guard.alive():
        return None
    return guard if probe(lock) == LockState.FREE else None


def _decode_root_lock(
    mangled: str, listings: dict[Path, list[str]], budget: int = 64
) -> tuple[Path, ...] | None:
    """Existing folders whose absolute path, "/" turned into "_", is `mangled` (the ambiguity of
    "_" is resolved by looking at what exists). Empty: nothing matches, the folder is gone. None:
    a folder on the way could not be listed or the search ran too long, so nobody knows."""
    found: list[Path] = []
    calls = 0
    unsure = False

    def walk(folder: Path, rest: str) -> None:
        nonlocal calls, unsure
        if calls >= budget:
            unsure = True
            return
        calls += 1
        names = listings.get(folder)
        if names is None:
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                return
            except OSError:
                unsure = True
                return
            listings[folder] = names
        for n in names:
            if n in (rest, rest + layout.INCOMPLETE_DIR_SUFFIX):
                found.append(folder / n)
            elif rest.startswith(n + "_") and os.path.isdir(folder / n):
                walk(folder / n, rest[len(n) + 1 :])

    walk(Path("/"), mangled[1:])
    if found:
        return tuple(found)
    return None if unsure else ()
