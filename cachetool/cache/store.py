"""The files cachetool keeps in a root's own folder (`<root>/.cachetool/`), opened, read, written,
appended to and locked in one place (docs/security.md says how), because whoever may write a
shared cache may have put anything there: every path is reached from descriptors without following
a link, must be a regular file, and is read whole up to a cap.

`STATE_FILES` names every file kept there: opening a name it does not match is a programming
error, so a new state file is in the list (and in the tests that plant links, FIFOs and devices
in place of each) the day it is added.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from cachetool.cache.layout import LEDGER_DIR
from cachetool.safejson import MAX_BYTES, read_opened

#: A temporary file of one of these writes older than this was left by a killed writer.
STALE_SECONDS = 3600.0

#: Every file cachetool keeps below `<root>/.cachetool/` (shell patterns, relative to it).
STATE_FILES = (
    "ledger/*.jsonl",  # cachetool.history.ledger: the ledger (gc's log included)
    "leases/*.json",  # cachetool.trace.leases
    "once/*.json",  # cachetool.trace.leases: a step's lease (`cachetool run --once`)
    "pins.json",  # cachetool.cache.pins
    "pins.json.lock",
    "stats.json",  # cachetool.history.ledger_stats
    "checksums.json",  # cachetool.maintenance.verify.deep
    "checksums.json.lock",
    "quarantine/log.jsonl",  # cachetool.maintenance.verify.quarantine
    "gc.lock",  # cachetool.maintenance.gc.execute
    "remote.jsonl",  # cachetool.remote.transfer: results pulled from a remote
)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class NotRegularFile(OSError):
    """A state file is a FIFO, a device, a folder, a symlink or a file with other names."""


def _split(path: Path) -> tuple[Path, tuple[str, ...]]:
    """(the folder opened as given, the components below it reached without following links):
    the root and everything from its `.cachetool` on; the parent and the name elsewhere."""
    parts = path.parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == LEDGER_DIR:
            return Path(*parts[:i]) if i else Path("."), parts[i:]
    return path.parent, (path.name,)


def _check_registered(parts: tuple[str, ...]) -> None:
    if parts[0] != LEDGER_DIR:
        return
    rel = "/".join(parts[1:])
    if not any(fnmatch.fnmatchcase(rel, pattern) for pattern in STATE_FILES):
        raise ValueError(f"{rel} is not in cachetool.cache.store.STATE_FILES")


def open_folder(path: Path, *, create: bool = False) -> int:
    """A descriptor of the folder `path`; each component from `.cachetool` on is opened without
    following a symlink (and made first, with `create`). OSError when one is missing or a link."""
    base, parts = _split(path / "_")  # `_`: every component of `path` is a folder
    parts = parts[:-1]
    if create and not parts:  # a per-user folder (state, derived speed-ups): the user's alone
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                try:
                    link = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
                except OSError:
                    link = False
                if link:
                    why = f"{part} is a symlink (cachetool writes inside the cache root only)"
                    raise OSError(err.errno, why, os.fsdecode(path)) from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_state(
    path: Path, flags: int = os.O_RDONLY, mode: int = 0o644, *, create_folders: bool = False
) -> int:
    """A descriptor of the state file `path`, opened with `flags` through `open_folder` and
    `O_NOFOLLOW`. NotRegularFile when it is not a regular file (or, opened to be written, has
    more than one link)."""
    _check_registered(_split(path)[1])
    dir_fd = open_folder(path.parent, create=create_folders)
    try:
        try:
            fd = os.open(path.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                raise NotRegularFile(err.errno, "a symlink, not a regular file", os.fsdecode(path)) from None
            raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(0, "not a regular file", os.fsdecode(path))
        if flags & _WRITE_FLAGS and st.st_nlink > 1:
            raise NotRegularFile(0, "a file with other names (hard links), not written", os.fsdecode(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the state file `path`: FileNotFoundError when there is none, BadJsonFile
    (a ValueError saying why) when it is not a regular file of at most `max_bytes`."""
    return read_opened(lambda: open_state(path), max_bytes)


def read_state_json(path: Path, max_bytes: int = MAX_BYTES) -> object:
    """The JSON document of the state file `path` (`read_state`; BadJsonFile when it is not one:
    not UTF-8, not JSON, nested too deeply, or holding `NaN`/`Infinity`)."""
    from cachetool.safejson import parse_json

    return parse_json(read_state(path, max_bytes))


def append_state(path: Path, data: bytes) -> None:
    """Append `data` (whole records) to the state file `path` with one `write` (made, with its
    folders, when missing). OSError when it cannot be, NotRegularFile when it is not a file."""
    fd = open_state(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, create_folders=True)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


@contextlib.contextmanager
def lock_state(path: Path, timeout: float, busy: type[Exception] = TimeoutError) -> Iterator[int]:
    """Hold an exclusive `flock` on the lock file `path` (made, with its folders, when missing;
    the lock `filelock` takes, so older versions exclude this one); `busy` after `timeout` s."""
    fd = open_state(path, os.O_RDWR | os.O_CREAT, create_folders=True)
    try:
        if not flock_within(fd, timeout):
            raise busy(f"{path} is locked by another process")
        yield fd
    finally:
        os.close(fd)  # releases the flock


def flock_within(fd: int, timeout: float) -> bool:
    """Take an exclusive `flock` on `fd`, waiting at most `timeout` seconds; False when another
    process still holds it then."""
    import fcntl

    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _write_temporary(dir_fd: int, prefix: str, data: bytes, mode: int) -> str:
    """Write `data` to a new file `<prefix><random>` of the folder `dir_fd`; its name (the file
    removed when the write fails)."""
    import secrets

    tmp = f"{prefix}{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return tmp


def write_whole(path: Path, data: bytes, *, mode: int = 0o600, create_folders: bool = False) -> None:
    """Replace `path` by `data` through a temporary file and one rename, through the descriptor of
    its folder (`open_folder`), so the writes never land outside the root. OSError (the temporary
    file removed) when the folder is missing, read-only, full, or a symlink. The file gets `mode`
    less the umask (0o644 for what every user of a shared cache must read)."""
    _check_registered(_split(path)[1])
    prefix = f".{path.name.split('.', 1)[0]}-"  # `.read-index-` for `read-index.z`
    dir_fd = open_folder(path.parent, create=create_folders)
    try:
        tmp = _write_temporary(dir_fd, prefix, data, mode)
        try:
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        try:  # the folder's own clock (another host's, on a shared file system)
            now = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mtime
        except OSError:
            return
        _remove_stale(dir_fd, prefix, now)
    finally:
        os.close(dir_fd)


def create_whole(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """Write `path` whole unless a file of that name exists, in one step: a temporary file, then
    one `link(2)`, which refuses an existing name on every file system (NFS included), so of
    several processes creating one name exactly one succeeds and nobody sees half a file. True
    when this call made it, False when the name was taken. Makes the folders below `.cachetool/`
    (never the root); OSError when it cannot write there."""
    _check_registered(_split(path)[1])
    dir_fd = open_folder(path.parent, create=True)
    try:
        tmp = _write_temporary(dir_fd, f".{path.name.split('.', 1)[0]}-", data, mode)
        try:
            os.link(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            # Over NFS a link whose reply was lost is retried and then "exists": it is this
            # call's when the temporary file has two names now.
            return os.stat(tmp, dir_fd=dir_fd, follow_symlinks=False).st_nlink == 2
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        return True
    finally:
        os.close(dir_fd)


def _remove_stale(dir_fd: int, prefix: str, now: float) -> None:
    """Remove the regular files `prefix...` of the folder `dir_fd` older than `STALE_SECONDS`."""
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_SECONDS:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            continue
