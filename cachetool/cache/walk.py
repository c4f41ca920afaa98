"""The walk: folders listed with `os.scandir` (never following a link), files turned into
`CacheFile`s with their `stat` and, for Arrow files, their headers (from the read index when the
file did not change, else read, on other cores when many are unread)."""

from __future__ import annotations

import gc
import math
import os
import stat
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.arrow import ArrowSummary, read_summary
from cachetool.cache.index import ReadIndex
from cachetool.cache.layout import Kind
from cachetool.cache.lean import LeanEntry, keep_lean
from cachetool.cache.model import CacheFile, DatasetDir, Entry, ScanWarning
from cachetool.cache.paths import child_maker


class Item:
    """One folder entry as `scandir` gave it: its name, path and the `lstat` fields a listing
    uses (`ok` is False, with `error` saying why, when `lstat` failed). Only the fields are kept:
    a whole `stat_result` and its numbers take some 600 bytes per file. `prefix` is the folder's
    text and a separator, one string shared by the folder's items. The `Path` is made when first
    asked for (`child` makes it from the name): a listing writing JSON never needs most of them."""

    __slots__ = (
        "_child",
        "_path",
        "ctime_ns",
        "error",
        "ino",
        "is_dir",
        "is_file",
        "mode",
        "mtime",
        "mtime_ns",
        "name",
        "ok",
        "prefix",
        "size",
        "uid",
    )

    def __init__(
        self,
        name: str,
        child: Callable[[str], Path],
        st: os.stat_result | None,
        error: str | None,
        prefix: str,
    ) -> None:
        self.name = name
        self._child = child
        self._path: Path | None = None
        self.error = error
        self.prefix = prefix
        if st is None:
            self.ok = self.is_dir = self.is_file = False
            self.mode = self.size = self.mtime_ns = self.ctime_ns = self.ino = 0
            self.uid = -1
            self.mtime = 0.0
            return
        self.ok = True
        mode = st.st_mode
        self.mode = mode = _MODES.setdefault(mode, mode)  # one int per distinct mode, not per file
        self.is_dir = S_ISDIR(mode)
        self.is_file = S_ISREG(mode)
        self.size = st.st_size
        self.mtime = st.st_mtime
        self.mtime_ns = st.st_mtime_ns
        self.ctime_ns = st.st_ctime_ns
        self.ino = st.st_ino
        self.uid = st.st_uid

    @property
    def path(self) -> Path:
        path = self._path
        if path is None:
            path = self._path = self._child(self.name)
        return path


S_ISDIR = stat.S_ISDIR
S_ISREG = stat.S_ISREG
_MODES: dict[int, int] = {}


def list_dir(path: Path) -> tuple[list[Item], str | None]:
    """The items of the folder `path` by name (never cachetool's own folder), or why it cannot
    be listed."""
    items, error, _ = _list_dir(path, False)
    return items, error


class Candidates:
    """The `cache-<fp>.arrow` regular files of one folder as (name, `stat`) pairs by name, not
    yet made `Item`s (`items()`): those a listing keeps lean never are."""

    __slots__ = ("child", "pairs", "prefix")

    def __init__(
        self, child: Callable[[str], Path], prefix: str, pairs: list[tuple[str, os.stat_result]]
    ) -> None:
        self.child = child
        self.prefix = prefix
        self.pairs = pairs

    def items(self, pairs: Iterable[tuple[str, os.stat_result]] | None = None) -> list[Item]:
        child, prefix = self.child, self.prefix
        return [Item(name, child, st, None, prefix) for name, st in (self.pairs if pairs is None else pairs)]


def list_dir_split(path: Path) -> tuple[list[Item], str | None, Candidates]:
    """`list_dir(path)` with its `cache-*.arrow` regular files set apart as `Candidates`."""
    return _list_dir(path, True)


def _list_dir(path: Path, split: bool) -> tuple[list[Item], str | None, Candidates]:
    items: list[Item] = []
    pairs: list[tuple[str, os.stat_result]] = []
    child = child_maker(path)
    prefix = os.path.join(str(path), "")
    candidates = Candidates(child, prefix, pairs)
    own = layout.LEDGER_DIR
    try:
        with os.scandir(path) as it:
            for de in it:
                name = de.name
                if name == own:
                    continue  # cachetool's own state (ledger, read index, pins): never an entry
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError as e:
                    items.append(Item(name, child, None, e.strerror or str(e), prefix))
                    continue
                if split and name[:6] == "cache-" and name[-6:] == ".arrow" and S_ISREG(st.st_mode):
                    pairs.append((name, st))
                else:
                    items.append(Item(name, child, st, None, prefix))
    except PermissionError:
        return [], "permission denied", Candidates(child, prefix, [])
    except OSError as e:
        return [], e.strerror or str(e), Candidates(child, prefix, [])
    items.sort(key=item_name)  # attrgetter: no Python call per item
    pairs.sort(key=_first)
    return items, None, candidates


_first = itemgetter(0)
item_name = attrgetter("name")


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


#: Below this many unread Arrow files, starting processes costs more than it saves.
READ_AHEAD_MIN_FILES = 2000
#: With a read index, how many unknown Arrow files the walk meets before it looks for more.
READ_AHEAD_AFTER = 100


def _spare_cores() -> int:
    """Cores a cold listing may use: those this process may run on and the machine's load
    leaves idle, and one only where forking is unsafe (another thread runs, e.g. a progress
    display) or unavailable. The listing keeps one for its own walk and reads headers in a
    process on each of the others: on 2 cores, a second reading process only took turns with
    the walk (the same time, 10% more CPU). A reading process costs CPU of its own (the names
    walked twice, the summaries sent back): on a busy machine, where it only takes turns with
    the walk, reading in the listing's own process is the faster too."""
    import threading

    if threading.active_count() > 1 or not hasattr(os, "fork"):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]  # the listing's own process (or the one before it) counts
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, math.ceil(cores + 0.5 - load)))


class _Reads:
    """`read_summary` of each path, on `workers` forked processes, handed back in order as they
    come (the walk classifies the first folders while the others are read). Chunk `i` of the
    paths is read by process `i % workers`, which writes its chunks' summaries, pickled, to its
    own pipe in order: a process a pipe's worth ahead of the walk waits, so read summaries do not
    pile up in memory when the walk is the slower side. The walk reads the pipes itself (a
    `ProcessPoolExecutor`'s thread unpickling results took the interpreter lock from the walk:
    0.06 s of CPU at 20k files). A process that died hands back nothing more: the walk reads
    those files itself."""

    def __init__(self, paths: list[str], workers: int) -> None:
        chunk = max(64, min(512, len(paths) // (workers * 8)))
        # A deque, so each chunk of paths is let go once read and handed back.
        self._chunks = deque(paths[i : i + chunk] for i in range(0, len(paths), chunk))
        self._readers: list[tuple[int, Any]] = []  # (pid, the read end of its pipe)
        workers = min(workers, len(self._chunks))
        for w in range(workers):
            mine = [c for i, c in enumerate(self._chunks) if i % workers == w]
            r, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the reading process (coverage does not follow forks)
                os.close(r)
                for _, other in self._readers:  # so each pipe breaks when the listing lets go
                    other.close()
                _reader_main(mine, wfd)
            os.close(wfd)
            self._readers.append((pid, open(r, "rb")))  # noqa: SIM115 - closed by close()

    def __iter__(self) -> Iterator[tuple[str, ArrowSummary]]:
        """(path, summary) pairs, in the order of the paths; fewer if a reading process died."""
        import pickle

        i = 0
        while self._chunks:
            chunk = self._chunks.popleft()
            pipe = self._readers[i % len(self._readers)][1]
            i += 1
            head = pipe.read(8)
            size = int.from_bytes(head, "little") if len(head) == 8 else -1
            data = pipe.read(size) if size >= 0 else b""
            if len(data) != size:
                return  # the process died: the walk reads the rest itself
            yield from zip(chunk, pickle.loads(data), strict=True)

    def close(self) -> None:
        """Stop the reading processes (a listing that ends early leaves them work undone)."""
        import signal

        for pid, pipe in self._readers:
            pipe.close()
            try:
                os.kill(pid, signal.SIGKILL)  # ours and not yet waited for: no other process
            except ProcessLookupError:  # pragma: no cover
                pass
            os.waitpid(pid, 0)
        self._readers = []


def _reader_main(chunks: list[list[str]], fd: int) -> None:  # pragma: no cover - runs forked
    """A reading process: the summaries of each chunk, pickled, length first, to `fd`; then it
    exits without running the listing's exit handlers."""
    import pickle

    code = 0
    try:
        _reader_start()
        with open(fd, "wb") as out:
            for chunk in chunks:
                data = pickle.dumps(_read_chunk(chunk), pickle.HIGHEST_PROTOCOL)
                out.write(len(data).to_bytes(8, "little") + data)
                out.flush()  # each chunk as soon as it is read: the walk may be waiting for it
    except BaseException:  # the listing stopped (a closed pipe) or anything else: just end
        code = 1
    os._exit(code)


def _reader_start() -> None:
    """A reading process only decodes schemas and walks batches with pyarrow, which does so
    without numpy since pyarrow 16: unless this process has numpy or pyarrow already (forked
    from a program that imported them), numpy is kept out, which makes importing pyarrow, the
    first thing the process waits for, take a third of the time."""
    if "numpy" in sys.modules or "pyarrow" in sys.modules:
        return
    try:
        from importlib.metadata import version

        major = int(version("pyarrow").split(".")[0])
    except (ImportError, ValueError):
        return
    if major >= 16:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # `import numpy` raises ImportError


def _read_chunk(paths: list[str]) -> list[ArrowSummary]:
    return [read_summary(p) for p in paths]


def _read_summaries(paths: list[str], workers: int) -> Iterable[tuple[str, ArrowSummary]]:
    """(path, summary) of each of `paths`, in order, read on `workers` other processes."""
    return _Reads(paths, workers)


def _read_ahead_below(name: str, at_root: bool) -> bool:
    """Whether the walk may read Arrow headers in the folder `name`."""
    if name == layout.LEDGER_DIR or (at_root and name == "downloads"):
        return False
    return not (layout.is_incomplete_dir(name) or layout.GC_TRASH_RE.match(name))


class Walker:
    """Lists folders and reads files for one scan; collects its entries, dataset folders and
    warnings. The rules that make entries of a folder's files live in the subclasses."""

    def __init__(self, root: Path, index: ReadIndex, progress: Callable[[int], None] | None) -> None:
        self.root = root
        self.index = index
        self.entries: list[Entry] = []
        self.datasets: list[DatasetDir] = []
        self.warnings: list[ScanWarning] = []
        self.progress = progress
        self.files_seen = 0
        self.root_len = len(str(root).rstrip("/")) + 1
        self.prefetched: dict[str, ArrowSummary] = {}  # headers read ahead, before their turn
        self._reads: Iterable[tuple[str, ArrowSummary]] = ()  # headers being read on other cores
        self._pending: set[str] = set()  # paths read ahead and not yet asked for
        self._stream: Iterator[tuple[str, ArrowSummary]] = iter(())
        self._in_use: Any = None  # a liveness snapshot, taken only when a tf.data writer left a lockfile
        self._prefix = ""  # the folder of the last file `summary` was asked for (its text + "/")
        self._folder = ""  # the same, relative to the root
        self._misses = 0  # Arrow files the read index did not know, so far
        self._deferred = False  # reading ahead waits for the walk to miss READ_AHEAD_AFTER files
        self._walked: set[str] = set()  # folders (text + "/") whose Arrow files the walk has met
        #: Where the walk keeps lean entries (`cachetool.cache.lean`); None: an `Entry` for each.
        self.lean: list[LeanEntry] | None = None
        #: Folders listed before the walk (`list_dir_split` results by path text), taken as met.
        self.listed: dict[str, tuple[list[Item], str | None, Candidates]] | None = None

    def read_ahead(self) -> None:
        """Where more than one core is free: find the Arrow files of folders the read index does
        not know whole (new folders, or ones whose count of Arrow files changed) and have their
        headers read on the other cores while the walk goes on: a cold listing of many files
        waits mostly on those reads. This first pass only reads names (no `stat`, nothing kept
        but the paths to read); folders the walk never reads Arrow headers in (cachetool's own,
        downloads, interrupted prepares, gc leftovers) are skipped. A file changed in place in a
        known folder is read by the walk itself.

        With a read index, the pass waits until the walk has met `READ_AHEAD_AFTER` files the
        index does not know (a repeat listing of an unchanged cache never makes it), and then
        leaves out the folders the walk has already been through."""
        if self.index.stored and not self._deferred:
            self._deferred = True
            return
        self._deferred = False
        cores = _spare_cores()
        if cores < 2:
            return
        workers = cores - 1
        walked = self._walked
        todo: list[str] = []
        root = str(self.root)
        root_len = self.root_len
        stack = [root]
        while stack:
            folder = stack.pop()
            arrow: list[str] = []
            below: list[str] = []
            try:
                with os.scandir(folder) as entries:
                    for de in entries:
                        name = de.name
                        if de.is_dir(follow_symlinks=False):
                            if _read_ahead_below(name, folder == root):
                                below.append(de.path)
                        elif name.endswith(".arrow") and de.is_file(follow_symlinks=False):
                            arrow.append(de.path)
            except OSError:
                continue  # the walk says what is wrong with it
            if arrow and walked and os.path.join(folder, "") in walked:
                arrow = []
            if arrow and self.index.folder_rows(folder[root_len:]) != len(arrow):
                arrow.sort()  # the walk's order: a folder's files by name, then its folders
                todo += arrow
            below.sort(reverse=True)
            stack += below
        if len(todo) < READ_AHEAD_MIN_FILES:
            return
        self._pending = set(todo)
        self._reads = _read_summaries(todo, workers)
        self._stream = iter(self._reads)

    def _read_ahead_result(self, path: str) -> ArrowSummary | None:
        """The summary of `path` read ahead, once its turn comes; None for a file not read ahead."""
        if path not in self._pending:
            return None
        self._pending.discard(path)
        got = self.prefetched.pop(path, None)
        if got is not None:
            return got
        for p, summary in self._stream:
            if p == path:
                return summary
            self.prefetched[p] = summary  # read ahead of its turn (the walk went another way)
        return None

    def close(self) -> None:
        """Stop the processes reading ahead (all their work is done once the walk is)."""
        close = getattr(self._reads, "close", None)
        if close is not None:
            close()
        self._reads = ()

    # -- helpers ------------------------------------------------------------------------------
    def warn(self, path: Path, problem: str) -> None:
        self.warnings.append(ScanWarning(path, problem))

    def cache_file(self, item: Item, *, arrow: bool, shard: tuple[int, int] | None = None) -> CacheFile:
        assert item.ok
        self.files_seen += 1
        if self.progress is not None and self.files_seen % 200 == 0:
            self.progress(self.files_seen)
        summary = link = None
        if item.is_file:
            if arrow:
                summary = self.summary(item)
                if summary.error is not None and not layout.TEMP_FILE_RE.match(item.name):
                    self.warn(item.path, summary.error)
        elif stat.S_ISLNK(item.mode):
            try:
                link = os.readlink(item.path)
            except OSError:
                link = "?"
        return CacheFile(item.path, item.size, item.mtime, item.mode, item.uid, summary, shard, link)

    def _folder_of(self, item: Item) -> str:
        """The folder of `item` relative to the root (noting that the walk has met it)."""
        return self._folder_of_prefix(item.prefix)

    def _folder_of_prefix(self, prefix: str) -> str:
        """The folder whose text and separator is `prefix`, relative to the root (noting that
        the walk has met it)."""
        if prefix is not self._prefix:  # a new folder: its path relative to the root, once
            self._prefix = prefix
            self._folder = prefix[self.root_len : -1] if len(prefix) > self.root_len else ""
            self._walked.add(prefix)
        return self._folder

    def lean_files(self, candidates: Candidates, ds: DatasetDir | None) -> list[Item]:
        """Keep the entries of a folder's unchanged `cache-<fp>.arrow` files (regular files the
        read index knows, whose entry needs nothing but the index row: `keep_lean`) as lean
        entries in `self.lean`; returns the other candidates as items, for the ordinary rules.
        Names with a shard part (`_00000_of_00004`) or other characters go the ordinary way."""
        lean = self.lean
        assert lean is not None
        index = self.index
        used: list[Any] = []  # the index rows that still describe their file
        rest = keep_lean(
            candidates.prefix,
            candidates.pairs,
            index.rows_of(self._folder_of_prefix(candidates.prefix)),
            index.schema,
            ds,
            lean,
            used,
        )
        if used:
            index.mark_used(*used)
            before = self.files_seen
            self.files_seen += len(used)
            if self.progress is not None and self.files_seen // 200 != before // 200:
                self.progress(self.files_seen)
        return candidates.items(rest) if rest else []

    def summary(self, item: Item) -> ArrowSummary:
        folder = self._folder_of(item)
        name = item.name
        cached = self.index.get_in(folder, name, item.size, item.mtime_ns, item.ino)
        if cached is not None:
            return cached
        path = item.prefix + name
        summary = self._read_ahead_result(path) if self._pending else None
        if summary is None:
            self._misses += 1
            if self._deferred and self._misses >= READ_AHEAD_AFTER:
                self.read_ahead()
            summary = read_summary(path, item.size)
        # A file still being written (a live tmp* file) must not be remembered half-read.
        if not layout.TEMP_FILE_RE.match(name):
            self.index.put(folder, name, item.size, item.mtime_ns, item.ino, summary)
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
        if not item.ok:
            self.warn(item.path, item.error or "cannot stat")
            return Entry(
                Kind.UNREADABLE,
                item.path,
                (),
                dataset=ds.name if ds else None,
                problems=(item.error or "cannot stat",),
            )
        mode = item.mode
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
            f = CacheFile(item.path, 0, item.mtime, mode, item.uid)
            self.warn(item.path, f"not a regular file ({what}); not opened")
            return Entry(
                Kind.OTHER,
                item.path,
                (f,),
                dataset=ds.name if ds else None,
                problems=(f"not a regular file ({what})",),
            )
        return None

    def walk(self, path: Path, unit: Path | None = None, dataset_hint: DatasetDir | None = None) -> None:
        """Make the entries of the folder `path` and of everything below it."""
        raise NotImplementedError
