"""One preparation per cluster (`cachetool run --once` with a remote, node-local caches): a step
that neither the local cache nor the remote holds is computed by the one process holding its lease
on the remote; the others wait for its result to be pushed, then pull it.

A step's remote lease is a set of objects `<fp>/leases/<n>.<k>.json` (outside what `ls s3://`
lists: one level below a result): `<n>.0.json` is taken by a write-once put (`If-None-Match: *`),
so of the processes claiming generation n exactly one gets it, and it stays until the holder gives
the lease back. Nothing is ever replaced: a renewal writes `<n>.<k>.json` (k = 1, 2, ...) once and
removes the one before it (never `<n>.0.json`). The lease is the process lease's document
(`cachetool.cache.lease`), judged by the same rule, its renewal time being the newest
`last_modified` of its generation (the store's clock, to the second): a holder of this host is dead when its
process is gone; one elsewhere when not renewed within its lifetime (`CACHETOOL_LEASE_SECONDS` in
its environment). Then generation n + 1 is taken, and the older objects removed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from cachetool.cache.lease import Lease, lease_document, lease_seconds, lease_state
from cachetool.cache.roots import MAX_LEASE_SECONDS
from cachetool.processes import this_host
from cachetool.remote.client import Remote

#: A waiter's first pause (s) between looks at the remote; each next is 1.5 times longer, up to
#: `LONGEST_POLL` (a look is a GET of the record, a LIST of the leases, a GET of one).
FIRST_POLL = 0.1
LONGEST_POLL = 2.0


def _renewed(modified: float) -> float:
    """When a lease object was written, at the latest: S3 stores keep `last_modified` to the
    second (cut, not rounded), so one without a fraction was written up to a second later."""
    return modified + 1.0 if modified == int(modified) else modified


def _lease(obj: dict[str, Any], data: bytes) -> Lease | None:
    """The lease the object `obj` (as listed) holding `data` is; None when it is not one."""
    try:
        doc = json.loads(data)
        lifetime = min(float(doc["lifetime"]), MAX_LEASE_SECONDS)
        return Lease(
            Path(str(obj["path"])),
            str(doc["host"]),
            str(doc["boot_id"]),
            int(doc["pid"]),
            int(doc["pid_ns"]),
            float(doc["start"]),
            _renewed(obj["last_modified"].timestamp()),
            lifetime if lifetime > 0 else 0.0,
        )
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None


def _name(fp: str, gen: int, k: int) -> str:
    return f"{fp}/leases/{gen}.{k}.json"


class RemoteLeases:
    """The remote leases of one process, renewed together by one daemon thread."""

    def __init__(self, remote: Remote, lifetime: float | None = None) -> None:
        self.remote = remote
        self.lifetime = lease_seconds() if lifetime is None else lifetime
        self._doc = json.dumps(lease_document(self.lifetime)).encode("utf-8")
        self._held: dict[str, tuple[int, int]] = {}  # fingerprint: (generation, last renewal)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- judging --------------------------------------------------------------------------------
    def current(self, fp: str) -> tuple[int, Lease | None] | None:
        """The newest generation of `fp`'s lease and the lease it is (None: its objects are not a
        lease); None when there is no lease."""
        while True:  # a renewal may remove the object just listed: list again
            gens: dict[int, dict[int, dict[str, Any]]] = {}
            for obj in self.remote.list(f"{fp}/leases/"):
                parts = PurePosixPath(str(obj["path"])).name.split(".")
                if len(parts) == 3 and parts[2] == "json" and parts[0].isdigit() and parts[1].isdigit():
                    gens.setdefault(int(parts[0]), {})[int(parts[1])] = obj
            if not gens:
                return None
            gen = max(gens)
            newest = gens[gen][max(gens[gen])]  # its latest renewal
            data = self.remote.get(str(newest["path"]))
            if data is not None:
                return gen, _lease(newest, data)

    # -- taking and giving back -----------------------------------------------------------------
    def take(self, fp: str, ready: Callable[[], bool], sleep: Callable[[float], None] = time.sleep) -> bool:
        """Wait while another live process holds `fp`'s lease. True: this process took it (it
        computes, then `give_back`); False: `ready()` says the result is on the remote (pull it),
        or another live process holds the lease while this one holds another (it computes without
        waiting: two processes taking steps in opposite orders never wait for each other)."""
        me = this_host()
        may_wait = not self._held
        poll = FIRST_POLL
        while not ready():
            found = self.current(fp)
            gen = 0
            if found is not None:
                gen, lease = found
                if lease is not None and lease_state(lease, me) == "live":
                    if not may_wait:
                        return False
                    sleep(poll)
                    poll = min(LONGEST_POLL, poll * 1.5)
                    continue
                gen += 1  # over, or not a lease: the next generation takes over
            if not self.remote.put_once(_name(fp, gen, 0), self._doc):
                continue  # another process took it first
            with self._lock:
                self._held[fp] = (gen, 0)
                self._start_renewing()
            self._remove(fp, below=gen)
            if ready():  # pushed while this process looked: nothing to compute
                self.give_back(fp)
                return False
            return True
        return False

    def give_back(self, fp: str) -> None:
        """Remove `fp`'s lease (held by this process)."""
        with self._lock:
            held = self._held.pop(fp, None)
        if held is not None:
            gen, k = held
            for i in {k, 0}:
                with contextlib.suppress(Exception):
                    self.remote.delete(_name(fp, gen, i))

    def give_back_all(self) -> None:
        for fp in list(self._held):
            self.give_back(fp)

    def _remove(self, fp: str, below: int) -> None:
        """Remove the objects of `fp`'s lease generations before `below` (over: taken over)."""
        with contextlib.suppress(Exception):
            for obj in self.remote.list(f"{fp}/leases/"):
                gen = PurePosixPath(str(obj["path"])).name.split(".")[0]
                if gen.isdigit() and int(gen) < below:
                    self.remote.delete(str(obj["path"]))

    # -- renewing -------------------------------------------------------------------------------
    def _start_renewing(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._renew, name="cachetool-remote-lease", daemon=True)
            self._thread.start()

    def _renew(self) -> None:
        while True:
            time.sleep(max(0.05, min(10.0, self.lifetime / 6)))
            with self._lock:
                held = list(self._held.items())
            for fp, (gen, k) in held:
                with contextlib.suppress(Exception):
                    if not self.remote.put_once(_name(fp, gen, k + 1), self._doc):
                        continue
                    with self._lock:
                        if fp not in self._held:  # given back meanwhile: no renewal left behind
                            self.remote.delete(_name(fp, gen, k + 1))
                            continue
                        self._held[fp] = (gen, k + 1)
                    if k:
                        self.remote.delete(_name(fp, gen, k))
