"""`cachetool.checkpoint(name, obj)`: record the hash of any object as a trace event.

A pipeline that does not use `datasets` (plain Python, tf.data, a config object for a trainer) can
still be checked by `cachetool check-determinism`: each checkpoint is compared across runs like a
fingerprint, and a difference is explained from its hash tree. Outside a determinism run (no
``CACHETOOL_TRACE_EVENTS`` in the environment) a checkpoint does nothing and costs nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from typing import Any

__all__ = [
    "COLD_ENV",
    "EVENTS_ENV",
    "SEED_ENV",
    "TREES_ENV",
    "append_event",
    "checkpoint",
    "run_settings",
    "take_environment",
]

EVENTS_ENV = "CACHETOOL_TRACE_EVENTS"
TREES_ENV = "CACHETOOL_TRACE_TREES"
#: Set by the determinism runner for its cold run: every transform computes (caching disabled).
COLD_ENV = "CACHETOOL_TRACE_COLD"
#: Set by the determinism runner when it sets PYTHONHASHSEED: the user's own value ("" for none).
SEED_ENV = "CACHETOOL_USER_PYTHONHASHSEED"
EVENT_VERSION = 1
_RUN_VARIABLES = (EVENTS_ENV, TREES_ENV, COLD_ENV, SEED_ENV)

_counter = itertools.count()
#: The run's settings, once taken out of the environment by `take_environment()`.
_taken: dict[str, str] | None = None


def take_environment() -> None:
    """Before the script's own code runs: keep the tracer's settings here and remove the
    ``CACHETOOL_*`` variables cachetool set for the run from ``os.environ`` (and the
    ``PYTHONHASHSEED`` the determinism runner set, putting back the user's own), so the script sees
    the environment of a plain run. The user's own settings (``CACHETOOL_HOME``, ...) stay."""
    global _taken
    taken = {k: os.environ[k] for k in _RUN_VARIABLES if k in os.environ}
    if SEED_ENV in taken:
        user_seed = taken[SEED_ENV]
        if user_seed:
            os.environ["PYTHONHASHSEED"] = user_seed
        else:
            os.environ.pop("PYTHONHASHSEED", None)
    for key in _RUN_VARIABLES:
        os.environ.pop(key, None)
    _taken = taken


def _setting(name: str) -> str:
    return (_taken if _taken is not None else os.environ).get(name, "")


def run_settings() -> tuple[str, bool, bool]:
    """(events file, hash trees wanted, cold run) of this process, from the determinism runner."""
    off = ("", "0", "false", "no")
    return _setting(EVENTS_ENV), _setting(TREES_ENV) not in off, _setting(COLD_ENV) not in off


def checkpoint(name: str, obj: Any) -> str | None:
    """Record `obj`'s digest (and, in a determinism run, its hash tree) under `name`.

    Returns the digest — ``datasets.fingerprint.Hasher.hash(obj)`` — or None when not recording
    or when `obj` cannot be pickled (the event then carries the exception text). Never raises
    into the caller because of hashing.
    """
    path, trees, _ = run_settings()
    if not path:
        return None
    from cachetool.fingerprint.hashing import try_hash
    from cachetool.fingerprint.tree import build_tree, short_repr
    from cachetool.lineage.records import ArgInfo, CallSite, CheckpointRecord, RandomFallback

    frame = sys._getframe(1)
    tree = build_tree(obj) if trees else None
    if tree is not None:
        digest, error = tree.get("d"), tree.get("e")
    else:
        digest, error = try_hash(obj)
    event = CheckpointRecord(
        v=EVENT_VERSION,
        seq=next(_counter),
        time=time.time(),
        operation="checkpoint",
        transform=str(name),
        result=digest,
        call_site=CallSite(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name),
        args={"value": ArgInfo(digest=digest, repr=short_repr(obj), tree=tree)},
        random_fallback=None if error is None else RandomFallback(argument="value", error=error),
    )
    append_event(path, event.to_json())
    return digest


def append_event(path: str, event: dict[str, Any]) -> None:
    """Append one JSON line with a single write (O_APPEND), so concurrent writers do not interleave."""
    line = (json.dumps(event, ensure_ascii=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
