"""Walk a cache root into frozen dataclasses. Nothing else in cachetool walks the folder.

`scan_cache(root)` returns a `CacheReport`: the dataset folders, one `Entry` per dataset state
(a fingerprint, possibly several files) and the problems met on the way. A scan never stops at a
bad file: truncated, empty, foreign, unreadable files and odd names become entries of kind
`unreadable`/`other` plus warnings. It never follows a symlink, never opens anything but regular
files, and never reads column data (see `cachetool.cache.arrow`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import stat
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring_ascii as _encode_ascii
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache import layout
from cachetool.cache.arrow import ArrowSummary, read_summary
from cachetool.cache.dirs import user_state_dir
from cachetool.cache.index import ReadIndex
from cachetool.cache.layout import Kind
from cachetool.errors import CacheNotFound, NotADirectory, RecordedOnly
from cachetool.fingerprint.plain import loaded_fingerprint, source_split_fingerprint
from cachetool.formatting import human_size, iso_time

if TYPE_CHECKING:
    from cachetool.lineage.ledger import Ledger


def _human_age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return ""
    import humanize

    delta = max(0.0, (now or time.time()) - ts)
    return str(humanize.naturaltime(delta))


@dataclass(frozen=True, slots=True)
class CacheFile:
    """One file on disk, as `stat` and (for Arrow files) the headers tell it."""

    path: Path
    size: int
    mtime: float
    mode: int = 0
    uid: int = -1
    summary: ArrowSummary | None = None  # Arrow headers, for files that should be Arrow
    shard: tuple[int, int] | None = None  # (index, count) of a num_proc, source or saved shard
    link_target: str | None = None  # where a symlink points (never followed)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def size_str(self) -> str:
        return human_size(self.size)

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "path": _path_str(self.path),
            "size": self.size,
            "modified": iso_time(self.mtime),
            "shard": list(self.shard) if self.shard else None,
            "link_target": self.link_target,
            "format": s.format if s else None,
            "rows": s.rows if s else None,
            "batches": s.batches if s else None,
            "fingerprint_in_file": s.fingerprint if s else None,
            "complete": s.complete if s else None,
            "error": s.error if s else None,
        }


@dataclass(frozen=True)
class DatasetDir:
    """A dataset folder: a prepared builder folder (holds `dataset_info.json`), a `save_to_disk`
    folder, a saved DatasetDict, or (for PATH arguments) any folder of Arrow files."""

    path: Path
    name: str  # what tables show: "csv/default-7a1b…" or the saved folder's name
    kind: str  # "builder" | "saved" | "saved-dict" | "folder"
    relative_data_dir: str | None = None  # <name>/<config>/<version>[/<hash>] for builders
    split_rows: tuple[tuple[str, int], ...] = ()  # from dataset_info.json
    shard_lengths: tuple[tuple[str, tuple[int, ...]], ...] = ()
    meta_files: tuple[CacheFile, ...] = ()

    def expected_rows(self, split: str) -> int | None:
        return dict(self.split_rows).get(split)

    def expected_shard_lengths(self, split: str) -> tuple[int, ...] | None:
        return dict(self.shard_lengths).get(split)


@dataclass(frozen=True, slots=True)
class Entry:
    """One logical dataset state (one fingerprint) or one leftover, with all its files."""

    kind: Kind
    path: Path  # the file, or the folder of a saved dataset / incomplete prepare
    files: tuple[CacheFile, ...]
    dataset: str | None = None
    dataset_dir: Path | None = None
    fingerprint: str | None = None
    aliases: tuple[str, ...] = ()  # other fingerprints of the same state (after load_from_disk)
    split: str | None = None
    content: str | None = None  # "data" | "indices" for Arrow entries
    expected_rows: int | None = None  # source splits: dataset_info.json
    expected_files: int | None = None  # shard sets: the N of _of_N / -of-N
    unit: Path | None = None  # what is deleted together (a saved DatasetDict folder)
    problems: tuple[str, ...] = ()
    last_used: float | None = None  # latest ledger record touching the entry, if any
    parent: str | None = None  # recorded parent fingerprint (from the ledger)
    operation: str | None = None  # recorded operation (from the ledger)
    #: tf.data caches: "complete", "incomplete", "being-written" or "abandoned" (see cache.tfdata)
    state: str | None = None
    writer_pids: tuple[int, ...] = ()  # tf.data caches being written: the live writers on this host

    # --- raw derived values -------------------------------------------------------------
    @property
    def id(self) -> str:
        """What `-q` prints and what `show`/`gc` accept: the fingerprint, else the path."""
        return self.fingerprint or _path_str(self.path)

    # Most entries hold one file: each property answers that case first (a listing of 100,000
    # entries asks each of them several times).
    @property
    def size(self) -> int:
        files = self.files
        return files[0].size if len(files) == 1 else sum(f.size for f in files)

    @property
    def rows(self) -> int | None:
        files = self.files
        if len(files) == 1:
            s = files[0].summary
            if s is not None and s.rows is not None:
                return s.rows
            return self.expected_rows if self.kind == Kind.SOURCE else None
        summaries = [f.summary for f in files if f.summary is not None]
        if not summaries or any(s.rows is None for s in summaries):
            return self.expected_rows if self.kind == Kind.SOURCE else None
        return sum(s.rows or 0 for s in summaries)

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        for f in self.files:
            if f.summary is not None and f.summary.columns:
                return f.summary.columns
        return ()

    @property
    def modified(self) -> float | None:
        files = self.files
        return files[0].mtime if len(files) == 1 else max((f.mtime for f in files), default=None)

    @property
    def used(self) -> float | None:
        """Last used: the latest ledger record touching the entry, else its mtime."""
        if self.last_used is not None:
            return max(self.last_used, self.modified or 0.0)
        return self.modified

    @property
    def complete(self) -> bool | None:
        """Every file read to its end-of-stream marker and, for shard sets, every shard present
        (tf.data caches: the index and every data shard it names, as large as it says)."""
        if self.kind == Kind.TF_CACHE:
            return self.state == "complete"
        files = self.files
        if len(files) == 1:
            s = files[0].summary
            if s is None:
                return None
            return False if self.expected_files is not None and self.expected_files > 1 else s.complete
        summaries = [f.summary for f in files if f.summary is not None]
        if not summaries:
            return None
        if self.expected_files is not None and len(self.files_of_data) < self.expected_files:
            return False
        return all(s.complete for s in summaries)

    @property
    def files_of_data(self) -> tuple[CacheFile, ...]:
        return tuple(f for f in self.files if f.summary is not None)

    # --- human forms ------------------------------------------------------------------------
    @property
    def size_str(self) -> str:
        return human_size(self.size)

    @property
    def modified_str(self) -> str:
        return _human_age(self.modified)

    @property
    def used_str(self) -> str:
        return _human_age(self.used)

    @property
    def kind_str(self) -> str:
        if self.kind == Kind.SHARDS and self.expected_files:
            return f"shards {len(self.files_of_data)}/{self.expected_files}"
        if self.kind == Kind.TF_CACHE and self.state:
            return f"tf-cache {_TF_STATE_SHORT.get(self.state, self.state)}"
        return self.kind._value_  # what .value gives, without the enum's descriptor

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "fingerprint": self.fingerprint,
            "aliases": list(self.aliases),
            "dataset": self.dataset,
            "dataset_dir": _path_str(self.dataset_dir) if self.dataset_dir else None,
            "split": self.split,
            "content": self.content,
            "path": _path_str(self.path),
            "files": len(self.files),
            "expected_files": self.expected_files,
            "rows": self.rows,
            "expected_rows": self.expected_rows,
            "columns": [name for name, _ in self.columns],
            "size": self.size,
            "modified": iso_time(self.modified),
            "used": iso_time(self.used),
            "complete": self.complete,
            "parent": self.parent,
            "operation": self.operation,
            "unit": _path_str(self.unit) if self.unit else None,
            "problems": list(self.problems),
            **(
                {"prefix": self.path.name, "state": self.state, "writer_pids": list(self.writer_pids)}
                if self.kind == Kind.TF_CACHE
                else {}
            ),
        }

    def to_json_text(self) -> str:
        """`json.dumps(self.to_json())` (default separators, ASCII), written directly: a listing
        of 100,000 entries spent more time building and encoding those dicts than scanning."""
        if self.kind == Kind.TF_CACHE:  # a few, with keys of their own
            import json

            return json.dumps(self.to_json())
        files = self.files
        modified = self.modified
        rows = self.rows
        complete = self.complete
        used = modified if self.last_used is None else max(self.last_used, modified or 0.0)
        mod_iso = _js(iso_time(modified))
        path = _js(_path_str(self.path))
        return (
            f'{{"id": {_js(self.fingerprint) if self.fingerprint else path}, '
            f'"kind": {_js(self.kind._value_)}, "fingerprint": {_js(self.fingerprint)}, '
            f'"aliases": {_js_list(self.aliases)}, "dataset": {_js(self.dataset)}, '
            f'"dataset_dir": {_js(_path_str(self.dataset_dir)) if self.dataset_dir else "null"}, '
            f'"split": {_js(self.split)}, "content": {_js(self.content)}, "path": {path}, '
            f'"files": {len(files)}, "expected_files": {_js_int(self.expected_files)}, '
            f'"rows": {_js_int(rows)}, "expected_rows": {_js_int(self.expected_rows)}, '
            f'"columns": {_js_list([name for name, _ in self.columns])}, "size": {self.size}, '
            f'"modified": {mod_iso}, '
            f'"used": {mod_iso if used == modified else _js(iso_time(used))}, '
            f'"complete": {"null" if complete is None else "true" if complete else "false"}, '
            f'"parent": {_js(self.parent)}, "operation": {_js(self.operation)}, '
            f'"unit": {_js(_path_str(self.unit)) if self.unit else "null"}, '
            f'"problems": {_js_list(self.problems)}}}'
        )


_TF_STATE_SHORT = {"being-written": "writing", "incomplete": "partial"}


@dataclass(frozen=True)
class ScanWarning:
    """A problem met while scanning: the file and what is wrong with it."""

    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{_path_str(self.path)}: {self.problem}"


@dataclass(frozen=True)
class CacheReport:
    """Everything one scan found under `root`."""

    root: Path
    datasets: tuple[DatasetDir, ...]
    entries: tuple[Entry, ...]
    warnings: tuple[ScanWarning, ...] = ()
    scanned_at: float = field(default=0.0, compare=False)

    def totals(self) -> dict[str, tuple[int, int]]:
        """Files and bytes per kind (inodes matter: caches hit inode quotas)."""
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for e in self.entries:
            row = out[e.kind.value]
            row[0] += len(e.files)
            row[1] += e.size
        for d in self.datasets:
            for f in d.meta_files:
                row = out[Kind.METADATA.value]
                row[0] += 1
                row[1] += f.size
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    @property
    def size(self) -> int:
        return sum(b for _, b in self.totals().values())

    @property
    def file_count(self) -> int:
        return sum(n for n, _ in self.totals().values())

    def find(self, prefix: str, ledger: Ledger | None = None) -> Entry:
        """The entry whose fingerprint or alias starts with `prefix` (or whose path is `prefix`)."""
        return find_entry(self, prefix, ledger)


def _path_str(p: Path) -> str:
    return str(p)  # what os.fsdecode gives for a Path, without its two calls


def _js(text: str | None) -> str:
    """A string (or None) as `json.dumps(..., ensure_ascii=True)` writes it."""
    return "null" if text is None else _encode_ascii(text)


def _js_int(n: int | None) -> str:
    return "null" if n is None else int.__repr__(n)


def _js_list(texts: Sequence[str]) -> str:
    return "[" + ", ".join(map(_encode_ascii, texts)) + "]" if texts else "[]"


# ------------------------------------------------------------------------------------------
# The walk
# ------------------------------------------------------------------------------------------


class _Item:
    """One folder entry as `scandir` gave it: its name, path and `lstat` (None if that failed)."""

    __slots__ = ("error", "name", "path", "st")

    def __init__(self, name: str, path: Path, st: os.stat_result | None, error: str | None = None) -> None:
        self.name = name
        self.path = path
        self.st = st
        self.error = error

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return self.st is not None and stat.S_ISREG(self.st.st_mode)

    @property
    def is_link(self) -> bool:
        return self.st is not None and stat.S_ISLNK(self.st.st_mode)


def _child_maker(folder: Path) -> Callable[[str], Path]:
    """Paths of a folder's children, built without parsing: `Path(de.path)` parses the whole
    path again for each of 100,000 files and `str()` of it formats it again. Joining one name to
    the parsed folder (a private helper of pathlib, where it exists) and handing it the string
    `scandir` already made costs a fraction of that."""
    make = getattr(folder, "_make_child_relpath", None)
    prefix = os.path.join(str(folder), "")
    if make is None or not _CAN_PRESET_STR:
        return lambda name: Path(prefix + name)

    def child(name: str) -> Path:
        p: Path = make(name)
        p._str = prefix + name  # type: ignore[attr-defined]
        return p

    return child


_CAN_PRESET_STR = any("_str" in getattr(c, "__slots__", ()) for c in Path.__mro__)


def _list_dir(path: Path) -> tuple[list[_Item], str | None]:
    items: list[_Item] = []
    child = _child_maker(path)
    try:
        with os.scandir(path) as it:
            for de in it:
                name = de.name
                if name == layout.LEDGER_DIR:
                    continue  # cachetool's own state (ledger, read index, pins): never an entry
                try:
                    items.append(_Item(name, child(name), de.stat(follow_symlinks=False)))
                except OSError as e:
                    items.append(_Item(name, child(name), None, e.strerror or str(e)))
    except PermissionError:
        return [], "permission denied"
    except OSError as e:
        return [], e.strerror or str(e)
    items.sort(key=_item_name)
    return items, None


def _item_name(item: _Item) -> str:
    return item.name


@contextmanager
def gc_paused(freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while a listing builds its objects: a scan of 100,000 files
    makes millions of objects and no cycles, and the collector walking them again and again was
    a quarter to a third of the time. With `freeze` (a command about to exit) what was made is
    moved out of the collector's sight on the way out, so no collection walks it even once."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()


class _Scanner:
    def __init__(self, root: Path, index: ReadIndex, progress: Callable[[int], None] | None) -> None:
        self.root = root
        self.index = index
        self.entries: list[Entry] = []
        self.datasets: list[DatasetDir] = []
        self.warnings: list[ScanWarning] = []
        self.progress = progress
        self.files_seen = 0
        self.root_len = len(str(root).rstrip("/")) + 1
        self.listings: dict[str, tuple[list[_Item], str | None]] = {}  # folders listed ahead
        self.prefetched: dict[str, ArrowSummary] = {}  # headers read ahead, on other cores
        self._in_use: Any = None  # a liveness snapshot, taken only when a tf.data writer left a lockfile

    def list_dir(self, path: Path) -> tuple[list[_Item], str | None]:
        """The folder's items, from the listing made ahead when there was one."""
        listed = self.listings.pop(str(path), None)
        return listed if listed is not None else _list_dir(path)

    def read_ahead(self, workers: int) -> None:
        """List every folder and read the headers of the Arrow files the read index does not
        know, split over `workers` processes, before the walk classifies them: a cold listing of
        many files waits mostly on those reads. Folders the walk never reads Arrow headers in
        (cachetool's own, downloads, interrupted prepares, gc leftovers) are listed, not read."""
        todo: list[str] = []
        stack = [self.root]
        while stack:
            folder = stack.pop()
            items, _ = self.listings[str(folder)] = _list_dir(folder)
            for it in items:
                st = it.st
                if st is None:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    name = it.name
                    if name == layout.LEDGER_DIR or (folder == self.root and name == "downloads"):
                        continue
                    if layout.is_incomplete_dir(name) or layout.GC_TRASH_RE.match(name):
                        continue
                    stack.append(it.path)
                elif stat.S_ISREG(st.st_mode) and it.name.endswith(".arrow"):
                    path = str(it.path)
                    if not self.index.knows(path[self.root_len :], st.st_size, st.st_mtime_ns, st.st_ino):
                        todo.append(path)
        if len(todo) < READ_AHEAD_MIN_FILES:
            return
        self.prefetched = dict(zip(todo, _read_summaries(todo, workers), strict=True))

    # -- helpers ------------------------------------------------------------------------------
    def warn(self, path: Path, problem: str) -> None:
        self.warnings.append(ScanWarning(path, problem))

    def cache_file(self, item: _Item, *, arrow: bool, shard: tuple[int, int] | None = None) -> CacheFile:
        st = item.st
        assert st is not None
        self.files_seen += 1
        if self.progress is not None and self.files_seen % 200 == 0:
            self.progress(self.files_seen)
        summary = None
        if arrow and stat.S_ISREG(st.st_mode):
            summary = self.summary(item.path, st)
            if summary.error is not None and not layout.TEMP_FILE_RE.match(item.name):
                self.warn(item.path, summary.error)
        link = None
        if stat.S_ISLNK(st.st_mode):
            try:
                link = os.readlink(item.path)
            except OSError:
                link = "?"
        return CacheFile(item.path, st.st_size, st.st_mtime, st.st_mode, st.st_uid, summary, shard, link)

    def summary(self, path: Path, st: os.stat_result) -> ArrowSummary:
        rel = str(path)[self.root_len :]  # cheaper than Path.relative_to on 100,000 files
        cached = self.index.get(rel, st.st_size, st.st_mtime_ns, st.st_ino)
        if cached is not None:
            return cached
        summary = self.prefetched.pop(str(path), None) or read_summary(path)
        # A file still being written (a live tmp* file) must not be remembered half-read.
        if not layout.TEMP_FILE_RE.match(path.name):
            self.index.put(rel, st.st_size, st.st_mtime_ns, st.st_ino, summary)
        return summary

    def tree_files(self, path: Path) -> list[CacheFile]:
        """Every regular file below `path` (for folders listed as one unit), links not followed."""
        out: list[CacheFile] = []
        stack = [path]
        while stack:
            d = stack.pop()
            items, err = self.list_dir(d)
            if err:
                self.warn(d, err)
            for it in items:
                if it.st is None:
                    continue
                if it.is_dir:
                    stack.append(it.path)
                else:
                    out.append(self.cache_file(it, arrow=False))
        return out

    def odd(self, item: _Item, ds: DatasetDir | None) -> Entry | None:
        """Entries for things that are not regular files or folders; None for ordinary items."""
        if item.st is None:
            self.warn(item.path, item.error or "cannot stat")
            return Entry(
                Kind.UNREADABLE,
                item.path,
                (),
                dataset=ds.name if ds else None,
                problems=(item.error or "cannot stat",),
            )
        mode = item.st.st_mode
        if stat.S_ISLNK(mode):
            f = self.cache_file(item, arrow=False)
            problem = f"symlink to {f.link_target} (not followed)"
            return Entry(
                Kind.OTHER,
                item.path,
                (f,),
                dataset=ds.name if ds else None,
                dataset_dir=ds.path if ds else None,
                problems=(problem,),
            )
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            what = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
            f = CacheFile(item.path, 0, item.st.st_mtime, mode, item.st.st_uid)
            self.warn(item.path, f"not a regular file ({what}); not opened")
            return Entry(
                Kind.OTHER,
                item.path,
                (f,),
                dataset=ds.name if ds else None,
                problems=(f"not a regular file ({what})",),
            )
        return None

    # -- the walk -------------------------------------------------------------------------------
    def walk(self, path: Path, unit: Path | None = None, dataset_hint: DatasetDir | None = None) -> None:
        items, err = self.list_dir(path)
        if err:
            self.warn(path, err)
            self.entries.append(Entry(Kind.UNREADABLE, path, (), problems=(err,)))
            return
        names = {it.name for it in items if it.is_file}
        is_root = path == self.root

        if layout.DATASET_DICT_JSON in names and _is_dataset_dict(path / layout.DATASET_DICT_JSON):
            self.saved_dict(path, items)
            return
        if layout.STATE_JSON in names and _is_datasets_state(_read_json(path / layout.STATE_JSON), names):
            self.saved(path, items, unit=unit)
            return
        ds: DatasetDir | None = dataset_hint
        if (
            layout.STATE_JSON not in names
            and any(layout.SAVED_SHARD_RE.match(n) for n in names)
            and _is_interrupted_save(items)
        ):
            # state.json is written last: data-*.arrow without it is a save that did not finish.
            self.incomplete_save(path, items)
            return
        if layout.DATASET_INFO in names and _relative_data_dir(path) is not None:
            ds = self.builder_dir(path, items)
        self.files_in(path, items, ds)
        for it in items:
            if not it.is_dir:
                continue
            if it.name == layout.LEDGER_DIR:
                continue  # cachetool's own records (any folder can be a root of its own)
            if layout.GC_TRASH_RE.match(it.name):
                self.entries.append(self.gc_trash(it, ds))
                continue
            rel = None
            if layout.is_incomplete_dir(it.name):
                final = it.path.with_name(it.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)])
                rel = _relative_data_dir(final)
            if rel is not None:  # `<name>/<config>/<version>[/<hash>].incomplete`, as datasets names it
                files = self.tree_files(it.path)
                label = "/".join(rel.split("/")[:2]) if rel else (ds.name if ds else it.name)
                self.entries.append(
                    Entry(
                        Kind.INCOMPLETE_PREPARE,
                        it.path,
                        tuple(files),
                        dataset=label,
                        dataset_dir=final,
                        problems=("interrupted load_dataset preparation",),
                    )
                )
                continue
            if is_root and it.name == "downloads":
                self.downloads(it.path)
                continue
            self.walk(it.path)

    def files_in(self, path: Path, items: Sequence[_Item], ds: DatasetDir | None) -> None:
        """Classify the files of one folder; `ds` is the dataset folder it is (if any)."""
        shard_groups: dict[str, list[CacheFile]] = defaultdict(list)
        shard_counts: dict[str, int] = {}
        source_groups: dict[str, list[CacheFile]] = defaultdict(list)
        source_counts: dict[str, int] = {}
        splits = [s for s, _ in ds.split_rows] if ds is not None and ds.kind == "builder" else []
        dsname = ds.name if ds else None
        dspath = ds.path if ds else None
        items = self.tf_caches(path, items, ds)
        for it in items:
            if it.is_dir:
                continue
            odd = self.odd(it, ds)
            if odd is not None:
                self.entries.append(odd)
                continue
            name = it.name
            if ds is not None and name in layout.METADATA_NAMES:
                continue  # attached to the DatasetDir
            if name.endswith(".lock"):
                self.entries.append(
                    Entry(
                        Kind.LOCK,
                        it.path,
                        (self.cache_file(it, arrow=False),),
                        dataset=dsname,
                        dataset_dir=dspath,
                    )
                )
                continue
            if layout.GC_TRASH_RE.match(name):
                self.entries.append(self.gc_trash(it, ds))
                continue
            if layout.TEMP_FILE_RE.match(name) and _looks_like_arrow_stream(it.path):
                f = self.cache_file(it, arrow=True)
                fp = f.summary.fingerprint if f.summary else None
                self.entries.append(
                    Entry(
                        Kind.TEMP,
                        it.path,
                        (f,),
                        dataset=dsname,
                        dataset_dir=dspath,
                        fingerprint=None,
                        aliases=(fp,) if fp else (),
                        problems=("temporary file: a writer in progress or killed",),
                    )
                )
                continue
            parsed = layout.parse_cache_file(name)
            if parsed is not None:
                fp, rank, count = parsed
                if rank is not None and count is not None:
                    shard_groups[fp].append(self.cache_file(it, arrow=True, shard=(rank, count)))
                    shard_counts[fp] = max(count, shard_counts.get(fp, 0))
                else:
                    self.entries.append(self.derived(self.cache_file(it, arrow=True), fp, ds))
                continue
            if splits and (src := layout.source_split_of(name, splits)) is not None:
                split, index, count = src
                shard = (index, count) if index is not None and count is not None else None
                source_groups[split].append(self.cache_file(it, arrow=True, shard=shard))
                if count is not None:
                    source_counts[split] = count
                continue
            if name.endswith(".arrow"):
                f = self.cache_file(it, arrow=True)
                self.entries.append(self.plain_arrow(f, ds))
                continue
            f = self.cache_file(it, arrow=False)
            if ds is None and name in layout.METADATA_NAMES:
                self.entries.append(Entry(Kind.METADATA, it.path, (f,)))
            else:
                self.entries.append(Entry(Kind.OTHER, it.path, (f,), dataset=dsname, dataset_dir=dspath))
        for fp, files in sorted(shard_groups.items()):
            self.entries.append(self.shard_set(fp, files, shard_counts[fp], ds))
        for split, files in sorted(source_groups.items()):
            self.entries.append(self.source(split, files, source_counts.get(split), ds))

    # -- entry builders ------------------------------------------------------------------------
    def tf_caches(self, path: Path, items: Sequence[_Item], ds: DatasetDir | None) -> Sequence[_Item]:
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
            sizes=lambda n: getattr(by_name[n].st, "st_size", 0),
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

    def in_use(self) -> Any:
        """Which files live processes hold, and the root's live leases (taken once, when needed)."""
        if self._in_use is None:
            from cachetool.maintenance.liveness import scan_in_use

            self._in_use = scan_in_use(root=self.root)
        return self._in_use

    def gc_trash(self, item: _Item, ds: DatasetDir | None) -> Entry:
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

    def _content(self, f: CacheFile) -> str | None:
        s = f.summary
        if s is None or not s.columns:
            return None
        return "indices" if s.is_indices else "data"

    def _unreadable(self, f: CacheFile, ds: DatasetDir | None, fp: str | None) -> Entry:
        problem = f.summary.error if f.summary and f.summary.error else "unreadable"
        return Entry(
            Kind.UNREADABLE,
            f.path,
            (f,),
            dataset=ds.name if ds else None,
            dataset_dir=ds.path if ds else None,
            fingerprint=fp,
            problems=(problem,),
        )

    def derived(self, f: CacheFile, fp: str, ds: DatasetDir | None) -> Entry:
        s = f.summary
        if s is None or s.format not in ("stream", "ipc-file") or not s.columns:
            return self._unreadable(f, ds, fp)
        problems = []
        if s.error:
            problems.append(s.error)
        if s.fingerprint is not None and s.fingerprint != fp:
            problems.append(f"file holds fingerprint {s.fingerprint}, name says {fp}")
        content = self._content(f)
        return Entry(
            Kind.INDICES if content == "indices" else Kind.DERIVED,
            f.path,
            (f,),
            dataset=ds.name if ds else None,
            dataset_dir=ds.path if ds else None,
            fingerprint=fp,
            content=content,
            problems=tuple(problems),
        )

    def plain_arrow(self, f: CacheFile, ds: DatasetDir | None) -> Entry:
        s = f.summary
        if s is None or s.format not in ("stream", "ipc-file"):
            return self._unreadable(f, ds, None)
        return Entry(
            Kind.ARROW,
            f.path,
            (f,),
            dataset=ds.name if ds else None,
            dataset_dir=ds.path if ds else None,
            fingerprint=s.fingerprint,
            content=self._content(f),
            problems=(s.error,) if s.error else (),
        )

    def shard_set(self, fp: str, files: list[CacheFile], count: int, ds: DatasetDir | None) -> Entry:
        files.sort(key=lambda f: f.shard or (0, 0))
        problems = []
        have = {f.shard[0] for f in files if f.shard}
        missing = [i for i in range(count) if i not in have]
        if missing:
            problems.append(f"partial: {len(have)} of {count} shards (missing {_ranks(missing)})")
        for f in files:
            s = f.summary
            if s is None:
                continue
            if s.error:
                problems.append(f"{f.name}: {s.error}")
            elif f.shard and s.fingerprint is not None:
                expect = layout.shard_fingerprint(fp, *f.shard)
                if s.fingerprint != expect:
                    problems.append(f"{f.name}: file holds fingerprint {s.fingerprint}, name says {expect}")
        content = next((c for f in files if (c := self._content(f))), None)
        return Entry(
            Kind.SHARDS,
            files[0].path,
            tuple(files),
            dataset=ds.name if ds else None,
            dataset_dir=ds.path if ds else None,
            fingerprint=fp,
            content=content,
            expected_files=count,
            problems=tuple(problems),
        )

    def source(self, split: str, files: list[CacheFile], count: int | None, ds: DatasetDir | None) -> Entry:
        assert ds is not None
        files.sort(key=lambda f: f.shard or (0, 0))
        fp = source_split_fingerprint(ds.relative_data_dir, split) if ds.relative_data_dir else None
        problems = []
        if count is not None:
            have = {f.shard[0] for f in files if f.shard}
            missing = [i for i in range(count) if i not in have]
            if missing:
                problems.append(f"missing shards {_ranks(missing)} of {count}")
        for f in files:
            if f.summary is not None and f.summary.error:
                problems.append(f"{f.name}: {f.summary.error}")
        expected = ds.expected_rows(split)
        rows = [f.summary.rows for f in files if f.summary is not None]
        # With a shard missing the row count is short by consequence; say the cause only.
        if expected is not None and rows and all(r is not None for r in rows) and not problems:
            got = sum(r or 0 for r in rows)
            if got != expected:
                problems.append(f"{got} rows, dataset_info.json says {expected}")
        return Entry(
            Kind.SOURCE,
            files[0].path,
            tuple(files),
            dataset=ds.name,
            dataset_dir=ds.path,
            fingerprint=fp,
            split=split,
            content="data",
            expected_rows=expected,
            expected_files=count,
            problems=tuple(problems),
        )

    def builder_dir(self, path: Path, items: Sequence[_Item]) -> DatasetDir:
        info = _read_json(path / layout.DATASET_INFO)
        split_rows: list[tuple[str, int]] = []
        shard_lengths: list[tuple[str, tuple[int, ...]]] = []
        if isinstance(info, dict):
            splits = info.get("splits") or {}
            if isinstance(splits, dict):
                for name, s in splits.items():
                    if isinstance(s, dict) and isinstance(s.get("num_examples"), int):
                        split_rows.append((str(name), s["num_examples"]))
                        lengths = s.get("shard_lengths")
                        if isinstance(lengths, list) and all(_is_count(x) for x in lengths):
                            shard_lengths.append((str(name), tuple(lengths)))
                        elif lengths is not None:
                            self.warn(
                                path / layout.DATASET_INFO, f"split {name}: shard_lengths are not counts"
                            )
        else:
            self.warn(path / layout.DATASET_INFO, "unreadable dataset_info.json")
        rel = _relative_data_dir(path)
        meta = tuple(
            self.cache_file(it, arrow=False)
            for it in items
            if it.is_file and it.name in layout.METADATA_NAMES
        )
        name = "/".join(rel.split("/")[:2]) if rel else path.name
        ds = DatasetDir(path, name, "builder", rel, tuple(split_rows), tuple(shard_lengths), meta)
        self.datasets.append(ds)
        return ds

    def saved(
        self, path: Path, items: Sequence[_Item], unit: Path | None = None, split_name: str | None = None
    ) -> None:
        state = _read_json(path / layout.STATE_JSON)
        meta = tuple(
            self.cache_file(it, arrow=False)
            for it in items
            if it.is_file and it.name in layout.METADATA_NAMES
        )
        label = f"{unit.name}/{path.name}" if unit is not None else path.name
        ds = DatasetDir(path, label, "saved")  # its metadata files belong to the entry below
        self.datasets.append(ds)
        problems: list[str] = []
        fp = aliases = None
        named: list[str] = []
        if isinstance(state, dict):
            fp = state.get("_fingerprint") if isinstance(state.get("_fingerprint"), str) else None
            alias = loaded_fingerprint(state)
            aliases = (alias,) if alias and alias != fp else ()
            for d in state.get("_data_files") or []:
                if isinstance(d, dict) and isinstance(d.get("filename"), str):
                    named.append(d["filename"])
            split_name = split_name or (state.get("_split") if isinstance(state.get("_split"), str) else None)
        else:
            problems.append("unreadable state.json")
            self.warn(path / layout.STATE_JSON, "unreadable state.json")
        files: list[CacheFile] = list(meta)
        other: list[_Item] = []
        for it in items:
            if it.is_file and layout.SAVED_SHARD_RE.match(it.name):
                m = layout.SAVED_SHARD_RE.match(it.name)
                assert m is not None
                files.append(self.cache_file(it, arrow=True, shard=(int(m["index"]), int(m["count"]))))
            elif it.name not in layout.METADATA_NAMES:
                other.append(it)
        present = {f.name for f in files}
        for n in named:
            if n not in present:
                problems.append(f"state.json names {n}, which is missing")
        for f in files:
            if f.summary is not None and f.summary.error:
                problems.append(f"{f.name}: {f.summary.error}")
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

    def saved_dict(self, path: Path, items: Sequence[_Item]) -> None:
        doc = _read_json(path / layout.DATASET_DICT_JSON)
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, list):
            self.warn(path / layout.DATASET_DICT_JSON, "unreadable dataset_dict.json")
            splits = []
        meta = tuple(
            self.cache_file(it, arrow=False)
            for it in items
            if it.is_file and it.name in layout.METADATA_NAMES
        )
        self.datasets.append(DatasetDir(path, path.name, "saved-dict", meta_files=meta))
        for it in items:
            if it.is_dir:
                sub_items, err = self.list_dir(it.path)
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

    def incomplete_save(self, path: Path, items: Sequence[_Item]) -> None:
        files = []
        for it in items:
            if it.is_dir:
                files.extend(self.tree_files(it.path))
            elif it.st is not None:
                files.append(self.cache_file(it, arrow=bool(layout.SAVED_SHARD_RE.match(it.name))))
        self.entries.append(
            Entry(
                Kind.INCOMPLETE_SAVE,
                path,
                tuple(files),
                dataset=path.name,
                dataset_dir=path,
                problems=("data-*.arrow without state.json: an interrupted save_to_disk",),
            )
        )

    def downloads(self, path: Path) -> None:
        items, err = self.list_dir(path)
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
            if it.name.endswith(".lock"):
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
        items, err = self.list_dir(path)
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
            elif it.name.endswith(".lock"):
                self.entries.append(
                    Entry(
                        Kind.LOCK, it.path, (self.cache_file(it, arrow=False),), dataset="downloads/extracted"
                    )
                )
            else:
                self.entries.append(Entry(Kind.OTHER, it.path, (self.cache_file(it, arrow=False),)))


#: Below this many unread Arrow files, starting processes costs more than it saves.
READ_AHEAD_MIN_FILES = 2000


def _spare_cores() -> int:
    """Processes a cold listing may read headers in: the cores this process may run on, and one
    only where forking is unsafe (another thread runs, e.g. a progress display) or unavailable."""
    import threading

    if threading.active_count() > 1 or not hasattr(os, "fork"):
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read_summaries(paths: list[str], workers: int) -> list[ArrowSummary]:
    """`read_summary` of each path, on `workers` forked processes, in order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    chunk = max(64, len(paths) // (workers * 8))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(read_summary, paths, chunksize=chunk))


#: A cheap first look before the tf.data patterns: names that may belong to a tf.data cache.
_TF_HINT = re.compile(r"\.index$|\.data-\d{5}-of-\d{5}$|\.lockfile$|\.tempstate\d")


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(f"{r:05d}" for r in ranks)


#: Metadata files larger than this are not read (a real dataset_info.json is a few kB to a few MB).
MAX_JSON_BYTES = 64 * 1024 * 1024


def _read_json(path: Path) -> Any:
    """A small JSON file `datasets` wrote, or None: regular files only (a FIFO is never waited
    on), size-capped, and nesting too deep to parse is a bad file like any other."""
    from cachetool.safejson import read_json_file

    try:
        return read_json_file(path, MAX_JSON_BYTES)
    except (OSError, ValueError):
        return None


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_dataset_dict(path: Path) -> bool:
    """`dataset_dict.json` as `DatasetDict.save_to_disk` writes it: {"splits": ["train", ...]}."""
    doc = _read_json(path)
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("splits"), list)
        and all(isinstance(x, str) for x in doc["splits"])
    )


def _is_datasets_state(state: Any, names: set[str]) -> bool:
    """A `state.json` as `Dataset.save_to_disk` writes it: `_fingerprint` is a string and
    `_data_files` names `data-NNNNN-of-NNNNN.arrow` files, at least one of them here (a missing
    one is a damaged save that verify reports). Anything else is a user's file."""
    if not isinstance(state, dict) or not isinstance(state.get("_fingerprint"), str):
        return False
    files = state.get("_data_files")
    if not isinstance(files, list) or not files:
        return False
    named = [d.get("filename") if isinstance(d, dict) else None for d in files]
    if not all(isinstance(n, str) and layout.SAVED_SHARD_RE.match(n) for n in named):
        return False
    return any(n in names for n in named)


def _is_interrupted_save(items: Sequence[_Item]) -> bool:
    """Only what `save_to_disk` writes (data-NNNNN-of-NNNNN.arrow, dataset_info.json, locks),
    and the data files are Arrow streams or empty: a killed save, not a user's folder."""
    for it in items:
        if it.is_dir:
            if it.name != layout.LEDGER_DIR:
                return False
            continue
        if it.name in (layout.DATASET_INFO, "dataset_infos.json") or it.name.endswith(".lock"):
            continue
        if not layout.SAVED_SHARD_RE.match(it.name) or not _looks_like_arrow_stream(it.path):
            return False
    return True


def _looks_like_arrow_stream(path: Path) -> bool:
    """Empty, or starting as every Arrow IPC stream `datasets` writes starts (the continuation
    marker `ff ff ff ff`): what a killed writer leaves. A user's text file is neither."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
    except OSError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 4)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head in (b"", b"\xff\xff\xff\xff")


def _relative_data_dir(path: Path) -> str | None:
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


def scan_cache(
    root: str | os.PathLike[str],
    *,
    use_index: bool = True,
    ledger: bool | Ledger = True,
    progress: Callable[[int], None] | None = None,
) -> CacheReport:
    """Scan a datasets cache root (or a `save_to_disk` folder, or any folder of Arrow files).

    Reads only `stat` results, JSON metadata and Arrow headers. With `use_index`, what was read is
    remembered in `<root>/.cachetool/read-index.sqlite.z` (skipped silently on a read-only root),
    so a repeat scan only stats unchanged files. With `ledger` (True: read it; or a `Ledger` the
    command already loaded), recorded lineage (parent, operation, last use) is attached to entries.
    """
    root_path = Path(root).expanduser()
    if not root_path.exists() and not root_path.is_symlink():
        raise CacheNotFound(root_path)
    if not root_path.is_dir():
        raise NotADirectory(root_path)
    root_path = root_path.resolve()
    own = _is_cachetool_state(root_path)
    with gc_paused():
        index = ReadIndex(root_path, enabled=use_index and not own)
        scanner = _Scanner(root_path, index, progress)
        if not own:
            workers = _spare_cores()
            if workers > 1:
                scanner.read_ahead(workers)
            scanner.walk(root_path)
        index.save()
        entries = _attribute_locks(scanner.entries, scanner.datasets)
        if ledger is not False:
            entries = _attach_ledger(root_path, entries, None if ledger is True else ledger)
        entries.sort(key=lambda e: (e.dataset or "~", e.kind.value, e.split or "", _path_str(e.path)))
        datasets = sorted(scanner.datasets, key=lambda d: _path_str(d.path))
    return CacheReport(root_path, tuple(datasets), tuple(entries), tuple(scanner.warnings), time.time())


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


def _attribute_locks(entries: list[Entry], datasets: list[DatasetDir]) -> list[Entry]:
    """Give lock files the dataset folder they guard: `<hash>_builder.lock` and
    `<hash>.incomplete_info.lock` sit next to it; the root's lock encodes its absolute path
    with "/" turned into "_" (`DatasetBuilder.__init__`)."""
    guarded: list[tuple[Path, str | None]] = [(d.path, d.name) for d in datasets if d.kind == "builder"]
    guarded += [
        (e.dataset_dir, e.dataset)
        for e in entries
        if e.kind == Kind.INCOMPLETE_PREPARE and e.dataset_dir is not None
    ]
    by_lock_path: dict[Path, tuple[Path, str | None]] = {}
    by_lock_name: dict[str, tuple[Path, str | None]] = {}
    for path, name in guarded:
        by_lock_path[path.parent / layout.builder_lock_name(path.name)] = (path, name)
        by_lock_path[path.parent / layout.info_lock_name(path.name)] = (path, name)
        by_lock_name[layout.root_lock_name(os.fsdecode(path.as_posix()))] = (path, name)
    out = []
    for e in entries:
        hit = None
        if e.kind == Kind.LOCK and e.dataset is None:
            hit = by_lock_path.get(e.path) or by_lock_name.get(e.path.name)
        if hit is not None:
            e = replace(e, dataset=hit[1], dataset_dir=hit[0])
        out.append(e)
    return out


def _attach_ledger(root: Path, entries: list[Entry], ledger: Ledger | None) -> list[Entry]:
    """Fill `parent`, `operation` and `last_used` from the ledger, when one exists."""
    from cachetool.lineage.ledger import usage_by_fingerprint

    usage = usage_by_fingerprint(ledger if ledger is not None else root)
    if not usage:
        return entries
    out = []
    for e in entries:
        info = None
        for fp in (e.fingerprint, *e.aliases):
            if fp and fp in usage:
                info = usage[fp]
                break
        if info is None:
            out.append(e)
        else:
            out.append(replace(e, last_used=info.last_used, parent=info.parent, operation=info.operation))
    return out


def find_entry(report: CacheReport, prefix: str, ledger: Ledger | None = None) -> Entry:
    """The one entry `prefix` names, by the rule of `cachetool.lineage.ledger.resolve` (path,
    exact fingerprint or alias, unique prefix). With a `ledger`, fingerprints only it knows are
    candidates too; one of them named is `UnknownFingerprint` here (no entry holds it, and the
    message says what the ledger knows). Raises `AmbiguousFingerprint` listing candidates."""
    from cachetool.lineage.ledger import entry_at_path, resolve

    at_path = entry_at_path(report, prefix)  # a leftover named by its path has no fingerprint
    if at_path is not None:
        return at_path
    got = resolve(prefix, report, ledger)
    if got.entry is None:
        raise RecordedOnly(got.fingerprint, report.root, ledger)
    return got.entry


def iter_arrow_files(report: CacheReport) -> Iterator[tuple[Entry, CacheFile]]:
    """Every (entry, file) pair whose file was read as Arrow."""
    for e in report.entries:
        for f in e.files:
            if f.summary is not None:
                yield e, f
