"""The walk: folders listed with `os.scandir` (never following a link), files turned into
`CacheFile`s with their `stat` and, for Arrow files, their headers (from the read index when the
file did not change, else read).

Paths are made cheaply (`child_maker`): a `Path` made the ordinary way parses its text and keeps it
twice (the text and its parts), some 400 bytes and a few microseconds per file. Where `pathlib`
keeps its parts in a list (Python 3.10 and 3.11 on POSIX), a child is a `PosixPath` holding its
folder's path and its name, making its text and parts when asked. It is equal to, hashes, sorts,
prints and pickles as `Path(text)`, and paths derived from it are ordinary ones.
"""

from __future__ import annotations

import gc
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from operator import attrgetter
from pathlib import Path, PosixPath, PurePath
from typing import TYPE_CHECKING, Any

from cachetool.cache import layout
from cachetool.cache.arrow import ArrowSummary, read_summary
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, DatasetDir, Entry, EntryProblem, Liveness, ScanWarning

if TYPE_CHECKING:
    from cachetool.cache.index import ReadIndex


class Item:
    """One folder entry as `scandir` gave it: its name, path and `lstat` result (`st` None and
    `error` saying why when `lstat` failed). Items live only while their folder is classified.
    `prefix` is the folder's text and a separator, one string shared by its items."""

    __slots__ = ("error", "is_dir", "is_file", "name", "ok", "path", "prefix", "st")

    def __init__(
        self, name: str, path: Path, st: os.stat_result | None, error: str | None, prefix: str
    ) -> None:
        self.name = name
        self.path = path
        self.st = st
        self.error = error
        self.prefix = prefix
        self.ok = st is not None
        mode = 0 if st is None else st.st_mode
        self.is_dir = S_ISDIR(mode)
        self.is_file = S_ISREG(mode)

    @property
    def size(self) -> int:
        return 0 if self.st is None else self.st.st_size


S_ISDIR = stat.S_ISDIR
S_ISREG = stat.S_ISREG
_MODES: dict[int, int] = {}


def list_dir(path: Path) -> tuple[list[Item], str | None]:
    """The items of the folder `path` by name (never cachetool's own folder), or why it cannot
    be listed."""
    items: list[Item] = []
    child = child_maker(path)
    prefix = os.path.join(str(path), "")
    own = layout.LEDGER_DIR
    try:
        with os.scandir(path) as it:
            for de in it:
                name = de.name
                if name == own:
                    continue  # cachetool's own state (ledger, pins, leases): never an entry
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError as e:
                    items.append(Item(name, child(name), None, e.strerror or str(e), prefix))
                    continue
                items.append(Item(name, child(name), st, None, prefix))
    except PermissionError:
        return [], "permission denied"
    except OSError as e:
        return [], e.strerror or str(e)
    items.sort(key=attrgetter("name"))  # attrgetter: no Python call per item
    return items, None


@contextmanager
def gc_paused(freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while a listing builds its objects (millions, and no cycles:
    collections took a quarter to a third of the time). With `freeze` (a command about to exit)
    what was made is moved out of the collector's sight on the way out."""
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


class Walker:
    """Lists folders and reads files for one scan; collects its entries, dataset folders and
    warnings. The rules that make entries of a folder's files live in the subclasses."""

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
        self._prefix = ""  # the folder of the last file `summary` was asked for (its text + "/")
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
        mode = _MODES.setdefault(st.st_mode, st.st_mode)  # one int per distinct mode, not per file
        return CacheFile(item.path, st.st_size, st.st_mtime, mode, st.st_uid, summary, shard, link)

    def _folder_of(self, item: Item) -> str:
        """The folder of `item` relative to the root."""
        prefix = item.prefix
        if prefix is not self._prefix:  # a new folder: its path relative to the root, once
            self._prefix = prefix
            self._folder = prefix[self.root_len : -1] if len(prefix) > self.root_len else ""
        return self._folder

    def summary(self, item: Item) -> ArrowSummary:
        name, st = item.name, item.st
        assert st is not None
        size, ctime_ns, ino = st.st_size, st.st_ctime_ns, st.st_ino
        path = item.prefix + name
        if name[:3] == "tmp" and layout.TEMP_FILE_RE.match(name):  # being written: never remembered
            return read_summary(path, size)
        index = self.index
        if index is None:
            from cachetool.cache.index import ReadIndex

            index = self.index = ReadIndex(self.root, enabled=self.use_index)
        folder = self._folder_of(item)
        cached = index.get_in(folder, name, size, ctime_ns, ino)
        if cached is not None:
            return cached
        summary = read_summary(path, size)
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

    def walk(self, path: Path, unit: Path | None = None, dataset_hint: DatasetDir | None = None) -> None:
        """Make the entries of the folder `path` and of everything below it."""
        raise NotImplementedError


#: Whether `pathlib` is the one `_ChildPath` is written for (its parts in a `_parts` slot).
LAZY = (
    os.name == "posix"
    and sys.version_info < (3, 12)
    and "_parts" in getattr(PurePath, "__slots__", ())
    and hasattr(PurePath, "_from_parsed_parts")
)


class _ChildPath(PosixPath):
    """The path of `name` in the folder `_folder`, its text and parts made when asked."""

    __slots__ = ("_folder", "_name", "_prefix")
    _folder: PosixPath
    _name: str
    _prefix: str  # the folder's text and a separator, shared by its children

    @property
    def _parts(self) -> list[str]:  # what pathlib reads to compare, hash and derive paths
        return [*self._folder._parts, self._name]  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return self._prefix + self._name

    def __fspath__(self) -> str:
        return self._prefix + self._name

    def __repr__(self) -> str:
        return f"PosixPath({self._prefix + self._name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PosixPath, (self._prefix + self._name,))

    @property
    def name(self) -> str:
        return self._name

    @property
    def parent(self) -> PosixPath:  # type: ignore[override]
        return self._folder

    # Paths derived from a child are ordinary paths.
    @classmethod
    def _from_parts(cls, args: Any) -> Any:
        return PosixPath._from_parts(args)  # type: ignore[attr-defined]

    @classmethod
    def _from_parsed_parts(cls, drv: str, root: str, parts: list[str]) -> Any:
        return PosixPath._from_parsed_parts(drv, root, parts)  # type: ignore[attr-defined]


def child_maker(folder: Path) -> Callable[[str], Path]:
    """The function from a name to the path of that name in `folder` (an absolute path)."""
    prefix = os.path.join(str(folder), "")
    if LAZY and type(folder) is _ChildPath:  # a folder found by the walk: parsed once, here
        folder = PosixPath._from_parsed_parts(folder.drive, folder.root, folder._parts)  # type: ignore[attr-defined]
    if not (LAZY and type(folder) is PosixPath and folder.is_absolute()):
        return lambda name: Path(prefix + name)
    new = object.__new__
    cls = _ChildPath
    set_folder = _ChildPath.__dict__["_folder"].__set__
    set_name = _ChildPath.__dict__["_name"].__set__
    set_prefix = _ChildPath.__dict__["_prefix"].__set__
    set_drv = PurePath._drv.__set__  # type: ignore[attr-defined]
    set_root = PurePath._root.__set__  # type: ignore[attr-defined]
    drv, root = folder.drive, folder.root

    def child(name: str) -> Path:
        p = new(cls)
        set_folder(p, folder)
        set_name(p, name)
        set_prefix(p, prefix)
        set_drv(p, drv)
        set_root(p, root)
        return p

    return child
