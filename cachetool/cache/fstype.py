"""Which file system a folder lives on, and whether other hosts may write it too (network, cluster
or FUSE file systems): from the mount table (`/proc/self/mounts`, as `df -T`) and `statfs(2)`'s
magic number (as `stat -f`). docs/hosts.md says what locks mean on each.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass

from cachetool.safejson import json_fields

#: statfs magic numbers (linux/magic.h and the file systems' own headers) of network and cluster
#: file systems.
SHARED_MAGIC = {
    0x6969: "nfs",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x00C36400: "ceph",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x517B: "smbfs",
    0x65735546: "fuse",
    0x5346414F: "afs",
    0x01021997: "9p",
    0x19830326: "beegfs",
    0x7461636F: "ocfs2",
    0x01161970: "gfs2",
}
#: Mount-table types of the same.
SHARED_TYPES = frozenset({*SHARED_MAGIC.values(), "nfs4", "smb3", "glusterfs", "panfs"})


@dataclass(frozen=True)
class FileSystem:
    """The file system of one folder."""

    type: str  # as the mount table names it ("ext4", "nfs4", "fuse.sshfs"), else from statfs
    mount_point: str | None
    source: str | None  # the device or server:/export
    magic: int | None  # statfs f_type
    shared: bool

    def to_json(self) -> dict[str, object]:
        return {**json_fields(self), "magic": f"0x{self.magic:x}" if self.magic is not None else None}


def is_shared_type(fstype: str) -> bool:
    """A network or cluster file system, by its mount-table type."""
    t = fstype.lower()
    return t in SHARED_TYPES or (t.startswith("fuse") and t != "fuseblk")


def _unescape(field: str) -> str:
    """Mount tables escape space, tab, newline and backslash as octal (`\\040`)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str, mounts: str) -> tuple[str, str, str] | None:
    """(mount point, type, source) of the mount holding `path` (absolute, resolved), from the
    text of a mount table: the longest mount point above it, the last one mounted there."""
    best: tuple[str, str, str] | None = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        source, point, fstype = _unescape(parts[0]), _unescape(parts[1]), parts[2]
        inside = path == point or point == "/" or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fstype, source)
    return best


def _statfs_magic(path: str) -> int | None:
    """`statfs(2)`'s f_type (the first field of `struct statfs` on Linux), or None."""
    if not os.path.exists("/proc/self/mounts"):
        return None  # not Linux: the struct differs
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library already loaded (no ldconfig run)
        buf = ctypes.create_string_buffer(256)  # sizeof(struct statfs) is 120 on 64-bit Linux
        if libc.statfs(os.fsencode(path), buf) != 0:
            return None
        size = ctypes.sizeof(ctypes.c_long)
        return int.from_bytes(buf.raw[:size], "little", signed=True) & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


def file_system(path: str | os.PathLike[str], mounts: str | None = None) -> FileSystem:
    """The file system of `path` (an existing folder): its type, mount and whether other hosts
    may share it. `mounts` is the text of a mount table (default: `/proc/self/mounts`)."""
    real = os.path.realpath(os.fspath(path))
    if mounts is None:
        try:
            with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as f:
                mounts = f.read()
        except OSError:
            mounts = ""
    hit = mount_of(real, mounts)
    magic = _statfs_magic(real)
    fstype = hit[1] if hit else SHARED_MAGIC.get(magic or -1, f"0x{magic:x}" if magic else "unknown")
    shared = is_shared_type(fstype) or (magic is not None and magic in SHARED_MAGIC)
    return FileSystem(fstype, hit[0] if hit else None, hit[2] if hit else None, magic, shared)
