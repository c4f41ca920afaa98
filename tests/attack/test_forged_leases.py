"""A lease is written by whoever can write a shared cache: one that claims to live forever
(lifetime `Infinity`, or 1e308 seconds, a renewal dated years ahead, `CACHETOOL_LEASE_SECONDS=inf`)
lives at most `MAX_LEASE_SECONDS` after its last renewal, gc shows each live lease with its file,
host, pid and expiry, and `gc --break-lease ID` removes one the user knows is dead, logged."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from cachetool.cache.layout import LEDGER_DIR
from cachetool.cache.lease import lease_seconds
from cachetool.cache.roots import MAX_LEASE_SECONDS
from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env

HOUR = 3600.0


def test_lease_seconds_from_the_environment_are_capped() -> None:
    """`CACHETOOL_LEASE_SECONDS=inf` (or any value over the maximum) is the maximum."""
    assert lease_seconds({"CACHETOOL_LEASE_SECONDS": "inf"}) == MAX_LEASE_SECONDS
    assert lease_seconds({"CACHETOOL_LEASE_SECONDS": "1e9"}) == MAX_LEASE_SECONDS
    assert lease_seconds({"CACHETOOL_LEASE_SECONDS": "nan"}) == 60.0
    assert lease_seconds({"CACHETOOL_LEASE_SECONDS": "30"}) == 30.0


def _cache_with_leftover(base: Path) -> tuple[Path, Path]:
    """A cache with a temp leftover in a builder folder (what a killed writer leaves)."""
    root = base / "cache"
    files = synthesize_cache(root, 1)
    leftover = files[0].parent / "tmpab12cd34"
    leftover.write_bytes(files[0].read_bytes()[:400])  # the start of an Arrow stream
    return root, leftover


def _lease(root: Path, name: str, text: str, age: float = 0.0) -> Path:
    """A lease file holding `text`, last written `age` seconds ago."""
    folder = root / LEDGER_DIR / "leases"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    os.utime(folder / name, (time.time() - age, time.time() - age))
    return folder / name


def _doc(**over: object) -> str:
    now = time.time()
    doc = {
        "v": 1,
        "host": "node-7",
        "boot_id": "another-kernel",
        "pid": 4242,
        "pid_ns": 1,
        "start": now - 3 * HOUR,
        "renewed": now - 2 * HOUR,
        "lifetime": 60,
        "command": "forged",
    }
    return json.dumps({**doc, **over})


def _gc(root: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "gc", *args, "--cache-dir", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "text",
    [
        _doc(lifetime=1e308),
        _doc().replace('"lifetime": 60', '"lifetime": Infinity'),
        _doc().replace('"lifetime": 60', '"lifetime": NaN'),
        _doc(renewed=time.time() + 10 * 365 * 24 * HOUR),
    ],
    ids=["lifetime-1e308", "lifetime-Infinity", "lifetime-NaN", "renewed-in-10-years"],
)
def test_a_forged_everlasting_lease_does_not_keep_gc_from_freeing(tmp_path: Path, text: str) -> None:
    """A lease of another host, last renewed two hours ago (or "renewed" ten years ahead), whose
    lifetime says forever: gc removes the temp leftover it would cover."""
    root, leftover = _cache_with_leftover(tmp_path)
    _lease(root, "node-7-4242-1.json", text, age=2 * HOUR)
    code, out, err = _gc(root, hf_env(tmp_path), "--temp", "--min-age", "0", "--yes")
    assert code == 0 and "Traceback" not in err, err
    assert not leftover.exists(), out


@pytest.mark.slow
def test_gc_shows_a_blocking_lease_and_breaks_it_on_request(tmp_path: Path) -> None:
    """A live lease of another host keeps the leftover; gc's plan names the lease's file, host,
    pid and expiry and the command that breaks it; that command removes the lease (logged in
    the ledger as a gc record), and the next gc frees the leftover. An unknown lease is one
    `Error:` line, exit 2."""
    root, leftover = _cache_with_leftover(tmp_path)
    env = hf_env(tmp_path)
    lease = _lease(root, "node-7-4242-1.json", _doc(renewed=time.time(), start=time.time() - 60))
    code, out, err = _gc(root, env, "--temp", "--min-age", "0", "--dry-run")
    assert code == 0 and leftover.exists()
    text = out + err
    assert "pid 4242 on node-7" in text and "expires in" in text and str(lease) in text
    command = f"cachetool gc --break-lease node-7-4242-1 --cache-dir {root}"
    assert command in text
    code, out, err = _gc(root, env, "--break-lease", "node-7-4242-1")
    assert (code, err) == (0, ""), err
    assert "Removed the lease of pid 4242 on node-7" in out and not lease.exists()
    ledger = b"".join(p.read_bytes() for p in (root / LEDGER_DIR / "ledger").glob("*.jsonl"))
    (rec,) = [json.loads(line) for line in ledger.splitlines()]
    assert rec["type"] == "gc" and rec["kind"] == "lease" and "gc --break-lease" in rec["reason"]
    assert _gc(root, env, "--temp", "--min-age", "0", "--yes")[0] == 0
    assert not leftover.exists()
    code, out, err = _gc(root, env, "--break-lease", "../../etc/passwd")
    assert code == 2 and err.startswith("Error: no lease ../../etc/passwd in ") and err.count("\n") == 1
    assert os.path.exists("/etc/passwd")
