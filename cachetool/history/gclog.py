"""gc's records in the ledger: what was removed, when, why, and how big it was.

`cachetool gc` appends one `GcRecord` per removed item to the ledger of the cache root (through
the same per-process segments as the tracer, so no lock and no rewrite), after the files are gone:
a crash in between leaves files removed without a record, never a record of a removal that did
not happen. The record's fields are documented with the others in `cachetool.history.ledger`.

A gc record has no `result`, so readers that follow `result`/`parents` (usage, lineage edges)
ignore it; `removed_fingerprints(ledger)` is how `lineage` learns that a node was deleted.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

from cachetool.history.ledger import Ledger, read_ledger
from cachetool.history.records.other import GcRecord
from cachetool.history.writer import RECORD_VERSION, LedgerWriter

GC_TYPE = "gc"


def _versions() -> dict[str, str | None]:
    from cachetool import __version__

    return {"python": platform.python_version(), "cachetool": __version__}


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
        self._seq += 1
        w = self._writer
        record = GcRecord(
            v=RECORD_VERSION,
            type=GC_TYPE,
            seq=self._seq,
            run=w.run_id,
            time=when,
            host=w.host,
            pid=w.pid,
            versions=_versions(),
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


def gc_records(root: str | os.PathLike[str] | Ledger) -> list[GcRecord]:
    """Every gc record of `root`, oldest first."""
    ledger = root if isinstance(root, Ledger) else read_ledger(root)
    return ledger.gc_records()


def removed_fingerprints(root: str | os.PathLike[str] | Ledger) -> dict[str, GcRecord]:
    """Fingerprint (and alias) -> the latest gc record that removed it.

    A fingerprint recomputed after its removal has files again; callers that show "deleted"
    should also check that the files named in the record are still gone."""
    out: dict[str, GcRecord] = {}
    for rec in gc_records(root):
        for fp in rec.fingerprints:
            out[fp] = rec
    return out


def paths_gone(record: GcRecord) -> bool:
    """True when no path the record names exists any more."""
    return not any(os.path.lexists(record.located(p)) for p in record.paths)


def describe(record: GcRecord) -> str:
    """`deleted by gc <time>: <reason>` for one gc record."""
    from cachetool.formatting import iso_time

    when = iso_time(record.time)
    return f"deleted by gc {when}: {record.reason or 'no reason recorded'}"
