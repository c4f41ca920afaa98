"""Leases: a writing process announces itself in every cache root it writes to, for gc and
verify on any host (`/proc` shows only this host).

A traced process keeps a file in `<root>/.cachetool/leases/` (host, boot id, pid, PID namespace,
start time), renewed from a daemon thread (`hold_lease`), written to a temp name and renamed, removed
at exit. Taking one creates `.cachetool/leases/` in an existing root, never the root; a renewal
creates nothing (a deleted root stays deleted). A lease of this host and PID namespace is judged by
`/proc`; any other lives until it expires, and while it lives, what was modified in its root since
its process started is live (`InUse.lease_over(mtime)`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cachetool.cache.roots import make_state_dir
from cachetool.processes import process_start
from cachetool.safejson import json_fields

#: Where a root keeps its leases, below its `.cachetool/` folder.
LEASES_DIR = "leases"
#: Seconds a lease lives after its last renewal, unless `CACHETOOL_LEASE_SECONDS` says otherwise.
DEFAULT_LEASE_SECONDS = 60.0
#: The longest a lease lives after its last renewal, whatever it or `CACHETOOL_LEASE_SECONDS`
#: says: a lease file is written by whoever can write the cache, and one that claimed to live
#: forever would keep gc from freeing anything.
MAX_LEASE_SECONDS = 3600.0
#: The most a lease file is read of (one is about 300 bytes).
MAX_LEASE_BYTES = 64 * 1024
#: How far the clocks of two hosts (and a file server's) may disagree: a lease covers files
#: modified up to this long before its process started.
CLOCK_SKEW = 300.0

LeaseState = Literal["live", "expired", "dead"]


def lease_seconds(environ: dict[str, str] | None = None) -> float:
    """The lease lifetime: `CACHETOOL_LEASE_SECONDS` (a positive number, at most
    `MAX_LEASE_SECONDS`: `inf` is that), else 60."""
    raw = (os.environ if environ is None else environ).get("CACHETOOL_LEASE_SECONDS", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_LEASE_SECONDS
    return min(value, MAX_LEASE_SECONDS) if value > 0 else DEFAULT_LEASE_SECONDS


@dataclass(frozen=True)
class HostId:
    """What tells one host (kernel) and one PID namespace from another."""

    host: str
    boot_id: str
    pid_ns: int


def this_host() -> HostId:
    """This process's host name, kernel boot id and PID namespace."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
    except OSError:
        boot_id = ""
    try:
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pid_ns = 0
    return HostId(socket.gethostname(), boot_id, pid_ns)


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
        from cachetool.formatting import safe_text  # the host name is whatever the file says

        return f"pid {self.pid} on {safe_text(self.host)}"

    def to_json(self) -> dict[str, object]:
        return json_fields(self)


def leases_dir(root: str | os.PathLike[str]) -> Path:
    from cachetool.cache.layout import LEDGER_DIR

    return Path(root) / LEDGER_DIR / LEASES_DIR


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


def judge_leases(root: str | os.PathLike[str], now: float | None = None) -> list[tuple[Lease, LeaseState]]:
    """Every lease of `root` with its state (unreadable lease files are left alone)."""
    folder = leases_dir(root)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    me = this_host()
    out = []
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        lease = read_lease(folder / name)
        if lease is not None:
            out.append((lease, lease_state(lease, me, now)))
    return out


class _Holder:
    """The leases of this process, one per root, renewed together by one daemon thread."""

    def __init__(self) -> None:
        self.lifetime = lease_seconds()
        self.pid = os.getpid()
        me = this_host()
        start = process_start(self.pid) or time.time()
        command = " ".join(sys.argv)[:500]
        self._doc = dict(
            v=1, **json_fields(me), pid=self.pid, start=start, lifetime=self.lifetime, command=command
        )
        self.name = f"{me.host}-{self.pid}-{int(start * 1000)}.json"
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, root: str | os.PathLike[str]) -> None:
        key = os.path.realpath(os.fspath(root))
        with self._lock:
            if key in self._paths:
                return
            path = leases_dir(key) / self.name
            try:
                make_state_dir(key, path.parent)
                self._write(path)
            except OSError:
                return  # read-only, or the root is gone
            self._paths[key] = path
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew, name="cachetool-lease", daemon=True)
                self._thread.start()

    def _write(self, path: Path) -> None:
        from cachetool.cache.store import write_whole

        write_whole(path, json.dumps(dict(self._doc, renewed=time.time())).encode("utf-8"), mode=0o644)

    def _renew(self) -> None:
        # Every sixth of the lifetime (10 s at the default 60 s), at most 10 s.
        while not self._stop.wait(max(0.05, min(10.0, self.lifetime / 6))):
            if os.getpid() != self.pid:
                return  # a forked child: the lease is its parent's
            with self._lock:
                for key, path in list(self._paths.items()):
                    if not os.path.lexists(path):  # never recreated: its root stays deleted
                        del self._paths[key]
                        continue
                    with contextlib.suppress(OSError):
                        self._write(path)

    def release(self) -> None:
        """Stop renewing and remove every lease of this process."""
        self._stop.set()
        if os.getpid() != self.pid:
            return
        with self._lock:
            for path in self._paths.values():
                with contextlib.suppress(OSError):
                    path.unlink()
                # Leave no trace in a root that had none (a determinism run's cache): the folders
                # go only when empty, so another process's lease or ledger keeps them.
                for folder in (path.parent, path.parent.parent):
                    try:
                        os.rmdir(folder)
                    except OSError:
                        break
            self._paths.clear()


_holder: _Holder | None = None
_holder_lock = threading.Lock()


def hold_lease(root: str | os.PathLike[str]) -> None:
    """Hold a lease in `root` for as long as this process traces (never raises)."""
    global _holder
    with contextlib.suppress(Exception):  # a lease must never break the user's pipeline
        with _holder_lock:
            if _holder is None or _holder.pid != os.getpid():
                _holder = _Holder()
                atexit.register(_holder.release)
        _holder.hold(root)


def release_all() -> None:
    """Remove this process's leases (tracing was uninstalled)."""
    global _holder
    with _holder_lock:
        if _holder is not None:
            _holder.release()
            _holder = None
