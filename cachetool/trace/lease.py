"""Leases: a writing process announces itself in every cache root it writes to.

`/proc` shows only this host. A traced process (`cachetool run`, `cachetool.tracing()`, the runs
of `check-determinism`) therefore keeps a small file in `<root>/.cachetool/leases/` naming its
host, kernel boot id, pid, PID namespace and start time, and renews it from a daemon thread every
few seconds. `cachetool gc` and `cachetool verify`, on any host, treat whatever that process may
be writing in the root as live while the lease lives (`cachetool.maintenance.liveness`).

A lease is written to a temp name and renamed into place, so a reader never sees half of one. It
is removed when tracing is uninstalled or the process exits; a killed process leaves it behind,
and gc removes it once it is dead (this host) or expired (another host). Taking a lease creates
`.cachetool/leases/` inside an existing root, never the root; a renewal creates nothing: a lease
whose file is gone (the program deleted the root, a saved folder or a temporary directory) ends
there, so the folder stays deleted.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

from cachetool.cache.roots import make_state_dir
from cachetool.trace.leases import lease_seconds, leases_dir, process_start, this_host

__all__ = ["LeaseHolder", "hold_lease", "holder", "release_all"]


class LeaseHolder:
    """The leases of this process, one per root, renewed together by one daemon thread."""

    def __init__(self, lifetime: float | None = None) -> None:
        self.lifetime = lease_seconds() if lifetime is None else lifetime
        self.pid = os.getpid()
        me = this_host()
        self._doc = {
            "v": 1,
            "host": me.host,
            "boot_id": me.boot_id,
            "pid": self.pid,
            "pid_ns": me.pid_ns,
            "start": process_start(self.pid) or time.time(),
            "lifetime": self.lifetime,
            "command": " ".join(sys.argv)[:500],
        }
        self.name = f"{me.host}-{self.pid}-{int(float(str(self._doc['start'])) * 1000)}.json"
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval(self) -> float:
        """Renewals come every sixth of the lifetime (10 s at the default 60 s), at most 10 s."""
        return max(0.05, min(10.0, self.lifetime / 6))

    def hold(self, root: str | os.PathLike[str]) -> Path | None:
        """Take (or keep) a lease in `root`; None when the root cannot be written (read-only)."""
        key = os.path.realpath(os.fspath(root))
        with self._lock:
            if key in self._paths:
                return self._paths[key]
            path = leases_dir(key) / self.name
            try:
                make_state_dir(key, path.parent)
                self._write(path)
            except OSError:
                return None  # read-only, or the root is gone
            self._paths[key] = path
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew, name="cachetool-lease", daemon=True)
                self._thread.start()
            return path

    def _write(self, path: Path) -> None:
        doc = dict(self._doc, renewed=time.time())
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, json.dumps(doc).encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _renew(self) -> None:
        while not self._stop.wait(self.interval):
            if os.getpid() != self.pid:
                return  # a forked child: the lease is its parent's
            with self._lock:
                for key, path in list(self._paths.items()):
                    # A renewal never creates anything: a lease that is gone (its root deleted by
                    # the program, or the lease removed) ends, so the folder stays deleted.
                    if not os.path.lexists(path):
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

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(self._paths)


_holder: LeaseHolder | None = None
_holder_lock = threading.Lock()


def holder() -> LeaseHolder:
    """This process's lease holder (made on first use; released at exit)."""
    global _holder
    with _holder_lock:
        if _holder is None or _holder.pid != os.getpid():
            _holder = LeaseHolder()
            atexit.register(_holder.release)
        return _holder


def hold_lease(root: str | os.PathLike[str]) -> Path | None:
    """Hold a lease in `root` for as long as this process traces (never raises)."""
    try:
        return holder().hold(root)
    except Exception:  # a lease must never break the user's pipeline
        return None


def release_all() -> None:
    """Remove this process's leases (tracing was uninstalled)."""
    global _holder
    with _holder_lock:
        if _holder is not None:
            _holder.release()
            _holder = None
