"""gc's records in the ledger: what was removed, when, why, and how big it was.

`cachetool gc` appends one `GcRecord` per removed item to the ledger of the cache root (through
the same per-process segments as the tracer, so no lock and no rewrite), after the files are gone:
a crash in between leaves files removed without a record, never a record of a removal that did
not happen. The record's fields are documented with the others in `cachetool.history.ledger`.

A gc record has no `result`, so readers that follow `result`/`parents` (usage, lineage edges)
ignore it; `lineage` reads them to say that a node was deleted.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

from cachetool.history.records.other import GcRecord
from cachetool.history.writer import RECORD_VERSION, LedgerWriter


class GcLog:
    """Appends gc records for one run to the ledger of one root (opened lazily, closed on exit)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self._writer = LedgerWriter()
        self._seq = 0

    def removed(
        self,
        *,
        kind: str,
        paths: Sequence[str | os.PathLike[str]],
        size: int,
        files: int,
        reason: str,
        fingerprint: str | None = None,
        aliases: Sequence[str] = (),
        dataset: str | None = None,
        when: float,
    ) -> None:
        """Record one removal. Never raises: losing a log line must not fail a deletion that happened."""
        from cachetool import __version__

        self._seq += 1
        w = self._writer
        record = GcRecord(
            v=RECORD_VERSION,
            type="gc",
            seq=self._seq,
            run=w.run_id,
            time=when,
            host=w.host,
            pid=w.pid,
            versions={"python": platform.python_version(), "cachetool": __version__},
            root=self.root,
            action="removed",
            fingerprint=fingerprint,
            aliases=tuple(aliases),
            kind=kind,
            path=os.fsdecode(paths[0]) if paths else None,
            paths=tuple(os.fsdecode(p) for p in paths),
            size=int(size),
            files=int(files),
            reason=reason,
            dataset=dataset,
        )
        try:
            w.append(self.root, record.to_json())
        except Exception:  # a full disk or a vanished root: the removal stands either way
            return

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> GcLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gc_records(root: str | os.PathLike[str]) -> list[GcRecord]:
    """Every gc record of `root`, oldest first."""
    from cachetool.history.ledger import read_ledger  # the reader is heavy; gc only appends

    return read_ledger(root).gc_records()
