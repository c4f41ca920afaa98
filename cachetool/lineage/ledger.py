"""The ledger: what cachetool recorded about a cache root while pipelines ran.

`datasets` keeps no parent fingerprint on disk, so the tracer (`cachetool.trace`) appends one
record per transform call to the ledger of the cache root the call belongs to:

* one ledger per root, in `<root>/.cachetool/ledger/`; a `save_to_disk` folder is a root of its own;
  in-memory datasets go to the default root's ledger (marked `"in_memory": true`);
* each process appends to its own *segment*, `<host>-<pid>-<start time>.jsonl`, opened with
  `O_APPEND`, one `write()` per record: no lock on the hot path, safe on NFS, and merging ledgers
  across machines is copying files;
* readers merge every segment, skip a torn last line (a writer killed mid-record) with a warning,
  and keep fields they do not know (records from a newer cachetool are still read);
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

Source records (`"type": "source"`, `"internal": true`, `"result": null`) carry the text of a user
function (or of a helper it calls) named by a record's `function` field, written once per process
and root, before the first record that names it: {"hash" (its source_hash), "qualname", "file",
"line", "text" (at most 20,000 characters), "truncated"}. `cachetool explain` diffs two of them
to show the line that changed.

The determinism runner's events file (`CACHETOOL_TRACE_EVENTS`) holds the same dicts, each with its
`seq`, plus `"tree"` per argument when `CACHETOOL_TRACE_TREES=1`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cachetool.cache.dirs import user_state_dir

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
    try:
        with open(roots_file(), encoding="utf-8") as f:
            doc = json.load(f)
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


@dataclass(frozen=True)
class LedgerRead:
    """All records of one root, merged from its segments, plus what was skipped and why."""

    root: Path
    records: tuple[Record, ...]
    warnings: tuple[str, ...] = ()
    segments: tuple[Path, ...] = field(default=(), compare=False)


def iter_segments(root: str | os.PathLike[str]) -> Iterator[Path]:
    """Segment files of `root` (own ledger and user fallback), in name order."""
    for d in ledger_dirs(root):
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(SEGMENT_SUFFIX))
        except OSError:
            continue
        for n in names:
            yield d / n


def read_segment(path: Path, warnings: list[str] | None = None) -> list[Record]:
    """The records of one segment. A last line without its newline is a record torn by a killed
    writer: skipped with a warning. Other bad lines are skipped with a warning too."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        if warnings is not None:
            warnings.append(f"{path}: {e.strerror or e}")
        return []
    out: list[Record] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    if tail.strip() and warnings is not None:
        warnings.append(
            f"{path}: skipped a torn last record ({len(tail)} bytes; its writer was killed mid-write)"
        )
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if warnings is not None:
                warnings.append(f"{path}:{number}: skipped an unreadable record")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("v"), int) or rec["v"] < 1:
            if warnings is not None:
                warnings.append(f"{path}:{number}: skipped a record without a version")
            continue
        out.append(rec)
    return out


def read_ledger(root: str | os.PathLike[str], *, include_internal: bool = True) -> LedgerRead:
    """Merge every segment of `root` into one list, ordered by time then per-process order."""
    warnings: list[str] = []
    records: list[Record] = []
    segments = list(iter_segments(root))
    for seg in segments:
        for rec in read_segment(seg, warnings):
            if include_internal or not rec.get("internal"):
                records.append(rec)
    records.sort(key=_order_key)
    return LedgerRead(Path(root), tuple(records), tuple(warnings), tuple(segments))


def _order_key(rec: Record) -> tuple[float, str, int]:
    t = rec.get("time")
    seq = rec.get("seq")
    return (
        float(t) if isinstance(t, (int, float)) else 0.0,
        str(rec.get("run") or ""),
        seq if isinstance(seq, int) else 0,
    )


def read_records(
    roots: Iterable[str | os.PathLike[str]], *, include_internal: bool = True, warn: WarnFn | None = None
) -> list[Record]:
    """Records of several roots, each record tagged with the root it was read from (`_root`)."""
    out: list[Record] = []
    seen: set[str] = set()
    for root in roots:
        key = os.path.abspath(os.fspath(root))
        if key in seen:
            continue
        seen.add(key)
        got = read_ledger(key, include_internal=include_internal)
        if warn is not None:
            for w in got.warnings:
                warn(w)
        for rec in got.records:
            rec.setdefault("_root", key)
            out.append(rec)
    out.sort(key=_order_key)
    return out


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


def _new_usage() -> dict[str, Any]:
    return {"last": 0.0, "origin": None, "n": 0, "hits": 0, "misses": 0, "random": False}


def usage_by_fingerprint(root: str | os.PathLike[str]) -> dict[str, Usage]:
    """For each fingerprint the ledger of `root` mentions: last use, parent and operation.

    Cheap when there is no ledger (one `listdir` per candidate folder) and returns `{}` then. Torn
    or unreadable lines are skipped silently here; `cachetool lineage` reports them."""
    acc: dict[str, dict[str, Any]] = {}
    records = [rec for seg in iter_segments(root) for rec in read_segment(seg) if not rec.get("internal")]
    records.sort(key=_order_key)  # oldest first: the latest origin wins
    for rec in records:
        t = rec.get("time")
        when = float(t) + float(rec.get("duration") or 0.0) if isinstance(t, (int, float)) else 0.0
        fp = rec.get("result")
        parents = [p for p in rec.get("parents") or [] if isinstance(p, str)]
        if isinstance(fp, str):
            a = acc.setdefault(fp, _new_usage())
            a["last"] = max(a["last"], when)
            # A save or a no-op map (its function returned None) says nothing about where the
            # fingerprint comes from, and reads no cache of its own.
            if rec.get("type") not in ("save", "checkpoint") and fp not in parents:
                a["origin"] = rec
                a["n"] += 1
                cache = rec.get("cache")
                a["hits"] += cache == "hit"
                a["misses"] += cache in ("miss", "partial")
                a["random"] = a["random"] or bool(rec.get("random_fallback"))
        # Using a dataset as a parent is a use of it too.
        for p in parents:
            pa = acc.setdefault(p, _new_usage())
            pa["last"] = max(pa["last"], when)
    out: dict[str, Usage] = {}
    for fp, a in acc.items():
        origin = a["origin"]
        origin_parents = tuple(str(p) for p in origin.get("parents") or ()) if origin else ()
        out[fp] = Usage(
            last_used=a["last"],
            parent=origin_parents[0] if origin_parents else None,
            operation=origin.get("operation") if origin else None,
            parents=origin_parents,
            records=a["n"],
            hits=a["hits"],
            misses=a["misses"],
            random_fallback=a["random"],
        )
    return out


def records_for(
    root: str | os.PathLike[str], fingerprint: str, *, include_internal: bool = False
) -> list[Record]:
    """Every record of `root` whose result is `fingerprint` (oldest first): what `show` prints."""
    got = read_ledger(root, include_internal=include_internal)
    return [r for r in got.records if r.get("result") == fingerprint]
