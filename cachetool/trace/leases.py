"""Leases: a traced process announces itself in every cache root it writes to
(`<root>/.cachetool/leases/`), renewed from a daemon thread, removed at exit, so gc and verify on
any host know it writes there (`cachetool.maintenance.liveness` reads them; docs/hosts.md).

A step's lease (`<root>/.cachetool/once/<fingerprint>.<n>.json`, `cachetool.trace.once`) is the
same document with the fingerprint added, renewed by the same thread while the step computes.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from pathlib import Path

from cachetool.cache.lease import lease_document, lease_seconds
from cachetool.cache.roots import leases_dir, make_state_dir


class _Holder:
    """The leases of this process, one per root, renewed together by one daemon thread."""

    def __init__(self) -> None:
        self.lifetime = lease_seconds()
        self.pid = os.getpid()
        self._doc = lease_document(self.lifetime)
        self.name = f"{self._doc['host']}-{self.pid}-{int(self._doc['start'] * 1000)}.json"
        self._paths: dict[str, Path] = {}
        self._steps: dict[Path, dict[str, str]] = {}  # step leases held, with what they add
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
            self._start_renewing()

    def _write(self, path: Path, extra: dict[str, str] | None = None) -> None:
        from cachetool.cache.store import write_whole

        write_whole(path, self._document(extra), mode=0o644)

    def _document(self, extra: dict[str, str] | None) -> bytes:
        return json.dumps(dict(self._doc, renewed=time.time(), **(extra or {}))).encode("utf-8")

    def claim(self, path: Path, fingerprint: str) -> bool:
        """Create the step lease `path` unless it exists (exactly one of several processes
        claiming one name succeeds); renewed from now on, until `drop`. OSError when it cannot
        be written."""
        from cachetool.cache.store import create_whole

        extra = {"fingerprint": fingerprint}
        if not create_whole(path, self._document(extra)):
            return False
        with self._lock:
            self._steps[path] = extra
            self._start_renewing()
        return True

    def drop(self, path: Path) -> None:
        """Stop renewing the step lease `path` and remove it."""
        with self._lock:
            self._steps.pop(path, None)
            with contextlib.suppress(OSError):
                path.unlink()

    def _start_renewing(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._renew, name="cachetool-lease", daemon=True)
            self._thread.start()

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
                for step, extra in list(self._steps.items()):
                    if not os.path.lexists(step):  # taken over: another process judged it over
                        del self._steps[step]
                        continue
                    with contextlib.suppress(OSError):
                        self._write(step, extra)

    def release(self) -> None:
        """Stop renewing and remove every lease of this process."""
        self._stop.set()
        if os.getpid() != self.pid:
            return
        with self._lock:
            for step in self._steps:
                with contextlib.suppress(OSError):
                    step.unlink()
            self._steps.clear()
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
    with contextlib.suppress(Exception):  # a lease must never break the user's pipeline
        _this_holder().hold(root)


def _this_holder() -> _Holder:
    global _holder
    with _holder_lock:
        if _holder is None or _holder.pid != os.getpid():
            _holder = _Holder()
            atexit.register(_holder.release)
        return _holder


def claim_step(path: Path, fingerprint: str) -> bool:
    """Take the step lease `path` (`_Holder.claim`): True when this process now holds it."""
    return _this_holder().claim(path, fingerprint)


def drop_step(path: Path) -> None:
    """Give the step lease `path` back (removed; never raises)."""
    with contextlib.suppress(Exception):
        _this_holder().drop(path)


def release_all() -> None:
    """Remove this process's leases (tracing was uninstalled)."""
    global _holder
    with _holder_lock:
        if _holder is not None:
            _holder.release()
            _holder = None
