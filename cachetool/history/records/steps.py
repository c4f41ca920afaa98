"""Step records: a call that made (or named) a dataset state (transform, root, save, checkpoint)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from cachetool.history.records.base import _BASE_KEYS, LedgerRecord, same_fields
from cachetool.history.records.fields import (
    BadRecord,
    _bool,
    _obj,
    _objs,
    _opt_str,
    _strs,
)
from cachetool.history.records.parts import (
    ArgInfo,
    CallSite,
    ColumnHead,
    FileRecord,
    FunctionInfo,
    RandomFallback,
    SourceInfo,
)

#: `cache` values of a step record.
CacheStatus = Literal["hit", "partial", "miss", "none"]
_CACHE_VALUES = ("hit", "partial", "miss", "none")
_COMPUTED = ("miss", "partial")


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

    @property
    def made(self) -> tuple[str, ...]:
        """The fingerprints this step's result is known by: `result`, then the fingerprint in the
        name of each cache file it wrote or reused when that differs (`cast_column` writes under
        the fingerprint of the `map` it runs): the ledger's usage files the step under each."""
        if self.result is None:
            return ()
        from cachetool.cache.layout import parse_cache_file

        made = [self.result]
        for f in self.files:
            parsed = parse_cache_file(f.path.rpartition("/")[2])
            if parsed is not None and parsed[0] not in made:
                made.append(parsed[0])
        return tuple(made)

    @property
    def used(self) -> tuple[str, ...]:
        """The fingerprints this step uses, what it made and its parents: the ledger's usage takes
        each one's last use from the step's end."""
        return (*self.made, *self.parents)

    @property
    def origin_counts(self) -> tuple[int, int, int]:
        """What this record, an origin of its result, adds to the result's usage: hits, misses,
        a random fingerprint (0 or 1)."""
        return int(self.cache == "hit"), int(self.computed), int(self.random_fallback is not None)

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


@same_fields
class TransformRecord(StepRecord):
    """A transform call (`map`, `filter`, `select`, `concatenate_datasets`, ...)."""

    TYPE: ClassVar[str] = "transform"


@same_fields
class RootRecord(StepRecord):
    """A dataset that starts a chain: a builder split, `load_from_disk` (its parent is the saved
    state's fingerprint), an in-memory dataset. `source` says which."""

    TYPE: ClassVar[str] = "root"


@same_fields
class SaveRecord(StepRecord):
    """`save_to_disk`: the folder `source.path` holds `result`."""

    TYPE: ClassVar[str] = "save"

    @property
    def saved_path(self) -> str | None:
        return self.source.path if self.source else None


@same_fields
class CheckpointRecord(StepRecord):
    """`cachetool.checkpoint(name, obj)` in an events file: `transform` is the name, `result` the
    digest of the object, `args["value"]` its repr (and tree)."""

    TYPE: ClassVar[str] = "checkpoint"


def site_key(rec: StepRecord, realpaths: dict[str, str] | None = None) -> tuple[object, ...] | None:
    """The same call site: operation, file (its real path, cached in `realpaths`) and line."""
    site = rec.call_site
    if site is None or not site.file:
        return None
    real = realpaths.get(site.file) if realpaths is not None else None
    if real is None:
        real = os.path.realpath(site.file)
        if realpaths is not None:
            realpaths[site.file] = real
    return (rec.operation, real, site.line)


def fn_key(rec: StepRecord) -> tuple[object, ...] | None:
    """The same function: operation, qualified name and file."""
    fn = rec.function
    if fn is None or not fn.qualname:
        return None
    return (rec.operation, fn.qualname, fn.file)


def moved_key(rec: StepRecord) -> tuple[object, ...] | None:
    """The same function moved to another file: operation, name, code and inputs."""
    fn = rec.function
    if fn is None or not fn.qualname or not fn.code_hash:
        return None
    return (rec.operation, fn.qualname, fn.code_hash, tuple(rec.parents))


#: The step types `stats` counts as steps (hits, misses); saves are counted apart.
COUNTED = ("transform", "root")


def written_bytes(rec: StepRecord) -> int:
    """Bytes of the files a record wrote (not those it reused)."""
    return sum(f.size or 0 for f in rec.files if f.status == "written")
