"""`verify --deep`: validate every buffer of every Arrow file, judge each schema as `datasets`
would (verdicts remembered in the user's cache folder), and checksum the bytes (xxh3) where a
stored checksum is compared or `--record` stores one. docs/performance.md has the measurements.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, CacheReport, Entry
from cachetool.cache.store import lock_state, read_state_json, write_whole
from cachetool.cache.walk import gc_paused
from cachetool.formatting import local_time
from cachetool.hints import shell_command
from cachetool.maintenance.fdops import identity
from cachetool.maintenance.verify.findings import Checker, Finding, rel

CHECKSUMS_NAME = "checksums.json"
#: How long `save_checksums` waits for another process storing its checksums (a few writes).
LOCK_SECONDS = 60.0
#: What a deep read checks, as a number: raise it whenever that changes, so that files recorded
#: as valid before are validated in full again.
DEEP_CHECKS = 1


def checksums_path(root: Path) -> Path:
    return root / layout.LEDGER_DIR / CHECKSUMS_NAME


def _stored(path: Path, field: str, keep: Callable[[Any], bool], **expect: Any) -> dict[str, Any]:
    """The entries of the object `field` of the JSON document at `path` that `keep` accepts; {}
    when it does not read, is not that shape (edited by hand), or differs from `expect`."""
    try:
        doc = read_state_json(path)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or any(doc.get(k) != v for k, v in expect.items()):
        return {}
    found = doc.get(field)
    return {k: v for k, v in found.items() if keep(v)} if isinstance(found, dict) else {}


def load_checksums(root: Path) -> dict[str, dict[str, Any]]:
    """The checksums stored for `root`; PermissionError when they are stored where this user may
    not read them (another user's, recorded with a strict umask)."""
    path = checksums_path(root)
    if os.path.lexists(path) and not os.access(path, os.R_OK, follow_symlinks=False):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
    return _stored(path, "files", lambda v: isinstance(v, dict))


def save_checksums(root: Path, files: dict[str, dict[str, Any]]) -> None:
    """Store the checksums `files` (relative path -> record) over the ones stored, keeping every
    other file's: under a lock, the stored ones are read again and merged, so two `--record`
    runs at once (two CI jobs) each keep what the other recorded. OSError (TimeoutError after
    `LOCK_SECONDS`) when they cannot be stored."""
    path = checksums_path(root)
    with lock_state(path.with_name(CHECKSUMS_NAME + ".lock"), LOCK_SECONDS):
        merged = {**load_checksums(root), **files}
        doc = json.dumps({"version": 1, "files": merged}, separators=(",", ":")).encode()
        # Every user of a shared cache compares with them (as `pins.json`, 0o644 less the umask).
        write_whole(path, doc, mode=0o644, create_folders=True)


def validator() -> str:
    """What validated a file in full, stored with its checksum: the same bytes validated by the
    same pyarrow and the same checks give the same answer."""
    import pyarrow as pa

    return f"pyarrow {pa.__version__}; checks {DEEP_CHECKS}"


# -- the deep pass -------------------------------------------------------------------------------


def deep_pass(
    checker: Checker,
    report: CacheReport,
    entries: Sequence[Entry],
    *,
    record: bool,
    jobs: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    """Read every whole Arrow stream of `entries` on `jobs` threads, add a finding for each that
    does not validate or whose bytes changed since recorded, and with `record` store the new
    checksums. Returns (bytes read, checksums stored)."""
    root = report.root
    targets: list[tuple[Entry, CacheFile]] = [
        (e, f)
        for e in entries
        if e.kind not in (Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE)
        for f in e.files
        if f.summary is not None and f.summary.error is None and f.summary.format == "stream"
    ]
    verdicts = SchemaVerdicts(root)
    try:
        stored = load_checksums(root)
    except PermissionError as err:  # `--record` then stores nothing: it would drop them
        stored = {}
        why = f"cannot read the stored checksums: {err.strerror}; no file is compared with them"
        checker.findings.append(Finding("checksums-unread", why, "", "record", checksums_path(root)))
    wants = [_want(stored.get(rel(f.path, root)), record) for _, f in targets]
    results = read_files([f.path for _, f in targets], jobs, verdicts, progress, wants)
    verdicts.save()
    new_sums: dict[str, dict[str, Any]] = {}
    record_command = shell_command("verify", "--deep", "--record", "--cache-dir", os.fsdecode(root))
    for (e, _), res in zip(targets, results, strict=True):
        if res.error is not None:
            checker.add("invalid-data", e, res.path, res.error, checker.recompute(e), ident=res.identity)
            continue
        key = rel(res.path, root)
        _compare(checker, e, res, stored.get(key), record, record_command)
        if not record:
            continue
        # A file written in place while it was read could have had old bytes validated and new
        # ones hashed: its checksum is stored without the note that it validated.
        try:
            st = os.stat(res.path)
            unchanged = identity(st) == res.identity and st.st_ctime_ns == res.ctime_ns
        except OSError:
            unchanged = False
        new_sums[key] = {
            "size": res.size,
            "mtime_ns": res.mtime_ns,
            "ctime_ns": res.ctime_ns,
            "xxh3": res.checksum,
            "time": time.time(),
            **({"ino": res.identity[1]} if res.identity is not None else {}),
            **({"validated": validator()} if unchanged else {}),
        }
    total_bytes = sum(res.size for res in results)
    if not new_sums:
        return total_bytes, 0
    try:
        save_checksums(root, new_sums)
    except OSError as err:
        why = f"cannot store checksums: {err.strerror or err}"
        checker.findings.append(Finding("checksums-not-stored", why, "", "record", checksums_path(root)))
        return total_bytes, 0
    return total_bytes, sum(1 for r in results if r.error is None) if record else 0


def _want(old: dict[str, Any] | None, record: bool) -> Want:
    """A checksum is computed when one is stored to compare with, or `record` stores it; a file
    whose stored checksum was recorded after this pyarrow validated it in full is validated again
    only if its bytes changed."""
    if old is None:
        return Want(checksum=record)
    trusted = old.get("xxh3") if old.get("validated") == validator() else None
    return Want(trusted=trusted if isinstance(trusted, str) else None)


def _compare(
    checker: Checker,
    e: Entry,
    res: DeepResult,
    old: dict[str, Any] | None,
    record: bool,
    record_command: str,
) -> None:
    """A finding when a file (whose stream validates in full) differs from its recorded checksum,
    saying whether it was written anew since (its checksum is recorded again with `record`; a
    verify without it writes nothing, and says how to record it).

    Written anew: another inode (written beside and renamed, as `datasets` writes a cache file),
    or a new mtime (truncated and written again, as `save_to_disk` writes): information. The same
    inode and mtime with other bytes is bit rot, a silent overwrite or a wrong record: an error,
    which `--quarantine` never moves on this evidence alone."""
    if old is None or old.get("xxh3") == res.checksum:
        return
    when = local_time(float(old.get("time", 0)), seconds=False)
    ino = res.identity[1] if res.identity is not None else None
    new_inode = isinstance(old.get("ino"), int) and ino is not None and old["ino"] != ino
    if new_inode or old.get("mtime_ns") != res.mtime_ns:
        how = "a new file" if new_inode else "a new modification time"
        checker.add(
            "rewritten",
            e,
            res.path,
            f"rewritten since its checksum was recorded {when} ({how}; the stream validates "
            f"in full){': checksum recorded again' if record else ''}",
            "" if record else f"to record its new checksum, run: {record_command}",
        )
        return
    same_size = " (same size and mtime: bit rot or a silent overwrite)" if old.get("size") == res.size else ""
    checker.add(
        "checksum-changed",
        e,
        res.path,
        f"bytes changed since checksum recorded {when}{same_size}; the stream validates in full, "
        "so values changed inside it or the record is wrong: not moved by --quarantine",
        f"check the data; if the file is right, run `{record_command}` again",
    )


# -- what datasets says of a schema -------------------------------------------------------------

VERDICTS_NAME = "schema-verdicts.json"
#: Far more distinct schemas than any real cache holds; past it the oldest verdicts are dropped.
MAX_VERDICTS = 4096


def load_error(schema: Any) -> str | None:
    """Why `datasets` would refuse a file with this Arrow schema, or None if it would load it.

    `Dataset.from_file` builds the features from the schema metadata, then checks column names and
    types in `Dataset.__init__`, all from the schema alone: the same constructor runs here on an
    empty table of that schema, so the answer is the one `datasets` gives, for every feature type
    and version. Without `datasets` installed, the metadata's JSON and shape are checked."""
    try:
        import datasets
    except ImportError:
        return _metadata_shape_error(schema)
    import pyarrow as pa

    try:
        datasets.Dataset(datasets.table.InMemoryTable(pa.Table.from_batches([], schema)))
    except Exception as e:  # whatever datasets raises is the reason it would not load the file
        return f"datasets cannot load it: {type(e).__name__}: {first_line(e)}"
    return None


def _metadata_shape_error(schema: Any) -> str | None:
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode())
    except (ValueError, RecursionError) as e:
        return f"datasets cannot load it: the huggingface schema metadata is not JSON ({first_line(e)})"
    info = doc.get("info") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or (info is not None and not isinstance(info, dict)):
        return "datasets cannot load it: the huggingface schema metadata is not an object with an info object"
    features = info.get("features") if isinstance(info, dict) else None
    if features is not None and not isinstance(features, dict):
        return "datasets cannot load it: info.features in the huggingface schema metadata is not an object"
    return None


def first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:299] + "…"


class SchemaVerdicts:
    """`load_error` per schema, once each; with a `root`, remembered for the `datasets` and
    `pyarrow` installed now (a verdict stored by another install is not used) in the user's cache
    folder, beside the folders of the roots (`cache.locations.derived_dir`, never a root): a verdict
    holds for every cache."""

    def __init__(self, root: Path | None = None) -> None:
        from cachetool.cache.locations import derived_dir

        folder = derived_dir(root) if root is not None else None  # <user cache>/roots/<root>
        self.path = folder.parent.parent / VERDICTS_NAME if folder is not None else None
        self.install = _install_key() if self.path is not None else None
        self.known: dict[str, str | None] = self._read()
        self.new = 0

    def _read(self) -> dict[str, str | None]:
        if self.path is None or self.install is None:
            return {}
        return _stored(self.path, "verdicts", lambda v: v is None or isinstance(v, str), install=self.install)

    def error(self, schema: Any) -> str | None:
        """`load_error(schema)`, from what an earlier verify found when it can."""
        import xxhash

        digest = xxhash.xxh3_128_hexdigest(schema.serialize().to_pybytes())
        if digest not in self.known:
            self.known[digest] = load_error(schema)
            self.new += 1
        return self.known[digest]

    def save(self) -> None:
        """Store the verdicts when this run found new ones (where that cannot be written: skipped),
        with those another verify stored meanwhile."""
        if not self.new or self.install is None or self.path is None:
            return
        verdicts = dict(list({**self._read(), **self.known}.items())[-MAX_VERDICTS:])
        try:
            doc = {"version": 1, "install": self.install, "verdicts": verdicts}
            write_whole(self.path, json.dumps(doc).encode(), create_folders=True)
        except OSError:
            return


def _install_key() -> str | None:
    """Names the `datasets` and `pyarrow` installed now without importing `datasets`: pyarrow's
    version and the path, size and mtime of the `datasets` modules whose code decides a verdict
    (an upgrade or an edit of them changes it). None without `datasets` (nothing is stored)."""
    import pyarrow as pa

    try:
        spec = find_spec("datasets")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    parts = [f"pyarrow {pa.__version__}"]
    for name in ("__init__.py", "arrow_dataset.py", "table.py", "features/features.py"):
        try:
            st = os.stat(package / name)
        except OSError:
            return None
        parts.append(f"{package / name} {st.st_size} {st.st_mtime_ns}")
    return "; ".join(parts)


# -- reading whole files ------------------------------------------------------------------------

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
    verdicts = verdicts or SchemaVerdicts()
    workers = jobs or os.cpu_count() or 1
    results: list[DeepResult] = []
    reading: deque[_Read] = deque()  # files mapped at once: at most 2 * workers + 2

    def finish_oldest() -> None:
        results.append(reading.popleft().result())
        if progress is not None:
            progress(len(results), len(paths))

    # Thousands of batch objects come and go, none in a cycle: a collection would only walk
    # every object of the process again (5% of a deep verify's CPU in a profile).
    with gc_paused(), ThreadPoolExecutor(max_workers=workers) as pool:
        for path, want in zip(paths, wants or [EVERYTHING] * len(paths), strict=True):
            if len(reading) > 2 * workers + 1:
                finish_oldest()
            reading.append(_Read(path, want, verdicts, pool))
        while reading:
            finish_oldest()
    return results


class _Read:
    """One file being read: mapped, its schema judged and its batches listed on the calling
    thread (cheap, zero-copy), while the pool hashes it and validates each group of batches."""

    def __init__(self, path: Path, want: Want, verdicts: SchemaVerdicts, pool: ThreadPoolExecutor) -> None:
        self.path, self.want, self.verdicts, self.pool = path, want, verdicts, pool
        self.mm: mmap.mmap | None = None
        self.groups: list[tuple[int, list[Any]]] = []  # (index of the first batch, batches)
        self.checks: list[Future[tuple[int, str] | None]] = []  # each group's first bad batch
        self.hashing: Future[str] | None = None
        self.size = self.mtime_ns = self.ctime_ns = 0
        self.ident: tuple[int, int, int, int] | None = None
        self.error: str | None = None  # found before any batch: opening, the schema
        self.read_error: str | None = None  # reading the stream, after every batch listed
        if not self._map():
            return
        if want.checksum:
            self.hashing = pool.submit(xxh3, self.mm)
        if want.trusted is None:  # else hashed first: validated only if it changed
            self._validate()

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

    def _open(self) -> tuple[Any, Any]:
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
        self.error = self.verdicts.error(reader.schema)
        return source, reader

    def _validate(self) -> None:
        """List the batches and hand each group of about `GROUP_BYTES` to the pool as soon as
        it is complete, so its validation starts while the rest is listed."""
        group: list[Any] = []
        first = start = 0
        try:
            source, reader = self._open()
            for index, batch in enumerate(reader if self.error is None else ()):
                group.append(batch)
                if source.tell() - start >= GROUP_BYTES:
                    self._check(first, group)
                    group, first, start = [], index + 1, source.tell()
        except Exception as e:  # whatever pyarrow raises on damage is a finding
            self.read_error = damage(e)
        if group:
            self._check(first, group)

    def _check(self, first: int, batches: list[Any]) -> None:
        self.groups.append((first, batches))
        self.checks.append(self.pool.submit(first_bad_batch, self.groups, len(self.groups) - 1))

    def result(self) -> DeepResult:
        """Wait for the file's tasks (raising what one raised) and unmap it."""
        checksum = self.hashing.result() if self.hashing is not None else None
        if self.mm is not None and self.want.trusted is not None:
            if checksum != self.want.trusted:
                self._validate()
            else:  # the bytes it found valid: only what `datasets` says of the schema is asked
                try:
                    self._open()
                except Exception as e:  # pragma: no cover - these bytes were read without an error
                    self.read_error = damage(e)
        bad = [b for b in (c.result() for c in self.checks) if b is not None]
        error = self.error or (min(bad)[1] if bad else self.read_error)
        self.groups.clear()
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # pragma: no cover - a view outlived the read; GC unmaps it
                pass
        return DeepResult(self.path, self.size, self.mtime_ns, checksum, error, self.ident, self.ctime_ns)


def xxh3(data: Any) -> str:
    import xxhash

    return str(xxhash.xxh3_64(data).hexdigest())


def first_bad_batch(groups: list[tuple[int, list[Any]]], n: int) -> tuple[int, str] | None:
    """The first batch of group `n` that does not validate in full, and why."""
    import pyarrow as pa

    first, batches = groups[n]
    if WHOLE_GROUPS and len(batches) > 1:
        try:
            # The whole group in one call: the GIL is given back and taken again once per group
            # instead of once per batch, so threads running on every core do not queue for it. A
            # table of the batches holds every one, empty ones included, and each batch's own
            # lengths were checked as it was read; a group that does not validate is gone through
            # batch by batch below, for the first bad batch and the words a batch-by-batch read gives.
            pa.Table.from_batches(batches).validate(full=True)
            return None
        except Exception:  # said batch by batch below
            pass
    for index, batch in enumerate(batches, first):
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid as e:
            return index, f"invalid data in batch {index}: {' '.join(str(e).split())}"
        except Exception as e:  # as reading the stream would report it
            return index, damage(e)
    return None


def damage(e: BaseException) -> str:
    """The finding for what pyarrow raised on a damaged stream."""
    import pyarrow as pa

    text = " ".join(str(e).split())
    if isinstance(e, (pa.ArrowInvalid, OSError)):
        return text
    return f"damaged Arrow file: {type(e).__name__}: {text}"
