"""What a scan of a cache finds, as frozen dataclasses with raw values: `CacheFile`, `DatasetDir`,
`Entry`, `ScanWarning` and `CacheReport` (the walk that fills them is in `cachetool.cache.scan`).

Human forms (`size_str`, `kind_str`, ...) are properties next to the raw values; `to_json` is
the `--json` form of each.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from cachetool.cache.arrow import ArrowSummary
from cachetool.cache.frozen import fast_init
from cachetool.cache.layout import Kind
from cachetool.formatting import human_size, iso_time, time_ago

if TYPE_CHECKING:
    from cachetool.history.ledger import Ledger


class RecordedUse(Protocol):
    """What a scan attaches from recorded lineage to the entry of one fingerprint (the ledger's
    `Usage` is one): its latest use, its parent and the operation that made it."""

    @property
    def last_used(self) -> float: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def operation(self) -> str | None: ...
    @property
    def made_as(self) -> str | None: ...


class Liveness(Protocol):
    """What a scan asks about live processes (`cachetool.maintenance.liveness.InUse` is one):
    who holds a file, and the live lease that may have written a file modified at a time."""

    def pids_for_path(self, path: str) -> frozenset[int]: ...
    def writer_pids(self, st: os.stat_result) -> frozenset[int]: ...
    def lease_over(self, mtime: float | None) -> object | None: ...


@fast_init
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
            "path": str(self.path),
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


class DirKind(str, Enum):
    """What a dataset folder is."""

    BUILDER = "builder"  # a prepared builder folder (holds dataset_info.json)
    SAVED = "saved"  # a save_to_disk folder (holds state.json)
    SAVED_DICT = "saved-dict"  # a saved DatasetDict (holds dataset_dict.json)


@dataclass(frozen=True)
class DatasetDir:
    """A dataset folder: a prepared builder folder, a `save_to_disk` folder or a saved DatasetDict."""

    path: Path
    name: str  # what tables show: "csv/default-7a1b…" or the saved folder's name
    kind: DirKind
    relative_data_dir: str | None = None  # <name>/<config>/<version>[/<hash>] for builders
    split_rows: tuple[tuple[str, int], ...] = ()  # from dataset_info.json
    shard_lengths: tuple[tuple[str, tuple[int, ...]], ...] = ()
    meta_files: tuple[CacheFile, ...] = ()

    def expected_rows(self, split: str) -> int | None:
        return dict(self.split_rows).get(split)

    def expected_shard_lengths(self, split: str) -> tuple[int, ...] | None:
        return dict(self.shard_lengths).get(split)


#: What is wrong with an entry: a file's Arrow headers do not read ("unreadable"), a file holds
#: another fingerprint than its name says, a shard set or a source split misses shards, a split
#: has other rows than dataset_info.json says; anything else the scan says is a "note".
ProblemCode = Literal[
    "note", "unreadable", "fingerprint-mismatch", "partial-shards", "missing-shards", "rows", "resumable"
]

#: The sentence of each code, filled from the problem's fields.
_WORDING: dict[str, str] = {
    "note": "{text}",
    "unreadable": "{text}",
    "fingerprint-mismatch": "file holds fingerprint {got}, name says {want}",
    "partial-shards": "partial: {got} of {want} shards (missing {missing})",
    "missing-shards": "missing shards {missing} of {want}",
    "rows": "{got} rows, dataset_info.json says {want}",
    "resumable": "temporary file of {want} holding {got:,} rows in complete batches: a writer in "
    "progress, or a killed one whose rows a traced rerun of the step reuses (resumable partial)",
}


@dataclass(frozen=True, slots=True)
class EntryProblem:
    """One thing wrong with an entry, typed: `str()` is the sentence listings, `show` and JSON
    show; `detail` is the same without the file's name, as verify says it about the file."""

    text: str = ""  # a note's sentence, or why a file's headers do not read
    code: ProblemCode = "note"
    file: Path | None = None  # the file of a set it is about, named first (None: the entry's own)
    got: int | str | None = None  # the fingerprint held, the shards present, the rows counted
    want: int | str | None = None  # the fingerprint the name says, the shard count, dataset_info's rows
    missing: tuple[int, ...] = ()  # the ranks of missing shards

    @property
    def detail(self) -> str:
        missing = ", ".join(f"{r:05d}" for r in self.missing)
        return _WORDING[self.code].format(text=self.text, got=self.got, want=self.want, missing=missing)

    def __str__(self) -> str:
        return self.detail if self.file is None else f"{self.file.name}: {self.detail}"


@fast_init
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
    problems: tuple[EntryProblem, ...] = ()
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
        return self.fingerprint or str(self.path)

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

    @property
    def resumable_rows(self) -> int:
        """A map's temporary file holding complete batches of a step not finished yet: the rows
        a traced rerun may reuse (docs/resume.md); 0 for anything else."""
        return next((int(p.got or 0) for p in self.problems if p.code == "resumable"), 0)

    # --- human forms ------------------------------------------------------------------------
    @property
    def size_str(self) -> str:
        return human_size(self.size)

    @property
    def modified_str(self) -> str:
        return time_ago(self.modified)

    @property
    def used_str(self) -> str:
        return time_ago(self.used)

    @property
    def kind_str(self) -> str:
        if self.kind == Kind.SHARDS and self.expected_files:
            return f"shards {len(self.files_of_data)}/{self.expected_files}"
        if self.kind == Kind.TF_CACHE and self.state:
            return f"tf-cache {_TF_STATE_SHORT.get(self.state, self.state)}"
        if self.resumable_rows:
            return "temp resumable"
        return self.kind._value_  # what .value gives, without the enum's descriptor

    def to_json(self) -> dict[str, Any]:
        modified, used = self.modified, self.used  # each worked out once (a listing writes 100,000)
        mod_iso = iso_time(modified)
        path = str(self.path)
        doc: dict[str, Any] = {
            "id": self.fingerprint or path,
            "kind": self.kind._value_,
            "fingerprint": self.fingerprint,
            "aliases": list(self.aliases),
            "dataset": self.dataset,
            "dataset_dir": None if self.dataset_dir is None else str(self.dataset_dir),
            "split": self.split,
            "content": self.content,
            "path": path,
            "files": len(self.files),
            "expected_files": self.expected_files,
            "rows": self.rows,
            "expected_rows": self.expected_rows,
            "columns": [name for name, _ in self.columns],
            "size": self.size,
            "modified": mod_iso,
            "used": mod_iso if used == modified else iso_time(used),
            "complete": self.complete,
            "parent": self.parent,
            "operation": self.operation,
            "unit": None if self.unit is None else str(self.unit),
            "problems": [str(p) for p in self.problems],
        }
        if self.kind is Kind.TF_CACHE:
            doc.update(prefix=self.path.name, state=self.state, writer_pids=list(self.writer_pids))
        elif self.kind is Kind.TEMP:
            doc["resumable"] = bool(self.resumable_rows)
        return doc


_TF_STATE_SHORT = {"being-written": "writing", "incomplete": "partial"}


@dataclass(frozen=True)
class ScanWarning:
    """A problem met while scanning: the file and what is wrong with it."""

    path: Path
    problem: str

    def __str__(self) -> str:
        """The line a person reads: a newline, an escape or a byte that is not UTF-8 in a name
        is shown escaped (`\\x0a`), so a name never prints a line of its own."""
        from cachetool.formatting import safe_text

        return safe_text(f"{self.path}: {self.problem}")


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
            row = out[e.kind._value_]  # what .value gives, without the enum's descriptor
            files = e.files
            row[0] += len(files)
            row[1] += files[0].size if len(files) == 1 else e.size
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
        from cachetool.cache.lookup import find_entry

        return find_entry(self, prefix, ledger)
