"""What a scan of a cache finds, as frozen dataclasses with raw values: `CacheFile`, `DatasetDir`,
`Entry`, `ScanWarning` and `CacheReport` (the walk that fills them is in `cachetool.cache.scan`).

Human forms (`size_str`, `kind_str`, ...) are properties next to the raw values; `to_json` is
the `--json` form of each.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from json.encoder import encode_basestring_ascii as _encode
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from cachetool.cache.layout import Kind
from cachetool.formatting import human_size, iso_time, time_ago

if TYPE_CHECKING:
    from cachetool.cache.arrow import ArrowSummary
    from cachetool.history.ledger import Ledger

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Replace the `__init__` of the frozen, slotted dataclass `cls` (fields with plain defaults
    only) by one that sets each slot through its descriptor: the generated one goes through
    `object.__setattr__` per field (an `Entry` took about 4 µs), and a listing builds hundreds of
    thousands. Instances stay frozen; `replace`, equality and pickling are unchanged."""
    params: list[str] = []
    lines: list[str] = []
    namespace: dict[str, Any] = {}
    for i, f in enumerate(fields(cls)):  # type: ignore[arg-type]
        if f.default_factory is not MISSING or not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_init handles plain defaults only")
        if f.default is MISSING:
            params.append(f.name)
        else:
            namespace[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        namespace[f"_set{i}"] = vars(cls)[f.name].__set__
        lines.append(f"    _set{i}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"]) + "\n"
    exec(source, namespace)  # code built from the class's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


class RecordedUse(Protocol):
    """What a scan attaches from recorded lineage to the entry of one fingerprint (the ledger's
    `Usage` is one): its latest use, its parent and the operation that made it; `saves`, the
    folder and end time of each recorded `save_to_disk` of it."""

    @property
    def last_used(self) -> float: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def operation(self) -> str | None: ...
    @property
    def made_as(self) -> str | None: ...
    @property
    def saves(self) -> tuple[tuple[str, float], ...]: ...


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
    "note",
    "unreadable",
    "fingerprint-mismatch",
    "partial-shards",
    "missing-shards",
    "rows",
    "resumable",
    "mixed-save",
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
    "mixed-save": "{text} written after state.json: a later save_to_disk into this folder did not finish, "
    "and load_from_disk reads the files of both saves as one dataset",
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
    split: str | None = None  # a half-saved DatasetDict (incomplete-save): its unfinished split
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
        (tf.data caches: the index and every data shard it names, as large as it says); never a
        saved dataset whose files are of two saves (`mixed_save`)."""
        if self.kind == Kind.TF_CACHE:
            return self.state == "complete"
        if self.mixed_save:
            return False  # every file whole, but of two saves
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
    def mixed_save(self) -> bool:
        """A saved dataset whose folder holds data files of a later save that did not finish
        (`cachetool.cache.entries.mixed_save`)."""
        return any(p.code == "mixed-save" for p in self.problems)

    @property
    def resumable_rows(self) -> int:
        """A map's temporary file holding complete batches of a step not finished yet: the rows
        a traced rerun may reuse (docs/resume.md); 0 for anything else."""
        return next((int(p.got or 0) for p in self.problems if p.code == "resumable"), 0)

    def pinned_in(self, pinned: frozenset[str] | set[str]) -> bool:
        """The entry's fingerprint, or one of its aliases, is in `pinned`."""
        return any(fp in pinned for fp in (self.fingerprint, *self.aliases) if fp)

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
        if self.mixed_save:
            return "saved mixed"
        return self.kind._value_  # what .value gives, without the enum's descriptor

    def to_json(self) -> dict[str, Any]:
        """The entry's `--json` object (docs/listing.md), read back from its one writer
        (`entries_json`)."""
        return json.loads(_JsonWriter().object(self) + "}")


_TF_STATE_SHORT = {"being-written": "writing", "incomplete": "partial"}


def entries_json(entries: Iterable[Entry], pinned: frozenset[str] = frozenset()) -> str:
    """The `--json` objects of `entries`, each with whether it is `pinned`, as the compact text
    `json.dumps` writes of a list's items (without the brackets). Written here, not by
    `json.dumps`: a listing of 100,000 entries spent more on building and encoding their dicts
    than on reading the cache."""
    w = _JsonWriter()
    return ", ".join(
        w.object(e) + (', "pinned": true}' if pinned and e.pinned_in(pinned) else ', "pinned": false}')
        for e in entries
    )


_OBJECT = (
    '{"id": %s, "kind": %s, "fingerprint": %s, "aliases": %s, "dataset": %s, "dataset_dir": %s, '
    '"split": %s, "content": %s, "path": %s, "files": %d, "expected_files": %s, "rows": %s, '
    '"expected_rows": %s, "columns": %s, "size": %d, "modified": %s, "used": %s, "complete": %s, '
    '"parent": %s, "operation": %s, "unit": %s, "problems": %s'
)
_LITERALS = {None: "null", True: "true", False: "false"}


class _JsonWriter:
    """Writes entries' `--json` objects, each text that repeats (a dataset's name, a second, a
    kind) encoded once, and each object many entries share (a folder's path, a set of columns)."""

    def __init__(self) -> None:
        self._texts: dict[str | None, str] = {None: "null"}
        self._by_id: dict[int, tuple[object, str]] = {}

    def text(self, s: str | None) -> str:
        """`s` as a JSON string (or null), encoded once per distinct value."""
        t = self._texts.get(s)
        if t is None:
            t = self._texts[s] = _encode(s)  # type: ignore[arg-type]
        return t

    def once(self, obj: Any, encode: Callable[[Any], str]) -> str:
        """`encode(obj)` of an object many entries share, by identity."""
        hit = self._by_id.get(id(obj))
        if hit is None or hit[0] is not obj:
            hit = self._by_id[id(obj)] = (obj, encode(obj))
        return hit[1]

    def object(self, e: Entry) -> str:
        """The entry's object, without its closing brace."""
        texts, text, once = self._texts, self.text, self.once
        modified = e.modified
        used = modified if e.last_used is None else e.used
        p = e.path
        folder = getattr(p, "_prefix", None)  # a path the walk found: its folder's text encoded once
        path = _encode(str(p)) if folder is None else text(folder)[:-1] + _encode(p.name)[1:]
        fp = e.fingerprint
        fp_text = "null" if fp is None else _encode(fp)
        mod = iso_time(modified)
        mod = texts.get(mod) or text(mod)
        kind, dataset, split, content = e.kind._value_, e.dataset, e.split, e.content
        expected_files, rows, expected_rows = e.expected_files, e.rows, e.expected_rows
        doc = _OBJECT % (
            fp_text if fp else path,
            texts.get(kind) or text(kind),
            fp_text,
            _json_list(e.aliases) if e.aliases else "[]",
            texts.get(dataset) or text(dataset),
            "null" if e.dataset_dir is None else once(e.dataset_dir, _encode_path),
            texts.get(split) or text(split),
            texts.get(content) or text(content),
            path,
            len(e.files),
            "null" if expected_files is None else expected_files,
            "null" if rows is None else rows,
            "null" if expected_rows is None else expected_rows,
            once(e.columns, _column_names),
            e.size,
            mod,
            mod if used == modified else text(iso_time(used)),
            _LITERALS[e.complete],
            "null" if e.parent is None else _encode(e.parent),
            "null" if e.operation is None else _encode(e.operation),
            "null" if e.unit is None else _encode(str(e.unit)),
            _json_list([str(p) for p in e.problems]) if e.problems else "[]",
        )
        if e.kind is Kind.TF_CACHE:
            pids = ", ".join(map(str, e.writer_pids))
            doc += f', "prefix": {_encode(e.path.name)}, "state": {text(e.state)}, "writer_pids": [{pids}]'
        elif e.kind is Kind.TEMP:
            doc += ', "resumable": true' if e.resumable_rows else ', "resumable": false'
        return doc


def _json_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(map(_encode, items)) + "]"


def _encode_path(p: Path) -> str:
    return _encode(str(p))


def _column_names(columns: tuple[tuple[str, str], ...]) -> str:
    return _json_list(name for name, _ in columns)


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
