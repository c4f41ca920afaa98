"""Planning `--temp`: what killed processes left behind, each proven dead before it is planned.

`tmp*` files of a killed writer, `<hash or version>.incomplete/` folders of an interrupted
preparation, interrupted `save_to_disk` folders, `*.incomplete` downloads, lock files that guard
nothing any more, what a killed `tf.data` writer or gc left, and in the temp dir only
`hf_datasets-*`, `pymp-*` and `cachetool-determinism-*` folders.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import WRITTEN_BY_DATASETS, Kind
from cachetool.cache.model import Entry
from cachetool.cache.tfdata import tf_leftover_name
from cachetool.maintenance.gc.model import GcItem, Refusal, Target
from cachetool.maintenance.gc.planner import Planner, gc_alive, newest_mtime, owner_uid
from cachetool.maintenance.gc.tempdir import check_owner_refusal, owner_refusal
from cachetool.maintenance.liveness import socket_reason
from cachetool.maintenance.locks import LockState, lock_guard, probe


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
        why = self.refusal([f.uid], f.mtime, self.file_pids([f]))
        if why:
            self.skip(e, why)
            return
        reason = ("empty" if f.size == 0 else "partial") + " tmp file of a killed writer"
        self.add(
            GcItem(
                e.path,
                Kind.TEMP,
                f.size,
                1,
                reason,
                (Target(e.path, False, f.size, f.mtime),),
                dataset=e.dataset,
                aliases=e.aliases,
            )
        )

    def tf_leftovers(self, e: Entry) -> None:
        """What a killed `tf.data` writer left (its lockfiles and partial shards), as one item;
        never a finished cache's index or data."""
        if e.state == "being-written":
            self.skip(e, Refusal("being-written", e.problems[-1] if e.problems else "being written"))
            return
        if e.state != "abandoned":
            return
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
        f = e.files[0]
        why = self.refusal([f.uid], f.mtime, self.file_pids([f]))
        if why:
            self.skip(e, why)
            return
        self.add(GcItem(e.path, Kind.TEMP, f.size, 1, reason, (Target(e.path, False, f.size, f.mtime),)))

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
            why = self.refusal([f.uid], f.mtime, self.file_pids([f]))
            if why:
                self.skip(e, why, path=f.path, size=f.size)
                continue
            self.add(
                GcItem(
                    f.path,
                    Kind.DOWNLOAD,
                    f.size,
                    1,
                    "interrupted download, its lock is free",
                    (Target(f.path, False, f.size, f.mtime),),
                    dataset=e.dataset,
                    lock=lock,
                )
            )

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
            self.skip(
                e,
                Refusal("lock-held", "held by a live process")
                if state == LockState.HELD
                else Refusal(
                    "lock-unknown", "cannot tell whether a live process holds it (it cannot be probed)"
                ),
            )
            return
        # Age says nothing about a lock: filelock never touches its mtime.
        why = self.refusal([f.uid], None, self.file_pids([f]), age_applies=False)
        if why:
            self.skip(e, why)
            return
        self.add(
            GcItem(
                e.path,
                Kind.LOCK,
                f.size,
                1,
                f"{guard.kind} nobody holds; its {guard.what} is gone",
                (Target(e.path, False, f.size, f.mtime),),
                dataset=e.dataset,
                lock=e.path,
            )
        )

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
            prefix = os.fspath(tf.path) + "/"
            bound = any(s.startswith(prefix) for s in self.sockets)
            why = self.refusal([tf.uid], tf.newest, pids, scope="temp")
            if why is None and bound:
                why = Refusal("socket", socket_reason(tf.path))
            if why is None and tf.kind == "determinism":
                why = check_owner_refusal(tf.path.name, tf.made_by, self.pool_users)
            elif why is None:
                why = owner_refusal(tf.kind, tf.made_by, self.temp_users, self.pool_users)
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


def _busy_reason(who: str, lock: Path, state: LockState) -> Refusal:
    if state == LockState.HELD:
        return Refusal("lock-held", f"{who} is running ({lock.name} is held)")
    return Refusal("lock-unknown", f"{who} may be running ({lock.name} cannot be probed)")
