"""Records that are not steps: the source text of a user function, an item gc removed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from cachetool.history.records.base import _BASE_KEYS, LedgerRecord
from cachetool.history.records.fields import (
    _bool,
    _int,
    _opt_int,
    _opt_str,
    _strs,
)


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
