"""A run's events file (``CACHETOOL_TRACE_EVENTS``), read once into typed step records with the
ledger's segment reader: a line that is not a valid record is skipped with a warning, never raised.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetool.history.ledger import read_segment
from cachetool.history.records import parse_record
from cachetool.history.records.base import BadRecord
from cachetool.history.records.steps import StepRecord

__all__ = ["Event", "EventsFile", "as_events", "load_events", "read_events"]

#: One event: a step (transform, root, save, checkpoint) as one run recorded it.
Event = StepRecord


@dataclass(frozen=True)
class EventsFile:
    """The events of one run in `seq` order, and the lines that could not be read."""

    events: tuple[Event, ...] = ()
    warnings: tuple[str, ...] = ()


def load_events(path: str | os.PathLike[str]) -> EventsFile:
    """The events of one run in `seq` order (writers may buffer differently), with a warning per line
    skipped; no file: nothing recorded."""
    path = Path(path)
    if not os.path.lexists(path):
        return EventsFile()
    warnings: list[str] = []
    events: list[Event] = []
    # Other valid records (a function's source text, the start and end of a run) are not compared.
    events.extend(r for r in read_segment(path, warnings) if isinstance(r, StepRecord))
    events.sort(key=lambda e: e.seq)
    return EventsFile(tuple(events), tuple(warnings))


def read_events(path: str | os.PathLike[str]) -> list[Event]:
    """The events of one run (see `load_events`; its warnings are dropped here)."""
    return list(load_events(path).events)


def as_events(run: Iterable[Event | Mapping[str, Any]]) -> tuple[Event, ...]:
    """Events given as records or as the decoded JSON objects of an events file (a missing ``v``
    is version 1), parsed once. `BadRecord` says which object is not a step."""
    out: list[Event] = []
    for i, item in enumerate(run):
        if isinstance(item, StepRecord):
            out.append(item)
            continue
        record = parse_record({"v": 1, **item})
        if not isinstance(record, StepRecord):
            raise BadRecord(f"event {i}: a {record.type} record, not a step")
        out.append(record)
    return tuple(out)
