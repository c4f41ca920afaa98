"""The one lock probe and the one reading of what a lock guards, as gc and verify both use them:
a lock gc would remove is exactly a lock verify calls stale, and a lock nobody can probe is
neither (small real folders, real `flock`s, a real unprivileged child; no datasets run)."""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cachetool.maintenance.gc import GcOptions
from cachetool.maintenance.gc.plan import plan_gc
from cachetool.maintenance.liveness import LockState, probe
from cachetool.maintenance.verify import verify_cache
from tests.conftest import as_another_user

GONE = "fedcba9876543210"
LIVE = "abc123abc123abc1"


@pytest.fixture
def root(tmp_path: Path, isolated_env: Path) -> Iterator[Path]:
    root = tmp_path / "locks"
    (root / "csv" / "default" / "0.0.0" / LIVE).mkdir(parents=True)
    (root / "downloads").mkdir()
    yield root


def test_the_probe_tells_missing_free_held_and_unknown(tmp_path: Path) -> None:
    """A missing lock is held by nobody and is not created; a lock another descriptor holds is
    held; a symlink or a socket with a lock's name cannot be probed (UNKNOWN, read as held)."""
    lock = tmp_path / "x_builder.lock"
    assert probe(lock) == LockState.MISSING and not lock.exists()
    lock.touch()
    assert probe(lock) == LockState.FREE
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert probe(lock) == LockState.HELD
    finally:
        os.close(fd)
    assert probe(lock) == LockState.FREE  # the probe released what it won
    link = tmp_path / "y_builder.lock"
    link.symlink_to(lock)
    sock_path = tmp_path / "z_builder.lock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        assert probe(link) == probe(sock_path) == LockState.UNKNOWN
    assert LockState.UNKNOWN.held and LockState.HELD.held and not LockState.FREE.held


def _stale_locks_by_verify(root: Path) -> set[str]:
    report = verify_cache(root)
    return {f.path.name for f in report.findings if f.problem.startswith("stale lock")}


def _locks_planned_by_gc(root: Path) -> set[str]:
    # The default --min-age keeps the fresh `.incomplete` leftovers, so their locks guard something.
    plan = plan_gc(root, GcOptions(temp=True, tmp_dir=root / "downloads"))
    return {i.path.name for i in plan.items if i.kind.value == "lock"}


def test_verify_calls_stale_exactly_the_locks_gc_removes(root: Path) -> None:
    """A builder lock whose folder is gone but whose `.incomplete` exists guards a running
    preparation: neither command touches it (verify used to call it stale). A download lock whose
    download is gone is stale to both (verify used to ignore download locks); one whose
    `.incomplete` download exists is not."""
    version = root / "csv" / "default" / "0.0.0"
    (version / "1111111111111111.incomplete").mkdir()
    (root / "downloads" / "inflight.incomplete").write_bytes(b"x")
    for p in (
        version / f"{LIVE}_builder.lock",
        version / f"{GONE}_builder.lock",
        version / f"{GONE}.incomplete_info.lock",
        version / "1111111111111111_builder.lock",
        root / "downloads" / "gone.lock",
        root / "downloads" / "inflight.lock",
    ):
        p.touch()
    expected = {f"{GONE}_builder.lock", f"{GONE}.incomplete_info.lock", "gone.lock"}
    assert _locks_planned_by_gc(root) == expected
    assert _stale_locks_by_verify(root) == expected


def _as_nobody(root: Path, fn: Callable[[], Any]) -> Any:
    """Run `fn` as an unprivileged user in a forked child: the kernel, not a mock, says no."""
    if os.geteuid() != 0:
        return fn()
    p = root
    while p != p.parent:
        os.chmod(p, os.stat(p).st_mode | 0o005)
        p = p.parent
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o777)  # the child may write the cache's own state folder
    return as_another_user(fn)


def test_a_lock_nobody_can_probe_is_kept_by_gc_and_not_stale_to_verify(root: Path) -> None:
    """A stale-looking lock this user cannot open (mode 000) may be held by a preparation: gc
    keeps it and says it cannot tell, verify does not call it stale (it used to: "cannot open"
    meant "not held" to verify and "held by a live process" to gc). A readable one beside it is
    probed as usual: stale to verify, removed by gc (`all_users`: another user owns it)."""
    version = root / "csv" / "default" / "0.0.0"
    closed = version / f"{GONE}_builder.lock"
    readable = version / "0123456789abcdef_builder.lock"
    closed.touch()
    readable.touch()
    os.chmod(closed, 0)
    os.chmod(readable, 0o644)

    def both() -> dict[str, Any]:
        plan = plan_gc(root, GcOptions(temp=True, tmp_dir=root / "downloads", min_age=0, all_users=True))
        return {
            "stale": sorted(_stale_locks_by_verify(root)),
            "gc_items": sorted(i.path.name for i in plan.items),
            "gc_kept": {s.path.name: [s.code, s.reason] for s in plan.skipped},
        }

    assert _as_nobody(root, both) == {
        "stale": [readable.name],
        "gc_items": [readable.name],
        "gc_kept": {
            closed.name: ["lock-unknown", "cannot tell whether a live process holds it (it cannot be probed)"]
        },
    }
