"""Planning `--temp`: what killed processes left behind, each proven dead before it is planned.

`tmp*` files of a killed writer, `<hash or version>.incomplete/` folders of an interrupted
preparation, interrupted `save_to_disk` folders, `*.incomplete` downloads, lock files that guard
nothing any more, what a killed `tf.data` writer or gc left, and in the temp dir only
`hf_datasets-*`, `pymp-*` and `cachetool-determinism-*` folders.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache import layout
from cachetool.cache.layout import WRITTEN_BY_DATASETS, Kind, TempKind
from cachetool.maintenance.gc.plan import GcItem, Refusal, Target
from cachetool.maintenance.gc.rules import Planner, gc_alive, owner_uid
from cachetool.maintenance.liveness import LockState, lock_guard, probe

if TYPE_CHECKING:
    from cachetool.cache.model import CacheFile
    from cachetool.cache.scan import Entry


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


def newest_mtime(e: Entry) -> float | None:
    """The newest modification time of an entry's files and of the entry itself."""
    got = max((f.mtime for f in e.files), default=None)
    try:
        own = os.lstat(e.path).st_mtime
    except OSError:
        return got
    return own if got is None else max(got, own)


class LeftoverPlanner(Planner):
    """The `--temp` steps of a plan."""

    def leftovers(self, only: set[Path] | None = None) -> None:
        # Folders `datasets` writes cache files into: dataset folders, and folders holding its
        # cache-<fp>.arrow files. A folder of a user's own .arrow files is not one of them.
        data_dirs = {d.path for d in self.report.datasets}
        data_dirs |= {e.path.parent for e in self.report.entries if e.kind in WRITTEN_BY_DATASETS}
        locks: list[Entry] = []
        for e in self.report.entries:
            if only is not None and e.path not in only:
                continue
            if e.kind == Kind.TEMP and layout.GC_TRASH_RE.match(e.path.name):
                self.gc_trash(e)
            elif e.kind == Kind.TEMP:
                self.temp_file(e, data_dirs)
            elif e.kind == Kind.INCOMPLETE_PREPARE:
                self.incomplete_prepare(e)
            elif e.kind == Kind.INCOMPLETE_SAVE:
                self.incomplete_save(e)
            elif e.kind == Kind.DOWNLOAD:
                self.incomplete_download(e)
            elif e.kind == Kind.LOCK:
                locks.append(e)
            elif e.kind == Kind.TF_CACHE:
                self.tf_leftovers(e)
        # Locks last: whether a lock still guards something depends on the folders removed above.
        for e in locks:
            self.lock(e)

    def temp_file(self, e: Entry, data_dirs: set[Path]) -> None:
        f = e.files[0] if e.files else None
        if f is None or not stat.S_ISREG(f.mode):
            self.skip(e, Refusal("not-regular", "not a regular file"))
            return
        if e.dataset_dir is None and e.path.parent not in data_dirs:
            self.skip(e, Refusal("not-datasets", "not in a dataset folder: datasets did not write it"))
            return
        reason = ("empty" if f.size == 0 else "partial") + " tmp file of a killed writer"
        self.leftover_file(e, f, Kind.TEMP, reason, dataset=e.dataset, aliases=e.aliases)

    def leftover_file(self, e: Entry, f: CacheFile, kind: Kind, reason: str, **extra: Any) -> None:
        """Plan to remove one leftover file as one item, unless a rule keeps it (a lock's age
        says nothing: filelock never touches its mtime)."""
        aged = kind != Kind.LOCK
        why = self.refusal([f.uid], f.mtime if aged else None, self.file_pids([f]), age_applies=aged)
        if why:
            self.skip(e, why, path=f.path, size=f.size)
            return
        self.add(GcItem(f.path, kind, f.size, 1, reason, (Target(f.path, False, f.size, f.mtime),), **extra))

    def tf_leftovers(self, e: Entry) -> None:
        """What a killed `tf.data` writer left (its lockfiles and partial shards), as one item;
        never a finished cache's index or data."""
        if e.state == "being-written":
            self.skip(e, Refusal("being-written", e.problems[-1] if e.problems else "being written"))
            return
        if e.state != "abandoned":
            return
        from cachetool.cache.tfdata import tf_leftover_name

        files = [f for f in e.files if tf_leftover_name(f.name)]
        if not files or any(not stat.S_ISREG(f.mode) for f in files):
            self.skip(e, Refusal("not-regular", "not a regular file"))
            return
        why = self.refusal([f.uid for f in files], max(f.mtime for f in files), self.file_pids(files))
        if why:
            self.skip(e, why)
            return
        self.add(
            GcItem(
                e.path,
                Kind.TF_CACHE,
                sum(f.size for f in files),
                len(files),
                "tf.data cache writer killed mid-write: its lockfile and partial shard",
                tuple(Target(f.path, False, f.size, f.mtime) for f in files),
                dataset=e.dataset,
            )
        )

    def gc_trash(self, e: Entry) -> None:
        """What a gc set aside and could not finish removing (it was killed)."""
        m = layout.GC_TRASH_RE.match(e.path.name)
        if m and gc_alive(int(m.group("pid"))):
            self.skip(
                e, Refusal("gc-running", f"the gc that set it aside (pid {m.group('pid')}) is still running")
            )
            return
        reason = "set aside by a gc that did not finish"
        if not e.files or any(f.path != e.path for f in e.files):
            self.leftover_folder(e, reason)
            return
        self.leftover_file(e, e.files[0], Kind.TEMP, reason)

    def incomplete_prepare(self, e: Entry) -> None:
        final = e.dataset_dir or e.path.with_name(e.path.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)])
        if not layout.PREPARE_NAME_RE.match(final.name):
            self.skip(
                e, Refusal("not-datasets", "not named <hash or version>.incomplete: datasets did not make it")
            )
            return
        lock = final.with_name(layout.builder_lock_name(final.name))
        state = probe(lock)
        if state.held:
            self.skip(e, _busy_reason("a preparation", lock, state))
            return
        self.leftover_folder(e, "interrupted preparation, its builder lock is free", lock=lock)

    def incomplete_save(self, e: Entry) -> None:
        if e.path == self.root:
            self.skip(e, Refusal("cache-root", "is the cache root itself"))
            return
        self.leftover_folder(e, "interrupted save_to_disk (no state.json)")

    def leftover_folder(self, e: Entry, reason: str, lock: Path | None = None) -> None:
        """Plan to remove a leftover folder as one item, unless something in it says keep."""
        newest = newest_mtime(e)
        uids = [f.uid for f in e.files] + [owner_uid(e.path)]
        why = self.refusal(uids, newest, self.in_use.pids_under(e.path))
        if why:
            self.skip(e, why)
            return
        target = Target(e.path, True, e.size, newest)
        self.add(
            GcItem(e.path, e.kind, e.size, len(e.files), reason, (target,), dataset=e.dataset, lock=lock)
        )

    def incomplete_download(self, e: Entry) -> None:
        for f in e.files:
            if not f.name.endswith(layout.INCOMPLETE_DIR_SUFFIX) or not stat.S_ISREG(f.mode):
                continue
            base = f.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)]
            lock = f.path.with_name(layout.download_lock_name(base))
            state = probe(lock)
            if state.held:
                self.skip(e, _busy_reason("a download", lock, state), path=f.path, size=f.size)
                continue
            reason = "interrupted download, its lock is free"
            self.leftover_file(e, f, Kind.DOWNLOAD, reason, dataset=e.dataset, lock=lock)

    def lock(self, e: Entry) -> None:
        f = e.files[0] if e.files else None
        if f is None or not stat.S_ISREG(f.mode):
            self.skip(e, Refusal("not-regular", "not a regular file"))
            return
        guard = lock_guard(e.path, self.root, self.listings)
        if guard is None:
            self.skip(e, Refusal("guard-unknown", "cannot tell which folder it guards"))
            return
        if guard.alive(frozenset(self.removing)):
            return  # a lock of a live folder: nothing to say, it is simply part of the cache
        state = probe(e.path)
        if state.held:
            held = state == LockState.HELD
            self.skip(e, Refusal("lock-held", "held by a live process") if held else _UNPROBED)
            return
        reason = f"{guard.kind} nobody holds; its {guard.what} is gone"
        self.leftover_file(e, f, Kind.LOCK, reason, dataset=e.dataset, lock=e.path)

    def temp_folders(self) -> None:
        if self.temp is None:
            return
        if self.temp.error:
            self.warnings.append(f"cannot read the temp dir {self.temp.path}: {self.temp.error}")
        for tf in self.temp.folders:
            if not tf.is_dir:
                self.skip(
                    None,
                    Refusal("not-regular", "a symlink or not a folder (never followed)"),
                    path=tf.path,
                    kind=Kind.TEMP,
                    size=0,
                    scope="temp",
                )
                continue
            pids = self.in_use.pids_under(tf.path) | self.in_use.cwd_pids_under(tf.path)
            why = self.refusal([tf.uid], tf.newest, pids, scope="temp")
            why = why or self.temp_refusal(tf.path, tf.kind, tf.made_by)
            if why:
                self.skip(None, why, path=tf.path, kind=Kind.TEMP, size=tf.size, scope="temp")
                continue
            if tf.kind == "hf_datasets":
                reason = "temp folder of a process that is gone (caching disabled)"
            elif tf.kind == "determinism":
                reason = "temp folder of a check-determinism that is gone"
            else:
                reason = "multiprocess pool folder, its processes are gone"
            self.add(
                GcItem(
                    tf.path,
                    Kind.TEMP,
                    tf.size,
                    tf.files,
                    reason,
                    (Target(tf.path, True, tf.size, tf.newest),),
                    scope="temp",
                )
            )


_UNPROBED = Refusal("lock-unknown", "cannot tell whether a live process holds it (it cannot be probed)")


def _busy_reason(who: str, lock: Path, state: LockState) -> Refusal:
    if state == LockState.HELD:
        return Refusal("lock-held", f"{who} is running ({lock.name} is held)")
    return Refusal("lock-unknown", f"{who} may be running ({lock.name} cannot be probed)")
