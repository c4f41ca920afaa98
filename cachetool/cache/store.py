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
import time
from pathlib import Path

#: A temporary file of one of these writes older than this was left by a killed writer.
STALE_SECONDS = 3600.0


def write_whole(path: Path, data: bytes) -> None:
    """Replace `path` by `data` through a temporary file and one rename. Raises OSError (with
    the temporary file removed) when the folder is missing, read-only or full."""
    import tempfile

    prefix = temp_prefix(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    remove_stale_temps(path.parent, prefix)


def temp_prefix(path: Path) -> str:
    """`.read-index-` for `read-index.sqlite.z`: how the temporary files of `path` begin."""
    return f".{path.name.split('.', 1)[0]}-"


def remove_stale_temps(folder: Path, prefix: str, now: float | None = None) -> list[str]:
    """Remove the regular files of `folder` named `prefix...` and modified more than
    `STALE_SECONDS` ago; the names removed. A folder that is a symlink is left alone (it may
    lead out of the root), and so is anything that cannot be read or removed."""
    now = time.time() if now is None else now
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    removed = []
    try:
        for name in os.listdir(fd):
            if not name.startswith(prefix):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_SECONDS:
                    os.unlink(name, dir_fd=fd)
                    removed.append(name)
            except OSError:
                continue
    except OSError:
        pass
    finally:
        os.close(fd)
    return removed
