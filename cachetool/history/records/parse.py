"""`parse_record`: the record class of a decoded line, among every record type (each registers in
`RECORD_TYPES` as its module is imported, all of them here)."""

from __future__ import annotations

from typing import Any

from cachetool.history.records import compacted, other, runs, steps  # noqa: F401 - the record types
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
