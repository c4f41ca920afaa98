"""`verify --restore`: put quarantined files back where they were, unless something new took
their place. The quarantine log is checked, not trusted; each move goes through folder
descriptors opened from the root without following symlinks, as quarantining does."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.maintenance.fdops import O_DIR, open_parent, rename_noreplace
from cachetool.maintenance.verify.quarantine_plan import QUARANTINE_DIR, QUARANTINE_LOG, log_move, parts_under

#: The most of the quarantine log that is read (a record is about 300 bytes).
MAX_LOG_BYTES = 64 * 1024 * 1024


def _inside(path: Path, folder: Path) -> bool:
    """`path` (its folder resolved, its last component not followed) lies inside `folder`."""
    real = Path(os.path.realpath(path.parent)) / path.name
    return real == folder or folder in real.parents


@dataclass(frozen=True)
class Quarantined:
    """Something `verify --quarantine` moved aside and that was not put back."""

    path: Path  # where it lies, in <root>/.cachetool/quarantine/<run>/
    original: Path  # where it came from
    problem: str
    time: float  # when it moved
    size: int  # bytes, a folder's files summed
    files: int
    #: Why `restore` could not put it back, once it tried (None: it has not failed).
    stays: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": os.fsdecode(self.path),
            "from": os.fsdecode(self.original),
            "problem": self.problem,
            "time": self.time,
            "size": self.size,
            "files": self.files,
            "stays": self.stays,
        }


def _log_lines(log: Path, say: Callable[[str], None]) -> list[bytes]:
    """The lines of the quarantine log, read through the bounded no-follow reader; [] (said) when
    it cannot be read."""
    from cachetool.cache.store import read_state
    from cachetool.safejson import BadJsonFile

    try:
        return read_state(log, MAX_LOG_BYTES).splitlines()
    except FileNotFoundError:
        return []
    except (OSError, BadJsonFile) as err:
        say(f"{log}: not read: {err}")
        return []


def quarantined(root: str | os.PathLike[str]) -> list[Quarantined]:
    """What the quarantine of `root` holds (moved aside, not put back), oldest first: the command
    `cachetool verify --quarantine --list`. Nothing is written."""
    root_path = Path(root).resolve()
    qbase = root_path / layout.LEDGER_DIR / QUARANTINE_DIR
    log = qbase / QUARANTINE_LOG
    out = []
    for rec in _pending(log, _log_lines(log, lambda _msg: None), lambda _msg: None):
        src = Path(rec["to"])
        if not _inside(src, qbase) or src.is_symlink():
            continue
        try:
            st = os.lstat(src)
        except OSError:
            continue
        sizes = [st.st_size] if not stat.S_ISDIR(st.st_mode) else _file_sizes(src)
        when = rec.get("time")
        out.append(
            Quarantined(
                src,
                Path(rec["from"]),
                str(rec.get("problem", "")),
                float(when) if isinstance(when, (int, float)) else st.st_mtime,
                sum(sizes),
                len(sizes),
                rec.get("stays") if isinstance(rec.get("stays"), str) else None,
            )
        )
    return sorted(out, key=lambda q: q.time)


def _file_sizes(folder: Path) -> list[int]:
    out = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                out.append(os.lstat(os.path.join(dirpath, name)).st_size)
    return out


def _pending(log: Path, lines: Sequence[bytes], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The quarantine records of the log not restored since (with `stays`: why the latest
    restore could not put one back); what does not parse is named."""
    from cachetool.safejson import BadJsonFile, parse_json

    pending: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = parse_json(line)
        except BadJsonFile:
            say(f"{log}:{number}: not a JSON record; skipped")
            continue
        if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) for k in ("to", "from")):
            say(f"{log}:{number}: not a quarantine record; skipped")
            continue
        if rec.get("action") == "quarantine":
            pending[rec["to"]] = rec
        elif rec.get("action") == "restore":
            pending.pop(rec["from"], None)
        elif rec.get("action") == "stays" and rec["from"] in pending:
            pending[rec["from"]] = {**pending[rec["from"]], "stays": rec.get("reason")}
    return list(pending.values())


def restore(
    root: str | os.PathLike[str], warn: Callable[[str], None] | None = None
) -> list[tuple[Path, Path]]:
    """Put quarantined files back where they were, unless something new took their place.

    The log is checked, not trusted: a record moves something only from inside the quarantine
    folder to a place inside the root (never into `.cachetool`), and nothing is overwritten."""
    root_path = Path(root).resolve()
    qbase = root_path / layout.LEDGER_DIR / QUARANTINE_DIR
    log = qbase / QUARANTINE_LOG
    say = warn or (lambda _msg: None)
    restored = []
    for rec in _pending(log, _log_lines(log, say), say):
        src, dst = Path(rec["to"]), Path(rec["from"])
        if not os.path.lexists(src):
            continue
        if not _inside(src, qbase) or src.is_symlink() or len(_below(_real(src), qbase)) < 2:
            say(f"{log}: {src} is not a file or folder inside the quarantine folder; not restored")
            continue
        if (
            not _inside(dst, root_path)
            or _inside(dst, root_path / layout.LEDGER_DIR)
            or not _below(_real(dst), root_path)
        ):
            say(f"{log}: {dst} is not inside the cache root; not restored")
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            _move_back(root_path, _real(src), _real(dst))
        except (OSError, ValueError) as err:
            why = str(getattr(err, "strerror", None) or err)
            if rec.get("stays") != why:  # said once; tried again every time, quietly
                say(f"{dst}: cannot go back: {why}")
                log_move(
                    root_path,
                    {
                        "action": "stays",
                        "from": os.fsdecode(src),
                        "to": os.fsdecode(dst),
                        "reason": why,
                        "time": time.time(),
                    },
                )
            continue
        restored.append((src, dst))
        log_move(
            root_path,
            {"action": "restore", "from": os.fsdecode(src), "to": os.fsdecode(dst), "time": time.time()},
        )
    return restored


def _below(path: Path, folder: Path) -> tuple[str, ...]:
    """The names from `folder` down to `path`; () when `path` is `folder` or not below it."""
    try:
        return parts_under(folder, path)
    except ValueError:
        return ()


def _real(path: Path) -> Path:
    """`path` with its folder resolved and its last component not followed."""
    return Path(os.path.realpath(path.parent)) / path.name


def _move_back(root: Path, src: Path, dst: Path) -> None:
    """Move `src` to `dst` (both inside `root`) through folder descriptors opened from the root
    without following symlinks, never replacing anything: a folder may take the place of an
    empty folder only (datasets may have made it again), a file no place that exists."""
    s_parts, d_parts = parts_under(root, src), parts_under(root, dst)
    root_fd = os.open(root, O_DIR)
    try:
        s_fd = open_parent(root_fd, s_parts)
        try:
            d_fd = open_parent(root_fd, d_parts)
            try:
                _make_room(s_fd, s_parts[-1], d_fd, d_parts[-1])
                rename_noreplace(s_fd, s_parts[-1], d_fd, d_parts[-1])
            finally:
                os.close(d_fd)
        finally:
            os.close(s_fd)
    finally:
        os.close(root_fd)


def _make_room(s_fd: int, s_name: str, d_fd: int, d_name: str) -> None:
    """Remove an empty folder where a quarantined folder goes back; refuse anything else there."""
    try:
        there = os.stat(d_name, dir_fd=d_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    moving = os.stat(s_name, dir_fd=s_fd, follow_symlinks=False)
    if stat.S_ISDIR(moving.st_mode) and stat.S_ISDIR(there.st_mode):
        try:
            os.rmdir(d_name, dir_fd=d_fd)  # fails on a folder that is not empty
            return
        except OSError:
            pass
    raise FileExistsError(errno.EEXIST, "something new is in its place", d_name)
