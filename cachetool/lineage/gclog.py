"""gc's records in the ledger: what was removed, when, why, and how big it was.

`cachetool gc` appends one record per removed item to the ledger of the cache root (through the
same per-process segments as the tracer, so no lock and no rewrite), after the files are gone:
a crash in between leaves files removed without a record, never a record of a removal that did
not happen. Record (ledger schema version 1, `type` "gc")::

    v, type="gc", seq, run, time, host, pid, versions   as every ledger record
    action        "removed"
    fingerprint   the removed entry's fingerprint, or null (leftovers have none)
    aliases       other fingerprints of the same state (a saved dataset after load_from_disk)
    kind          the entry kind (derived, shards, saved, temp, incomplete-prepare, lock, ...)
    path          the removed file or folder (the first one, for a shard set)
    paths         every file or folder removed
    size, files   bytes and files freed
    reason        why gc removed it ("not used in 30d", "leftover of a killed map", ...)
    dataset       the dataset folder's name, if any

A gc record has no `result`, so readers that follow `result`/`parents` (usage, lineage edges)
ignore it; `removed_fingerprints(root)` is how `lineage` learns that a node was deleted.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any

from cachetool.lineage.ledger import RECORD_VERSION, LedgerWriter, Record, read_ledger

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
        record: Record = {
            "v": RECORD_VERSION,
            "type": GC_TYPE,
            "seq": self._seq,
            "run": w.run_id,
            "time": when,
            "host": w.host,
            "pid": w.pid,
            "versions": _versions(),
            "action": "removed",
            "fingerprint": fingerprint,
            "aliases": list(aliases),
            "kind": kind,
            "path": os.fsdecode(paths[0]) if paths else None,
            "paths": [os.fsdecode(p) for p in paths],
            "size": size,
            "files": files,
            "reason": reason,
            "dataset": dataset,
        }
        try:
            w.append(self.root, record)
        except Exception:  # a full disk or a vanished root: the removal stands either way
            return

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> GcLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gc_records(root: str | os.PathLike[str]) -> list[Record]:
    """Every gc record of `root`, oldest first."""
    return [r for r in read_ledger(root).records if r.get("type") == GC_TYPE]


def removed_fingerprints(root: str | os.PathLike[str]) -> dict[str, Record]:
    """Fingerprint (and alias) -> the latest gc record that removed it.

    A fingerprint recomputed after its removal has files again; callers that show "deleted"
    should also check that the files named in the record are still gone."""
    out: dict[str, Record] = {}
    for rec in gc_records(root):
        for fp in (rec.get("fingerprint"), *(rec.get("aliases") or ())):
            if isinstance(fp, str):
                out[fp] = rec
    return out


def paths_gone(record: Record) -> bool:
    """True when no path the record names exists any more."""
    paths: list[Any] = list(record.get("paths") or [])
    return all(isinstance(p, str) and not os.path.lexists(p) for p in paths) if paths else True


def describe(record: Record) -> str:
    """`deleted by gc <time>: <reason>` for one gc record."""
    from datetime import datetime, timezone

    t = record.get("time")
    when = (
        datetime.fromtimestamp(float(t), tz=timezone.utc).isoformat(timespec="seconds")
        if isinstance(t, (int, float))
        else "?"
    )
    return f"deleted by gc {when}: {record.get('reason') or 'no reason recorded'}"


__all__ = ["GC_TYPE", "GcLog", "describe", "gc_records", "paths_gone", "removed_fingerprints"]
