"""Where a tracer's records go: the ledger of the root each belongs to (`LedgerSink`), or, in a
determinism run, one events file (`EventsSink`)."""

from __future__ import annotations

import os
import socket

from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.steps import StepRecord
from cachetool.history.writer import LedgerWriter, SegmentWriter
from cachetool.trace.install import warn

__all__ = ["EventsSink", "LedgerSink"]


class LedgerSink:
    """Records go to the ledger of the root each belongs to."""

    def __init__(self) -> None:
        self.writer = LedgerWriter(warn=warn)
        self.cache_root = ""  # the process's cache root: also where steps on other file systems go
        self.roots: dict[str, None] = {}  # every root written to, in order

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    def emit_line(self, record: LedgerRecord, line: str) -> None:
        """Write one record, already encoded as `line` (JSON, no newline)."""
        root = record.root or self.cache_root
        source = record.source if isinstance(record, StepRecord) else None
        saved = source is not None and source.kind == "saved" and root != self.cache_root
        self.roots[root] = None
        self.writer.append_line(root, line, "saved" if saved else "cache")

    def close(self) -> None:
        self.writer.close()


class EventsSink:
    """The determinism runner's mode: every event, in one file, instead of the ledger."""

    def __init__(self, path: str, trees: bool) -> None:
        from pathlib import Path

        self.path = Path(path)
        self.segment = SegmentWriter(self.path)
        self.trees = trees
        self.run_id = f"{socket.gethostname()}-{os.getpid()}"

    def emit_line(self, record: LedgerRecord, line: str) -> None:
        self.segment.append_line(line)

    def close(self) -> None:
        self.segment.close()
