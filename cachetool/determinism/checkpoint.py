"""`cachetool.checkpoint(name, obj)`: record the hash of any object as a trace event, compared
across runs by `check-determinism` like a fingerprint; outside a determinism run it does nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from cachetool.trace.install import event_counter, run_settings


def checkpoint(name: str, obj: Any) -> str | None:
    """Record `obj`'s digest (and, in a determinism run, its hash tree) under `name`.

    Returns the digest — ``datasets.fingerprint.Hasher.hash(obj)`` — or None when not recording
    or when `obj` cannot be pickled (the event then carries the exception text). Never raises
    into the caller because of hashing.
    """
    path, trees, _ = run_settings()
    if not path:
        return None
    from pathlib import Path

    from cachetool.fingerprint.hashing import try_hash
    from cachetool.fingerprint.tree import build_tree, short_repr
    from cachetool.history.records.parts import ArgInfo, CallSite, RandomFallback
    from cachetool.history.records.steps import CheckpointRecord
    from cachetool.history.writer import RECORD_VERSION, SegmentWriter

    frame = sys._getframe(1)
    tree = build_tree(obj) if trees else None
    if tree is not None:
        digest, error = tree.get("d"), tree.get("e")
    else:
        digest, error = try_hash(obj)
    event = CheckpointRecord(
        v=RECORD_VERSION,
        seq=next(event_counter),
        time=time.time(),
        operation="checkpoint",
        transform=str(name),
        result=digest,
        call_site=CallSite(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name),
        args={"value": ArgInfo(digest=digest, repr=short_repr(obj), tree=tree)},
        random_fallback=None if error is None else RandomFallback(argument="value", error=error),
    )
    # One write of the whole line on an O_APPEND descriptor, as the tracer writes its events.
    writer = SegmentWriter(Path(path))
    try:
        writer.append(event.to_json())
    finally:
        writer.close()
    return digest
