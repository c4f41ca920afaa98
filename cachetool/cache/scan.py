"""Scanning a datasets cache: `scan_cache(root)` walks the tree once and returns a `CacheReport`.

Only `stat`, small JSON metadata files and Arrow headers are read; a symlink is never followed,
nothing but regular files is opened. `Scanner` holds the rules of what each folder and file is (a
saved dataset, a builder folder, downloads, tf.data caches, what a killed gc set aside; the name
patterns are in `layout`); leftovers and odd names become entries of kind `unreadable`/`other`
plus warnings; `entries` builds the entries of dataset states.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache import layout
from cachetool.cache.arrow import ArrowSummary, open_noatime, read_summary
from cachetool.cache.entries import (
    attach_usage,
    attribute_locks,
    derived_entry,
    header_problems,
    plain_arrow_entry,
    shard_set_entry,
    source_entry,
    where,
)
from cachetool.cache.layout import Kind, parse_cache_file
from cachetool.cache.model import (
    CacheFile,
    CacheReport,
    DatasetDir,
    DirKind,
    Entry,
    EntryProblem,
    Liveness,
    RecordedUse,
    ScanWarning,
)
from cachetool.cache.roots import user_state_dir
from cachetool.cache.walk import Item, gc_paused, list_dir
from cachetool.errors import CacheNotFound, NotADirectory
from cachetool.safejson import read_json_file

if TYPE_CHECKING:
    from cachetool.cache.index import ReadIndex


def scan_cache(
    root: str | os.PathLike[str],
    *,
    use_index: bool = True,
    usage: Mapping[str, RecordedUse] | None = None,
    liveness: Callable[..., Liveness] | None = None,
    progress: Callable[[int], None] | None = None,
) -> CacheReport:
    """Scan a datasets cache root (or a `save_to_disk` folder, or any folder of Arrow files).

    With `use_index`, what was read is remembered in the user's cache folder (never in the root),
    so a repeat scan only stats unchanged files. What a higher layer knows comes in as data:
    `usage` (fingerprint to what the ledger says of it, e.g.
    `cachetool.history.ledger.read_ledger(root).usage()`) fills parent, operation and last use;
    `liveness` (e.g. `cachetool.maintenance.liveness.scan_in_use`), called as
    `liveness(root=root)` at most once, tells a tf.data cache being written from an abandoned one
    (without it, no process is live).
    """
    root_path = Path(root).expanduser()
    if not root_path.exists() and not root_path.is_symlink():
        raise CacheNotFound(root_path)
    if not root_path.is_dir():
        raise NotADirectory(root_path)
    root_path = root_path.resolve()
    own = _is_cachetool_state(root_path)
    with gc_paused():
        scanner = Scanner(root_path, use_index, progress, liveness)
        if not own:
            scanner.walk(root_path)
        if scanner.index is not None:
            scanner.index.save()
        entries = attribute_locks(scanner.entries, scanner.datasets)
        if usage:
            entries = attach_usage(entries, usage)
            # What the ledger tells of an entry is a problem of the scan too (the listing's hint).
            mixed = (e for e in entries if e.mixed_save)
            scanner.warnings += [ScanWarning(e.path, str(p)) for e in mixed for p in e.problems]
        entries = _in_listing_order(entries)
        datasets = sorted(scanner.datasets, key=lambda d: str(d.path))
    return CacheReport(root_path, tuple(datasets), tuple(entries), tuple(scanner.warnings), time.time())


def _in_listing_order(entries: list[Entry]) -> list[Entry]:
    """`entries` by dataset, kind, split, then path text (grouped first, so only one group's path
    texts exist at a time)."""
    groups: dict[tuple[str, str, str], list[Entry]] = {}
    for e in entries:
        key = (e.dataset or "~", e.kind._value_, e.split or "")
        group = groups.get(key)
        if group is None:
            groups[key] = [e]
        else:
            group.append(e)
    out: list[Entry] = []
    for key in sorted(groups):
        group = groups.pop(key)
        group.sort(key=lambda e: str(e.path))
        out += group
    return out


def may_have_ledger(root: Path) -> bool:
    """Whether a folder that may hold ledger segments of `root` holds a file named like one (a
    caller can skip importing the ledger otherwise)."""
    from cachetool.cache.roots import SEGMENT_SUFFIX, present_ledger_dirs

    for folder in present_ledger_dirs(root):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(n.endswith(SEGMENT_SUFFIX) for n in names):
            return True
    return False


def _is_cachetool_state(path: Path) -> bool:
    """A folder of cachetool's own state (a root's `.cachetool/`, or the per-user state folder):
    nothing in it is a cache entry."""
    if layout.LEDGER_DIR in path.parts:
        return True
    state = user_state_dir()
    with contextlib.suppress(OSError):
        state = state.resolve()
    # Only the folder itself and its ledgers: CACHETOOL_HOME may be a broad folder holding caches.
    return path == state or state / "ledgers" in (path, *path.parents)


#: A cheap first look before the tf.data patterns: names that may belong to a tf.data cache.
_TF_HINT = re.compile(r"\.index$|\.data-\d{5}-of-\d{5}$|\.lockfile$|\.tempstate\d")
#: One int per distinct file mode, shared by the files that have it.
_MODES: dict[int, int] = {}


class Scanner:
    """One scan of a cache root: `walk(root)` lists folders and reads files, and fills `entries`,
    `datasets` and `warnings` by the rules of what each folder and file is."""

    def __init__(
        self,
        root: Path,
        use_index: bool,
        progress: Callable[[int], None] | None,
        liveness: Callable[..., Liveness] | None = None,
    ) -> None:
        self.root = root
        self.use_index = use_index
        #: The read index, from the first Arrow file met on (a walk that meets only leftovers, as
        #: `gc --temp` may, does not load it).
        self.index: ReadIndex | None = None
        self.entries: list[Entry] = []
        self.datasets: list[DatasetDir] = []
        self.warnings: list[ScanWarning] = []
        self.progress = progress
        self.files_seen = 0
        self.root_len = len(str(root).rstrip("/")) + 1
        self.liveness = liveness
        self._in_use: Liveness | None = None  # taken only when a file may be being written
        self._prefix = ""  # the folder of the last file `summary` read (its text + "/")
        self._folder = ""  # the same, relative to the root

    # -- helpers ------------------------------------------------------------------------------
    def warn(self, path: Path, problem: str) -> None:
        self.warnings.append(ScanWarning(path, problem))

    def in_use(self) -> Liveness | None:
        """Which files live processes hold, and the root's live leases (taken once, when needed,
        from the scan's `liveness`; None without it)."""
        if self._in_use is None and self.liveness is not None:
            self._in_use = self.liveness(root=self.root)
        return self._in_use

    def cache_file(self, item: Item, *, arrow: bool, shard: tuple[int, int] | None = None) -> CacheFile:
        st = item.st
        assert st is not None
        self.files_seen += 1
        if self.progress is not None and self.files_seen % 200 == 0:
            self.progress(self.files_seen)
        summary = link = None
        if item.is_file:
            if arrow:
                summary = self.summary(item)
                error = summary.error
                if error is not None and not layout.TEMP_FILE_RE.match(item.name):
                    # A file another process is writing right now reads as cut short: not damage.
                    pids = live.writer_pids(st) if (live := self.in_use()) else ()
                    if pids:
                        summary = replace(
                            summary, error=f"being written by pid {', '.join(map(str, sorted(pids)))}"
                        )
                    else:
                        self.warn(item.path, error)
        elif stat.S_ISLNK(st.st_mode):
            try:
                link = os.readlink(item.path)
            except OSError:
                link = "?"
        mode = _MODES.setdefault(st.st_mode, st.st_mode)
        return CacheFile(item.path, st.st_size, st.st_mtime, mode, st.st_uid, summary, shard, link)

    def read_index(self) -> ReadIndex:
        if self.index is None:
            from cachetool.cache.index import ReadIndex

            self.index = ReadIndex(self.root, enabled=self.use_index)
        return self.index

    def summary(self, item: Item) -> ArrowSummary:
        """What the headers of the file `item` say: from the read index while the file has not
        changed, else read (and remembered, unless a writer is filling it)."""
        name, st = item.name, item.st
        assert st is not None
        size, ctime_ns, ino = st.st_size, st.st_ctime_ns, st.st_ino
        if name[:3] == "tmp" and layout.TEMP_FILE_RE.match(name):  # being written: never remembered
            return read_summary(item.prefix + name, size)
        index = self.index or self.read_index()
        prefix = item.prefix
        if prefix is not self._prefix:  # a new folder: its path relative to the root, once
            self._prefix = prefix
            self._folder = prefix[self.root_len : -1] if len(prefix) > self.root_len else ""
        folder = self._folder
        cached = index.get_in(folder, name, size, ctime_ns, ino)
        if cached is not None:
            return cached
        summary = read_summary(item.prefix + name, size)
        index.put(folder, name, size, ctime_ns, ino, summary)
        return summary

    def tree_files(self, path: Path) -> list[CacheFile]:
        """Every regular file below `path` (for folders listed as one unit), links not followed."""
        out: list[CacheFile] = []
        stack = [path]
        while stack:
            d = stack.pop()
            items, err = list_dir(d)
            if err:
                self.warn(d, err)
            for it in items:
                if not it.ok:
                    continue
                if it.is_dir:
                    stack.append(it.path)
                else:
                    out.append(self.cache_file(it, arrow=False))
        return out

    def odd(self, item: Item, ds: DatasetDir | None) -> Entry | None:
        """Entries for things that are not regular files or folders; None for ordinary items."""
        dataset, st = ds.name if ds else None, item.st
        if st is None:
            why = item.error or "cannot stat"
            self.warn(item.path, why)
            return Entry(Kind.UNREADABLE, item.path, (), dataset, problems=(EntryProblem(why),))
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            f = self.cache_file(item, arrow=False)
            problem = EntryProblem(f"symlink to {f.link_target} (not followed)")
            return Entry(Kind.OTHER, item.path, (f,), dataset, ds.path if ds else None, problems=(problem,))
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            what = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
            f = CacheFile(item.path, 0, st.st_mtime, mode, st.st_uid)
            self.warn(item.path, f"not a regular file ({what}); not opened")
            problem = EntryProblem(f"not a regular file ({what})")
            return Entry(Kind.OTHER, item.path, (f,), dataset, problems=(problem,))
        return None

    #: The folders still to walk, the next one last (None: no walk under way).
    _pending: list[tuple[Path, Path | None, DatasetDir | None]] | None = None

    # -- the walk -------------------------------------------------------------------------------
    def walk(self, path: Path, unit: Path | None = None, dataset_hint: DatasetDir | None = None) -> None:
        """Classify the folder `path` and, in turn, its subfolders, in depth-first order.

        The folders to walk wait on a list, not on Python's stack: a folder nested a thousand
        levels deep is listed like any other (one too long for the system to open is a warning
        and an unreadable entry). Called while a walk is under way (a saved dataset's
        subfolders), `path` is walked after the folder at hand."""
        pending = self._pending
        if pending is not None:
            pending.append((path, unit, dataset_hint))
            return
        self._pending = pending = [(path, unit, dataset_hint)]
        try:
            while pending:
                start = len(pending) - 1
                self._walk_folder(*pending.pop())
                pending[start:] = pending[start:][::-1]  # the first subfolder is walked first
        finally:
            self._pending = None

    def _walk_folder(self, path: Path, unit: Path | None, dataset_hint: DatasetDir | None) -> None:
        """Classify the folder `path`: a saved dataset (dict), an interrupted save, a builder's
        folder, or files of any other folder; its subfolders go to `walk`."""
        items, err = list_dir(path)
        if err:
            self.warn(path, err)
            self.entries.append(Entry(Kind.UNREADABLE, path, (), problems=(EntryProblem(err),)))
            return
        names = {it.name for it in items if it.is_file}
        is_root = path == self.root
        if path.name[:6] == "cache-" and parse_cache_file(path.name) is not None:
            self.folder_named_as_a_file(path, dataset_hint)

        if layout.DATASET_DICT_JSON in names and is_dataset_dict(path / layout.DATASET_DICT_JSON):
            self.saved_dict(path, items)
            return
        if layout.STATE_JSON in names and is_datasets_state(read_json(path / layout.STATE_JSON)):
            self.saved(path, items, unit=unit)
            return
        ds: DatasetDir | None = dataset_hint
        if (
            layout.STATE_JSON not in names
            and any(n[:5] == "data-" and layout.SAVED_SHARD_RE.match(n) for n in names)
            and is_interrupted_save(items)
        ):
            # state.json is written last: data-*.arrow without it is a save that did not finish.
            self.incomplete_save(path, items)
            return
        if layout.DATASET_INFO in names and relative_data_dir(path) is not None:
            ds = self.builder_dir(path, items)
        self.files_in(path, items, ds)
        for it in items:
            if it.is_dir:
                self.subfolder(it, ds, is_root)

    def folder_named_as_a_file(self, path: Path, ds: DatasetDir | None) -> None:
        """A folder where `datasets` writes or loads a step's cache file: the step fails on it. An
        entry of its own (its contents are walked as usual), which verify reports."""
        why = "a folder where datasets writes or loads this step's cache file: the step fails on it"
        try:
            st = os.lstat(path)
        except OSError:  # gone since it was listed
            return
        self.warn(path, why)
        folder = CacheFile(path, 0, st.st_mtime, st.st_mode, st.st_uid)
        dataset, dataset_dir = (ds.name, ds.path) if ds else (None, None)
        problems = (EntryProblem(why),)
        self.entries.append(Entry(Kind.OTHER, path, (folder,), dataset, dataset_dir, problems=problems))

    def subfolder(self, it: Item, ds: DatasetDir | None, is_root: bool) -> None:
        """A folder met by `walk`: cachetool's own (skipped), a killed gc's, an interrupted
        preparation, the downloads, or one walked in turn."""
        if it.name == layout.LEDGER_DIR:
            return  # cachetool's own records (any folder can be a root of its own)
        if layout.GC_TRASH_RE.match(it.name):
            self.entries.append(self.gc_trash(it, ds))
            return
        rel = final = None
        if layout.is_incomplete_dir(it.name):
            final = it.path.with_name(it.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)])
            rel = relative_data_dir(final)
        if rel is not None:  # `<name>/<config>/<version>[/<hash>].incomplete`, as datasets names it
            self.entries.append(
                Entry(
                    Kind.INCOMPLETE_PREPARE,
                    it.path,
                    tuple(self.tree_files(it.path)),
                    dataset="/".join(rel.split("/")[:2]),
                    dataset_dir=final,
                    problems=(EntryProblem("interrupted load_dataset preparation"),),
                )
            )
            return
        if is_root and it.name == "downloads":
            self.downloads(it.path)
            return
        self.walk(it.path)

    def files_in(self, path: Path, items: Sequence[Item], ds: DatasetDir | None) -> None:
        """Classify the files of one folder; `ds` is the dataset folder it is (if any)."""
        shard_groups: dict[str, list[CacheFile]] = defaultdict(list)
        source_groups: dict[str, list[CacheFile]] = defaultdict(list)
        splits = [s for s, _ in ds.split_rows] if ds is not None and ds.kind == DirKind.BUILDER else []
        entries = self.entries
        for it in self.tf_caches(path, items, ds):
            if not it.is_file:
                odd = None if it.is_dir else self.odd(it, ds)
                if odd is not None:
                    entries.append(odd)
                continue
            name = it.name
            # Most files of a cache are `cache-<fp>.arrow`: never metadata, a lock, a gc leftover
            # or a temporary file, so one prefix test passes them straight to the pattern.
            if name.startswith("cache-"):
                parsed = parse_cache_file(name)
            else:
                parsed = None
                if ds is not None and name in layout.METADATA_NAMES:
                    continue  # attached to the DatasetDir
                special = self.special_file(it, ds)
                if special is not None:
                    entries.append(special)
                    continue
            if parsed is not None:
                fp, rank, count = parsed
                if rank is not None and count is not None:
                    shard_groups[fp].append(self.cache_file(it, arrow=True, shard=(rank, count)))
                else:
                    entries.append(derived_entry(self.cache_file(it, arrow=True), fp, ds))
            elif splits and (src := layout.source_split_of(name, splits)) is not None:
                split, index, count = src
                shard = (index, count) if index is not None and count is not None else None
                source_groups[split].append(self.cache_file(it, arrow=True, shard=shard))
            elif name.endswith(".arrow"):
                entries.append(plain_arrow_entry(self.cache_file(it, arrow=True), ds))
            else:
                kind = Kind.METADATA if ds is None and name in layout.METADATA_NAMES else Kind.OTHER
                if kind == Kind.OTHER and not os.path.lexists(it.path):
                    continue  # gone since listed: a `tmp*` file renamed as its map ended
                entries.append(Entry(kind, it.path, (self.cache_file(it, arrow=False),), *where(ds)))
        for fp, files in sorted(shard_groups.items()):
            entries.append(shard_set_entry(fp, files, max(f.shard[1] for f in files if f.shard), ds))
        for split, files in sorted(source_groups.items()):
            count = next((f.shard[1] for f in reversed(files) if f.shard), None)
            assert ds is not None
            rel = ds.relative_data_dir
            entries.append(
                source_entry(
                    split, files, count, ds, rel and self.read_index().source_fingerprint(rel, split)
                )
            )

    def meta_files(self, items: Sequence[Item]) -> tuple[CacheFile, ...]:
        """The metadata files (`dataset_info.json`, `state.json`, ...) among a folder's items."""
        return tuple(
            self.cache_file(it, arrow=False)
            for it in items
            if it.is_file and it.name in layout.METADATA_NAMES
        )

    def special_file(self, it: Item, ds: DatasetDir | None) -> Entry | None:
        """The entry of a lock file, of what a killed gc set aside, or of a temporary file a
        writer is filling (or left behind); None for any other file."""
        name = it.name
        if layout.is_lock_name(name):
            return Entry(Kind.LOCK, it.path, (self.cache_file(it, arrow=False),), *where(ds))
        if name.startswith(layout.GC_TRASH_PREFIX) and layout.GC_TRASH_RE.match(name):
            return self.gc_trash(it, ds)
        temp_name = name.startswith("tmp") and layout.TEMP_FILE_RE.match(name)
        if temp_name and (uid := unreadable_owner(it)) is not None:
            # Another user's writer (datasets makes its temp files 0600): its name is all there is.
            text = f"another user's temporary file (uid {uid}) this user may not read"
            unread = (EntryProblem(f"{text}: a writer in progress or killed"),)
            return Entry(Kind.TEMP, it.path, (self.cache_file(it, arrow=False),), *where(ds), problems=unread)
        if temp_name and looks_like_arrow_stream(it.path):
            f = self.cache_file(it, arrow=True)
            fp = f.summary.fingerprint if f.summary else None
            rows = f.summary.resumable_rows(it.path.parent) if f.summary else 0
            # A partial is a killed run's only once no live process writes it (asked only then).
            pids = live.pids_for_path(os.fsdecode(it.path)) if rows and (live := self.in_use()) else ()
            problem = (
                EntryProblem(f"being written by pid {', '.join(map(str, sorted(pids)))}")
                if pids
                else EntryProblem(code="resumable", got=rows, want=fp)
                if rows
                else EntryProblem("temporary file: a writer in progress or killed")
            )
            return Entry(
                Kind.TEMP, it.path, (f,), *where(ds), aliases=(fp,) if fp else (), problems=(problem,)
            )
        return None

    # -- entry builders ------------------------------------------------------------------------

    def builder_dir(self, path: Path, items: Sequence[Item]) -> DatasetDir:
        info_path = path / layout.DATASET_INFO
        info = read_json(info_path)
        if not isinstance(info, dict):
            self.warn(info_path, "unreadable dataset_info.json")
        splits = (info.get("splits") or {}) if isinstance(info, dict) else {}
        split_rows: list[tuple[str, int]] = []
        shard_lengths: list[tuple[str, tuple[int, ...]]] = []
        for name, s in splits.items() if isinstance(splits, dict) else ():
            if not isinstance(s, dict) or not isinstance(s.get("num_examples"), int):
                continue
            split_rows.append((str(name), s["num_examples"]))
            lengths = s.get("shard_lengths")
            if isinstance(lengths, list) and all(is_count(x) for x in lengths):
                shard_lengths.append((str(name), tuple(lengths)))
            elif lengths is not None:
                self.warn(info_path, f"split {name}: shard_lengths are not counts")
        rel = relative_data_dir(path)
        meta = self.meta_files(items)
        name = "/".join(rel.split("/")[:2]) if rel else path.name
        ds = DatasetDir(path, name, DirKind.BUILDER, rel, tuple(split_rows), tuple(shard_lengths), meta)
        self.datasets.append(ds)
        return ds

    def saved(
        self, path: Path, items: Sequence[Item], unit: Path | None = None, split_name: str | None = None
    ) -> None:
        state = read_json(path / layout.STATE_JSON)
        meta = self.meta_files(items)
        label = f"{unit.name}/{path.name}" if unit is not None else path.name
        ds = DatasetDir(path, label, DirKind.SAVED)  # its metadata files belong to the entry below
        self.datasets.append(ds)
        problems: list[EntryProblem] = []
        fp = aliases = None
        named: list[str] = []
        if isinstance(state, dict):
            fp = state.get("_fingerprint") if isinstance(state.get("_fingerprint"), str) else None
            alias = self.read_index().loaded_fingerprint(state)
            aliases = (alias,) if alias and alias != fp else ()
            for d in state.get("_data_files") or []:
                if isinstance(d, dict) and isinstance(d.get("filename"), str):
                    named.append(d["filename"])
            split_name = split_name or (state.get("_split") if isinstance(state.get("_split"), str) else None)
        else:
            problems.append(EntryProblem("unreadable state.json"))
            self.warn(path / layout.STATE_JSON, "unreadable state.json")
        files: list[CacheFile] = list(meta)
        other: list[Item] = []
        for it in items:
            if it.is_file and (m := layout.SAVED_SHARD_RE.match(it.name)):
                files.append(self.cache_file(it, arrow=True, shard=(int(m["index"]), int(m["count"]))))
            elif it.name not in layout.METADATA_NAMES:
                other.append(it)
        present = {f.name for f in files}
        problems += [
            EntryProblem(f"state.json names {n}, which is missing") for n in named if n not in present
        ]
        problems += [p for f in files for p in header_problems(f, in_set=True)]
        self.entries.append(
            Entry(
                Kind.SAVED,
                path,
                tuple(files),
                dataset=label,
                dataset_dir=path,
                fingerprint=fp,
                aliases=aliases or (),
                split=split_name,
                content="data",
                expected_files=len(named) or None,
                unit=unit or path,
                problems=tuple(problems),
            )
        )
        # A map after load_from_disk writes cache-<fp>.arrow into the saved folder.
        self.files_in(path, [it for it in other if not it.is_dir], ds)
        for it in other:
            if it.is_dir and it.name != layout.LEDGER_DIR:
                self.walk(it.path, dataset_hint=ds)

    def saved_dict(self, path: Path, items: Sequence[Item]) -> None:
        doc = read_json(path / layout.DATASET_DICT_JSON)
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, list):
            self.warn(path / layout.DATASET_DICT_JSON, "unreadable dataset_dict.json")
            splits = []
        listed = {it.name: list_dir(it.path) for it in items if it.is_dir}
        unfinished = next((s for s in splits if _interrupted_split(s, listed)), None)
        if unfinished is not None:
            self.half_saved_dict(path, items, unfinished)
            return
        meta = self.meta_files(items)
        self.datasets.append(DatasetDir(path, path.name, DirKind.SAVED_DICT, meta_files=meta))
        for it in items:
            if it.is_dir:
                sub_items, err = listed[it.name]
                if err is None and any(s.name == layout.STATE_JSON for s in sub_items):
                    self.saved(it.path, sub_items, unit=path, split_name=it.name)
                else:
                    self.walk(it.path, unit=path)
            elif it.name not in layout.METADATA_NAMES:
                odd = self.odd(it, None)
                f = self.cache_file(it, arrow=False) if odd is None else None
                self.entries.append(odd or Entry(Kind.OTHER, it.path, (f,) if f else (), unit=path))
        for s in splits:
            if isinstance(s, str) and not (path / s / layout.STATE_JSON).is_file():
                self.warn(path / s, "dataset_dict.json names this split, but it has no state.json")

    def half_saved_dict(self, path: Path, items: Sequence[Item], split: str) -> None:
        """A DatasetDict whose save was killed in `split`: one interrupted save, the dict's whole
        folder. `datasets` writes dataset_dict.json first and each split's state.json last; a
        finished split inside is part of the same unfinished save (`load_from_disk` cannot read
        the dict), and removing the unfinished split alone would leave a dataset_dict.json
        naming a split that is gone."""
        self.warn(path, f"dataset_dict.json names the split {split}, which has no state.json")
        self.incomplete_save(path, items, split)

    def incomplete_save(self, path: Path, items: Sequence[Item], split: str | None = None) -> None:
        """An interrupted save's folder as one entry (of a DatasetDict: `split` is the one it
        stopped in)."""
        files = []
        for it in items:
            if it.is_dir:
                files.extend(self.tree_files(it.path))
            elif it.ok:
                files.append(self.cache_file(it, arrow=bool(layout.SAVED_SHARD_RE.match(it.name))))
        what = f"its split {split} has no state.json" if split else "data-*.arrow without state.json"
        self.entries.append(
            Entry(
                Kind.INCOMPLETE_SAVE,
                path,
                tuple(files),
                dataset=path.name,
                dataset_dir=path,
                split=split,
                problems=(EntryProblem(f"{what}: an interrupted save_to_disk"),),
            )
        )

    # -- what holds no dataset state ----------------------------------------------------------

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
            holders=lambda n: (
                tuple(live.pids_for_path(os.fsdecode(path / n))) if (live := self.in_use()) else ()
            ),
        )
        claimed: set[str] = set()
        for c in caches:
            files = tuple(self.cache_file(by_name[n], arrow=False) for n in c.files)
            state, problems = c.state, [EntryProblem(p) for p in c.problems]
            newest = max(f.mtime for f in files)
            live = self.in_use() if state == "abandoned" else None
            if live is not None and (lease := live.lease_over(newest)) is not None:
                state = "being-written"
                problems.append(EntryProblem(f"may be being written by {lease} (a live lease)"))
            elif state == "abandoned":
                problems.append(
                    EntryProblem(
                        "abandoned by a killed writer: its lockfile makes the next run fail "
                        "(AlreadyExistsError); `cachetool gc --temp` removes it"
                    )
                )
            elif state == "being-written":
                problems.append(EntryProblem(f"being written by pid {', '.join(map(str, c.writer_pids))}"))
            self.entries.append(
                Entry(
                    Kind.TF_CACHE,
                    Path(c.path),
                    files,
                    *where(ds),
                    problems=tuple(problems),
                    state=state,
                    writer_pids=c.writer_pids,
                )
            )
            claimed.update(c.files)
        return [it for it in items if it.name not in claimed]

    def gc_trash(self, item: Item, ds: DatasetDir | None) -> Entry:
        """What a killed gc set aside (`.cachetool-gc-<pid>-<n>`): a leftover for `gc --temp`."""
        files = self.tree_files(item.path) if item.is_dir else [self.cache_file(item, arrow=False)]
        return Entry(
            Kind.TEMP,
            item.path,
            tuple(files),
            *where(ds),
            problems=(EntryProblem("set aside by a gc that did not finish"),),
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
            incomplete = any(f.name.endswith(".incomplete") for f in files)
            problems = (EntryProblem("incomplete download"),) if incomplete else ()
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
                continue
            files = tuple(self.tree_files(it.path)) if it.is_dir else (self.cache_file(it, arrow=False),)
            kind = Kind.EXTRACTED if it.is_dir else Kind.LOCK if layout.is_lock_name(it.name) else Kind.OTHER
            label = None if kind == Kind.OTHER else "downloads/extracted"
            self.entries.append(Entry(kind, it.path, files, dataset=label))


def read_json(path: Path) -> Any:
    """A small JSON file `datasets` wrote, or None: regular files only (a FIFO is never waited
    on), size-capped, and nesting too deep to parse is a bad file like any other."""
    try:
        return read_json_file(path)
    except (OSError, ValueError):
        return None


def is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def is_dataset_dict(path: Path) -> bool:
    """`dataset_dict.json` as `DatasetDict.save_to_disk` writes it: {"splits": ["train", ...]}."""
    doc = read_json(path)
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("splits"), list)
        and all(isinstance(x, str) for x in doc["splits"])
    )


def is_datasets_state(state: Any) -> bool:
    """A `state.json` as `Dataset.save_to_disk` writes it: `_fingerprint` is a string and
    `_data_files` names the whole set `data-00000-of-0000N.arrow` … `data-<N-1>-of-0000N.arrow`.
    Such a folder is a saved dataset even when none of its data files remain (a damaged save
    verify reports). Anything else is a user's file."""
    if not isinstance(state, dict) or not isinstance(state.get("_fingerprint"), str):
        return False
    files = state.get("_data_files")
    if not isinstance(files, list) or not files:
        return False
    named = [d.get("filename") if isinstance(d, dict) else None for d in files]
    shards = [layout.SAVED_SHARD_RE.match(n) if isinstance(n, str) else None for n in named]
    if not all(shards):
        return False
    return sorted((int(m["index"]), int(m["count"])) for m in shards if m) == [
        (i, len(shards)) for i in range(len(shards))
    ]


def is_interrupted_save(items: Sequence[Item]) -> bool:
    """Only what `save_to_disk` writes (data-NNNNN-of-NNNNN.arrow, dataset_info.json, locks),
    and the data files are Arrow streams or empty: a killed save, not a user's folder."""
    for it in items:
        if it.is_dir:
            if it.name != layout.LEDGER_DIR:
                return False
            continue
        if it.name in (layout.DATASET_INFO, "dataset_infos.json") or layout.is_lock_name(it.name):
            continue
        if not layout.SAVED_SHARD_RE.match(it.name) or not looks_like_arrow_stream(it.path):
            return False
    return True


def _interrupted_split(split: object, listed: Mapping[str, tuple[list[Item], str | None]]) -> bool:
    """Whether the folder of `split` (a name dataset_dict.json gives) holds what a killed
    `save_to_disk` leaves: data-*.arrow and no state.json."""
    if not isinstance(split, str) or split not in listed:
        return False
    items, err = listed[split]
    names = {it.name for it in items if it.is_file}
    return (
        err is None
        and layout.STATE_JSON not in names
        and any(layout.SAVED_SHARD_RE.match(n) for n in names)
        and is_interrupted_save(items)
    )


def unreadable_owner(it: Item) -> int | None:
    """The owner of a regular file of another user's that this user may not read, else None."""
    st = it.st
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid == os.geteuid():
        return None
    return (
        None
        if os.access(it.path, os.R_OK, effective_ids=os.access in os.supports_effective_ids)
        else st.st_uid
    )


def looks_like_arrow_stream(path: Path) -> bool:
    """Empty, or starting as every Arrow IPC stream `datasets` writes starts (the continuation
    marker `ff ff ff ff`): what a killed writer leaves. A user's text file is neither."""
    try:
        fd = open_noatime(path)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, 4) in (b"", b"\xff\xff\xff\xff")
    except OSError:
        return False
    finally:
        os.close(fd)


def relative_data_dir(path: Path) -> str | None:
    """`<name>/<config>/<version>[/<hash>]`, as `DatasetBuilder._relative_data_dir` builds it.

    Recognised by the version level (`0.0.0`), not by depth below the root: a builder folder is
    3 levels deep without a module hash and 4 with one.
    """
    parts = path.parts
    if len(parts) >= 3 and layout.VERSION_RE.match(parts[-1]):
        return "/".join(parts[-3:])
    if len(parts) >= 4 and layout.VERSION_RE.match(parts[-2]):
        return "/".join(parts[-4:])
    return None
