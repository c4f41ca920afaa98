"""File operations relative to open folder descriptors, for everything that removes or moves
files (gc, verify's quarantine): once a folder is open, no path string is resolved again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
from functools import lru_cache
from pathlib import Path

from cachetool.cache import layout

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_RENAME_NOREPLACE = 1


@lru_cache(maxsize=1)
def _renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # pragma: no cover - not glibc >= 2.28
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def rename_noreplace(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """Move `src` (in the folder `src_dir_fd`) to `dst` (in `dst_dir_fd`); FileExistsError when
    `dst` exists. Without renameat2 (old kernels, other C libraries) a link/unlink pair gives the
    same guarantee for files; folders then refuse with EXDEV-free `os.rename` after a check."""
    fn = _renameat2()
    if fn is not None:
        rc = fn(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), _RENAME_NOREPLACE)  # type: ignore[operator]
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), src)
    st = os.stat(src, dir_fd=src_dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):  # pragma: no cover - file systems without renameat2 flags
        try:
            os.stat(dst, dir_fd=dst_dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            return
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False)
    os.unlink(src, dir_fd=src_dir_fd)


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def inventory(dir_fd: int) -> list[os.stat_result]:
    """stat of everything below an open folder, walking by descriptors without following links."""
    out: list[os.stat_result] = []
    with os.scandir(dir_fd) as it:
        entries = list(it)
    for de in entries:
        st = os.stat(de.name, dir_fd=dir_fd, follow_symlinks=False)
        out.append(st)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(de.name, O_DIR, dir_fd=dir_fd)
            try:
                out += inventory(sub)
            finally:
                os.close(sub)
    return out


def parts_under(root: Path, path: Path) -> tuple[str, ...]:
    """The names from `root` down to `path`; ValueError when `path` is not strictly below `root`."""
    parts = path.relative_to(root).parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise ValueError(path)
    return parts


def open_parent(root_fd: int, parts: tuple[str, ...], *, create: bool = False) -> int:
    """Open the folder `root/parts[0]/…/parts[-2]` one component at a time from `root_fd`, never
    following a symlink: a component swapped for a symlink fails with ELOOP or ENOTDIR. With
    `create`, missing folders are made (mode 0o700). Returns a new descriptor of that folder."""
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            if part in ("", ".", ".."):
                raise OSError(errno.EINVAL, "not a plain path component", part)
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            nfd = os.open(part, O_DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one file version from another: device, inode, size, mtime (ns)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


_MARKER_FILES = frozenset({layout.STATE_JSON, layout.DATASET_DICT_JSON, layout.DATASET_INFO})


def remove_tree(dir_fd: int, freed: list[int]) -> None:
    """Empty an open folder through descriptors: `unlink`/`rmdir` relative to each folder's fd,
    subfolders opened with `O_NOFOLLOW`. A symlink inside is removed as a link, never followed.
    Keeps going past errors and raises the first one at the end; `freed` ([bytes, files]) counts
    what is gone either way."""
    first_error: OSError | None = None
    with os.scandir(dir_fd) as it:
        entries = list(it)
    # The files that make a folder count as a dataset go first: a removal that stops half-way
    # then leaves a folder datasets will not load, never one with data files missing.
    entries.sort(key=lambda de: de.name not in _MARKER_FILES)
    for de in entries:
        try:
            st = os.stat(de.name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(de.name, O_DIR, dir_fd=dir_fd)
                try:
                    remove_tree(sub, freed)
                finally:
                    os.close(sub)
                os.rmdir(de.name, dir_fd=dir_fd)
            else:
                os.unlink(de.name, dir_fd=dir_fd)
                if stat.S_ISREG(st.st_mode):
                    freed[0] += st.st_size
                freed[1] += 1
        except OSError as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error
