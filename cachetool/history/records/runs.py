"""Run markers: a traced process started or ended, a step began to compute."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from cachetool.history.records.base import _BASE_KEYS, LedgerRecord
from cachetool.history.records.fields import (
    _obj,
    _opt_int,
    _opt_str,
    _strs,
)
from cachetool.history.records.parts import (
    CallSite,
)


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
    """A traced process ended without being killed (an uncaught exception included), or stopped
    tracing; written to every root the run wrote to, with how it ended when `cachetool run` ran
    it (None: not known, as in records of older versions)."""

    TYPE: ClassVar[str] = "run-end"

    #: The exit status the script ended with (1 for an uncaught exception).
    status: int | None = None
    #: The uncaught exception that ended the run: its type's name and its message.
    exception: str | None = None
    message: str | None = None
    #: The `seq` of the step the exception came out of (None: outside any step).
    step: int | None = None

    _KEYS: ClassVar[tuple[str, ...]] = ("status", "exception", "message", "step")

    @classmethod
    def parse(cls, d: Mapping[str, Any], read_from: str | None = None) -> RunEndRecord:
        return cls(
            **cls._base(d, read_from),
            status=_opt_int(d, "status"),
            exception=_opt_str(d, "exception"),
            message=_opt_str(d, "message"),
            step=_opt_int(d, "step"),
            extra={k: v for k, v in d.items() if k not in _BASE_KEYS and k not in cls._KEYS},
        )

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        out = self._base_json(constant)
        out.update(self.extra)
        out.update({k: getattr(self, k) for k in self._KEYS if getattr(self, k) is not None})
        return out


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
    #: The `tmp*` files already in those folders when the step began (another run's leftovers):
    #: not what this step wrote.
    before: tuple[str, ...] = ()

    _KEYS: ClassVar[tuple[str, ...]] = ("operation", "parents", "call_site", "split", "paths", "before")

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
            before=_strs(d, "before"),
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
                "before": list(self.before),
            }
        )
        return out
