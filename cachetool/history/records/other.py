"""Records that are not steps: the source text of a user function, an item gc removed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cachetool.history.records.base import LedgerRecord


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


@dataclass(frozen=True, kw_only=True)
class GcRecord(LedgerRecord):
    """One item `cachetool gc` removed. `files` is a count here (a step's `files` is a list)."""

    TYPE: ClassVar[str] = "gc"
    EXTRA_LAST: ClassVar[bool] = True

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

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The removed entry's fingerprint and aliases."""
        return ((self.fingerprint,) if self.fingerprint else ()) + self.aliases
