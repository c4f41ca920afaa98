"""Reading Arrow headers ahead of the walk, on the other cores: a cold listing of many files
waits mostly on those reads."""

from __future__ import annotations

import math
import os
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

from cachetool.cache import layout
from cachetool.cache.arrow import ArrowSummary, read_summary
from cachetool.cache.index import ReadIndex

#: Below this many unread Arrow files, starting processes costs more than it saves.
READ_AHEAD_MIN_FILES = 2000
#: With a read index, how many unknown Arrow files the walk meets before it looks for more.
READ_AHEAD_AFTER = 100


class ReadAhead:
    """The headers of one walk's Arrow files, read on other cores and handed to the walk in turn."""

    def __init__(self, root: str, root_len: int, index: ReadIndex) -> None:
        self.root = root
        self.root_len = root_len  # the length of the root's text and a separator
        self.index = index
        self.prefetched: dict[str, ArrowSummary] = {}  # headers read ahead, before their turn
        self._reads: _Reads | None = None  # headers being read on other cores
        self.pending: set[str] = set()  # paths read ahead and not yet asked for
        self._stream: Iterator[tuple[str, ArrowSummary]] = iter(())
        self.misses = 0  # Arrow files the read index did not know, so far
        self.deferred = False  # reading ahead waits for the walk to miss READ_AHEAD_AFTER files
        self.walked: set[str] = set()  # folders (text + "/") whose Arrow files the walk has met

    def start(self) -> None:
        """Where more than one core is free, have the headers of the Arrow files of folders the
        read index does not know whole (new ones, or ones whose count of Arrow files changed) read
        on the other cores. This pass reads names only, and skips the folders the walk reads no
        header in; a file changed in place in a known folder is read by the walk itself. With a
        read index it waits until the walk has met `READ_AHEAD_AFTER` files the index does not
        know (a repeat listing of an unchanged cache never does), then skips the folders walked."""
        if self.index.stored and not self.deferred:
            self.deferred = True
            return
        self.deferred = False
        cores = spare_cores()
        if cores < 2:
            return
        workers = cores - 1
        walked = self.walked
        todo: list[str] = []
        root = self.root
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
        self.pending = set(todo)
        self._reads = read_summaries(todo, workers)
        self._stream = iter(self._reads)

    def missed(self) -> None:
        """The walk met an Arrow file the read index did not know."""
        self.misses += 1
        if self.deferred and self.misses >= READ_AHEAD_AFTER:
            self.start()

    def result(self, path: str) -> ArrowSummary | None:
        """The summary of `path` read ahead, once its turn comes; None for a file not read ahead."""
        if path not in self.pending:
            return None
        self.pending.discard(path)
        got = self.prefetched.pop(path, None)
        if got is not None:
            return got
        for p, summary in self._stream:
            if p == path:
                return summary
            self.prefetched[p] = summary  # read ahead of its turn (the walk went another way)
        return None

    def close(self) -> None:
        if self._reads is not None:
            self._reads.close()
        self._reads = None


def _read_ahead_below(name: str, at_root: bool) -> bool:
    """Whether the walk may read Arrow headers in the folder `name`."""
    if name == layout.LEDGER_DIR or (at_root and name == "downloads"):
        return False
    return not (layout.is_incomplete_dir(name) or layout.GC_TRASH_RE.match(name))


def spare_cores() -> int:
    """Cores a cold listing may use: those this process may run on and the machine's load leaves
    idle; one where forking is unsafe (another thread runs) or unavailable. The walk keeps one
    and a reading process runs on each other: on a busy machine, where a reader only takes turns
    with the walk (and costs CPU of its own), reading in the walk's own process is faster."""
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
    """(path, summary) of each of `paths`, in order, read on `workers` forked processes. Chunk `i`
    is read by process `i % workers` and written, pickled, to its own pipe: a process a pipe's
    worth ahead of the walk waits, so summaries do not pile up. The walk reads the pipes itself
    (a `ProcessPoolExecutor`'s thread took the interpreter lock from it). A process that died
    hands back nothing more: the walk reads those files itself."""

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
    """A reading process: each chunk's summaries, pickled, length first, to `fd`; then it exits
    without running the listing's exit handlers."""
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
    """Keep numpy out of a reading process (pyarrow >= 16 reads headers without it) unless it was
    forked with numpy or pyarrow loaded: importing pyarrow then takes a third of the time."""
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


def read_summaries(paths: list[str], workers: int) -> _Reads:
    """(path, summary) of each of `paths`, in order, read on `workers` other processes."""
    return _Reads(paths, workers)
