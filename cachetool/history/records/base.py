"""`LedgerRecord`: the fields every record has, and how they are read and written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any, ClassVar, TypeVar

from cachetool.history.records.fields import (
    BadRecord,
    _bool,
    _int,
    _num,
    _obj,
    _opt_int,
    _opt_str,
    _time,
)

_BASE_KEYS = ("v", "type", "seq", "run", "time", "duration", "host", "pid", "versions", "internal", "root")
#: The fields of `LedgerRecord.constant_json()`: the same in every record a process writes.
CONSTANT_KEYS = ("v", "run", "host", "pid", "versions")

_R = TypeVar("_R", bound=type)


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

    def located(self, path: str) -> str:
        """Where a path the record names is now: a path below the root it was written in lies
        below the folder its ledger was read from (the same root, moved since); any other path
        is as written."""
        if self.root and self.read_from and self.root != self.read_from:
            prefix = self.root.rstrip("/") + "/"
            if path.startswith(prefix):
                return self.read_from.rstrip("/") + "/" + path[len(prefix) :]
        return path

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


def same_fields(cls: _R) -> _R:
    """For a record class that adds no field to its frozen dataclass base (only its `TYPE`): it
    keeps the base's generated `__init__`, `__repr__`, `__eq__` and `__hash__` (they name and
    compare `type(self)`), instead of `@dataclass` compiling them again, ~1 ms per class at every
    import (a traced run pays it at start). Assigning or deleting any attribute raises
    `FrozenInstanceError`, as `@dataclass(frozen=True)` makes it."""
    own = [name for name in vars(cls).get("__annotations__", {}) if name != "TYPE"]
    if own:
        raise TypeError(f"{cls.__name__} adds fields {own}: decorate it with @dataclass")

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: Any, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    cls.__setattr__ = __setattr__  # type: ignore[assignment]
    cls.__delattr__ = __delattr__  # type: ignore[assignment]
    return cls
