"""Where a root's ledger lives, and the per-user registry of every root a tracer wrote to.

* one ledger per root, in `<root>/.cachetool/ledger/`, one segment file per process
  (`segment_name`); a root that cannot be written is recorded in
  `user_state_dir()/ledgers/<key>/` instead (`fallback_ledger_dir`);
* `user_state_dir()/roots.json` lists every root a tracer wrote to (`known_roots`), so lineage
  can follow a parent into another root (a saved folder's parent lives in the cache root it
  came from).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cachetool.cache.layout import LEDGER_DIR

SEGMENT_SUFFIX = ".jsonl"
ROOTS_FILE = "roots.json"
#: Where a root keeps its leases (`cachetool.trace.leases`), below its `.cachetool/` folder.
LEASES_DIR = "leases"
#: Where a root keeps its step leases (`cachetool.trace.once`), below its `.cachetool/` folder.
ONCE_DIR = "once"
#: The longest a lease lives after its last renewal, whatever it or `CACHETOOL_LEASE_SECONDS`
#: says: a lease file is written by whoever can write the cache, and one that claimed to live
#: forever would keep gc from freeing anything.
MAX_LEASE_SECONDS = 3600.0


def leases_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / LEDGER_DIR / LEASES_DIR


def user_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """cachetool's per-user folder: `CACHETOOL_HOME`, else `XDG_STATE_HOME/cachetool`,
    else `~/.local/state/cachetool`."""
    env = os.environ if environ is None else environ
    if value := env.get("CACHETOOL_HOME"):
        return Path(os.path.expanduser(value))
    base = env.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(os.path.expanduser(base)) / "cachetool"


def root_key(root: str | os.PathLike[str]) -> str:
    """A file-name-safe key for a root: its last folder name plus a hash of its absolute path."""
    import hashlib  # here: a listing of a root without a per-user ledger never names one

    path = os.path.realpath(os.fspath(root))
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(path))[:40]
    return f"{name or 'root'}-{digest}"


def ledger_dir(root: str | os.PathLike[str]) -> Path:
    """`<root>/.cachetool/ledger`: where tracers write the records of this root."""
    return Path(root) / LEDGER_DIR / "ledger"


def make_state_dir(root: str | os.PathLike[str], folder: Path) -> None:
    """Create `folder` (inside `<root>/.cachetool/`) and the folders between it and `root`, but
    never `root` itself nor anything above it: a root the program deleted stays deleted
    (FileNotFoundError)."""
    current = Path(root)
    for part in folder.relative_to(current).parts:
        current = current / part
        try:
            os.mkdir(current)
        except FileExistsError:
            pass


def fallback_ledger_dir(root: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path:
    """The per-user ledger of a root that cannot be written (read-only file system or permissions)."""
    return user_state_dir(environ) / "ledgers" / root_key(root)


def ledger_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """Every folder that may hold segments of this root: its own ledger, then the user fallback."""
    return [ledger_dir(root), fallback_ledger_dir(root)]


def present_ledger_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """`ledger_dirs` without hashing the root's path for a fallback that cannot exist: the
    per-user fallback only where the per-user `ledgers` folder exists (what a listing checks)."""
    if os.path.isdir(user_state_dir() / "ledgers"):
        return ledger_dirs(root)
    return [ledger_dir(root)]


def segment_name(host: str, pid: int, start: float) -> str:
    """`<host>-<pid>-<UTC start time>.jsonl`: unique per process, sortable by start within a host."""
    stamp = datetime.fromtimestamp(start, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe_host = "".join(c if c.isalnum() or c in "-." else "_" for c in host) or "host"
    return f"{safe_host}-{pid}-{stamp}{SEGMENT_SUFFIX}"


def is_segment_name(name: str) -> bool:
    """A name a segment can have: a plain file name in its folder (no folder part, no leading
    dot, no `..`), ending in `.jsonl`. A compacted segment naming anything else names nothing."""
    return (
        os.path.basename(name) == name
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not name.startswith(".")
        and name.endswith(SEGMENT_SUFFIX)
    )


def roots_file(environ: Mapping[str, str] | None = None) -> Path:
    return user_state_dir(environ) / ROOTS_FILE


def known_roots(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every root a tracer of this user wrote to: `{absolute path: {"kind", "first_seen", "last_seen"}}`."""
    from cachetool.safejson import read_json_file

    try:
        doc = read_json_file(roots_file(environ))
    except (OSError, ValueError):
        return {}
    roots = doc.get("roots") if isinstance(doc, dict) else None
    return {k: v for k, v in roots.items() if isinstance(v, dict)} if isinstance(roots, dict) else {}


def other_roots(
    root: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The roots of the registry other than `root`, sorted: `(absolute path, kind)` (kind `saved`
    for a `save_to_disk` folder, else `cache`). Keys that are not absolute paths are skipped."""
    here = os.path.realpath(os.fspath(root))
    return [
        (path, "saved" if item.get("kind") == "saved" else "cache")
        for path, item in sorted(known_roots(environ).items())
        if os.path.isabs(path) and os.path.realpath(path) != here
    ]


def newest_segment_elsewhere(root: str | os.PathLike[str]) -> tuple[float, str, Path] | None:
    """(modification time, root, segment) of the ledger segment written last in a root of the
    registry other than `root` (where a run with `cache_dir=` recorded), or None."""
    newest: tuple[float, str, Path] | None = None
    for other, _ in other_roots(root):
        for segment in ledger_dir(other).glob("*.jsonl"):
            try:
                when = segment.stat().st_mtime
            except OSError:
                continue
            if newest is None or when > newest[0]:
                newest = (when, other, segment)
    return newest


def latest_root_elsewhere(root: str | os.PathLike[str]) -> str | None:
    """The root of the registry, other than `root`, whose ledger was written to last, or None
    when a later run recorded in `root` only (a segment is named after its run)."""
    newest = newest_segment_elsewhere(root)
    if newest is None:
        return None
    when, other, last = newest
    for segment in ledger_dir(root).glob("*.jsonl"):
        with contextlib.suppress(OSError):
            if segment.stem != last.stem and segment.stat().st_mtime > when:
                return None
    return other


def register_root(root: str | os.PathLike[str], kind: str = "cache") -> None:
    """Add `root` to the registry (once per process and root: a lock and a rewrite, off the hot path).

    Failures are silent: a registry we cannot write only means `lineage` cannot cross roots."""
    path = os.path.realpath(os.fspath(root))
    seen = known_roots().get(path)
    if seen and (seen.get("kind") == kind or kind != "saved"):
        last = seen.get("last_seen")
        if isinstance(last, (int, float)) and time.time() - last < 3600:
            return  # known and recently seen: no lock, no rewrite

    def add(roots: dict[str, dict[str, Any]]) -> None:
        now = time.time()
        item = roots.get(path) or {"kind": kind, "first_seen": now}
        item["last_seen"] = now
        if kind == "saved":
            item["kind"] = kind
        roots[path] = item

    _update_registry(add)


def forget_roots(paths: Iterable[str]) -> None:
    """Remove `paths` (absolute, as `known_roots` keys them) from the registry. Failures are
    silent, as for `register_root`."""
    gone = set(paths)

    def drop(roots: dict[str, dict[str, Any]]) -> None:
        for path in gone & set(roots):
            del roots[path]

    if gone & set(known_roots()):
        _update_registry(drop)


def _update_registry(change: Callable[[dict[str, dict[str, Any]]], None]) -> None:
    """Re-read the registry under its lock, `change` it, and write it whole."""
    try:
        from filelock import FileLock

        target = roots_file()
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock", timeout=5):
            roots = known_roots()
            change(roots)
            tmp = target.with_name(f".{ROOTS_FILE}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"v": 1, "roots": roots}, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, target)
    except Exception:  # never let bookkeeping break a pipeline
        return
