"""Typed ledger records: one frozen class per record type, parsed once when a ledger is read.

The schema they implement is documented in `cachetool.lineage.ledger` (its module docstring is the
single source of truth). Readers get these classes, never raw dicts; writers (the tracer, gc's
log) build them and serialize them with `to_json()`, so a field has one type everywhere.

`parse_record(obj)` turns one decoded JSON object into a record or raises `BadRecord` with a
one-line reason ("'parents' is not a list of strings"); `read_segment` turns that into a warning.
Fields a record does not know are kept in `extra` (records written by a newer cachetool are read,
and written back unchanged by `to_json()`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

#: `cache` values of a step record.
CacheStatus = Literal["hit", "partial", "miss", "none"]
_CACHE_VALUES = ("hit", "partial", "miss", "none")
_COMPUTED = ("miss", "partial")


class BadRecord(ValueError):
    """A ledger line that is JSON but not a record this cachetool can read; the message says why."""


# ------------------------------------------------------------------------------------------
# Field checks: each returns the value or raises BadRecord naming the field
# ------------------------------------------------------------------------------------------


def _opt_str(d: Mapping[str, Any], key: str, where: str = "") -> str | None:
    v = d.get(key)
    if v is None or isinstance(v, str):
        return v
    raise BadRecord(f"'{where}{key}' is not a string")


def _opt_int(d: Mapping[str, Any], key: str, where: str = "") -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRecord(f"'{where}{key}' is not an integer")
    return v


def _int(d: Mapping[str, Any], key: str, default: int = 0, where: str = "") -> int:
    v = _opt_int(d, key, where)
    return default if v is None else v


def _opt_num(d: Mapping[str, Any], key: str, where: str = "") -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadRecord(f"'{where}{key}' is not a finite number")
    return float(v)


def _num(d: Mapping[str, Any], key: str, default: float = 0.0, where: str = "") -> float:
    v = _opt_num(d, key, where)
    return default if v is None else v


#: Later than this is not a time a record was written (year 5138): `datetime` cannot show it.
_MAX_TIME = 1e11


def _time(d: Mapping[str, Any]) -> float:
    t = _num(d, "time")
    if not 0 <= t < _MAX_TIME:
        raise BadRecord("'time' is not a time since the epoch")
    return t


def _bool(d: Mapping[str, Any], key: str, where: str = "") -> bool:
    v = d.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRecord(f"'{where}{key}' is not true or false")
    return v


def _strs(d: Mapping[str, Any], key: str, where: str = "") -> tuple[str, ...]:
    v = d.get(key)
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise BadRecord(f"'{where}{key}' is not a list of strings")
    return tuple(v)


def _obj(d: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise BadRecord(f"'{where}{key}' is not an object")
    return v


def _objs(d: Mapping[str, Any], key: str, where: str = "") -> list[Mapping[str, Any]]:
    v = d.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise BadRecord(f"'{where}{key}' is not a list of objects")
    return v


def _drop_none(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    for k in keys:
        if d.get(k) is None:
            d.pop(k, None)
    return d


# ------------------------------------------------------------------------------------------
# Parts of a record
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    """Where the user's code called the step: the first frame outside `datasets` and cachetool."""

    file: str | None = None
    line: int | None = None
    function: str | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> CallSite:
        w = "call_site."
        return cls(_opt_str(d, "file", w), _opt_int(d, "line", w), _opt_str(d, "function", w))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function}


@dataclass(frozen=True)
class FunctionRef:
    """A function of the user's code: its name, place and the hashes of its source and bytecode."""

    qualname: str | None = None
    file: str | None = None
    line: int | None = None
    source_hash: str | None = None
    code_hash: str | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any], where: str = "function.deps.") -> FunctionRef:
        return cls(
            _opt_str(d, "qualname", where),
            _opt_str(d, "file", where),
            _opt_int(d, "line", where),
            _opt_str(d, "source_hash", where),
            _opt_str(d, "code_hash", where),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "qualname": self.qualname,
            "file": self.file,
            "line": self.line,
            "source_hash": self.source_hash,
            "code_hash": self.code_hash,
        }


@dataclass(frozen=True)
class FunctionInfo(FunctionRef):
    """The user's function of a step, with the helpers of the user's modules it reaches."""

    by_reference: bool = False
    deps: tuple[FunctionRef, ...] = ()
    error: str | None = None  # the function could not be described

    @classmethod
    def parse(cls, d: Mapping[str, Any], where: str = "function.") -> FunctionInfo:
        ref = FunctionRef.parse(d, where)
        return cls(
            ref.qualname,
            ref.file,
            ref.line,
            ref.source_hash,
            ref.code_hash,
            by_reference=_bool(d, "by_reference", where),
            deps=tuple(FunctionRef.parse(x) for x in _objs(d, "deps", where)),
            error=_opt_str(d, "error", where),
        )

    def to_json(self) -> dict[str, Any]:
        if self.error is not None and self.qualname is None:
            return {"error": self.error}
        return {
            "qualname": self.qualname,
            "file": self.file,
            "line": self.line,
            "source_hash": self.source_hash,
            "code_hash": self.code_hash,
            "by_reference": self.by_reference,
            "deps": [x.to_json() for x in self.deps],
        }


@dataclass(frozen=True)
class ArgInfo:
    """One hashed argument of a step: its `Hasher` digest, a short repr and its type name;
    `summary` (a bounded hash tree) for steps that computed, `tree` (a full one) in events files,
    and there `after`: its tree at the end of a step that changed it while it ran."""

    digest: str | None = None
    repr: str | None = None
    type: str | None = None
    summary: Mapping[str, Any] | None = None
    tree: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any], name: str) -> ArgInfo:
        w = f"args.{name}."
        return cls(
            _opt_str(d, "digest", w),
            _opt_str(d, "repr", w),
            _opt_str(d, "type", w),
            _obj(d, "summary", w),
            _obj(d, "tree", w),
            _obj(d, "after", w),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"digest": self.digest, "repr": self.repr, "type": self.type}
        if self.summary is not None:
            out["summary"] = self.summary
        if self.tree is not None:
            out["tree"] = self.tree
        if self.after is not None:
            out["after"] = self.after
        return out


@dataclass(frozen=True)
class ColumnHead:
    """A column of an in-memory source in an events file: its digest and the short reprs of its
    first values (a source built at run time is explained by the first value that differs)."""

    digest: str | None = None
    head: tuple[str, ...] = ()

    @classmethod
    def parse(cls, d: Mapping[str, Any], name: str) -> ColumnHead:
        w = f"columns.{name}."
        return cls(_opt_str(d, "digest", w), _strs(d, "head", w))

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "head": list(self.head)}


@dataclass(frozen=True)
class RandomFallback:
    """`datasets` could not hash `argument` (None: the transform itself) and used a random fingerprint."""

    argument: str | None = None
    error: str | None = None
    error_type: str | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> RandomFallback:
        w = "random_fallback."
        return cls(_opt_str(d, "argument", w), _opt_str(d, "error", w), _opt_str(d, "error_type", w))

    def to_json(self) -> dict[str, Any]:
        return {"argument": self.argument, "error": self.error, "error_type": self.error_type}


@dataclass(frozen=True)
class FileRecord:
    """A cache file a step produced or reused: `status` "written" or "reused"."""

    path: str
    size: int | None = None
    status: str | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> FileRecord:
        path = _opt_str(d, "path", "files.")
        if path is None:
            raise BadRecord("'files.path' is missing")
        return cls(path, _opt_int(d, "size", "files."), _opt_str(d, "status", "files."))

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "status": self.status}


@dataclass(frozen=True)
class DataFile:
    """A local data file of a builder at load time."""

    split: str | None
    path: str
    size: int | None = None
    mtime: float | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> DataFile:
        w = "source.data_files."
        path = _opt_str(d, "path", w)
        if path is None:
            raise BadRecord(f"'{w}path' is missing")
        return cls(_opt_str(d, "split", w), path, _opt_int(d, "size", w), _opt_num(d, "mtime", w))

    def to_json(self) -> dict[str, Any]:
        return {"split": self.split, "path": self.path, "size": self.size, "mtime": self.mtime}


@dataclass(frozen=True)
class SourceInfo:
    """Where a chain starts (roots) or where a save went (saves). `kind` is "builder", "saved",
    "in-memory" or "file"; the other fields belong to one kind each (None otherwise)."""

    kind: str | None = None
    builder: str | None = None
    config: str | None = None
    relative_data_dir: str | None = None
    split: str | None = None
    data_files: tuple[DataFile, ...] = ()
    path: str | None = None
    state_fingerprint: str | None = None
    constructor: str | None = None

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "kind",
        "builder",
        "config",
        "relative_data_dir",
        "split",
        "path",
        "state_fingerprint",
        "constructor",
    )

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> SourceInfo:
        w = "source."
        values = {k: _opt_str(d, k, w) for k in cls._FIELDS}
        return cls(**values, data_files=tuple(DataFile.parse(x) for x in _objs(d, "data_files", w)))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "builder":
            for k in ("builder", "config", "relative_data_dir", "split"):
                out[k] = getattr(self, k)
            out["data_files"] = [x.to_json() for x in self.data_files]
            return out
        for k in self._FIELDS[1:]:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.data_files:
            out["data_files"] = [x.to_json() for x in self.data_files]
        return out


# ------------------------------------------------------------------------------------------
# Records
# ------------------------------------------------------------------------------------------

_BASE_KEYS = ("v", "type", "seq", "run", "time", "duration", "host", "pid", "versions", "internal", "root")
#: The fields of `LedgerRecord.constant_json()`: the same in every record a process writes.
CONSTANT_KEYS = ("v", "run", "host", "pid", "versions")


@dataclass(frozen=True, kw_only=True)
class LedgerRecord:
    """What every record has: version, type, order, time, where it ran, and the root it belongs to.

    `read_from` is the root whose ledger the record was read from (not written: it is where the
    reader found it); `extra` keeps the fields this cachetool does not know."""

    TYPE: ClassVar[str] = ""

    v: int = 1
    type: str = ""
    seq: int = 0
    run: str = ""
    time: float = 0.0
    duration: float = 0.0
    host: str | None = None
    pid: int | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    internal: bool = False
    root: str | None = None
    read_from: str | None = field(default=None, compare=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @staticmethod
    def _base(d: Mapping[str, Any], read_from: str | None = None) -> dict[str, Any]:
        versions = _obj(d, "versions") or {}
        if not all(v is None or isinstance(v, str) for v in versions.values()):
            raise BadRecord("'versions' holds a value that is not a string")
        run = d.get("run")
        if run is not None and not isinstance(run, str):
            raise BadRecord("'run' is not a string")
        return {
            "v": _int(d, "v", 1),
            "type": str(d.get("type")),
            "seq": _int(d, "seq"),
            "run": run or "",
            "time": _time(d),
            "duration": _num(d, "duration"),
            "host": _opt_str(d, "host"),
            "pid": _opt_int(d, "pid"),
            "versions": dict(versions),
            "internal": _bool(d, "internal"),
            "root": _opt_str(d, "root"),
            "read_from": read_from,
        }

    def version(self, package: str) -> str | None:
        """The version of `package` ("datasets", "python", ...) the record was written with."""
        return self.versions.get(package)

    @property
    def end(self) -> float:
        """When the call finished (seconds since the epoch)."""
        return self.time + self.duration

    @property
    def where(self) -> str:
        """The root the record belongs to (as written, else where it was read)."""
        return self.root or self.read_from or ""

    def _base_json(self, constant: bool) -> dict[str, Any]:
        out = {
            "type": self.type or self.TYPE,
            "seq": self.seq,
            "time": self.time,
            "duration": self.duration,
            "internal": self.internal,
            "root": self.root,
        }
        if constant:
            out.update(self.constant_json())
        return out

    def constant_json(self) -> dict[str, Any]:
        """The fields every record of one process shares (`CONSTANT_KEYS`): a writer encodes
        them once per process and writes the rest with `to_json(constant=False)`."""
        return {
            "v": self.v,
            "run": self.run,
            "host": self.host,
            "pid": self.pid,
            "versions": dict(self.versions),
        }

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        """The record as written in a segment (and as `--json` outputs show it); without the
        fields of `constant_json()` when `constant` is False."""
        out = self._base_json(constant)
        out.update(self.extra)
        return out


_STEP_KEYS = (
    "operation",
    "transform",
    "result",
    "parents",
    "output",
    "call_site",
    "function",
    "args",
    "random_fallback",
    "fingerprint_given",
    "files",
    "cache",
    "in_memory",
    "split",
    "source",
    "error",
    "no_cache",
    "columns",
)


_STEP_ALL = frozenset(_BASE_KEYS + _STEP_KEYS)


@dataclass(frozen=True, kw_only=True)
class StepRecord(LedgerRecord):
    """A call that made (or named) a dataset state: a transform, a root, a save, a checkpoint."""

    operation: str | None = None
    transform: str | None = None
    result: str | None = None
    parents: tuple[str, ...] = ()
    output: str | None = None
    call_site: CallSite | None = None
    function: FunctionInfo | None = None
    args: Mapping[str, ArgInfo] = field(default_factory=dict)
    random_fallback: RandomFallback | None = None
    fingerprint_given: bool = False
    files: tuple[FileRecord, ...] = ()
    cache: str = "none"
    in_memory: bool = False
    split: str | None = None
    source: SourceInfo | None = None
    error: str | None = None
    #: Why the step ran without a persistent cache (it runs again in every run), or None:
    #: one of `UNCACHED_REASONS`.
    no_cache: str | None = None
    #: Events files, in-memory roots: each column's digest and first values.
    columns: Mapping[str, ColumnHead] = field(default_factory=dict)

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> StepRecord:
        cache = d.get("cache")
        if cache is None:
            cache = "none"
        if cache not in _CACHE_VALUES:
            raise BadRecord("'cache' is not one of hit, partial, miss, none")
        raw_args = _obj(d, "args") or {}
        for name, a in raw_args.items():
            if not isinstance(a, dict):
                raise BadRecord(f"'args.{name}' is not an object")
        raw_columns = _obj(d, "columns") or {}
        for name, c in raw_columns.items():
            if not isinstance(c, dict):
                raise BadRecord(f"'columns.{name}' is not an object")
        cs, fn, rf, src = (_obj(d, k) for k in ("call_site", "function", "random_fallback", "source"))
        return cls(
            **cls._base(d, read_from),
            operation=_opt_str(d, "operation"),
            transform=_opt_str(d, "transform"),
            result=_opt_str(d, "result"),
            parents=_strs(d, "parents"),
            output=_opt_str(d, "output"),
            call_site=CallSite.parse(cs) if cs is not None else None,
            function=FunctionInfo.parse(fn) if fn is not None else None,
            args={str(k): ArgInfo.parse(v, str(k)) for k, v in raw_args.items()},
            random_fallback=RandomFallback.parse(rf) if rf is not None else None,
            fingerprint_given=_bool(d, "fingerprint_given"),
            files=tuple(FileRecord.parse(x) for x in _objs(d, "files")),
            cache=cache,
            in_memory=_bool(d, "in_memory"),
            split=_opt_str(d, "split"),
            source=SourceInfo.parse(src) if src is not None else None,
            error=_opt_str(d, "error"),
            no_cache=_opt_str(d, "no_cache"),
            columns={str(k): ColumnHead.parse(v, str(k)) for k, v in raw_columns.items()},
            extra={k: v for k, v in d.items() if k not in _STEP_ALL},
        )

    # -- what readers ask ----------------------------------------------------------------------
    @property
    def uncached(self) -> str | None:
        """Why this step runs again in every run (`UNCACHED_REASONS`), or None. Records written
        before the tracer said so count a map or filter of an in-memory dataset."""
        if self.no_cache is not None:
            return self.no_cache
        if self.in_memory and self.cache == "none" and self.operation in ("map", "filter"):
            return "in-memory"
        return None

    @property
    def computed(self) -> bool:
        """The step computed (part of) its result: cache "miss" or "partial"."""
        return self.cache in _COMPUTED

    @property
    def is_origin(self) -> bool:
        """The record says where `result` comes from: not a save, not a checkpoint, not a no-op
        whose result is its own parent (a map whose function returned None)."""
        return (
            self.result is not None
            and self.type not in ("save", "checkpoint")
            and self.result not in self.parents
        )

    def arg(self, name: str) -> ArgInfo | None:
        """The recorded argument `name`, or None (`datasets` leaves out arguments equal to their
        default)."""
        return self.args.get(name)

    @property
    def file_paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        out = self._base_json(constant)
        out |= {
            "operation": self.operation,
            "transform": self.transform,
            "result": self.result,
            "parents": list(self.parents),
            "output": self.output,
            "call_site": self.call_site.to_json() if self.call_site else None,
            "function": self.function.to_json() if self.function else None,
            "args": {k: a.to_json() for k, a in self.args.items()},
            "random_fallback": self.random_fallback.to_json() if self.random_fallback else None,
            "fingerprint_given": self.fingerprint_given,
            "files": [f.to_json() for f in self.files],
            "cache": self.cache,
            "in_memory": self.in_memory,
            "split": self.split,
            "source": self.source.to_json() if self.source else None,
            "error": self.error,
        }
        if self.no_cache is not None:
            out["no_cache"] = self.no_cache
        if self.columns:
            out["columns"] = {k: c.to_json() for k, c in self.columns.items()}
        out.update(self.extra)
        return out


#: Why a step ran without a persistent cache: its dataset lives in memory (`Dataset.from_dict`,
#: `from_pandas`, `from_list`, any dataset without cache files), `keep_in_memory=True`,
#: `datasets.disable_caching()` (results go to a temp folder deleted at exit), or
#: `load_from_cache_file=False` (the file is there, and computed again).
UNCACHED_REASONS = ("in-memory", "keep-in-memory", "caching-disabled", "load-from-cache-file-false")


@dataclass(frozen=True, kw_only=True)
class TransformRecord(StepRecord):
    """A transform call (`map`, `filter`, `select`, `concatenate_datasets`, ...)."""

    TYPE: ClassVar[str] = "transform"


@dataclass(frozen=True, kw_only=True)
class RootRecord(StepRecord):
    """A dataset that starts a chain: a builder split, `load_from_disk` (its parent is the saved
    state's fingerprint), an in-memory dataset. `source` says which."""

    TYPE: ClassVar[str] = "root"


@dataclass(frozen=True, kw_only=True)
class SaveRecord(StepRecord):
    """`save_to_disk`: the folder `source.path` holds `result`."""

    TYPE: ClassVar[str] = "save"

    @property
    def saved_path(self) -> str | None:
        return self.source.path if self.source else None


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord(StepRecord):
    """`cachetool.checkpoint(name, obj)` in an events file: `transform` is the name, `result` the
    digest of the object, `args["value"]` its repr (and tree)."""

    TYPE: ClassVar[str] = "checkpoint"


@dataclass(frozen=True, kw_only=True)
class SourceRecord(LedgerRecord):
    """The text of a user function named by a step's `function` (or one of its `deps`)."""

    TYPE: ClassVar[str] = "source"

    hash: str | None = None
    qualname: str | None = None
    file: str | None = None
    line: int | None = None
    text: str | None = None
    truncated: bool = False

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> SourceRecord:
        keys = ("hash", "qualname", "file", "line", "text", "truncated")
        return cls(
            **cls._base(d, read_from),
            hash=_opt_str(d, "hash"),
            qualname=_opt_str(d, "qualname"),
            file=_opt_str(d, "file"),
            line=_opt_int(d, "line"),
            text=_opt_str(d, "text"),
            truncated=_bool(d, "truncated"),
            extra={k: v for k, v in d.items() if k not in _BASE_KEYS and k not in keys},
        )

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        out = self._base_json(constant)
        out.update(self.extra)
        out.update(
            {
                "hash": self.hash,
                "qualname": self.qualname,
                "file": self.file,
                "line": self.line,
                "text": self.text,
                "truncated": self.truncated,
            }
        )
        return out


@dataclass(frozen=True, kw_only=True)
class GcRecord(LedgerRecord):
    """One item `cachetool gc` removed. `files` is a count here (a step's `files` is a list)."""

    TYPE: ClassVar[str] = "gc"

    action: str = "removed"
    fingerprint: str | None = None
    aliases: tuple[str, ...] = ()
    kind: str | None = None
    path: str | None = None
    paths: tuple[str, ...] = ()
    size: int = 0
    files: int = 0
    reason: str | None = None
    dataset: str | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> GcRecord:
        keys = (
            "action",
            "fingerprint",
            "aliases",
            "kind",
            "path",
            "paths",
            "size",
            "files",
            "reason",
            "dataset",
        )
        return cls(
            **cls._base(d, read_from),
            action=_opt_str(d, "action") or "removed",
            fingerprint=_opt_str(d, "fingerprint"),
            aliases=_strs(d, "aliases"),
            kind=_opt_str(d, "kind"),
            path=_opt_str(d, "path"),
            paths=_strs(d, "paths"),
            size=_int(d, "size"),
            files=_int(d, "files"),
            reason=_opt_str(d, "reason"),
            dataset=_opt_str(d, "dataset"),
            extra={k: v for k, v in d.items() if k not in _BASE_KEYS and k not in keys},
        )

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The removed entry's fingerprint and aliases."""
        return ((self.fingerprint,) if self.fingerprint else ()) + self.aliases

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        out = self._base_json(constant)
        out.update(
            {
                "action": self.action,
                "fingerprint": self.fingerprint,
                "aliases": list(self.aliases),
                "kind": self.kind,
                "path": self.path,
                "paths": list(self.paths),
                "size": self.size,
                "files": self.files,
                "reason": self.reason,
                "dataset": self.dataset,
            }
        )
        out.update(self.extra)
        return out


@dataclass(frozen=True, kw_only=True)
class RunStartRecord(LedgerRecord):
    """A traced process started (written when the tracer is installed, to its cache root's ledger):
    a run with this record and no `RunEndRecord` ended without closing (killed, or still running)."""

    TYPE: ClassVar[str] = "run-start"

    argv: tuple[str, ...] = ()
    cwd: str | None = None

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> RunStartRecord:
        return cls(
            **cls._base(d, read_from),
            argv=_strs(d, "argv"),
            cwd=_opt_str(d, "cwd"),
            extra={k: v for k, v in d.items() if k not in _BASE_KEYS and k not in ("argv", "cwd")},
        )

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        out = self._base_json(constant)
        out.update(self.extra)
        out.update({"argv": list(self.argv), "cwd": self.cwd})
        return out


@dataclass(frozen=True, kw_only=True)
class RunEndRecord(LedgerRecord):
    """A traced process ended normally (an exception included), or stopped tracing; written to
    every root the run wrote to."""

    TYPE: ClassVar[str] = "run-end"

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> RunEndRecord:
        return cls(**cls._base(d, read_from), extra={k: v for k, v in d.items() if k not in _BASE_KEYS})


@dataclass(frozen=True, kw_only=True)
class StepStartRecord(LedgerRecord):
    """A step began to compute: written when it finds no cache file to load (a miss), before it
    writes, so a run killed in the step still says which step it was and where it wrote. The
    step's own record, written when it ends, has the same `run` and `seq`."""

    TYPE: ClassVar[str] = "step-start"

    operation: str | None = None
    parents: tuple[str, ...] = ()
    call_site: CallSite | None = None
    split: str | None = None
    #: The cache files the step is about to write (they do not exist yet).
    paths: tuple[str, ...] = ()

    _KEYS: ClassVar[tuple[str, ...]] = ("operation", "parents", "call_site", "split", "paths")

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> StepStartRecord:
        cs = _obj(d, "call_site")
        return cls(
            **cls._base(d, read_from),
            operation=_opt_str(d, "operation"),
            parents=_strs(d, "parents"),
            call_site=CallSite.parse(cs) if cs is not None else None,
            split=_opt_str(d, "split"),
            paths=_strs(d, "paths"),
            extra={k: v for k, v in d.items() if k not in _BASE_KEYS and k not in cls._KEYS},
        )

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        out = self._base_json(constant)
        out.update(self.extra)
        out.update(
            {
                "operation": self.operation,
                "parents": list(self.parents),
                "call_site": self.call_site.to_json() if self.call_site else None,
                "split": self.split,
                "paths": list(self.paths),
            }
        )
        return out


#: Record type -> class. A type not listed here is skipped with a warning.
RECORD_TYPES: dict[str, type[LedgerRecord]] = {
    c.TYPE: c
    for c in (
        TransformRecord,
        RootRecord,
        SaveRecord,
        CheckpointRecord,
        SourceRecord,
        GcRecord,
        RunStartRecord,
        RunEndRecord,
        StepStartRecord,
    )
}


def parse_record(obj: Any, read_from: str | None = None) -> LedgerRecord:
    """The typed record for one decoded JSON line (found in the ledger of the root `read_from`);
    `BadRecord` says why it is not one."""
    if not isinstance(obj, dict):
        raise BadRecord("not a JSON object")
    v = obj.get("v")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise BadRecord("no record version")
    kind = obj.get("type")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise BadRecord(f"unknown record type {str(kind)[:40]!r}")
    return cls.parse(obj, read_from)  # type: ignore[attr-defined]


__all__ = [
    "RECORD_TYPES",
    "ArgInfo",
    "BadRecord",
    "CacheStatus",
    "CallSite",
    "CheckpointRecord",
    "ColumnHead",
    "DataFile",
    "FileRecord",
    "FunctionInfo",
    "FunctionRef",
    "GcRecord",
    "LedgerRecord",
    "RandomFallback",
    "RootRecord",
    "RunEndRecord",
    "RunStartRecord",
    "SaveRecord",
    "SourceInfo",
    "SourceRecord",
    "StepRecord",
    "StepStartRecord",
    "TransformRecord",
    "parse_record",
]
