"""`verify --quarantine`: move what has errors aside (never delete), as a plan first, put it back
(`--restore`) or list it (`--list`). Each file is checked again right before it moves, and every
move goes through folder descriptors opened from the root without following symlinks.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.model import Entry
from cachetool.cache.scan import scan_cache
from cachetool.maintenance.fdops import O_DIR, identity, inventory, open_parent, parts_under, rename_noreplace
from cachetool.maintenance.liveness import InUse, pids_text, scan_in_use
from cachetool.maintenance.verify.findings import Finding, VerifyReport, owner
from cachetool.safejson import json_fields

QUARANTINE_DIR = "quarantine"
QUARANTINE_LOG = "log.jsonl"
#: The most of the quarantine log that is read (a record is about 300 bytes).
MAX_LOG_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class QuarantineUnit:
    """What moves together for one error, so that `datasets` recomputes instead of crashing."""

    finding: Finding
    paths: tuple[Path, ...]
    entry: Entry | None = None  # the entry the files belong to: its fingerprints go in the ledger


@dataclass(frozen=True)
class QuarantinePlan:
    """The moves `verify --quarantine` would make; nothing has moved yet."""

    report: VerifyReport
    units: tuple[QuarantineUnit, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file or folder that would move, once, in the order they would."""
        out: list[Path] = []
        for p in (p for unit in self.units for p in unit.paths):
            if p not in out and not any(q in p.parents for q in out):
                out.append(p)
        return tuple(out)

    def dry_run(self) -> VerifyReport:
        """The report, saying what would move (`would_quarantine`)."""
        return replace(self.report, would_quarantine=self.paths)

    def execute(self) -> VerifyReport:
        """Move each unit, checking every file again right before; see `quarantine`."""
        report, root = self.report, self.report.root
        if not self.units:
            return report
        moved: list[tuple[Path, Path]] = []
        problems: list[Finding] = []
        try:
            root_fd = os.open(root, O_DIR)
        except OSError as err:
            reason = f"cannot open the cache root: {err.strerror or err}"
            problems = [_not_quarantined(unit.finding, reason) for unit in self.units]
            return replace(report, findings=(*report.findings, *problems))
        in_use = scan_in_use(root=root)
        folder = functools.cache(lambda: _run_folder(root_fd))
        done: set[Path] = set()
        try:
            for unit in self.units:
                finding = unit.finding
                todo = [
                    src
                    for src in unit.paths
                    if src not in done and not any(p in done for p in src.parents) and os.path.lexists(src)
                ]
                why = _changed(root_fd, root, finding, finding.path)
                if why is not None and todo:
                    problems.append(_not_quarantined(finding, why))
                    continue
                this: list[tuple[Path, Path]] = []
                for src in todo:
                    try:
                        this.append((src, _move(root_fd, root, folder, src, finding, in_use)))
                    except (_Refused, OSError) as err:
                        problems.append(_not_quarantined(finding, _reason(err), src))
                if not this:
                    continue
                # Out of reach now: nobody can swap the file under its old name any more, so this
                # check is final. If the finding no longer holds, the unit goes back.
                why = _still_broken(root_fd, root, finding, this)
                if why is not None:
                    _put_back(root_fd, root, this)
                    problems.append(_not_quarantined(finding, why + " (put back)"))
                    continue
                done.update(src for src, _ in this)
                moved += this
                _record(root, unit, this)
        finally:
            os.close(root_fd)
        return replace(report, findings=(*report.findings, *problems), quarantined=tuple(moved))


def _record(root: Path, unit: QuarantineUnit, moved: list[tuple[Path, Path]]) -> None:
    """Say in the ledger what moved, as gc says what it removed: `show` and `explain` name the
    quarantine when the fingerprint's files are missing or recomputed."""
    from cachetool.history.writer import GcLog

    e = unit.entry
    with GcLog(root) as log:
        log.removed(
            action="quarantined",
            kind=e.kind.value if e is not None else "file",
            paths=[src for src, _ in moved],
            moved_to=[dst for _, dst in moved],
            size=sum(_size(dst) for _, dst in moved),
            files=len(moved),
            reason=unit.finding.problem,
            fingerprint=e.fingerprint if e is not None else None,
            aliases=e.aliases if e is not None else (),
            when=time.time(),
        )


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _not_quarantined(f: Finding, why: str, path: Path | None = None) -> Finding:
    return replace(f, code="not-quarantined", problem=f"not quarantined: {why}", path=path or f.path, hint="")


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
    by_path = {e.path: e for e in scanned.entries} | {f.path: e for e in scanned.entries for f in e.files}
    units: list[QuarantineUnit] = []
    refused: list[Finding] = []
    for f in errors:
        e = by_path.get(f.path)
        why = _stays(f, e)
        if why is None and f.path == report.root:  # an interrupted save that is the root itself
            why = "it is the cache root itself: nothing is moved out of it"
        if why is not None:
            refused.append(_not_quarantined(f, why))
            continue
        assert e is not None
        if e.kind == Kind.SOURCE and e.dataset_dir is not None:
            paths = [e.dataset_dir / layout.DATASET_INFO, *(x.path for x in e.files)]
        elif e.kind in (Kind.INCOMPLETE_SAVE, Kind.INCOMPLETE_PREPARE):
            paths = [e.path]
        elif e.kind == Kind.SHARDS:  # datasets loads each finished shard on its own: they stay
            paths = [f.path]
        else:
            paths = [x.path for x in e.files] or [e.path]
        units.append(QuarantineUnit(f, tuple(p for p in paths if os.path.lexists(p)), e))
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
    if f.problem == "permission denied" and owner(e) not in (os.geteuid(), None):
        # A shared cache: gc leaves other users' files alone too (unless --all-users).
        return "another user's file this user may not read: it may be whole"
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


def _reason(err: Exception) -> str:
    return str(getattr(err, "strerror", None) or err)


@contextmanager
def _folder(root_fd: int, parts: tuple[str, ...], create: bool = False) -> Iterator[int]:
    """A descriptor of the folder holding `parts[-1]` (`fdops.open_parent`), closed after."""
    fd = open_parent(root_fd, parts, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def _changed(root_fd: int, root: Path, finding: Finding, where: Path) -> str | None:
    """Why the file at `where` is no longer the version of the finding (None: it still is, or
    the finding is about a folder)."""
    if finding.identity is None:
        return None
    try:
        parts = parts_under(root, where)
        with _folder(root_fd, parts) as fd:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except (OSError, ValueError):
        return "changed since verify read it (gone or moved)"
    if finding.identity != identity(st):
        return "changed since verify read it (another file or other bytes now)"
    return None


def _rename(root_fd: int, root: Path, src: Path, dst: Path, *, make_room: bool = False) -> None:
    """Move `src` to `dst` (both below `root`) through folder descriptors, never over anything
    (`make_room`: an empty folder at `dst` is removed first for a folder)."""
    s_parts, d_parts = parts_under(root, src), parts_under(root, dst)
    with _folder(root_fd, s_parts) as s_fd, _folder(root_fd, d_parts) as d_fd:
        if make_room:
            _make_room(s_fd, s_parts[-1], d_fd, d_parts[-1])
        rename_noreplace(s_fd, s_parts[-1], d_fd, d_parts[-1])


def _run_folder(root_fd: int) -> str:
    """Make the folder of one quarantine run, `<time>-<pid>` (`-2`, `-3`, ... when a run of the
    same process in the same second has it); called when the run's first file moves."""
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    with _folder(root_fd, (layout.LEDGER_DIR, QUARANTINE_DIR, stamp), create=True) as fd:
        for name in (stamp, *(f"{stamp}-{n}" for n in range(2, 10_000))):
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                continue
            return name
    raise OSError(errno.EEXIST, "no free quarantine folder", stamp)


def _move(
    root_fd: int, root: Path, folder: Callable[[], str], src: Path, finding: Finding, in_use: InUse
) -> Path:
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
        dst_parts = (layout.LEDGER_DIR, QUARANTINE_DIR, folder(), *parts)
        dst = root.joinpath(*dst_parts)
        with _folder(root_fd, dst_parts, create=True) as dst_fd:
            _log(root, "quarantine", src, dst, problem=finding.problem)
            rename_noreplace(src_fd, parts[-1], dst_fd, parts[-1])
    finally:
        os.close(src_fd)
    return dst


def _check_unheld(dir_fd: int, name: str, in_use: InUse) -> None:
    """Refuse a symlink, and anything (a file, or a file in a folder) that a live process holds,
    maps or writes, or that a live lease may cover."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise _Refused("a symlink")
    for s in _files_in(name, dir_fd) if stat.S_ISDIR(st.st_mode) else [st]:
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
        (dst / finding.path.relative_to(src) for src, dst in unit if finding.path.is_relative_to(src)),
        None,
    )
    if where is None:
        return None
    why = _changed(root_fd, root, finding, where)
    if why is not None:
        return why
    # A header or deep finding is checked again by reading the file again; the others rely on
    # the file's identity alone.
    if finding.code == "unreadable-header":
        from cachetool.cache.arrow import read_summary

        if read_summary(where).error is None:
            return "changed since verify read it (it reads whole now)"
    elif finding.code == "invalid-data":
        from cachetool.maintenance.verify.deep import deep_check

        if deep_check(where).error is None:
            return "changed since verify read it (it validates now)"
    return None


def _put_back(root_fd: int, root: Path, unit: list[tuple[Path, Path]]) -> None:
    """Undo the moves of one unit, never over something new at the old name (then it stays in
    quarantine, logged, for `--restore` to report)."""
    for src, dst in reversed(unit):
        try:
            _rename(root_fd, root, dst, src)
        except (OSError, ValueError):
            continue
        _log(root, "restore", dst, src)


def _log(root: Path, action: str, src: Path, dst: Path, **more: str) -> None:
    """Append a record of a move to the quarantine log, as one whole line (never through a
    symlink, see `cachetool.cache.store`)."""
    from cachetool.cache.store import append_state

    rec = {"action": action, "from": os.fsdecode(src), "to": os.fsdecode(dst), **more, "time": time.time()}
    log = root / layout.LEDGER_DIR / QUARANTINE_DIR / QUARANTINE_LOG
    append_state(log, (json.dumps(rec) + "\n").encode("utf-8", "surrogateescape"))


# -- what the quarantine holds, and putting it back ------------------------------------------------


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
        """Every field, paths as text, `original` as "from"."""
        return {("from" if k == "original" else k): v for k, v in json_fields(self).items()}


def quarantined(root: str | os.PathLike[str]) -> list[Quarantined]:
    """What the quarantine of `root` holds (moved aside, not put back), oldest first: the command
    `cachetool verify --quarantine --list`. Nothing is written."""
    qbase = Path(root).resolve() / layout.LEDGER_DIR / QUARANTINE_DIR
    out = []
    for rec in _pending(qbase / QUARANTINE_LOG, lambda _msg: None):
        src = Path(rec["to"])
        if not _below(src, qbase) or src.is_symlink():
            continue
        try:
            st = os.lstat(src)
        except OSError:
            continue
        try:
            sizes = [s.st_size for s in (_files_in(src) if stat.S_ISDIR(st.st_mode) else [st])]
        except OSError:
            sizes = []
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


def _files_in(name: str | Path, dir_fd: int | None = None) -> list[os.stat_result]:
    """The stat of every file (not folder) below the folder `name`, never following a symlink."""
    fd = os.open(name, O_DIR, dir_fd=dir_fd)
    try:
        return [s for s in inventory(fd) if not stat.S_ISDIR(s.st_mode)]
    finally:
        os.close(fd)


def _pending(log: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The quarantine records of the log not restored since (with `stays`: why the latest
    restore could not put one back); what does not read or parse is named."""
    from cachetool.cache.store import read_state
    from cachetool.safejson import BadJsonFile, parse_json

    try:
        lines = read_state(log, MAX_LOG_BYTES).splitlines()
    except FileNotFoundError:
        return []
    except (OSError, BadJsonFile) as err:
        say(f"{log}: not read: {err}")
        return []
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
    for rec in _pending(log, say):
        src, dst = Path(rec["to"]), Path(rec["from"])
        if not os.path.lexists(src):
            continue
        if src.is_symlink() or len(_below(src, qbase)) < 2:
            say(f"{log}: {src} is not a file or folder inside the quarantine folder; not restored")
            continue
        if _below(dst, root_path)[:1] in ((), (layout.LEDGER_DIR,)):
            say(f"{log}: {dst} is not inside the cache root; not restored")
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            root_fd = os.open(root_path, O_DIR)
            try:
                _rename(root_fd, root_path, _real(src), _real(dst), make_room=True)
            finally:
                os.close(root_fd)
        except (OSError, ValueError) as err:
            why = _reason(err)
            if rec.get("stays") != why:  # said once; tried again every time, quietly
                say(f"{dst}: cannot go back: {why}")
                _log(root_path, "stays", src, dst, reason=why)
            continue
        restored.append((src, dst))
        _log(root_path, "restore", src, dst)
    return restored


def _real(path: Path) -> Path:
    """`path` with its folder resolved and its last component not followed."""
    return Path(os.path.realpath(path.parent)) / path.name


def _below(path: Path, folder: Path) -> tuple[str, ...]:
    """The names from `folder` down to `path` (its folder resolved); () when not below it."""
    try:
        return parts_under(folder, _real(path))
    except ValueError:
        return ()


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
