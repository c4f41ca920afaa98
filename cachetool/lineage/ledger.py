"""The ledger: what cachetool recorded about a cache root while pipelines ran.

`datasets` keeps no parent fingerprint on disk, so the tracer (`cachetool.trace`) appends one
record per transform call to the ledger of the cache root the call belongs to:

* one ledger per root, in `<root>/.cachetool/ledger/`; a `save_to_disk` folder is a root of its own;
  in-memory datasets go to the default root's ledger (marked `"in_memory": true`);
* each process appends to its own *segment*, `<host>-<pid>-<start time>.jsonl`, opened with
  `O_APPEND`, one `write()` per record: no lock on the hot path, safe on NFS, and merging ledgers
  across machines is copying files;
* readers merge every segment into typed records (`cachetool.lineage.records`: one frozen class
  per record type), skip a torn last line (a writer killed mid-record) with a warning, and keep
  fields they do not know (records from a newer cachetool are still read). A line that is not a
  record of this schema (bad JSON, more than `MAX_LINE_BYTES`, nested too deeply, a field of the
  wrong type such as `"parents": 5` or `"time": 1e400`, an unknown `type`) is skipped with a
  warning naming the file and line, never an exception. Only regular files are read (a FIFO is
  not waited on, a symlink to `/dev/zero` is not read), at most `MAX_SEGMENT_BYTES` each;
* a command loads a root's ledger once (`Ledger.load`), scoped to that root: other roots' records
  are read only with `--all-roots` or to find the origin of a parent the root does not record,
  and keep the root they were read from (`read_from`);
* one rule turns what a user types into a fingerprint for every command (`resolve`);
* a read-only root is recorded in `user_state_dir()/ledgers/<key>/` instead (said once on stderr);
  readers look in both places;
* `user_state_dir()/roots.json` lists every root a tracer wrote to, so `cachetool lineage` can
  follow a parent into another root (a saved folder's parent lives in the cache root it came from).

Record schema, version 1 (one JSON object per line; fields may be added, never renamed)::

    v               1
    type            "transform" (a transform call), "root" (a dataset that starts a chain: a
                    builder split, load_from_disk, an in-memory dataset), "save" (save_to_disk:
                    the saved folder holds `result`), "source" (the text of a user function,
                    see below); events files also hold "checkpoint" events of
                    `cachetool.checkpoint()`
    seq             order of the call within its process (sort by it; nested calls finish first)
    run             the segment id: "<host>-<pid>-<start>"; records of one run share it
    time            call start, seconds since the epoch
    duration        seconds
    host, pid       where the call ran
    versions        {"python", "datasets", "dill", "pyarrow", "cachetool"}
    operation       "map", "filter", "select", "shuffle", "sort", "train_test_split",
                    "remove_columns", "concatenate_datasets", "set_format", "load_dataset",
                    "load_from_disk", "from_dict", "save_to_disk", ...
    transform       the transform string `datasets` hashed (e.g.
                    "datasets.arrow_dataset.Dataset._map_single"), or null when it hashed nothing
    result          the result fingerprint (null when the call raised)
    parents         list of parent fingerprints (several for concatenate_datasets; [] for roots)
    output          which output of a multi-output call ("train"/"test" of train_test_split,
                    the split of a builder's DatasetDict), else null
    internal        true for calls `datasets` makes itself (set_format inside map, the per-shard
                    select of num_proc maps, ...); hidden by default
    call_site       {"file", "line", "function"}: the first frame outside datasets and cachetool
    function        {"qualname", "file", "line", "source_hash", "code_hash", "by_reference",
                    "deps"} of the user's function, or null. `source_hash` is "sha256:<16 hex>" of
                    its source text ("code:<16 hex>" without source); `code_hash` hashes its
                    bytecode, constants and names but not line numbers (a moved function or an
                    edited comment keeps it); `by_reference` is true when `datasets` pickles it by
                    module and name (a function of an importable module), so editing it keeps the
                    fingerprint; `deps` lists the functions of the user's own modules it reaches
                    through its globals that are pickled by reference, each {"qualname", "file",
                    "line", "source_hash", "code_hash"} (at most 16). [added: code_hash,
                    by_reference, deps]
    args            {name: {"digest", "repr", "type", "summary"?}}: per hashed argument its
                    `Hasher` digest (null when not hashed), a short safe repr of small plain
                    values (else null) and its type name. `summary` (only in records of steps
                    that computed their result, cache "miss"/"partial", or fell back to a random
                    fingerprint; not for plain scalars) is a bounded hash tree of the argument in
                    the node format of `cachetool.fingerprint.tree` (keys l, t, d, s, r, e, o, x,
                    c): three levels at most, reprs of at most 48 characters, at most 2.5 kB of
                    JSON per argument (deeper levels are dropped to fit). [added: summary]
    random_fallback null, or {"argument": name or null (the transform itself), "error": text,
                    "error_type": name}: `datasets` could not hash and used a random fingerprint
    fingerprint_given  true when the caller passed `new_fingerprint=` (no hashing took place)
    files           [{"path", "size", "status": "written" | "reused"}]: cache files the call
                    produced (result files that its parents do not have)
    cache           "hit" (every output file existed), "partial" (some num_proc shards existed),
                    "miss", or "none" (the call writes no file: in memory, select, remove_columns)
    in_memory       the result has no cache file
    root            the cache root whose ledger holds the record
    split           the dataset's split, if any
    source          roots only: {"kind": "builder", "builder", "config", "relative_data_dir",
                    "split", "data_files": [{"split", "path", "size", "mtime"}] (local data files
                    at load time, at most 16) [added: data_files]} |
                    {"kind": "saved", "path", "state_fingerprint"} |
                    {"kind": "in-memory", "constructor"}; saves: {"kind": "saved", "path"}
    error           null, or "ExceptionType: message" when the call raised

Types (a record whose field has another type is skipped): `v`, `seq`, `pid`, sizes and lines are
integers; `time`, `duration`, `mtime` finite numbers; `parents`, `aliases`, `paths` lists of
strings; `files` of a step a list of objects with a string `path`; `internal`, `in_memory`,
`fingerprint_given`, `by_reference`, `truncated` true/false; `cache` one of the four values; the
other scalar fields strings or null. Classes: `TransformRecord`, `RootRecord`, `SaveRecord`,
`CheckpointRecord` (all `StepRecord`), `SourceRecord`, `GcRecord`.

Source records (`"type": "source"`, `"internal": true`, `"result": null`) carry the text of a user
function (or of a helper it calls) named by a record's `function` field, written once per process
and root, before the first record that names it: {"hash" (its source_hash), "qualname", "file",
"line", "text" (at most 20,000 characters), "truncated"}. `cachetool explain` diffs two of them
to show the line that changed.

Gc records (`"type": "gc"`, written by `cachetool gc` after each removal, `GcRecord`) carry no
`result`: {"action": "removed", "fingerprint" (or null: leftovers have none), "aliases", "kind"
(the entry kind), "path" (the first removed path), "paths" (every removed file or folder),
"size" (bytes freed), "files" (the *number* of files freed), "reason", "dataset"}.

Checkpoint events (`"type": "checkpoint"`, `CheckpointRecord`, only in events files) are steps:
`transform` is the checkpoint's name, `result` the object's digest, `args.value` its repr.

The determinism runner's events file (`CACHETOOL_TRACE_EVENTS`) holds the same dicts, each with its
`seq`, plus `"tree"` per argument when `CACHETOOL_TRACE_TREES=1`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.dirs import user_state_dir
from cachetool.lineage.records import (
    BadRecord,
    GcRecord,
    LedgerRecord,
    SaveRecord,
    SourceRecord,
    StepRecord,
    parse_record,
)

if TYPE_CHECKING:
    from cachetool.cache.model import CacheReport, Entry

#: The record format this cachetool writes. Readers accept any version >= 1.
RECORD_VERSION = 1
LEDGER_DIR = ".cachetool"
SEGMENT_SUFFIX = ".jsonl"
ROOTS_FILE = "roots.json"

Record = dict[str, Any]
_UNSET: Any = object()
# One encoder for every record: compact, UTF-8, anything odd (a Path) as its str().
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str, check_circular=False)
WarnFn = Callable[[str], None]


def _stderr_warning(message: str) -> None:
    sys.stderr.write(f"cachetool: warning: {message}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------
# Where a root's ledger lives
# ------------------------------------------------------------------------------------------


def root_key(root: str | os.PathLike[str]) -> str:
    """A file-name-safe key for a root: its last folder name plus a hash of its absolute path."""
    path = os.path.realpath(os.fspath(root))
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(path))[:40]
    return f"{name or 'root'}-{digest}"


def ledger_dir(root: str | os.PathLike[str]) -> Path:
    """`<root>/.cachetool/ledger`: where tracers write the records of this root."""
    return Path(root) / LEDGER_DIR / "ledger"


def fallback_ledger_dir(root: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path:
    """The per-user ledger of a root that cannot be written (read-only file system or permissions)."""
    return user_state_dir(environ) / "ledgers" / root_key(root)


def ledger_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """Every folder that may hold segments of this root: its own ledger, then the user fallback."""
    return [ledger_dir(root), fallback_ledger_dir(root)]


def segment_name(host: str, pid: int, start: float) -> str:
    """`<host>-<pid>-<UTC start time>.jsonl`: unique per process, sortable by start within a host."""
    stamp = datetime.fromtimestamp(start, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe_host = "".join(c if c.isalnum() or c in "-." else "_" for c in host) or "host"
    return f"{safe_host}-{pid}-{stamp}{SEGMENT_SUFFIX}"


# ------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------


class SegmentWriter:
    """Appends records to one segment file. One `os.write` per record on an `O_APPEND` descriptor:
    the record reaches the kernel whole or (killed mid-write) as a torn last line that readers skip.

    Nothing is buffered in Python, so a crash loses at most the record being written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)

    def append(self, record: Mapping[str, Any]) -> None:
        self.append_line(ENCODER.encode(record))

    def append_line(self, line: str) -> None:
        """Append one record already encoded as JSON (without its newline)."""
        view = memoryview((line + "\n").encode("utf-8", "surrogateescape"))
        # A short write (signal, full disk) would leave half a line; finishing it keeps the segment
        # readable, and a kill in between is exactly the torn tail readers expect.
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


class LedgerWriter:
    """The writing side of every ledger a process touches: one segment per root, opened lazily.

    A root that cannot be written falls back to `fallback_ledger_dir(root)`, said once per root on
    stderr. Every root written to is added to the per-user registry of known roots."""

    def __init__(
        self,
        *,
        host: str | None = None,
        pid: int | None = None,
        start: float | None = None,
        warn: WarnFn | None = None,
    ) -> None:
        self.host = host or socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self.start = start if start is not None else time.time()
        self.name = segment_name(self.host, self.pid, self.start)
        self._warn = warn or _stderr_warning
        self._segments: dict[str, SegmentWriter | None] = {}
        self._lock = threading.Lock()

    @property
    def run_id(self) -> str:
        return self.name[: -len(SEGMENT_SUFFIX)]

    def segment_for(self, root: str, kind: str = "cache") -> SegmentWriter | None:
        """The open segment of `root`, creating it (or its fallback) the first time."""
        seg = self._segments.get(root, _UNSET)
        if seg is not _UNSET:
            return seg
        with self._lock:  # two threads writing to a new root at once open one segment
            if root in self._segments:
                return self._segments[root]
            return self._open(root, kind)

    def _open(self, root: str, kind: str) -> SegmentWriter | None:
        writer: SegmentWriter | None = None
        try:
            writer = SegmentWriter(ledger_dir(root) / self.name)
        except OSError as e:
            fallback = fallback_ledger_dir(root)
            try:
                writer = SegmentWriter(fallback / self.name)
                _write_root_note(fallback, root)
                self._warn(
                    f"cannot write the ledger of {root} ({e.strerror or e}); "
                    f"recording its lineage in {fallback} instead"
                )
            except OSError as e2:
                self._warn(f"cannot record lineage for {root}: {e2.strerror or e2}")
        self._segments[root] = writer
        if writer is not None:
            register_root(root, kind)
        return writer

    def append(self, root: str, record: Mapping[str, Any], kind: str = "cache") -> None:
        seg = self.segment_for(root, kind)
        if seg is not None:
            seg.append(record)

    def append_line(self, root: str, line: str, kind: str = "cache") -> None:
        seg = self.segment_for(root, kind)
        if seg is not None:
            seg.append_line(line)

    def close(self) -> None:
        for seg in self._segments.values():
            if seg is not None:
                seg.close()
        self._segments.clear()


def _write_root_note(folder: Path, root: str) -> None:
    note = folder / "ROOT"
    if not note.exists():
        with contextlib.suppress(OSError):
            note.write_text(os.path.abspath(root) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------
# The registry of known roots
# ------------------------------------------------------------------------------------------


def roots_file(environ: Mapping[str, str] | None = None) -> Path:
    return user_state_dir(environ) / ROOTS_FILE


def known_roots() -> dict[str, dict[str, Any]]:
    """Every root a tracer of this user wrote to: `{absolute path: {"kind", "first_seen", "last_seen"}}`."""
    from cachetool.safejson import read_json_file

    try:
        doc = read_json_file(roots_file())
    except (OSError, ValueError):
        return {}
    roots = doc.get("roots") if isinstance(doc, dict) else None
    return {k: v for k, v in roots.items() if isinstance(v, dict)} if isinstance(roots, dict) else {}


def register_root(root: str | os.PathLike[str], kind: str = "cache") -> None:
    """Add `root` to the registry (once per process and root: a lock and a rewrite, off the hot path).

    Failures are silent: a registry we cannot write only means `lineage` cannot cross roots."""
    path = os.path.realpath(os.fspath(root))
    seen = known_roots().get(path)
    if seen and (seen.get("kind") == kind or kind != "saved"):
        last = seen.get("last_seen")
        if isinstance(last, (int, float)) and time.time() - last < 3600:
            return  # known and recently seen: no lock, no rewrite
    try:
        from filelock import FileLock

        target = roots_file()
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock", timeout=5):
            roots = known_roots()
            now = time.time()
            item = roots.get(path) or {"kind": kind, "first_seen": now}
            item["last_seen"] = now
            if kind == "saved":
                item["kind"] = kind
            roots[path] = item
            tmp = target.with_name(f".{ROOTS_FILE}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"v": 1, "roots": roots}, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, target)
    except Exception:  # never let bookkeeping break a pipeline
        return


# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------

#: A record longer than this is not one cachetool wrote (source texts stop at 20,000 characters,
#: argument summaries at 2.5 kB each): skipped with a warning.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: A segment is read up to this size; the rest is skipped with a warning (a runaway writer, or a
#: file that is not a segment).
MAX_SEGMENT_BYTES = 256 * 1024 * 1024


def iter_segments(root: str | os.PathLike[str]) -> Iterator[Path]:
    """Segment files of `root` (own ledger and user fallback), in name order."""
    for d in ledger_dirs(root):
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(SEGMENT_SUFFIX))
        except OSError:
            continue
        for n in names:
            yield d / n


def _read_capped(path: Path, warnings: list[str]) -> bytes | None:
    """The bytes of a regular file, at most MAX_SEGMENT_BYTES; None (with a warning) for anything
    else: a FIFO is never waited on, a symlink to /dev/zero is never read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        warnings.append(f"{path}: {e.strerror or e}")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            warnings.append(f"{path}: skipped: not a regular file")
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_SEGMENT_BYTES + 1)
    except OSError as e:
        warnings.append(f"{path}: {e.strerror or e}")
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_SEGMENT_BYTES:
        cut = data.rfind(b"\n", 0, MAX_SEGMENT_BYTES) + 1
        warnings.append(
            f"{path}: read the first {cut} bytes only (a segment holds at most {MAX_SEGMENT_BYTES})"
        )
        data = data[:cut]
    return data


def read_segment(
    path: Path, warnings: list[str] | None = None, read_from: str | None = None
) -> list[LedgerRecord]:
    """The records of one segment, typed. A last line without its newline is a record torn by a
    killed writer; it and every line that is not a valid record (bad JSON, too long, nested too
    deeply, a field of the wrong type, an unknown type) are skipped with a warning naming the line."""
    sink: list[str] = [] if warnings is None else warnings
    data = _read_capped(path, sink)
    if data is None:
        return []
    out: list[LedgerRecord] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    if tail.strip():
        sink.append(
            f"{path}: skipped a torn last record ({len(tail)} bytes; its writer was killed mid-write)"
        )
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            sink.append(f"{path}:{number}: skipped a record of {len(line)} bytes (at most {MAX_LINE_BYTES})")
            continue
        try:
            obj = json.loads(line)
        except RecursionError:
            sink.append(f"{path}:{number}: skipped a record nested too deeply")
            continue
        except ValueError:
            sink.append(f"{path}:{number}: skipped an unreadable record")
            continue
        try:
            out.append(parse_record(obj, read_from))
        except BadRecord as e:
            sink.append(f"{path}:{number}: skipped a record: {e}")
        except RecursionError:
            sink.append(f"{path}:{number}: skipped a record nested too deeply")
    return out


def _order_key(rec: LedgerRecord) -> tuple[float, str, int]:
    return (rec.time, rec.run, rec.seq)


def _read_root(root: Path) -> tuple[list[LedgerRecord], list[str], list[Path]]:
    warnings: list[str] = []
    records: list[LedgerRecord] = []
    segments = list(iter_segments(root))
    label = os.fspath(root)
    for seg in segments:
        records += read_segment(seg, warnings, label)
    return records, warnings, segments


@dataclass(frozen=True)
class Ledger:
    """The records of one cache root, read once per command, oldest first.

    Scoped to `root`: records of other roots are read only when asked (`all_roots=True`,
    `--all-roots`), to explain a step whose input lives in another root (a saved folder's
    `load_from_disk` names a state computed in the cache root it came from), and for the
    `save_to_disk` folders that hold a state made in `root` (what was made from them descends
    from it). Those records keep the root they were read from in `read_from` (`is_foreign`)."""

    root: Path
    records: tuple[LedgerRecord, ...] = ()
    warnings: tuple[str, ...] = ()
    segments: tuple[Path, ...] = field(default=(), compare=False)
    roots: tuple[Path, ...] = ()  # every root read, `root` first

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, root: str | os.PathLike[str], *, all_roots: bool = False, follow: bool = True) -> Ledger:
        """Read the ledger of `root`. With `follow`, the origins of parents that `root` does not
        record are looked up in the other known roots (and their own parents, transitively);
        with `all_roots`, every known root is read whole."""
        first = Path(os.path.abspath(os.fspath(root)))
        records, warnings, segments = _read_root(first)
        roots = [first]
        registry = known_roots()
        others = [p for p in (Path(r) for r in registry) if p != first and p.is_dir()]
        if all_roots:
            for other in others:
                got, w, segs = _read_root(other)
                records += got
                warnings += w
                segments += segs
                roots.append(other)
        elif follow and others:
            cache: dict[Path, list[LedgerRecord]] = {}
            saved = [p for p in others if registry.get(os.fspath(p), {}).get("kind") == "saved"]
            cls._follow_saves(records, warnings, roots, saved, cache)
            cls._follow(records, warnings, roots, others, cache)
        records.sort(key=_order_key)
        return cls(first, tuple(records), tuple(warnings), tuple(segments), tuple(roots))

    @staticmethod
    def _follow_saves(
        records: list[LedgerRecord],
        warnings: list[str],
        roots: list[Path],
        saved: list[Path],
        cache: dict[Path, list[LedgerRecord]],
    ) -> None:
        """Add the records of `save_to_disk` folders that hold a state made here (the folder is a
        root of its own; what was made from it there descends from this root)."""
        made = {r.result for r in records if isinstance(r, StepRecord) and r.result is not None}
        for folder in saved:
            if folder not in cache:
                got, w, _ = _read_root(folder)
                cache[folder] = got
                warnings.extend(w)
            steps = [r for r in cache[folder] if isinstance(r, StepRecord)]
            if any(r.result in made for r in steps if isinstance(r, SaveRecord)):
                records += [r for r in cache[folder] if isinstance(r, (StepRecord, SourceRecord))]
                roots.append(folder)
                made |= {r.result for r in steps if r.result is not None}

    @staticmethod
    def _follow(
        records: list[LedgerRecord],
        warnings: list[str],
        roots: list[Path],
        others: list[Path],
        cache: dict[Path, list[LedgerRecord]],
    ) -> None:
        """Add the origins (and their ancestry) of parents that `records` do not explain."""
        whole = set(roots)  # read whole already
        made = {r.result for r in records if isinstance(r, StepRecord) and r.is_origin}
        needed = {p for r in records if isinstance(r, StepRecord) for p in r.parents} - made
        while needed:
            found: list[LedgerRecord] = []
            for other in others:
                if other in whole:
                    continue
                if other not in cache:
                    got, w, _ = _read_root(other)
                    cache[other] = got
                    warnings.extend(w)
                hit = [r for r in cache[other] if isinstance(r, StepRecord) and r.result in needed]
                if hit and other not in roots:
                    roots.append(other)
                found += hit
                # the text of the functions those steps name, for explain
                hashes = {h for r in hit for h in _source_hashes(r)}
                found += [r for r in cache[other] if isinstance(r, SourceRecord) and r.hash in hashes]
            if not found:
                return
            records += found
            made |= {r.result for r in found if isinstance(r, StepRecord) and r.is_origin}
            needed = {p for r in found if isinstance(r, StepRecord) for p in r.parents} - made
            needed -= {r.result for r in records if isinstance(r, StepRecord)}

    # -- views ----------------------------------------------------------------------------------
    def is_foreign(self, rec: LedgerRecord) -> bool:
        """The record was read from another root than this ledger's."""
        return rec.read_from is not None and Path(rec.read_from) != self.root

    def steps(self, *, include_internal: bool = False) -> list[StepRecord]:
        """Step records (transforms, roots, saves, checkpoints), oldest first."""
        return [r for r in self.records if isinstance(r, StepRecord) and (include_internal or not r.internal)]

    def own_steps(self, *, include_internal: bool = False) -> list[StepRecord]:
        """Step records of this root only."""
        return [r for r in self.steps(include_internal=include_internal) if not self.is_foreign(r)]

    def sources(self) -> list[SourceRecord]:
        return [r for r in self.records if isinstance(r, SourceRecord)]

    def gc_records(self) -> list[GcRecord]:
        """gc's removals recorded in this root, oldest first."""
        return [r for r in self.records if isinstance(r, GcRecord) and not self.is_foreign(r)]

    def for_result(self, fingerprint: str, *, include_internal: bool = False) -> list[StepRecord]:
        """Every step record of this root whose result is `fingerprint` (oldest first)."""
        return [r for r in self.own_steps(include_internal=include_internal) if r.result == fingerprint]

    def fingerprints(self, *, include_internal: bool = True) -> set[str]:
        """Every fingerprint a step record names, as a result or as a parent."""
        out: set[str] = set()
        for r in self.steps(include_internal=include_internal):
            if r.result is not None:
                out.add(r.result)
            out.update(r.parents)
        return out

    def saves_elsewhere(self) -> list[SaveRecord]:
        """`save_to_disk` records of states made in this root: a save is recorded in the saved
        folder's own ledger (a root of its own), so they are looked up in the other known roots,
        each labelled with the root it was read from."""
        made = {r.result for r in self.own_steps(include_internal=True) if r.result is not None}
        own = {(r.run, r.seq) for r in self.own_steps() if isinstance(r, SaveRecord)}
        out: list[SaveRecord] = []
        if not made:
            return out
        for r in known_roots():
            other = Path(r)
            if other == self.root or not other.is_dir():
                continue
            got, _, _ = _read_root(other)
            out += [
                x
                for x in got
                if isinstance(x, SaveRecord)
                and not x.internal
                and x.result in made
                and (x.run, x.seq) not in own
            ]
        return out

    def usage(self) -> dict[str, Usage]:
        """Per fingerprint of this root: last use, recorded origin, hits and misses."""
        return _usage(self.own_steps())


def _source_hashes(rec: StepRecord) -> list[str]:
    fn = rec.function
    if fn is None:
        return []
    return [h for h in (fn.source_hash, *(d.source_hash for d in fn.deps)) if h]


def read_ledger(root: str | os.PathLike[str], *, include_internal: bool = True) -> Ledger:
    """The ledger of `root` alone (no other root), internal records included unless told."""
    got = Ledger.load(root, follow=False)
    if include_internal:
        return got
    kept = tuple(r for r in got.records if not r.internal)
    return dataclasses.replace(got, records=kept)


@dataclass(frozen=True)
class Usage:
    """What the ledger says about one fingerprint: its latest use and its recorded origin."""

    last_used: float
    parent: str | None
    operation: str | None
    parents: tuple[str, ...] = ()
    records: int = 0
    hits: int = 0
    misses: int = 0
    random_fallback: bool = False


def _usage(steps: Iterable[StepRecord]) -> dict[str, Usage]:
    last: dict[str, float] = {}
    origin: dict[str, StepRecord] = {}
    counts: dict[str, list[int]] = {}  # fp -> [records, hits, misses, random]
    for rec in steps:  # oldest first: the latest origin wins
        when = rec.end
        fp = rec.result
        if fp is not None:
            last[fp] = max(last.get(fp, 0.0), when)
            # A save or a no-op map says nothing about where the fingerprint comes from.
            if rec.is_origin:
                origin[fp] = rec
                c = counts.setdefault(fp, [0, 0, 0, 0])
                c[0] += 1
                c[1] += rec.cache == "hit"
                c[2] += rec.computed
                c[3] |= rec.random_fallback is not None
        # Using a dataset as a parent is a use of it too.
        for p in rec.parents:
            last[p] = max(last.get(p, 0.0), when)
    out: dict[str, Usage] = {}
    for fp, when in last.items():
        o = origin.get(fp)
        c = counts.get(fp, [0, 0, 0, 0])
        out[fp] = Usage(
            last_used=when,
            parent=o.parents[0] if o and o.parents else None,
            operation=o.operation if o else None,
            parents=o.parents if o else (),
            records=c[0],
            hits=c[1],
            misses=c[2],
            random_fallback=bool(c[3]),
        )
    return out


def usage_by_fingerprint(root: str | os.PathLike[str] | Ledger) -> dict[str, Usage]:
    """For each fingerprint the ledger of `root` mentions: last use, parent and operation.

    Cheap when there is no ledger (one `listdir` per candidate folder) and returns `{}` then."""
    ledger = root if isinstance(root, Ledger) else read_ledger(root)
    return ledger.usage()


def records_for(
    root: str | os.PathLike[str] | Ledger, fingerprint: str, *, include_internal: bool = False
) -> list[StepRecord]:
    """Every record of `root` whose result is `fingerprint` (oldest first): what `show` prints."""
    ledger = root if isinstance(root, Ledger) else read_ledger(root)
    return ledger.for_result(fingerprint, include_internal=include_internal)


# ------------------------------------------------------------------------------------------
# Naming a fingerprint
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """What a name a user typed stands for: one fingerprint, and the cache entry that holds it
    (None when only the ledger knows it: its files were removed, or it never had any)."""

    fingerprint: str
    entry: Entry | None = None

    @property
    def recorded_only(self) -> bool:
        return self.entry is None


def resolve(
    name: str, report: CacheReport, ledger: Ledger | None = None, *, recorded: Iterable[str] | None = None
) -> Resolved:
    """The one fingerprint `name` means, with one rule for every command:

    1. a path: the entry at that path (as typed, or made absolute);
    2. an exact fingerprint: an entry's fingerprint or alias, else one the ledger records (as a
       result or a parent);
    3. a prefix: the fingerprints (of entries, aliases included, and of the ledger) that start
       with `name`. An entry and its aliases are one candidate; a recorded fingerprint that is
       one of an entry's is not another, nor is a shard of a `num_proc` map's result
       (`<fp>_00000_of_00002`). One candidate resolves; several are *ambiguous*
       (`AmbiguousFingerprint`, listing them); none is `UnknownFingerprint`.

    For an entry, the fingerprint returned is the one typed when it is exact, else the one that
    starts with the prefix, preferring the one the ledger records (`recorded`: fingerprints known
    without a loaded ledger) (after `load_from_disk` the
    recorded one is the alias). A fingerprint only the ledger knows resolves to the entry that
    holds the files its step wrote (`cast_column`'s result lives in a file its internal `map`
    named), else with `entry=None`: `lineage`, `explain` and `show` show its records, `pin` pins
    it, `gc` and `verify` say no cache file holds it."""
    from cachetool.errors import AmbiguousFingerprint, UnknownFingerprint

    if not name:
        raise UnknownFingerprint(name, report.root)
    known = set(recorded or ()) | (ledger.fingerprints() if ledger is not None else set())
    # 1. a path
    e = entry_at_path(report, name)
    if e is not None:
        fp = next((x for x in (e.fingerprint, *e.aliases) if x and x in known), e.fingerprint)
        if fp is None:
            raise UnknownFingerprint(name, report.root)  # a file without a fingerprint
        return Resolved(fp, e)
    # 2. exact
    exact = [e for e in report.entries if name in (e.fingerprint, *e.aliases)]
    if len(exact) == 1:
        return Resolved(name, exact[0])
    if not exact and name in known:
        return Resolved(name, _entry_of(report, name) or _entry_of_files(report, ledger, name))
    # 3. prefix
    candidates: dict[str, Resolved] = {}
    seen: set[str] = set()
    for e in exact or report.entries:
        fps = [x for x in (e.fingerprint, *e.aliases) if x]
        named = [x for x in fps if x.startswith(name)]
        if not named:
            continue
        seen.update(fps)
        fp = next((x for x in named if x in known), None) or next((x for x in fps if x in known), named[0])
        candidates[f"{e.id} ({e.kind.value}, {os.fsdecode(e.path)})"] = Resolved(fp, e)
    for fp in sorted(known - seen):
        shard_of = _SHARD_OF.match(fp)  # a num_proc shard is part of its map's result
        if shard_of is not None and shard_of.group(1) in seen | known:
            continue
        if fp.startswith(name):
            entry = _entry_of_files(report, ledger, fp)
            where = f"files of {entry.id}" if entry is not None else "no cache file"
            candidates[f"{fp} (recorded in the ledger, {where})"] = Resolved(fp, entry)
    if not candidates:
        raise UnknownFingerprint(name, report.root)
    if len(candidates) > 1:
        raise AmbiguousFingerprint(name, sorted(candidates))
    return next(iter(candidates.values()))


#: `<fp>_00000_of_00002`: the fingerprint `datasets` gives shard 0 of a `num_proc=2` map.
_SHARD_OF = re.compile(r"^(.+)_\d{5}_of_\d{5}$")


def entry_at_path(report: CacheReport, name: str) -> Entry | None:
    """The entry at the path `name` (as typed, or made absolute), if `name` is one's path."""
    absolute = os.path.abspath(name) if (os.sep in name or name in (".", "..")) else None
    for e in report.entries:
        path = os.fsdecode(e.path)
        if path == name or (absolute is not None and path == absolute):
            return e
    return None


def _entry_of(report: CacheReport, fp: str) -> Entry | None:
    return next((e for e in report.entries if fp in (e.fingerprint, *e.aliases)), None)


def _entry_of_files(report: CacheReport, ledger: Ledger | None, fp: str) -> Entry | None:
    """The entry holding the files a step that made `fp` wrote: `cast_column`'s result lives in
    the file its internal `map` named after another fingerprint."""
    if ledger is None:
        return None
    paths = {f.path for r in ledger.for_result(fp, include_internal=True) for f in r.files}
    if not paths:
        return None
    return next((e for e in report.entries if any(os.fsdecode(f.path) in paths for f in e.files)), None)
