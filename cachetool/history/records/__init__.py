"""Typed ledger records: one frozen class per record type, parsed once when a ledger is read.

The schema they implement is documented in `cachetool.history.ledger` (its module docstring is the
single source of truth). Readers get these classes, never raw dicts; writers (the tracer, gc's
log) build them and serialize them with `to_json()`, so a field has one type everywhere.

`parse_record(obj)` turns one decoded JSON object into a record or raises `BadRecord` with a
one-line reason ("'parents' is not a list of strings"); `read_segment` turns that into a warning.
Fields a record does not know are kept in `extra` (records written by a newer cachetool are read,
and written back unchanged by `to_json()`).

The classes live in modules by family (`fields`: `BadRecord` and the field checks; `parts`: the
parts of a record; `base`: `LedgerRecord`; `steps`: step records; `runs`: run markers;
`compacted`: a compacted ledger's marker and run summaries; `other`: source and gc records;
`parse`: the registry); import them from here.

Part of `history`: imports only `cache` and the base modules.
"""

from cachetool.history.records.base import CONSTANT_KEYS, LedgerRecord
from cachetool.history.records.compacted import CompactionRecord, RunSummaryRecord
from cachetool.history.records.fields import BadRecord
from cachetool.history.records.other import GcRecord, SourceRecord
from cachetool.history.records.parse import RECORD_TYPES, parse_record
from cachetool.history.records.parts import (
    ArgInfo,
    CallSite,
    ColumnHead,
    DataFile,
    FileRecord,
    FunctionInfo,
    FunctionRef,
    RandomFallback,
    SourceInfo,
)
from cachetool.history.records.runs import RunEndRecord, RunStartRecord, StepStartRecord
from cachetool.history.records.steps import (
    UNCACHED_REASONS,
    CacheStatus,
    CheckpointRecord,
    RootRecord,
    SaveRecord,
    StepRecord,
    TransformRecord,
)

__all__ = [
    "CONSTANT_KEYS",
    "RECORD_TYPES",
    "UNCACHED_REASONS",
    "ArgInfo",
    "BadRecord",
    "CacheStatus",
    "CallSite",
    "CheckpointRecord",
    "ColumnHead",
    "CompactionRecord",
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
    "RunSummaryRecord",
    "SaveRecord",
    "SourceInfo",
    "SourceRecord",
    "StepRecord",
    "StepStartRecord",
    "TransformRecord",
    "parse_record",
]
