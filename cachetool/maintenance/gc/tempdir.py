"""The temp dir `datasets` uses: only `hf_datasets-*`, `pymp-*` and `cachetool-determinism-*`
entries are ever looked at, and a folder is someone's while a live process may own it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import TempKind
from cachetool.maintenance.gc.model import Refusal
from cachetool.maintenance.liveness import TempDirUser
from cachetool.processes import alive, process_start


@dataclass(frozen=True)
class TempFolder:
    """An `hf_datasets-*` or `pymp-*` entry of the temp dir, as `lstat` and a walk tell it."""

    path: Path
    kind: TempKind
    is_dir: bool  # False for a symlink or a file with such a name (never followed, never removed)
    uid: int
    size: int = 0
    files: int = 0
    newest: float = 0.0
    made_by: float = 0.0  # the latest the folder can have been created: min(its mtime, its ctime)


@dataclass(frozen=True)
class TempScan:
    """The temp dir and its `datasets` leftovers."""

    path: Path
    folders: tuple[TempFolder, ...] = ()
    error: str | None = None


def scan_temp_dir(path: str | os.PathLike[str]) -> TempScan:
    """List the `hf_datasets-*` and `pymp-*` folders of a temp dir; nothing else there is read."""
    resolved = Path(os.path.realpath(path))
    try:
        names = sorted(os.listdir(resolved))
    except OSError as e:
        return TempScan(resolved, (), e.strerror or str(e))
    out = []
    for name in names:
        kind = layout.temp_folder_kind(name)
        if kind is None:
            continue
        p = resolved / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        made_by = min(st.st_mtime, st.st_ctime)
        if not stat.S_ISDIR(st.st_mode):
            out.append(TempFolder(p, kind, False, st.st_uid, 0, 0, st.st_mtime, made_by))
            continue
        size, files, newest = _tree_totals(p, st.st_mtime)
        out.append(TempFolder(p, kind, True, st.st_uid, size, files, newest, made_by))
    return TempScan(resolved, tuple(out))


def _tree_totals(path: Path, newest: float) -> tuple[int, int, float]:
    size = files = 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for de in it:
                    try:
                        st = de.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    newest = max(newest, st.st_mtime)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(Path(de.path))
                    else:
                        size += st.st_size
                        files += 1
        except OSError:
            continue
    return size, files, newest


#: Clock slack when comparing a process start time (boot-time based) with a file time.
_START_SLACK = 2.0


def owner_refusal(
    kind: TempKind, made_by: float, datasets_users: Iterable[TempDirUser], python_users: Iterable[TempDirUser]
) -> Refusal | None:
    """Why a temp-dir folder may still have an owner that holds nothing in it right now."""
    if kind == "hf_datasets":
        owners = possible_owners(made_by, datasets_users)
        if owners:
            return _may_own("datasets", owners[0])
    elif kind == "pymp":
        owners = possible_owners(made_by, python_users)
        if owners:
            return _may_own("Python", owners[0])
    return None


def check_owner_refusal(name: str, made_by: float, python_users: Iterable[TempDirUser]) -> Refusal | None:
    """A `cachetool-determinism-<pid>-*` folder belongs to that check while the process lives and
    started before the folder was made (a reused pid started later). Without a pid in the name
    (older checks), any live Python process using this temp dir may own it."""
    m = layout.CHECK_DIR_RE.match(name)
    pid = m.group("pid") if m else None
    if pid is None:
        owners = possible_owners(made_by, python_users)
        return _may_own("Python", owners[0]) if owners else None
    started = _process_start(int(pid))
    if started is not None and started <= made_by + _START_SLACK:
        return Refusal("may-be-owned", f"the check that made it (pid {pid}) is still running")
    return None


def _may_own(who: str, pid: int) -> Refusal:
    return Refusal("may-be-owned", f"a live {who} process using this temp dir (pid {pid}) may own it")


def _process_start(pid: int) -> float | None:
    """When process `pid` started, or None when it is gone; 0.0 when it lives but its start
    cannot be read (then it counts as started before anything: it may own the folder)."""
    started = process_start(pid)
    if started is None and alive(pid):
        return 0.0
    return started


def possible_owners(made_by: float, users: Iterable[TempDirUser]) -> list[int]:
    """Pids of live datasets processes using this temp dir that started before an `hf_datasets-*`
    folder existed: any of them may be its owner, idle between writes."""
    return sorted(u.pid for u in users if u.started <= made_by + _START_SLACK)
