"""The files cachetool keeps in a root's own folder (`<root>/.cachetool/`: the read index, the
kept listing text, deep-verify checksums, schema verdicts), each written whole.

A file is written to a temporary file beside it (`.<stem>-XXXXXXXX`) and renamed over the old
one, so a reader sees the old file or the new one, never part of either. A writer killed between
the two leaves its temporary file behind; the next write of the same file removes those that
are older than `STALE_SECONDS` (no write takes that long), so they never pile up.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: A temporary file of one of these writes older than this was left by a killed writer.
STALE_SECONDS = 3600.0


def write_whole(path: Path, data: bytes) -> None:
    """Replace `path` by `data` through a temporary file and one rename. Raises OSError (with
    the temporary file removed) when the folder is missing, read-only, full, or a symlink: the
    folder is opened without following one, and the writes go through that descriptor, so they
    never land outside the cache root."""
    import secrets

    prefix = temp_prefix(path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        if os.path.islink(path.parent):
            why = f"{path.parent.name} is a symlink (cachetool writes inside the cache root only)"
            raise OSError(err.errno, why, os.fsdecode(path.parent)) from None
        raise
    try:
        tmp = f"{prefix}{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
        try:  # the folder's own clock (another host's, on a shared file system)
            now = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mtime
        except OSError:
            return
        _remove_stale(dir_fd, prefix, now)
    finally:
        os.close(dir_fd)


def temp_prefix(path: Path) -> str:
    """`.read-index-` for `read-index.sqlite.z`: how the temporary files of `path` begin."""
    return f".{path.name.split('.', 1)[0]}-"


def _remove_stale(dir_fd: int, prefix: str, now: float) -> None:
    """Remove the regular files of the folder `dir_fd` named `prefix...` and modified more than
    `STALE_SECONDS` before `now`; anything that cannot be read or removed stays."""
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
