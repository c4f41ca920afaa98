"""The record type registry and `parse_record`, which picks the class for a decoded line."""

from __future__ import annotations

from typing import Any

from cachetool.history.records.base import BadRecord, LedgerRecord
from cachetool.history.records.compacted import CompactionRecord, RunSummaryRecord
from cachetool.history.records.other import GcRecord, SourceRecord
from cachetool.history.records.runs import RunEndRecord, RunStartRecord, StepStartRecord
from cachetool.history.records.steps import CheckpointRecord, RootRecord, SaveRecord, TransformRecord

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
        CompactionRecord,
        RunSummaryRecord,
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
    return cls.parse(obj, read_from)
