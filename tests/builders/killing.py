"""Run a piece of `datasets` work in a child process and SIGKILL it mid-write: what a crash,
an OOM kill or `kill -9` leaves behind is what the builders want on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit("timed out waiting for a writer")


def killed_run(code: str, *args: str, ready: Callable[[], bool], settle: float = 0.2, **env: str) -> None:
    """Run `code` in a child and SIGKILL it as soon as `ready()` says it is mid-write (after
    `settle` seconds more, so the writer is well inside what it writes)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: ready() or proc.poll() is not None)
        time.sleep(settle)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
