"""`verify --restore`: put quarantined files back where they were, unless something new took
their place. The quarantine log is checked, not trusted."""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cachetool.cache import layout
from cachetool.maintenance.verify.quarantine_plan import QUARANTINE_DIR, QUARANTINE_LOG, log_move


def _inside(path: Path, folder: Path) -> bool:
    """`path` (its folder resolved, its last component not followed) lies inside `folder`."""
    real = Path(os.path.realpath(path.parent)) / path.name
    return real == folder or folder in real.parents


def _pending(log: Path, lines: Sequence[str], say: Callable[[str], None]) -> list[dict[str, str]]:
    """The quarantine records of the log not restored since; what does not parse is named."""
    pending: dict[str, dict[str, str]] = {}
    for number, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except ValueError:
            say(f"{log}:{number}: not a JSON record; skipped")
            continue
        if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) for k in ("to", "from")):
            say(f"{log}:{number}: not a quarantine record; skipped")
            continue
        if rec.get("action") == "quarantine":
            pending[rec["to"]] = rec
        elif rec.get("action") == "restore":
            pending.pop(rec["from"], None)
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
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    say = warn or (lambda _msg: None)
    restored = []
    for rec in _pending(log, lines, say):
        src, dst = Path(rec["to"]), Path(rec["from"])
        if not os.path.lexists(src):
            continue
        if not _inside(src, qbase) or src.is_symlink():
            say(f"{log}: {src} is not inside the quarantine folder; not restored")
            continue
        if not _inside(dst, root_path) or _inside(dst, root_path / layout.LEDGER_DIR):
            say(f"{log}: {dst} is not inside the cache root; not restored")
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            _move_no_replace(src, dst)
        except OSError as err:
            say(f"{dst}: not restored: {err.strerror or err}")
            continue
        restored.append((src, dst))
        log_move(
            root_path,
            {"action": "restore", "from": os.fsdecode(src), "to": os.fsdecode(dst), "time": time.time()},
        )
    return restored


def _move_no_replace(src: Path, dst: Path) -> None:
    """Move without ever replacing what is at `dst`: a hard link fails on an existing name, and
    renaming a folder fails onto a non-empty one."""
    if src.is_dir():
        if os.path.lexists(dst) and not (dst.is_dir() and not any(dst.iterdir())):
            raise FileExistsError(errno.EEXIST, "something new is in its place", os.fsdecode(dst))
        os.rename(src, dst)
        return
    os.link(src, dst)
    os.unlink(src)
