"""Typed ledger records: one class per record type (`steps`, `other`), their parts (`parts`), all
read and written from their dataclass fields (`base`); `parse_record` turns one decoded JSON line
into a record or raises `BadRecord`. Part of `history`: imports only `cache` and the base modules.
"""

from __future__ import annotations

from typing import Any

from cachetool.history.records import other, steps  # noqa: F401 - every record type registers
from cachetool.history.records.base import RECORD_TYPES, BadRecord, LedgerRecord


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
    return cls.parse(obj, read_from)
