"""Reading whole Arrow files for `verify --deep`: every buffer of every batch validated in full
(offsets, UTF-8, nulls) and every byte hashed (xxh3) where the checksum is wanted, on a pool of
threads.

Each file is mapped once (`mmap` of a descriptor opened without touching its access time): on a
warm page cache this costs less CPU than `read()` into a buffer, which copies every byte. Both
xxhash and pyarrow's `validate` release the GIL, so one thread walks the stream's message headers
(cheap, zero-copy) while the pool hashes each whole file and validates its batches in groups of
about `GROUP_BYTES`: a large file is spread over every core instead of keeping one busy. The
first problem in stream order is the one reported, as reading the file batch by batch would.

What each file needs is its `Want`: a checksum nobody compares or stores is not computed (xxh3
and the page faults of the bytes only it reads were a quarter of the read's CPU), and a file
whose bytes hash to a checksum recorded after this pyarrow validated them in full is not
validated again (the same bytes give the same answer): hashed, its schema checked, done."""

from __future__ import annotations

import mmap
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetool.cache.walk import gc_paused
from cachetool.maintenance.fdops import identity
from cachetool.maintenance.verify.schema_check import SchemaVerdicts, load_error

#: Validate each group of batches in one call (one GIL hand-over a group); False: batch by batch
#: (the same findings, a test compares them).
WHOLE_GROUPS = True

#: Bytes of batches validated by one task: large enough that a task costs far more than handing
#: it over, small enough that a large file spreads over every core.
GROUP_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class DeepResult:
    path: Path
    size: int
    mtime_ns: int
    checksum: str | None
    error: str | None
    identity: tuple[int, int, int, int] | None = None  # of the very file read (its descriptor)
    ctime_ns: int = 0  # of the very file read, when it was opened


@dataclass(frozen=True)
class Want:
    """What reading one file is for: `checksum` (computed only when something compares or stores
    it), and `trusted`, a checksum recorded after this pyarrow validated the file in full (when
    the bytes hash to it, the validation's answer is known)."""

    checksum: bool = True
    trusted: str | None = None


EVERYTHING = Want()


def deep_check(path: Path) -> DeepResult:
    """Validate every buffer of every batch (offsets, UTF-8, nulls) and hash every byte (xxh3)."""
    return read_files([path])[0]


def read_files(
    paths: Sequence[Path],
    jobs: int | None = None,
    verdicts: SchemaVerdicts | None = None,
    progress: Callable[[int, int], None] | None = None,
    wants: Sequence[Want] | None = None,
) -> list[DeepResult]:
    """`deep_check` of every path, in order, on `jobs` threads (default: one per core), each as
    its `wants` says (default: validated and hashed); `progress(done, total)` is called from this
    thread as files finish."""
    batch = _Batch(paths, wants or [EVERYTHING] * len(paths), jobs or os.cpu_count() or 1, verdicts, progress)
    # Thousands of batch objects come and go, none in a cycle: a collection would only walk
    # every object of the process again (5% of a deep verify's CPU in a profile).
    with gc_paused():
        batch.run()
    return [r for r in batch.results if r is not None]  # every one is: a crash was raised


class _Batch:
    """The files of one `read_files`: handed out from this thread, collected as they finish."""

    def __init__(
        self,
        paths: Sequence[Path],
        wants: Sequence[Want],
        workers: int,
        verdicts: SchemaVerdicts | None,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.paths = paths
        self.wants = wants
        self.workers = workers
        self.verdicts = verdicts
        self.progress = progress
        self.results: list[DeepResult | None] = [None] * len(paths)
        self.finished: queue.SimpleQueue[_File] = queue.SimpleQueue()
        self.in_flight = threading.BoundedSemaphore(2 * workers + 2)  # files mapped at once
        self.done = 0

    def run(self) -> None:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for index, (path, want) in enumerate(zip(self.paths, self.wants, strict=True)):
                while not self.in_flight.acquire(blocking=False):
                    self.collect(self.finished.get())  # a file finished frees its place first
                _File(index, path, want, self.done_with).start(pool, self.verdicts)
                while not self.finished.empty():
                    self.collect(self.finished.get())
            while self.done < len(self.paths):
                self.collect(self.finished.get())

    def done_with(self, f: _File) -> None:
        """Called on the thread that finished the file."""
        self.in_flight.release()
        self.finished.put(f)

    def collect(self, f: _File) -> None:
        if f.crash is not None:
            raise f.crash
        self.results[f.index] = f.result
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, len(self.paths))


class _File:
    """One file being read: its map, its batches, and what the tasks found. `pending` counts the
    tasks not yet finished (plus one for the thread still handing them out); the last to finish
    turns the findings into the result and unmaps the file."""

    def __init__(self, index: int, path: Path, want: Want, on_done: Callable[[_File], None]) -> None:
        self.index = index
        self.path = path
        self.want = want
        self.on_done = on_done
        self.lock = threading.Lock()
        self.pending = 1
        self.mm: mmap.mmap | None = None
        self.views: list[Any] = []  # pyarrow objects over the map: dropped before it closes
        self.groups: list[tuple[int, list[Any]]] = []  # (index of the first batch, batches)
        self.size = self.mtime_ns = self.ctime_ns = 0
        self.ident: tuple[int, int, int, int] | None = None
        self.checksum: str | None = None
        self.error: str | None = None  # found before any batch: opening, the schema
        self.read_error: str | None = None  # reading the stream, after every batch listed
        self.bad_batch: tuple[int, str] | None = None  # the first batch that does not validate
        self.crash: BaseException | None = None
        self.result: DeepResult | None = None

    def start(self, pool: ThreadPoolExecutor, verdicts: SchemaVerdicts | None) -> None:
        try:
            if self._map():
                self._submit(pool, verdicts)
        except BaseException as e:  # handed to the caller's thread by `collect`
            self.crash = e
        self._task_done()

    def _submit(self, pool: ThreadPoolExecutor, verdicts: SchemaVerdicts | None) -> None:
        if self.want.trusted is not None:  # hashed first: validated only if it changed
            self._add_task()
            pool.submit(self._task, self._trusted, pool, verdicts)
        elif self.size <= GROUP_BYTES:  # one task: validated, then hashed while cached
            self._list_batches(verdicts)
            self._add_task()
            pool.submit(self._task, self._whole)
        else:  # hashed on one core while its batches are validated on the others
            if self.want.checksum:
                self._add_task()
                pool.submit(self._task, self._hash)
            self._list_and_validate(pool, verdicts)

    def _list_and_validate(self, pool: ThreadPoolExecutor, verdicts: SchemaVerdicts | None) -> None:
        """List the batches, each group validated on the pool as soon as it is listed."""

        def validate(n: int) -> None:
            self._add_task()
            pool.submit(self._task, self._validate, n)

        self._list_batches(verdicts, validate)

    def _trusted(self, pool: ThreadPoolExecutor, verdicts: SchemaVerdicts | None) -> None:
        """A file recorded as valid: when its bytes hash to the recorded checksum only its schema
        is checked (what `datasets` says of it may have changed); otherwise it is read in full."""
        self._hash()
        if self.checksum != self.want.trusted:
            self._list_and_validate(pool, verdicts)
            return
        try:
            self._open(verdicts)
        except Exception as e:  # pragma: no cover - these bytes were read without an error
            self.read_error = damage(e)

    def _map(self) -> bool:
        from cachetool.cache.arrow import open_noatime

        try:
            fd = open_noatime(self.path)
        except OSError as e:
            self.error = e.strerror or str(e)
            return False
        try:
            st = os.fstat(fd)
            self.mtime_ns, self.ctime_ns = st.st_mtime_ns, st.st_ctime_ns
            if st.st_size == 0:
                self.error = "empty file (0 bytes)"
                return False
            self.size, self.ident = st.st_size, identity(st)
            self.mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return True

    def _list_batches(
        self, verdicts: SchemaVerdicts | None, listed: Callable[[int], None] | None = None
    ) -> None:
        """Read the message headers (zero-copy views of the map) and group the batches, calling
        `listed(n)` as group n is complete (so its validation starts while the rest is listed);
        stop at a schema `datasets` refuses (the file is reported for that alone)."""
        group: list[Any] = []
        first = start = 0
        try:
            source, reader = self._open(verdicts)
            if self.error is not None:
                return
            for index, batch in enumerate(reader):
                group.append(batch)
                if source.tell() - start >= GROUP_BYTES:
                    self._listed((first, group), listed)
                    group, first, start = [], index + 1, source.tell()
        except Exception as e:  # whatever pyarrow raises on damage is a finding
            self.read_error = damage(e)
        if group:
            self._listed((first, group), listed)

    def _open(self, verdicts: SchemaVerdicts | None) -> tuple[Any, Any]:
        """The stream's reader over the map, its schema read; `error` is set when `datasets`
        refuses the schema, or it is too large to read (the file is reported for that alone)."""
        import pyarrow as pa

        from cachetool.cache.arrow import schema_too_large

        assert self.mm is not None
        self.error = schema_too_large(self.mm[:16], len(self.mm))  # reported, never read
        if self.error is not None:
            return None, None
        source = pa.BufferReader(pa.py_buffer(self.mm))
        reader = pa.ipc.open_stream(source)
        self.views += [source, reader]
        self.error = verdicts.error(reader.schema) if verdicts is not None else load_error(reader.schema)
        return source, reader

    def _listed(self, group: tuple[int, list[Any]], listed: Callable[[int], None] | None) -> None:
        self.groups.append(group)
        if listed is not None:
            listed(len(self.groups) - 1)

    def _add_task(self) -> None:
        with self.lock:
            self.pending += 1

    def _task(self, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except BaseException as e:
            self.crash = e
        self._task_done()

    def _whole(self) -> None:
        if self.groups:
            self._validate(0)
        if self.want.checksum:
            self._hash()

    def _hash(self) -> None:
        import xxhash

        assert self.mm is not None  # hashed only once mapped
        self.checksum = xxhash.xxh3_64(self.mm).hexdigest()

    def _validate(self, n: int) -> None:
        import pyarrow as pa

        first, batches = self.groups[n]
        bad = self.bad_batch
        if bad is not None and bad[0] < first:
            return  # an earlier batch is the one reported
        if WHOLE_GROUPS and len(batches) > 1:
            try:
                # The whole group in one call: the GIL is given back and taken again once per
                # group instead of once per batch, so threads running on every core do not
                # queue for it. A table of the batches holds every one, empty ones included,
                # and each batch's own lengths were checked as it was read; a group that does
                # not validate is gone through batch by batch below, for the first bad batch
                # and the words a batch-by-batch read gives.
                pa.Table.from_batches(batches).validate(full=True)
                return
            except Exception:  # said batch by batch below
                pass
        for index, batch in enumerate(batches, first):
            bad = self.bad_batch
            if bad is not None and bad[0] < index:
                return  # an earlier batch is the one reported
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid as e:
                self._bad(index, f"invalid data in batch {index}: {' '.join(str(e).split())}")
                return
            except Exception as e:  # as reading the stream would report it
                self._bad(index, damage(e))
                return

    def _bad(self, index: int, why: str) -> None:
        with self.lock:
            if self.bad_batch is None or index < self.bad_batch[0]:
                self.bad_batch = (index, why)

    def _task_done(self) -> None:
        with self.lock:
            self.pending -= 1
            if self.pending:
                return
        self._finish()
        self.on_done(self)

    def _finish(self) -> None:
        error = self.error
        if error is None:
            error = self.bad_batch[1] if self.bad_batch is not None else self.read_error
        self.result = DeepResult(
            self.path, self.size, self.mtime_ns, self.checksum, error, self.ident, self.ctime_ns
        )
        self.groups.clear()
        self.views.clear()
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # pragma: no cover - a view outlived the walk; GC unmaps it
                pass
            self.mm = None


def damage(e: BaseException) -> str:
    """The finding for what pyarrow raised on a damaged stream."""
    import pyarrow as pa

    text = " ".join(str(e).split())
    if isinstance(e, (pa.ArrowInvalid, OSError)):
        return text
    return f"damaged Arrow file: {type(e).__name__}: {text}"
