"""A lease file: one writing process's announcement in a root's `.cachetool/` (host, boot id, pid,
PID namespace, start, last renewal, lifetime), read and judged by one rule for every reader: gc and
verify (`cachetool.maintenance.liveness`), and a traced run waiting for another's step
(`cachetool.trace.once`). Written by `cachetool.trace.leases`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from cachetool.cache.roots import MAX_LEASE_SECONDS
from cachetool.formatting import safe_text
from cachetool.processes import HostId, process_start, this_host

#: The most a lease file is read of (one is about 300 bytes).
MAX_LEASE_BYTES = 64 * 1024
#: How far the clocks of two hosts (and a file server's) may disagree: a lease covers files
#: modified up to this long before its process started.
CLOCK_SKEW = 300.0

LeaseState = Literal["live", "expired", "dead"]

#: Seconds a lease lives after its last renewal, unless `CACHETOOL_LEASE_SECONDS` says otherwise.
DEFAULT_LEASE_SECONDS = 60.0


def lease_seconds(environ: dict[str, str] | None = None) -> float:
    """The lease lifetime: `CACHETOOL_LEASE_SECONDS` (a positive number, at most
    `MAX_LEASE_SECONDS`: `inf` is that), else 60."""
    raw = (os.environ if environ is None else environ).get("CACHETOOL_LEASE_SECONDS", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_LEASE_SECONDS
    return min(value, MAX_LEASE_SECONDS) if value > 0 else DEFAULT_LEASE_SECONDS


def lease_document(lifetime: float) -> dict[str, Any]:
    """What a lease of this process says, less the time of its renewal (`renewed`)."""
    import sys

    me, pid = this_host(), os.getpid()
    start = process_start(pid) or time.time()
    command = " ".join(sys.argv)[:500]
    return dict(v=1, **me._asdict(), pid=pid, start=start, lifetime=lifetime, command=command)


@dataclass(frozen=True)
class Lease:
    """One writing process's announcement, as read from its lease file."""

    path: Path
    host: str
    boot_id: str
    pid: int
    pid_ns: int
    start: float  # when the process started
    renewed: float  # its last renewal (the later of the recorded time and the file's mtime)
    lifetime: float
    command: str = ""

    @property
    def expires(self) -> float:
        return self.renewed + self.lifetime

    def is_local(self, me: HostId) -> bool:
        """Of this kernel and of a PID namespace whose processes `/proc` shows by these pids."""
        return bool(self.boot_id) and self.boot_id == me.boot_id and self.pid_ns == me.pid_ns

    def __str__(self) -> str:
        return f"pid {self.pid} on {safe_text(self.host)}"

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "path": os.fsdecode(self.path)}


def read_lease(path: Path) -> Lease | None:
    """A lease file, or None when it is not one (read through `cachetool.cache.store`; times must be
    finite; its lifetime is at most `MAX_LEASE_SECONDS`)."""
    from cachetool.cache.store import open_state  # (not for every importer of this module)
    from cachetool.safejson import parse_json, read_open_file

    try:
        fd = open_state(path)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        doc = parse_json(read_open_file(fd, MAX_LEASE_BYTES))
        start, renewed, lifetime = (float(doc[k]) for k in ("start", "renewed", "lifetime"))
        if not all(map(math.isfinite, (start, renewed, lifetime))) or lifetime <= 0:
            return None
        host, boot_id, command = str(doc["host"]), str(doc["boot_id"]), str(doc.get("command", ""))
        renewed, lifetime = max(renewed, st.st_mtime), min(lifetime, MAX_LEASE_SECONDS)
        return Lease(
            path, host, boot_id, int(doc["pid"]), int(doc["pid_ns"]), start, renewed, lifetime, command
        )
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None
    finally:
        os.close(fd)


def lease_state(lease: Lease, me: HostId | None = None, now: float | None = None) -> LeaseState:
    """`live`, `expired` (another host's lease, not renewed within its lifetime) or `dead` (a
    lease of this host whose process is gone, has ended unreaped, or is another process with the
    same pid)."""
    me = me or this_host()
    if lease.is_local(me):
        started = process_start(lease.pid)
        return "live" if started is not None and abs(started - lease.start) < 2.0 else "dead"
    now = time.time() if now is None else now
    if lease.renewed > now + CLOCK_SKEW:  # a renewal from the future is not one: it never expires
        return "expired"
    return "live" if now < lease.expires else "expired"
