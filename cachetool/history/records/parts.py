"""Parts of a record: call site, function, arguments, columns, files and sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from cachetool.history.records.fields import (
    BadRecord,
    _bool,
    _obj,
    _objs,
    _opt_int,
    _opt_num,
    _opt_str,
    _strs,
)


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
