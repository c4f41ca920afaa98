"""`verify`: prove every cache file is whole and what it claims to be.

`verify_cache(root)` scans the root without the read index (every header is read again; with
`deep=True` the index is used, as every byte is read and validated after), turns
what the scan found into findings of three severities, and adds the checks only verify makes:
shard lengths against `dataset_info.json`, indices that point past the end of their data, leftovers
and who is writing them, ledger records whose files are gone, and with `deep=True` a full
validation of every buffer plus an xxh3 checksum of every byte (compared with checksums stored by
an earlier `record=True`).

A file a live process is writing right now is never reported as corrupt: it is "being written by
pid N". A save in progress looks like an interrupted one for a moment (state.json is written last),
so an incomplete save touched in the last minutes is a warning, not an error.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.scan import CacheFile, CacheReport, Entry, find_entry, scan_cache
from cachetool.lineage.ledger import Ledger
from cachetool.maintenance.fdops import O_DIR, identity, open_parent, rename_noreplace
from cachetool.maintenance.hints import gc_hint, shell_command
from cachetool.maintenance.liveness import InUse, scan_in_use
from cachetool.maintenance.locks import stale_guard

CHECKSUMS_NAME = "checksums.json"
QUARANTINE_DIR = "quarantine"
QUARANTINE_LOG = "log.jsonl"
#: An interrupted save younger than this may still be running (state.json comes last).
RECENT_SAVE_SECONDS = 300.0


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One thing verify has to say: how bad, about which entry and file, and what to do."""

    severity: Severity
    entry: str  # the entry id (fingerprint, or path)
    kind: str
    path: Path
    problem: str
    hint: str = ""
    #: The file version the finding is about (device, inode, size, mtime ns), taken when it was
    #: read; `quarantine` moves nothing else. None for folders; CHANGED when it changed meanwhile.
    identity: tuple[int, int, int, int] | None = field(default=None, compare=False, repr=False)
    #: How to tell the finding still holds: "header" (read the headers again), "deep" (validate
    #: every buffer again), "" (the identity alone).
    check: str = field(default="", compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "entry": self.entry,
            "kind": self.kind,
            "path": os.fsdecode(self.path),
            "problem": self.problem,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class VerifyReport:
    root: Path
    findings: tuple[Finding, ...]
    entries_checked: int
    files_checked: int
    bytes_checked: int = 0  # bytes read in full (deep)
    deep: bool = False
    recorded: int = 0  # checksums stored (record)
    quarantined: tuple[tuple[Path, Path], ...] = field(default=())

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == Severity.ERROR)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == Severity.WARNING)

    def failed(self, strict: bool = False) -> bool:
        return bool(self.errors) or (strict and bool(self.warnings))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "root": os.fsdecode(self.root),
            "deep": self.deep,
            "entries_checked": self.entries_checked,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "checksums_recorded": self.recorded,
            "counts": {s.value: sum(f.severity == s for f in self.findings) for s in Severity},
            "findings": [f.to_json() for f in self.findings],
            "quarantined": [{"from": os.fsdecode(a), "to": os.fsdecode(b)} for a, b in self.quarantined],
        }


def recompute_hint(root: Path) -> str:
    """How to get rid of a damaged entry: quarantine moves it aside, datasets recomputes it."""
    command = shell_command("verify", "--quarantine", "--cache-dir", os.fsdecode(root))
    return f"move it aside with `{command}`; datasets will recompute it"


TF_RECOMPUTE_HINT = "remove the cache's files; the next run of the tf.data pipeline writes it again"


def _rel(path: Path, root: Path) -> str:
    try:
        return os.fsdecode(path.relative_to(root))
    except ValueError:
        return os.fsdecode(path)


class _Checker:
    def __init__(self, report: CacheReport, in_use: InUse, now: float) -> None:
        self.report = report
        self.in_use = in_use
        self.now = now
        self.findings: list[Finding] = []
        self.removed_folders: frozenset[Path] | None = None
        self.recompute = recompute_hint(report.root)

    def gc_hint(self, e: Entry) -> str:
        """The gc command that removes this leftover now (it was just proven unheld)."""
        return gc_hint(self.report.root, os.fsdecode(e.path))

    def add(
        self,
        sev: Severity,
        e: Entry,
        path: Path,
        problem: str,
        hint: str = "",
        *,
        check: str = "",
        ident: tuple[int, int, int, int] | None = None,
    ) -> None:
        if ident is None:
            ident = _scanned_identity(e, path)
        self.findings.append(Finding(sev, e.id, e.kind.value, path, problem, hint, ident, check))

    def writers_of(self, path: Path) -> frozenset[int]:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return frozenset()
        return self.in_use.writer_pids(st) or frozenset()

    def live_writer(self, e: Entry) -> tuple[Path, frozenset[int]] | None:
        for f in e.files:
            pids = self.writers_of(f.path)
            if pids:
                return f.path, pids
        return None

    def leased(self, e: Entry) -> bool:
        """A live lease's process (on this host or another) may be writing `e`: say so, as info."""
        lease = self.in_use.lease_over(e.modified)
        if lease is None:
            return False
        self.add(Severity.INFO, e, e.path, f"may be being written by {lease} (a live lease)")
        return True

    # -- per entry ---------------------------------------------------------------------------
    def entry(self, e: Entry) -> None:
        if e.kind == Kind.TEMP:
            return self.temp(e)
        if e.kind == Kind.INCOMPLETE_PREPARE:
            return self.leftover_dir(e, "an interrupted load_dataset preparation")
        if e.kind == Kind.INCOMPLETE_SAVE:
            return self.incomplete_save(e)
        if e.kind == Kind.LOCK:
            return self.lock(e)
        if e.kind == Kind.TF_CACHE:
            return self.tf_cache(e)
        if e.kind == Kind.DOWNLOAD and e.problems:
            self.add(Severity.WARNING, e, e.path, "; ".join(e.problems), self.gc_hint(e))
            return None
        if e.kind == Kind.OTHER:
            for p in e.problems:
                sev = Severity.WARNING if p.startswith(("not a regular file", "symlink")) else Severity.INFO
                self.add(sev, e, e.path, p)
            return None
        if e.kind in (Kind.SHARDS,) and e.problems and self.shards_in_progress(e):
            self.add(Severity.INFO, e, e.path, "shard set being written right now")
            return None
        for f in e.files:
            self.file(e, f)
        for p in e.problems:
            if not any(p.startswith(f"{f.name}: ") for f in e.files) and not self.per_file_problem(e, p):
                self.add(Severity.ERROR, e, e.path, p, self.recompute)
        if e.kind == Kind.SOURCE:
            self.shard_lengths(e)
        return None

    def tf_cache(self, e: Entry) -> None:
        """A finished tf.data cache must have an index that parses and every data shard it names,
        as long as the index says; a killed writer's lockfile blocks the next run."""
        if e.state == "incomplete":
            for p in e.problems:
                self.add(Severity.ERROR, e, e.path, p, TF_RECOMPUTE_HINT)
        elif e.state == "abandoned":
            self.add(Severity.WARNING, e, e.path, "; ".join(e.problems), self.gc_hint(e))
        elif e.state == "being-written":
            self.add(Severity.INFO, e, e.path, "; ".join(e.problems))

    def per_file_problem(self, e: Entry, problem: str) -> bool:
        """Problems the per-file checks already reported (file errors, fingerprint mismatch)."""
        if len(e.files) == 1 and e.files[0].summary is not None:
            s = e.files[0].summary
            return problem == s.error or problem.startswith("file holds fingerprint")
        return False

    def file(self, e: Entry, f: CacheFile) -> None:
        s = f.summary
        if s is None:
            return
        if s.error is not None:
            pids = self.writers_of(f.path)
            if pids:
                self.add(Severity.INFO, e, f.path, f"being written by pid {_pids(pids)}")
                return
            self.add(Severity.ERROR, e, f.path, s.error, self.recompute, check="header")
            return
        expected = self.expected_metadata_fingerprint(e, f)
        if expected is not None and s.fingerprint is not None and s.fingerprint != expected:
            self.add(
                Severity.ERROR,
                e,
                f.path,
                f"file holds fingerprint {s.fingerprint}, name says {expected}",
                "the file was written under another name or overwritten; " + self.recompute,
            )

    def expected_metadata_fingerprint(self, e: Entry, f: CacheFile) -> str | None:
        parsed = layout.parse_cache_file(f.name)
        if parsed is None:
            return None
        fp, rank, count = parsed
        if rank is not None and count is not None:
            return layout.shard_fingerprint(fp, rank, count)
        return fp

    def shards_in_progress(self, e: Entry) -> bool:
        """A num_proc map renames each shard into place when it finishes; while the others are
        still tmp* files held by live workers, the set is in progress, not broken."""
        assert e.fingerprint is not None
        folder = e.path.parent
        for other in self.report.entries:
            if other.kind != Kind.TEMP or other.path.parent != folder:
                continue
            if any(a.startswith(e.fingerprint + "_") for a in other.aliases) and self.live_writer(other):
                return True
        return False

    def shard_lengths(self, e: Entry) -> None:
        ds = next((d for d in self.report.datasets if d.path == e.dataset_dir), None)
        if ds is None or e.split is None:
            return
        lengths = ds.expected_shard_lengths(e.split)
        if not lengths or len(lengths) != len(e.files):
            return
        for f, want in zip(e.files, lengths, strict=True):
            got = f.summary.rows if f.summary else None
            if got is not None and f.summary is not None and f.summary.error is None and got != want:
                self.add(
                    Severity.ERROR,
                    e,
                    f.path,
                    f"{got} rows, dataset_info.json shard_lengths says {want}",
                    self.recompute,
                )

    def temp(self, e: Entry) -> None:
        live = self.live_writer(e)
        if live is not None:
            self.add(Severity.INFO, e, e.path, f"being written by pid {_pids(live[1])}")
            return
        holders = self.holders(e)
        if holders:
            self.add(Severity.INFO, e, e.path, f"temporary file held open by pid {_pids(holders)}")
            return
        if self.leased(e):
            return
        self.add(Severity.WARNING, e, e.path, "leftover temporary file of a killed writer", self.gc_hint(e))

    def holders(self, e: Entry) -> frozenset[int]:
        pids: set[int] = set()
        for f in e.files:
            try:
                pids |= self.in_use.pids(os.stat(f.path, follow_symlinks=False))
            except OSError:
                continue
        return frozenset(pids)

    def leftover_dir(self, e: Entry, what: str) -> None:
        live = self.live_writer(e)
        if live is not None:
            self.add(Severity.INFO, e, e.path, f"{what} in progress: being written by pid {_pids(live[1])}")
            return
        if self.leased(e):
            return
        self.add(Severity.WARNING, e, e.path, f"leftover of {what}", self.gc_hint(e))

    def incomplete_save(self, e: Entry) -> None:
        live = self.live_writer(e)
        if live is not None:
            self.add(
                Severity.INFO, e, e.path, f"save_to_disk in progress: being written by pid {_pids(live[1])}"
            )
            return
        if self.leased(e):
            return
        age = self.now - (e.modified or 0.0)
        if age < RECENT_SAVE_SECONDS:
            self.add(
                Severity.WARNING,
                e,
                e.path,
                f"data-*.arrow without state.json, last written {int(age)}s ago: a save in progress "
                "or an interrupted one",
                "verify again later; if it stays, it is interrupted",
            )
            return
        self.add(
            Severity.ERROR,
            e,
            e.path,
            "data-*.arrow without state.json: an interrupted save_to_disk",
            "save it again; " + self.gc_hint(e),
        )

    def lock(self, e: Entry) -> None:
        """A lock is stale when what it guards is gone and nobody holds it (`maintenance.locks`)."""
        guard = stale_guard(e.path, self.report.root)
        if guard is not None:
            self.add(
                Severity.WARNING, e, e.path, f"stale lock: {guard.name} no longer exists", self.gc_hint(e)
            )

    # -- indices bounds ------------------------------------------------------------------------
    def orphan(self, e: Entry, why: str) -> None:
        """An indices file whose data is gone: harmless (datasets never reads it without its
        data), removable, and never quarantined."""
        self.add(Severity.WARNING, e, e.files[0].path, f"orphan: {why}", gc_hint(self.report.root, e.id))

    def data_removed(self, e: Entry, ledger: Ledger) -> bool:
        """The data an unrecorded indices file points into is gone: its folder has no source
        split left, or gc removed data files from it."""
        if self.removed_folders is None:
            self.removed_folders = _removed_folders(ledger)
        folder = e.files[0].path.parent
        no_source = not any(
            x.kind == Kind.SOURCE and x.files and x.files[0].path.parent == folder
            for x in self.report.entries
        )
        return no_source or folder in self.removed_folders

    def indices(self, entries: Sequence[Entry], parents: dict[str, str | None], ledger: Ledger) -> None:
        """An indices mapping must point inside the data it indexes. The recorded parent tells
        which data that is; without a record, an index past the end of every data file in the
        folder is wrong whatever it indexes."""
        by_fp = {fp: e for e in entries for fp in (e.fingerprint, *e.aliases) if fp}
        by_path = {f.path: x for x in self.report.entries for f in x.files}
        for e in entries:
            if (
                e.kind != Kind.INDICES
                or not e.files
                or e.files[0].summary is None
                or e.files[0].summary.error
            ):
                continue
            biggest = _max_index(e.files[0].path)
            if biggest is None:
                continue
            parent_fp = parents.get(e.fingerprint or "")
            parent = by_fp.get(parent_fp or "")
            if parent_fp and parent is None:
                parent = _data_on_disk(parent_fp, ledger, by_fp, by_path)
            if parent_fp and parent is None:
                self.orphan(e, f"the data it indexes ({parent_fp}) is no longer in the cache")
                continue
            if parent is not None and (parent.problems or parent.complete is False):
                continue  # the parent is the broken one: its own finding says so
            if parent is not None and parent.rows is not None and parent.kind != Kind.INDICES:
                if biggest >= parent.rows:
                    self.add(
                        Severity.ERROR,
                        e,
                        e.files[0].path,
                        f"index {biggest} points past the end of its data ({parent.rows} rows in "
                        f"{parent.id})",
                        self.recompute,
                    )
                continue
            sizes = [
                x.rows
                for x in entries
                if x.dataset_dir == e.dataset_dir
                and x.rows is not None
                and not x.problems
                and x.kind in (Kind.SOURCE, Kind.DERIVED, Kind.SHARDS, Kind.SAVED)
            ]
            if sizes and biggest >= max(sizes) and self.data_removed(e, ledger):
                self.orphan(
                    e,
                    f"index {biggest} is past the end of every dataset left in its folder (largest has "
                    f"{max(sizes)} rows): the data it indexes was removed",
                )
            elif sizes and biggest >= max(sizes):
                self.add(
                    Severity.ERROR,
                    e,
                    e.files[0].path,
                    f"index {biggest} points past the end of every dataset in its folder "
                    f"(largest has {max(sizes)} rows)",
                    self.recompute,
                )


#: The identity of a file that changed between the scan and the finding: matches no file.
CHANGED = (0, 0, -1, 0)


def _scanned_identity(e: Entry, path: Path) -> tuple[int, int, int, int] | None:
    """The identity of `path` as the scan read it: its stat now, if size and mtime are still the
    scan's; CHANGED if not; None for what is not one of the entry's regular files."""
    f = next((f for f in e.files if f.path == path), None)
    if f is None:
        return None
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return CHANGED
    if not stat.S_ISREG(st.st_mode):
        return None
    return identity(st) if (st.st_size, st.st_mtime) == (f.size, f.mtime) else CHANGED


def _removed_folders(ledger: Ledger) -> frozenset[Path]:
    """Folders from which gc (as its log in the ledger says) removed data files."""
    out: set[Path] = set()
    for rec in ledger.gc_records():
        if rec.kind in ("source", "derived", "shards", "arrow"):
            out.update(Path(p).parent for p in rec.paths)
    return frozenset(out)


def _pids(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(pids))


def _max_index(path: Path) -> int | None:
    """The largest value of an indices file (reads its single uint64 column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        with pa.memory_map(os.fspath(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
            if table.num_rows == 0:
                return None
            value = pc.max(table.column(0)).as_py()
            return int(value) if value is not None else None
    except Exception:  # a damaged file has no bounds to check; its own finding says so
        return None


# -- deep checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeepResult:
    path: Path
    size: int
    mtime_ns: int
    checksum: str | None
    error: str | None
    identity: tuple[int, int, int, int] | None = None  # of the very file read (its descriptor)


def deep_check(path: Path) -> DeepResult:
    """Validate every buffer of every batch (offsets, UTF-8, nulls) and hash every byte (xxh3)."""
    import mmap

    from cachetool.cache.arrow import open_noatime

    try:
        fd = open_noatime(path)
    except OSError as e:
        return DeepResult(path, 0, 0, None, e.strerror or str(e))
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            return DeepResult(path, 0, st.st_mtime_ns, None, "empty file (0 bytes)")
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        try:
            checksum, error = _hash_and_validate(mm)
        finally:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a view outlived the walk; GC unmaps it
                pass
        return DeepResult(path, st.st_size, st.st_mtime_ns, checksum, error, identity(st))
    finally:
        os.close(fd)


def _hash_and_validate(mm: Any) -> tuple[str, str | None]:
    """Every pyarrow view of the map lives in this frame only, so the map can close after."""
    import pyarrow as pa
    import xxhash

    checksum = xxhash.xxh3_64(mm).hexdigest()
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(pa.py_buffer(mm)))
        why = load_error(reader.schema)
        if why is not None:
            return checksum, why
        for index, batch in enumerate(reader):
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid as e:
                return checksum, f"invalid data in batch {index}: {' '.join(str(e).split())}"
    except (pa.ArrowInvalid, OSError) as e:
        return checksum, " ".join(str(e).split())
    except Exception as e:  # whatever pyarrow raises on damage is a finding
        return checksum, f"damaged Arrow file: {type(e).__name__}: {' '.join(str(e).split())}"
    return checksum, None


_LOAD_ERRORS: dict[bytes, str | None] = {}
_LOAD_LOCK = threading.Lock()


def load_error(schema: Any) -> str | None:
    """Why `datasets` would refuse a file with this Arrow schema, or None if it would load it.

    `datasets.Dataset.from_file` reads the `huggingface` schema metadata as JSON and builds
    `Features.from_arrow_schema` (which runs `Features.from_dict` on `info.features`), then checks
    column names and types in `Dataset.__init__`. The same constructor runs here on an empty table
    of the same schema (everything it checks depends on the schema alone), so the answer is the
    one `datasets` gives, for every feature type and version; once per distinct schema. Without
    `datasets` installed, the metadata is only parsed as JSON and its shape checked."""
    key = schema.serialize().to_pybytes()
    with _LOAD_LOCK:
        if key in _LOAD_ERRORS:
            return _LOAD_ERRORS[key]
    why = _load_error(schema)
    with _LOAD_LOCK:
        _LOAD_ERRORS[key] = why
    return why


def _load_error(schema: Any) -> str | None:
    try:
        import datasets
    except ImportError:
        return _metadata_shape_error(schema)
    import pyarrow as pa

    try:
        datasets.Dataset(datasets.table.InMemoryTable(pa.Table.from_batches([], schema)))
    except Exception as e:  # whatever datasets raises is the reason it would not load the file
        return f"datasets cannot load it: {type(e).__name__}: {_first_line(e)}"
    return None


def _metadata_shape_error(schema: Any) -> str | None:
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode())
    except (ValueError, RecursionError) as e:
        return f"datasets cannot load it: the huggingface schema metadata is not JSON ({_first_line(e)})"
    info = doc.get("info") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or (info is not None and not isinstance(info, dict)):
        return "datasets cannot load it: the huggingface schema metadata is not an object with an info object"
    features = info.get("features") if isinstance(info, dict) else None
    if features is not None and not isinstance(features, dict):
        return "datasets cannot load it: info.features in the huggingface schema metadata is not an object"
    return None


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:299] + "…"


def _checksums_path(root: Path) -> Path:
    return root / layout.LEDGER_DIR / CHECKSUMS_NAME


def load_checksums(root: Path) -> dict[str, dict[str, Any]]:
    try:
        with open(_checksums_path(root), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) else None
    return files if isinstance(files, dict) else {}


def save_checksums(root: Path, files: dict[str, dict[str, Any]]) -> None:
    folder = root / layout.LEDGER_DIR
    folder.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".checksums-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps({"version": 1, "files": files}, separators=(",", ":")))
    os.replace(tmp, _checksums_path(root))


# -- the entry point -----------------------------------------------------------------------------


def verify_cache(
    root: str | os.PathLike[str],
    fingerprints: Sequence[str] = (),
    *,
    deep: bool = False,
    record: bool = False,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    ledger: Ledger | None = None,
) -> VerifyReport:
    """Check every entry of `root` (or the entries `fingerprints` name) and return the findings.

    `deep` reads and validates every buffer and checksums every byte, on `jobs` threads (default:
    one per core); `record` stores those checksums so a later deep verify reports changed bytes."""
    if ledger is None:  # a command that has loaded the ledger passes it
        ledger = Ledger.load(Path(root).expanduser().resolve(), follow=False)
    # Without `deep` every header is read again; with it the deep pass reads every byte anyway,
    # so the listing may take what the read index remembers (keyed by size, mtime and inode).
    report = scan_cache(
        root,
        use_index=deep,
        ledger=ledger,
        progress=(lambda n: progress(n, 0)) if progress is not None else None,
    )
    in_use = scan_in_use(root=report.root)
    now = time.time()
    entries = list(report.entries)
    if fingerprints:
        chosen = {id(find_entry(report, fp, ledger)) for fp in fingerprints}
        entries = [e for e in entries if id(e) in chosen]
    checker = _Checker(report, in_use, now)
    for e in entries:
        checker.entry(e)
    parents = {fp: u.parent for fp, u in ledger.usage().items()}
    checker.indices(entries, parents, ledger)
    if not fingerprints:
        _ledger_findings(checker, ledger)
    bytes_checked = 0
    recorded = 0
    if deep or record:
        bytes_checked, recorded = _deep(checker, report, entries, record=record, jobs=jobs, progress=progress)
    files_checked = sum(len(e.files) for e in entries)
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    findings = sorted(checker.findings, key=lambda f: (order[f.severity], os.fsdecode(f.path)))
    return VerifyReport(
        report.root, tuple(findings), len(entries), files_checked, bytes_checked, deep, recorded
    )


def _data_on_disk(
    fp: str, ledger: Ledger, by_fp: dict[str, Entry], by_path: dict[Path, Entry]
) -> Entry | None:
    """The cache entry holding the data of the recorded step `fp` when no entry has its
    fingerprint: a step that wrote no file (`select` of a range, `set_format`) holds its parent's
    data, and one that wrote under another fingerprint (`cast_column` through its internal `map`)
    holds the files its record lists. None when that data is gone."""
    seen: set[str] = set()
    while fp not in seen:
        seen.add(fp)
        if fp in by_fp:
            return by_fp[fp]
        made = [r for r in ledger.for_result(fp, include_internal=True) if r.is_origin]
        if not made:
            return None
        rec = made[-1]
        if rec.files:
            return next((by_path[p] for f in rec.files if (p := Path(f.path)) in by_path), None)
        if len(rec.parents) != 1:
            return None
        fp = rec.parents[0]
    return None


def _ledger_findings(checker: _Checker, ledger: Ledger) -> None:
    """Records whose files are gone: information (gc or a user removed them), not corruption."""
    gone: dict[str, str] = {}
    for rec in ledger.own_steps():
        for f in rec.files:
            if f.path not in gone and not os.path.lexists(f.path):
                gone[f.path] = rec.result or "?"
    for path, fp in sorted(gone.items()):
        checker.findings.append(
            Finding(Severity.INFO, fp, "record", Path(path), "recorded file no longer exists (removed since)")
        )


def _deep(
    checker: _Checker,
    report: CacheReport,
    entries: Sequence[Entry],
    *,
    record: bool,
    jobs: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    targets: list[tuple[Entry, CacheFile]] = []
    for e in entries:
        if e.kind in (Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE):
            continue
        for f in e.files:
            if f.summary is not None and f.summary.error is None and f.summary.format == "stream":
                targets.append((e, f))
    stored = load_checksums(report.root)
    workers = jobs or os.cpu_count() or 1
    done = 0
    total_bytes = 0
    results: list[tuple[Entry, DeepResult]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for (e, _), res in zip(targets, pool.map(deep_check, [f.path for _, f in targets]), strict=True):
            results.append((e, res))
            done += 1
            total_bytes += res.size
            if progress is not None:
                progress(done, len(targets))
    new_sums: dict[str, dict[str, Any]] = dict(stored)
    record_command = shell_command("verify", "--deep", "--record", "--cache-dir", os.fsdecode(report.root))
    for e, res in results:
        rel = _rel(res.path, report.root)
        if res.error is not None:
            checker.add(
                Severity.ERROR, e, res.path, res.error, checker.recompute, check="deep", ident=res.identity
            )
            continue
        old = stored.get(rel)
        if old is not None and old.get("xxh3") != res.checksum:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(old.get("time", 0))))
            same_stat = old.get("size") == res.size and old.get("mtime_ns") == res.mtime_ns
            checker.add(
                Severity.ERROR,
                e,
                res.path,
                f"bytes changed since checksum recorded {when}"
                + (" (same size and mtime: bit rot or a silent overwrite)" if same_stat else ""),
                f"if it was rewritten on purpose, run `{record_command}` again",
            )
        if record:
            new_sums[rel] = {
                "size": res.size,
                "mtime_ns": res.mtime_ns,
                "xxh3": res.checksum,
                "time": time.time(),
            }
    recorded = 0
    if record:
        try:
            save_checksums(report.root, new_sums)
            recorded = sum(1 for _, r in results if r.error is None)
        except OSError as err:
            checker.findings.append(
                Finding(
                    Severity.WARNING,
                    "",
                    "record",
                    _checksums_path(report.root),
                    f"cannot store checksums: {err.strerror or err}",
                )
            )
    return total_bytes, recorded


# -- quarantine ----------------------------------------------------------------------------------


def stale_hint(gc_command: str) -> str:
    return (
        "datasets hashes functions from your own modules by name: pass new_fingerprint= to the step, "
        f"or delete the entry (`{gc_command}`, or --quarantine)"
    )


def with_stale_findings(report: VerifyReport) -> VerifyReport:
    """`report` plus an error for each entry computed by code that has changed since
    (`cachetool.lineage.explain.stale_hits`): `verify_cache(...)` then `verify --stale`."""
    from dataclasses import replace

    from cachetool.lineage.explain import stale_hits

    found = [
        Finding(Severity.ERROR, s.fingerprint, "stale", Path(path), s.message, stale_hint(s.gc_command))
        for s in stale_hits(report.root)
        for path in s.files[:1]
    ]
    return replace(report, findings=(*report.findings, *found))


def _quarantine_units(root: Path, findings: Sequence[Finding]) -> list[tuple[Finding, list[Path]]]:
    """What to move for each error so that `datasets` recomputes instead of crashing.

    A damaged source split takes `dataset_info.json` with it (moved first: without it `datasets`
    prepares the folder again); a saved dataset moves as its whole folder (a saved DatasetDict as
    the dict folder; `load_from_disk` reads every file `state.json` names); a shard set moves
    with all its shards; anything else is the damaged file alone."""
    report = scan_cache(root, use_index=False, ledger=False)
    by_file = {f.path: e for e in report.entries for f in e.files}
    by_path = {e.path: e for e in report.entries}
    out: list[tuple[Finding, list[Path]]] = []
    for f in findings:
        e = by_file.get(f.path) or by_path.get(f.path)
        if e is None:
            paths = [f.path]
        elif e.kind == Kind.SOURCE and e.dataset_dir is not None:
            paths = [e.dataset_dir / layout.DATASET_INFO, *(x.path for x in e.files)]
        elif e.kind == Kind.SAVED:
            paths = [e.unit or e.path]
        elif e.kind in (Kind.INCOMPLETE_SAVE, Kind.INCOMPLETE_PREPARE):
            paths = [e.path]
        else:
            paths = [x.path for x in e.files] or [e.path]
        out.append((f, paths))
    return out


def _inside(path: Path, folder: Path) -> bool:
    """`path` (its folder resolved, its last component not followed) lies inside `folder`."""
    real = Path(os.path.realpath(path.parent)) / path.name
    return real == folder or folder in real.parents


def quarantine(report: VerifyReport) -> VerifyReport:
    """Move what has errors into `<root>/.cachetool/quarantine/<time>-<pid>/` (never delete), so the
    next `datasets` run recomputes it instead of crashing. Each move is logged before it happens;
    one that fails becomes a finding and the others go on. Nothing a live process holds moves.

    Only the file version verify judged moves: its identity (device, inode, size, mtime) is
    compared before the move, and again with the finding itself once the unit is out of reach in
    the quarantine folder; a file replaced or repaired meanwhile is put back. Every step goes
    through folder descriptors opened from the root without following symlinks."""
    root = report.root
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    moved: list[tuple[Path, Path]] = []
    problems: list[Finding] = []

    def refuse(finding: Finding, src: Path, why: str) -> None:
        problems.append(
            replace(finding, severity=Severity.WARNING, path=src, problem=f"not quarantined: {why}", hint="")
        )

    try:
        root_fd = os.open(root, O_DIR)
    except OSError as err:
        for finding in report.errors:
            refuse(finding, finding.path, f"cannot open the cache root: {err.strerror or err}")
        return replace(report, findings=(*report.findings, *problems))
    in_use = scan_in_use(root=root)
    done: set[Path] = set()
    try:
        for finding, paths in _quarantine_units(root, report.errors):
            todo = [
                src
                for src in paths
                if src not in done and not any(p in done for p in src.parents) and os.path.lexists(src)
            ]
            why = _changed(root_fd, root, finding)
            if why is not None and todo:
                refuse(finding, finding.path, why)
                continue
            unit: list[tuple[Path, Path]] = []
            for src in todo:
                why = _cannot_move(src, root, in_use)
                if why is None:
                    try:
                        dst = _move_to_quarantine(root_fd, root, stamp, src, finding)
                    except OSError as err:
                        why = err.strerror or str(err)
                    else:
                        unit.append((src, dst))
                        continue
                refuse(finding, src, why)
            if not unit:
                continue
            # Out of reach now: nobody can swap the file under its old name any more, so this
            # check is final. If the finding no longer holds, the unit goes back.
            why = _still_broken(root_fd, root, finding, unit)
            if why is not None:
                _put_back(root_fd, root, unit)
                refuse(finding, finding.path, why + " (put back)")
                continue
            done.update(src for src, _ in unit)
            moved += unit
    finally:
        os.close(root_fd)
    return replace(report, findings=(*report.findings, *problems), quarantined=tuple(moved))


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    parts = path.relative_to(root).parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise ValueError(path)
    return parts


def _stat_at(root_fd: int, parts: tuple[str, ...]) -> os.stat_result:
    fd = open_parent(root_fd, parts)
    try:
        return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def _changed(root_fd: int, root: Path, finding: Finding) -> str | None:
    """Why the finding's file is no longer the version verify read (None: it still is)."""
    if finding.identity is None:
        return None
    try:
        st = _stat_at(root_fd, _parts(root, finding.path))
    except (OSError, ValueError):
        return "changed since verify read it (gone or moved)"
    if finding.identity != identity(st):
        return "changed since verify read it (another file or other bytes now)"
    return None


def _move_to_quarantine(root_fd: int, root: Path, stamp: str, src: Path, finding: Finding) -> Path:
    """Rename `src` into the quarantine folder of this run, never over anything; logged first."""
    try:
        parts = _parts(root, src)
    except ValueError:
        raise OSError(errno.EXDEV, "outside the cache root", os.fsdecode(src)) from None
    dst_parts = (layout.LEDGER_DIR, QUARANTINE_DIR, stamp, *parts)
    dst = root.joinpath(*dst_parts)
    src_fd = open_parent(root_fd, parts)
    try:
        dst_fd = open_parent(root_fd, dst_parts, create=True)
        try:
            _log_move(
                root,
                {
                    "action": "quarantine",
                    "from": os.fsdecode(src),
                    "to": os.fsdecode(dst),
                    "problem": finding.problem,
                    "time": time.time(),
                },
            )
            rename_noreplace(src_fd, parts[-1], dst_fd, parts[-1])
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return dst


def _still_broken(root_fd: int, root: Path, finding: Finding, unit: list[tuple[Path, Path]]) -> str | None:
    """Check the finding's file where it now lies in the quarantine folder: same identity, and
    (for a header or deep finding) the same reading fails again. None when it still holds."""
    if finding.identity is None:
        return None
    where = next(
        (
            dst / finding.path.relative_to(src)
            for src, dst in unit
            if src == finding.path or src in finding.path.parents
        ),
        None,
    )
    if where is None:
        return None
    try:
        st = _stat_at(root_fd, _parts(root, where))
    except (OSError, ValueError):
        return "changed since verify read it (gone)"
    if identity(st) != finding.identity:
        return "changed since verify read it (another file or other bytes now)"
    if finding.check == "header":
        from cachetool.cache.arrow import read_summary

        if read_summary(where).error is None:
            return "changed since verify read it (it reads whole now)"
    elif finding.check == "deep" and deep_check(where).error is None:
        return "changed since verify read it (it validates now)"
    return None


def _put_back(root_fd: int, root: Path, unit: list[tuple[Path, Path]]) -> None:
    """Undo the moves of one unit, never over something new at the old name (then it stays in
    quarantine, logged, for `--restore` to report)."""
    for src, dst in reversed(unit):
        try:
            s_parts, d_parts = _parts(root, src), _parts(root, dst)
            s_fd = open_parent(root_fd, s_parts)
            try:
                d_fd = open_parent(root_fd, d_parts)
                try:
                    rename_noreplace(d_fd, d_parts[-1], s_fd, s_parts[-1])
                finally:
                    os.close(d_fd)
            finally:
                os.close(s_fd)
        except (OSError, ValueError):
            continue
        _log_move(
            root, {"action": "restore", "from": os.fsdecode(dst), "to": os.fsdecode(src), "time": time.time()}
        )


def _cannot_move(src: Path, root: Path, in_use: InUse) -> str | None:
    if src.is_symlink():
        return "a symlink"
    if not _inside(src, root) or _inside(src, root / layout.LEDGER_DIR):
        return "outside the cache root"
    targets = [src] if not src.is_dir() else [Path(d) / n for d, _, names in os.walk(src) for n in names]
    for t in targets:
        try:
            st = os.stat(t, follow_symlinks=False)
        except OSError:
            continue
        pids = in_use.pids(st)
        if pids:
            return f"in use by pid {_pids(pids)}"
        lease = in_use.lease_over(st.st_mtime)
        if lease is not None:
            return f"may be being written by {lease} (a live lease)"
    return None


def restore(
    root: str | os.PathLike[str], warn: Callable[[str], None] | None = None
) -> list[tuple[Path, Path]]:
    """Put quarantined files back where they were, unless something new took their place.

    The log is checked, not trusted: a record moves something only from inside the quarantine
    folder to a place inside the root (never into `.cachetool`), and nothing is overwritten."""
    root_path = Path(root).resolve()
    qbase = root_path / layout.LEDGER_DIR / QUARANTINE_DIR
    log = qbase / QUARANTINE_LOG
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    say = warn or (lambda _msg: None)
    pending: dict[str, dict[str, str]] = {}
    for number, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except ValueError:
            say(f"{log}:{number}: not a JSON record; skipped")
            continue
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("to"), str)
            or not isinstance(rec.get("from"), str)
        ):
            say(f"{log}:{number}: not a quarantine record; skipped")
            continue
        if rec.get("action") == "quarantine":
            pending[rec["to"]] = rec
        elif rec.get("action") == "restore":
            pending.pop(rec["from"], None)
    restored = []
    for rec in pending.values():
        src, dst = Path(rec["to"]), Path(rec["from"])
        if not os.path.lexists(src):
            continue
        if not _inside(src, qbase) or src.is_symlink():
            say(f"{log}: {src} is not inside the quarantine folder; not restored")
            continue
        if not _inside(dst, root_path) or _inside(dst, root_path / layout.LEDGER_DIR):
            say(f"{log}: {dst} is not inside the cache root; not restored")
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            _move_no_replace(src, dst)
        except OSError as err:
            say(f"{dst}: not restored: {err.strerror or err}")
            continue
        restored.append((src, dst))
        _log_move(
            root_path,
            {"action": "restore", "from": os.fsdecode(src), "to": os.fsdecode(dst), "time": time.time()},
        )
    return restored


def _move_no_replace(src: Path, dst: Path) -> None:
    """Move without ever replacing what is at `dst`: a hard link fails on an existing name, and
    renaming a folder fails onto a non-empty one."""
    if src.is_dir():
        if os.path.lexists(dst) and not (dst.is_dir() and not any(dst.iterdir())):
            raise FileExistsError(errno.EEXIST, "something new is in its place", os.fsdecode(dst))
        os.rename(src, dst)
        return
    os.link(src, dst)
    os.unlink(src)


def _log_move(root: Path, rec: dict[str, Any]) -> None:
    log = root / layout.LEDGER_DIR / QUARANTINE_DIR / QUARANTINE_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
