"""`verify --deep`: validate every buffer of every Arrow file, and checksum its bytes (xxh3) where a
stored checksum is compared or `--record` stores one, so a later deep verify reports bytes that
changed."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, CacheReport, Entry
from cachetool.cache.store import write_whole
from cachetool.formatting import local_time
from cachetool.hints import shell_command
from cachetool.maintenance.fdops import identity
from cachetool.maintenance.verify.checks import Checker
from cachetool.maintenance.verify.deep_read import DeepResult, Want, deep_check, read_files
from cachetool.maintenance.verify.model import Finding, Problem, rel
from cachetool.maintenance.verify.schema_check import SchemaVerdicts, load_error

__all__ = ["DeepResult", "deep_check", "deep_pass", "load_checksums", "load_error", "save_checksums"]

CHECKSUMS_NAME = "checksums.json"


# -- stored checksums ----------------------------------------------------------------------------


def checksums_path(root: Path) -> Path:
    return root / layout.LEDGER_DIR / CHECKSUMS_NAME


def load_checksums(root: Path) -> dict[str, dict[str, Any]]:
    from cachetool.cache.store import read_state_json

    try:
        doc = read_state_json(checksums_path(root))
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, dict)}  # an entry edited by hand


def save_checksums(root: Path, files: dict[str, dict[str, Any]]) -> None:
    """Store the checksums `files` (relative path -> record) over the ones stored, keeping every
    other file's: under a lock, the stored ones are read again and merged, so two `--record`
    runs at once (two CI jobs) each keep what the other recorded. OSError (TimeoutError after
    `LOCK_SECONDS`) when they cannot be stored."""
    from cachetool.cache.store import lock_state

    path = checksums_path(root)
    with lock_state(path.with_name(CHECKSUMS_NAME + ".lock"), LOCK_SECONDS):
        merged = {**load_checksums(root), **files}
        doc = json.dumps({"version": 1, "files": merged}, separators=(",", ":")).encode()
        write_whole(path, doc, create_folders=True)


#: How long `save_checksums` waits for another process storing its checksums (a few writes).
LOCK_SECONDS = 60.0


# -- the deep pass -------------------------------------------------------------------------------


def deep_pass(
    checker: Checker,
    report: CacheReport,
    entries: Sequence[Entry],
    *,
    record: bool,
    jobs: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    """Read every whole Arrow stream of `entries` on `jobs` threads, add a finding for each that
    does not validate or whose bytes changed since recorded, and with `record` store the new
    checksums. Returns (bytes read, checksums stored). What `datasets` would say of each schema is
    remembered in the cache (`schema_check.SchemaVerdicts`) for the next run."""
    targets: list[tuple[Entry, CacheFile]] = [
        (e, f)
        for e in entries
        if e.kind not in (Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE)
        for f in e.files
        if f.summary is not None and f.summary.error is None and f.summary.format == "stream"
    ]
    verdicts = SchemaVerdicts(report.root)
    paths = [f.path for _, f in targets]
    stored = load_checksums(report.root)
    wants = [_want(stored.get(rel(p, report.root)), record) for p in paths]
    read = read_files(paths, jobs, verdicts, progress, wants)
    results = list(zip([e for e, _ in targets], read, strict=True))
    verdicts.save()
    new_sums: dict[str, dict[str, Any]] = {}
    record_command = shell_command("verify", "--deep", "--record", "--cache-dir", os.fsdecode(report.root))
    for e, res in results:
        if res.error is not None:
            checker.add("invalid-data", e, res.path, res.error, checker.recompute(e), ident=res.identity)
            continue
        key = rel(res.path, report.root)
        rewritten = _compare(checker, e, res, stored.get(key), record_command)
        if record or (rewritten and _unchanged_since_read(res)):
            new_sums[key] = _record(res)
    total_bytes = sum(res.size for _, res in results)
    if not new_sums:
        return total_bytes, 0
    try:
        save_checksums(report.root, new_sums)
    except OSError as err:
        checker.findings.append(
            Finding(
                Problem("checksums-not-stored", f"cannot store checksums: {err.strerror or err}"),
                "",
                "record",
                checksums_path(report.root),
            )
        )
        return total_bytes, 0
    return total_bytes, sum(1 for _, r in results if r.error is None) if record else 0


def _record(res: DeepResult) -> dict[str, Any]:
    """What is stored of a file read in full: its checksum, and the stat that tells a later run
    whether it was written anew (inode, mtime, ctime) or changed where it lies."""
    rec: dict[str, Any] = {
        "size": res.size,
        "mtime_ns": res.mtime_ns,
        "ctime_ns": res.ctime_ns,
        "xxh3": res.checksum,
        "time": time.time(),
    }
    if res.identity is not None:
        rec["ino"] = res.identity[1]
    if _unchanged_since_read(res):
        rec["validated"] = validator()
    return rec


#: What a deep read checks, as a number: raise it whenever that changes, so that files recorded
#: as valid before are validated in full again.
DEEP_CHECKS = 1


def validator() -> str:
    """What validated a file in full, stored with its checksum: the same bytes validated by the
    same pyarrow and the same checks give the same answer."""
    import pyarrow as pa

    return f"pyarrow {pa.__version__}; checks {DEEP_CHECKS}"


def _unchanged_since_read(res: DeepResult) -> bool:
    """Whether the file is still the very version that was read (a write in place while it was
    read could have had old bytes validated and new ones hashed: those are not trusted later)."""
    try:
        st = os.stat(res.path)
    except OSError:
        return False
    return identity(st) == res.identity and st.st_ctime_ns == res.ctime_ns


def _want(old: dict[str, Any] | None, record: bool) -> Want:
    """A checksum is computed when one is stored to compare with, or `record` stores it; a file
    whose stored checksum was recorded after this pyarrow validated it in full is validated again
    only if its bytes changed."""
    if old is None:
        return Want(checksum=record)
    trusted = old.get("xxh3") if old.get("validated") == validator() else None
    return Want(trusted=trusted if isinstance(trusted, str) else None)


def _compare(
    checker: Checker, e: Entry, res: DeepResult, old: dict[str, Any] | None, record_command: str
) -> bool:
    """Whether a file whose bytes differ from its recorded checksum was written anew since (True:
    its checksum is to be recorded again), and a finding saying which.

    Only a file whose stream validates in full comes here. Written anew: another inode (written
    beside and renamed, as `datasets` writes a cache file), or a new mtime (and so a new ctime:
    truncated and written again, as `save_to_disk` writes into its folder): information, and it
    is recorded again. The same inode and mtime with other bytes is bit rot, a silent overwrite,
    or a wrong record: an error that says the stream validates, and which `--quarantine` never
    moves on this evidence alone (one mismatch against a record is a finding, not proof)."""
    if old is None or old.get("xxh3") == res.checksum:
        return False
    when = local_time(float(old.get("time", 0)), seconds=False)
    ino = res.identity[1] if res.identity is not None else None
    new_inode = isinstance(old.get("ino"), int) and ino is not None and old["ino"] != ino
    if new_inode or old.get("mtime_ns") != res.mtime_ns:
        how = "a new file" if new_inode else "a new modification time"
        checker.add(
            "rewritten",
            e,
            res.path,
            f"rewritten since its checksum was recorded {when} ({how}; the stream validates "
            "in full): checksum recorded again",
            "",
        )
        return True
    same_size = " (same size and mtime: bit rot or a silent overwrite)" if old.get("size") == res.size else ""
    checker.add(
        "checksum-changed",
        e,
        res.path,
        f"bytes changed since checksum recorded {when}{same_size}; the stream validates in full, "
        "so values changed inside it or the record is wrong: not moved by --quarantine",
        f"check the data; if the file is right, run `{record_command}` again",
    )
    return False
