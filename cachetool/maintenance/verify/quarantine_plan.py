"""`verify --quarantine`: move what has errors aside (never delete), as a plan first.

`plan_quarantine(report)` says what would move, unit by unit (a damaged source split takes its
`dataset_info.json`; a num_proc shard only itself; a saved dataset and what `datasets` did not
write never move); `--dry-run`
prints it; `plan.execute()` moves each unit into `<root>/.cachetool/quarantine/<time>-<pid>/`,
checking each file again right before: still the version verify judged, not a symlink, inside the
cache, not held or mapped by a live process, not covered by a live lease. `restore` puts them back.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.model import Entry
from cachetool.cache.scan import scan_cache
from cachetool.maintenance.fdops import O_DIR, identity, inventory, open_parent, rename_noreplace
from cachetool.maintenance.liveness import InUse, scan_in_use
from cachetool.maintenance.verify.model import RECHECK, Finding, Problem, VerifyReport, pids_text

QUARANTINE_DIR = "quarantine"
QUARANTINE_LOG = "log.jsonl"


@dataclass(frozen=True)
class QuarantineUnit:
    """What moves together for one error, so that `datasets` recomputes instead of crashing."""

    finding: Finding
    paths: tuple[Path, ...]


@dataclass(frozen=True)
class QuarantinePlan:
    """The moves `verify --quarantine` would make; nothing has moved yet."""

    report: VerifyReport
    units: tuple[QuarantineUnit, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file or folder that would move, once, in the order they would."""
        out: list[Path] = []
        for unit in self.units:
            for p in unit.paths:
                if p not in out and not any(q in p.parents for q in out):
                    out.append(p)
        return tuple(out)

    def dry_run(self) -> VerifyReport:
        """The report, saying what would move (`would_quarantine`)."""
        return replace(self.report, would_quarantine=self.paths)

    def execute(self) -> VerifyReport:
        """Move each unit, checking every file again right before; see `quarantine`."""
        return _execute(self)


def plan_quarantine(report: VerifyReport) -> QuarantinePlan:
    """What to move for each error so that `datasets` recomputes instead of crashing.

    A damaged source split takes `dataset_info.json` with it (moved first: without it `datasets`
    prepares the folder again); a num_proc shard (datasets reuses the others), and anything else,
    is the damaged file alone. Only what the cache model classifies as written by `datasets`
    moves (`layout.MOVABLE_KINDS`), whatever a finding or a ledger record says of a path: a
    file of the user's, a saved dataset's files (nothing recomputes them: saved again, not moved)
    and a file whose bytes only differ from a recorded checksum (a finding, not proof) stay, each
    with a `not-quarantined` finding saying why (in `plan.report`)."""
    errors = report.errors
    if not errors:
        return QuarantinePlan(report, ())
    scanned = scan_cache(report.root, use_index=False, liveness=scan_in_use)
    by_file = {f.path: e for e in scanned.entries for f in e.files}
    by_path = {e.path: e for e in scanned.entries}
    units: list[QuarantineUnit] = []
    refused: list[Finding] = []
    for f in errors:
        e = by_file.get(f.path) or by_path.get(f.path)
        why = _stays(f, e)
        if why is not None:
            note = Problem("not-quarantined", f"not quarantined: {why}")
            refused.append(replace(f, issue=note, hint=""))
            continue
        assert e is not None
        if e.kind == Kind.SOURCE and e.dataset_dir is not None:
            paths = [e.dataset_dir / layout.DATASET_INFO, *(x.path for x in e.files)]
        elif e.kind in (Kind.INCOMPLETE_SAVE, Kind.INCOMPLETE_PREPARE):
            paths = [e.path]
        elif e.kind == Kind.SHARDS:
            # datasets loads each finished shard on its own and computes only the missing ones:
            # a complete, valid shard stays.
            paths = [f.path]
        else:
            paths = [x.path for x in e.files] or [e.path]
        units.append(QuarantineUnit(f, tuple(p for p in paths if os.path.lexists(p))))
    report = replace(report, findings=(*report.findings, *refused))
    return QuarantinePlan(report, tuple(u for u in units if u.paths))


def _stays(f: Finding, e: Entry | None) -> str | None:
    """Why the error `f` about entry `e` (None: no entry of the cache holds its path) moves
    nothing; None when its files may move."""
    if e is not None and e.kind == Kind.SAVED:
        return "a saved dataset's file (save_to_disk): nothing recomputes it, save it again"
    if e is None or e.kind not in layout.MOVABLE_KINDS:
        what = "nothing" if e is None else e.kind.value
        return f"not a file datasets wrote (the cache classifies it as {what}), whatever a record says"
    if f.code == "checksum-changed":
        return "its stream validates in full; a differing checksum alone is no proof of damage"
    return None


def quarantine(report: VerifyReport) -> VerifyReport:
    """Move what has errors into `<root>/.cachetool/quarantine/<time>-<pid>/` (never delete), so the
    next `datasets` run recomputes it instead of crashing: `plan_quarantine(report).execute()`.
    Each move is logged before it happens; one that fails becomes a finding and the others go on.
    Nothing a live process holds moves.

    Only the file version verify judged moves: its identity (device, inode, size, mtime) is
    compared before the move, and again with the finding itself once the unit is out of reach in
    the quarantine folder; a file replaced or repaired meanwhile is put back. Every step goes
    through folder descriptors opened from the root without following symlinks."""
    return plan_quarantine(report).execute()


class _Refused(Exception):
    """A file that stays where it is, and why (a sentence)."""


def _execute(plan: QuarantinePlan) -> VerifyReport:
    report = plan.report
    root = report.root
    folder = _RunFolder(f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    moved: list[tuple[Path, Path]] = []
    problems: list[Finding] = []

    def refuse(finding: Finding, src: Path, why: str) -> None:
        note = Problem("not-quarantined", f"not quarantined: {why}")
        problems.append(replace(finding, issue=note, path=src, hint=""))

    if not plan.units:
        return report
    try:
        root_fd = os.open(root, O_DIR)
    except OSError as err:
        for unit in plan.units:
            refuse(unit.finding, unit.finding.path, f"cannot open the cache root: {err.strerror or err}")
        return replace(report, findings=(*report.findings, *problems))
    in_use = scan_in_use(root=root)
    done: set[Path] = set()
    try:
        for unit in plan.units:
            finding = unit.finding
            todo = [
                src
                for src in unit.paths
                if src not in done and not any(p in done for p in src.parents) and os.path.lexists(src)
            ]
            why = _changed(root_fd, root, finding)
            if why is not None and todo:
                refuse(finding, finding.path, why)
                continue
            this: list[tuple[Path, Path]] = []
            for src in todo:
                try:
                    this.append((src, _move(root_fd, root, folder, src, finding, in_use)))
                except _Refused as refusal:
                    refuse(finding, src, str(refusal))
                except OSError as err:
                    refuse(finding, src, err.strerror or str(err))
            if not this:
                continue
            # Out of reach now: nobody can swap the file under its old name any more, so this
            # check is final. If the finding no longer holds, the unit goes back.
            why = _still_broken(root_fd, root, finding, this)
            if why is not None:
                _put_back(root_fd, root, this)
                refuse(finding, finding.path, why + " (put back)")
                continue
            done.update(src for src, _ in this)
            moved += this
    finally:
        os.close(root_fd)
    return replace(report, findings=(*report.findings, *problems), quarantined=tuple(moved))


def parts_under(root: Path, path: Path) -> tuple[str, ...]:
    """The names from `root` down to `path`; ValueError when `path` is not below `root`."""
    parts = path.relative_to(root).parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise ValueError(path)
    return parts


def _stat_at(root_fd: int, parts: tuple[str, ...]) -> os.stat_result:
    fd = open_parent(root_fd, parts)
    try:
        return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def _changed(root_fd: int, root: Path, finding: Finding) -> str | None:
    """Why the finding's file is no longer the version verify read (None: it still is)."""
    if finding.identity is None:
        return None
    try:
        st = _stat_at(root_fd, parts_under(root, finding.path))
    except (OSError, ValueError):
        return "changed since verify read it (gone or moved)"
    if finding.identity != identity(st):
        return "changed since verify read it (another file or other bytes now)"
    return None


class _RunFolder:
    """The folder of one quarantine run, `<time>-<pid>` (`-2`, `-3`, ... when a run of the same
    process in the same second has it), made when the run's first file moves."""

    def __init__(self, stamp: str) -> None:
        self.stamp = stamp
        self.name: str | None = None

    def claim(self, root_fd: int) -> str:
        if self.name is None:
            fd = open_parent(root_fd, (layout.LEDGER_DIR, QUARANTINE_DIR, self.stamp), create=True)
            try:
                for n in range(1, 10_000):
                    name = self.stamp if n == 1 else f"{self.stamp}-{n}"
                    try:
                        os.mkdir(name, 0o700, dir_fd=fd)
                    except FileExistsError:
                        continue
                    self.name = name
                    break
                else:
                    raise OSError(errno.EEXIST, "no free quarantine folder", self.stamp)
            finally:
                os.close(fd)
        return self.name


def _move(root_fd: int, root: Path, folder: _RunFolder, src: Path, finding: Finding, in_use: InUse) -> Path:
    """Rename `src` into the quarantine folder of this run, never over anything; logged first.

    The checks and the move go through one descriptor of `src`'s folder, opened from the root
    one component at a time without following a symlink: what is checked is what moves."""
    try:
        parts = parts_under(root, src)
    except ValueError:
        raise _Refused("outside the cache root") from None
    if parts[0] == layout.LEDGER_DIR:
        raise _Refused("outside the cache root")
    try:
        src_fd = open_parent(root_fd, parts)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Refused("a folder on its way is a symlink") from None
        raise
    try:
        _check_unheld(src_fd, parts[-1], in_use)
        dst_parts = (layout.LEDGER_DIR, QUARANTINE_DIR, folder.claim(root_fd), *parts)
        dst = root.joinpath(*dst_parts)
        dst_fd = open_parent(root_fd, dst_parts, create=True)
        try:
            log_move(
                root,
                {
                    "action": "quarantine",
                    "from": os.fsdecode(src),
                    "to": os.fsdecode(dst),
                    "problem": finding.problem,
                    "time": time.time(),
                },
            )
            rename_noreplace(src_fd, parts[-1], dst_fd, parts[-1])
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return dst


def _check_unheld(dir_fd: int, name: str, in_use: InUse) -> None:
    """Refuse a symlink, and anything (a file, or a file in a folder) that a live process holds,
    maps or writes, or that a live lease may cover."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise _Refused("a symlink")
    stats = [st]
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, O_DIR, dir_fd=dir_fd)
        try:
            stats = [s for s in inventory(fd) if not stat.S_ISDIR(s.st_mode)]
        finally:
            os.close(fd)
    for s in stats:
        pids = in_use.pids(s)
        if pids:
            raise _Refused(f"in use by pid {pids_text(pids)}")
        lease = in_use.lease_over(s.st_mtime)
        if lease is not None:
            raise _Refused(f"may be being written by {lease} (a live lease)")


def _still_broken(root_fd: int, root: Path, finding: Finding, unit: list[tuple[Path, Path]]) -> str | None:
    """Check the finding's file where it now lies in the quarantine folder: same identity, and
    (for a header or deep finding) the same reading fails again. None when it still holds."""
    if finding.identity is None:
        return None
    where = next(
        (
            dst / finding.path.relative_to(src)
            for src, dst in unit
            if src == finding.path or src in finding.path.parents
        ),
        None,
    )
    if where is None:
        return None
    try:
        st = _stat_at(root_fd, parts_under(root, where))
    except (OSError, ValueError):
        return "changed since verify read it (gone)"
    if identity(st) != finding.identity:
        return "changed since verify read it (another file or other bytes now)"
    check = RECHECK.get(finding.code)
    if check == "header":
        from cachetool.cache.arrow import read_summary

        if read_summary(where).error is None:
            return "changed since verify read it (it reads whole now)"
    elif check == "deep":
        from cachetool.maintenance.verify.deep import deep_check

        if deep_check(where).error is None:
            return "changed since verify read it (it validates now)"
    return None


def _put_back(root_fd: int, root: Path, unit: list[tuple[Path, Path]]) -> None:
    """Undo the moves of one unit, never over something new at the old name (then it stays in
    quarantine, logged, for `--restore` to report)."""
    for src, dst in reversed(unit):
        try:
            s_parts, d_parts = parts_under(root, src), parts_under(root, dst)
            s_fd = open_parent(root_fd, s_parts)
            try:
                d_fd = open_parent(root_fd, d_parts)
                try:
                    rename_noreplace(d_fd, d_parts[-1], s_fd, s_parts[-1])
                finally:
                    os.close(d_fd)
            finally:
                os.close(s_fd)
        except (OSError, ValueError):
            continue
        log_move(
            root, {"action": "restore", "from": os.fsdecode(dst), "to": os.fsdecode(src), "time": time.time()}
        )


def log_move(root: Path, rec: dict[str, Any]) -> None:
    """Append `rec` to the quarantine log, as one whole line (never through a symlink, see
    `cachetool.cache.store`)."""
    from cachetool.cache.store import append_state

    log = root / layout.LEDGER_DIR / QUARANTINE_DIR / QUARANTINE_LOG
    append_state(log, (json.dumps(rec) + "\n").encode("utf-8", "surrogateescape"))
