"""Folders and files of a cache that hold no dataset state: downloads, extracted archives,
`tf.data` file caches, and what a killed gc set aside."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, DatasetDir, Entry, Liveness
from cachetool.cache.walk import Item, Walker, list_dir

#: A cheap first look before the tf.data patterns: names that may belong to a tf.data cache.
_TF_HINT = re.compile(r"\.index$|\.data-\d{5}-of-\d{5}$|\.lockfile$|\.tempstate\d")


class NonDataWalker(Walker):
    """The walk's rules for what is not a dataset state."""

    def tf_caches(self, path: Path, items: Sequence[Item], ds: DatasetDir | None) -> Sequence[Item]:
        """Group the files of `tf.data` file caches in this folder into one entry each; returns the
        items left for the other rules."""
        # Most names in a datasets cache end in .arrow: one suffix test keeps 100k files cheap.
        candidates = [
            it for it in items if not it.name.endswith(".arrow") and _TF_HINT.search(it.name) and it.is_file
        ]
        if not candidates:
            return items
        from cachetool.cache import tfdata

        by_name = {it.name: it for it in candidates if tfdata.is_tf_cache_file(it.name)}
        if not by_name:
            return items
        caches = tfdata.find_tf_caches(
            os.fsdecode(path),
            list(by_name),
            sizes=lambda n: by_name[n].size,
            holders=lambda n: tuple(self.in_use().pids_for_path(os.fsdecode(path / n))),
        )
        claimed: set[str] = set()
        for c in caches:
            files = tuple(self.cache_file(by_name[n], arrow=False) for n in c.files)
            state, problems = c.state, list(c.problems)
            newest = max(f.mtime for f in files)
            if state == "abandoned" and (lease := self.in_use().lease_over(newest)) is not None:
                state = "being-written"
                problems.append(f"may be being written by {lease} (a live lease)")
            elif state == "abandoned":
                problems.append(
                    "abandoned by a killed writer: its lockfile makes the next run fail "
                    "(AlreadyExistsError); `cachetool gc --temp` removes it"
                )
            elif state == "being-written":
                problems.append(f"being written by pid {', '.join(map(str, c.writer_pids))}")
            self.entries.append(
                Entry(
                    Kind.TF_CACHE,
                    Path(c.path),
                    files,
                    dataset=ds.name if ds else None,
                    dataset_dir=ds.path if ds else None,
                    problems=tuple(problems),
                    state=state,
                    writer_pids=c.writer_pids,
                )
            )
            claimed.update(c.files)
        return [it for it in items if it.name not in claimed]

    def in_use(self) -> Liveness:
        """Which files live processes hold, and the root's live leases (taken once, when needed,
        from the scan's `liveness`; none without it)."""
        if self._in_use is None:
            self._in_use = _NoneLive() if self.liveness is None else self.liveness(root=self.root)
        return self._in_use

    def gc_trash(self, item: Item, ds: DatasetDir | None) -> Entry:
        """What a killed gc set aside (`.cachetool-gc-<pid>-<n>`): a leftover for `gc --temp`."""
        files = self.tree_files(item.path) if item.is_dir else [self.cache_file(item, arrow=False)]
        return Entry(
            Kind.TEMP,
            item.path,
            tuple(files),
            dataset=ds.name if ds else None,
            dataset_dir=ds.path if ds else None,
            problems=("set aside by a gc that did not finish",),
        )

    def downloads(self, path: Path) -> None:
        items, err = list_dir(path)
        if err:
            self.warn(path, err)
            return
        by_base: dict[str, list[CacheFile]] = defaultdict(list)
        for it in items:
            if it.is_dir:
                if it.name == "extracted":
                    self.extracted(it.path)
                else:
                    self.walk(it.path)
                continue
            odd = self.odd(it, None)
            if odd is not None:
                self.entries.append(odd)
                continue
            f = self.cache_file(it, arrow=False)
            if layout.is_lock_name(it.name):
                self.entries.append(Entry(Kind.LOCK, it.path, (f,), dataset="downloads"))
                continue
            base = it.name
            for suffix in (".json", ".incomplete"):
                if base.endswith(suffix):
                    base = base[: -len(suffix)]
            by_base[base].append(f)
        for base, files in sorted(by_base.items()):
            main = next((f for f in files if f.name == base), files[0])
            problems = ("incomplete download",) if any(f.name.endswith(".incomplete") for f in files) else ()
            self.entries.append(
                Entry(Kind.DOWNLOAD, main.path, tuple(files), dataset="downloads", problems=problems)
            )

    def extracted(self, path: Path) -> None:
        items, err = list_dir(path)
        if err:
            self.warn(path, err)
            return
        for it in items:
            odd = self.odd(it, None)
            if odd is not None:
                self.entries.append(odd)
            elif it.is_dir:
                self.entries.append(
                    Entry(
                        Kind.EXTRACTED,
                        it.path,
                        tuple(self.tree_files(it.path)),
                        dataset="downloads/extracted",
                    )
                )
            elif layout.is_lock_name(it.name):
                self.entries.append(
                    Entry(
                        Kind.LOCK, it.path, (self.cache_file(it, arrow=False),), dataset="downloads/extracted"
                    )
                )
            else:
                self.entries.append(Entry(Kind.OTHER, it.path, (self.cache_file(it, arrow=False),)))


class _NoneLive:
    """What a scan told nothing about live processes assumes: none holds a file, no lease is live."""

    def pids_for_path(self, path: str) -> frozenset[int]:
        return frozenset()

    def lease_over(self, mtime: float | None) -> None:
        return None
